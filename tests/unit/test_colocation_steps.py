"""The conversion step machine: one action at a time, derived from what the node looks like now."""

import pytest

from cluster.types import Pool
from colocation.policy import (Conflict, DeletePod, DetachPod, Direction, Done, Event, EvictTraining, NodeNow,
                               NodePod, PodKind, SetState, Step, TransitionRecord, Wait, drive, expected_after,
                               next_action)
from experiments.builders.colocation import OFF_N, OFF_U, ON_N, ON_U

INF, TRAIN = PodKind.INFERENCE, PodKind.TRAINING
LEND, BACK = Direction.LEND, Direction.TAKE_BACK
NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC


def node(state, *pods: NodePod, pool=Pool.COLOCATION) -> NodeNow:
    return NodeNow("t4-1", state, pool, pods)


def inf(name, detached=False, ready=False) -> NodePod:
    return NodePod(name, INF, detached=detached, replacement_ready=ready)


def train(name, terminating=False) -> NodePod:
    return NodePod(name, TRAIN, terminating=terminating)


@pytest.mark.parametrize("direction,step,observed,expected", [
    # lend
    (LEND, Step.PLANNED, node(ON_N, inf("a")), SetState("t4-1", Event.LEND, OFF_U, Step.MARK_UNNORMAL)),
    (LEND, Step.MARK_UNNORMAL, node(OFF_U, inf("a"), inf("b")), DetachPod("t4-1", "a")),
    (LEND, Step.DRAIN, node(OFF_U, inf("a", True), inf("b")), DetachPod("t4-1", "b")),
    (LEND, Step.DRAIN, node(OFF_U, inf("a", True), inf("b", True)), Wait("t4-1", "replacements of a, b not ready yet")),
    (LEND, Step.DRAIN, node(OFF_U, inf("a", True), inf("b", True, True)), DeletePod("t4-1", "b")),
    (LEND, Step.DRAIN, node(OFF_U, train("j")), SetState("t4-1", Event.LEND_DONE, OFF_N, Step.MARK_NORMAL)),
    (LEND, Step.MARK_NORMAL, node(OFF_N), Done("t4-1")),
    # take back
    (BACK, Step.PLANNED, node(OFF_N, train("j")), SetState("t4-1", Event.TAKE_BACK, ON_U, Step.MARK_UNNORMAL)),
    (BACK, Step.MARK_UNNORMAL, node(ON_U, train("j"), train("k")), EvictTraining("t4-1", "j")),
    (BACK, Step.DRAIN, node(ON_U, train("j", True), train("k")), EvictTraining("t4-1", "k")),
    (BACK, Step.DRAIN, node(ON_U, train("j", True)), Wait("t4-1", "evicted training pods j still terminating")),
    (BACK, Step.DRAIN, node(ON_U), SetState("t4-1", Event.TAKE_BACK_DONE, ON_N, Step.MARK_NORMAL)),
    (BACK, Step.MARK_NORMAL, node(ON_N), Done("t4-1")),
])
def test_next_action(direction, step, observed, expected):
    assert next_action(TransitionRecord("t4-1", direction, step), observed, NOW) == expected


def test_evicted_training_is_requeued_to_the_fixed_pool():
    action = next_action(TransitionRecord("t4-1", BACK, Step.MARK_UNNORMAL), node(ON_U, train("j")), NOW)
    assert action.requeue_pool is Pool.FIXED


@pytest.mark.parametrize("direction,observed,expected", [
    # crashed after acting, before persisting: the effect is observed, the step is not repeated
    (LEND, node(OFF_U, inf("a")), DetachPod("t4-1", "a")),
    (LEND, node(OFF_N), Done("t4-1")),
    (BACK, node(ON_U), SetState("t4-1", Event.TAKE_BACK_DONE, ON_N, Step.MARK_NORMAL)),
])
def test_crash_before_persisting_is_resumed_from_what_is_observed(direction, observed, expected):
    assert next_action(TransitionRecord("t4-1", direction, Step.PLANNED), observed, NOW) == expected


@pytest.mark.parametrize("direction,step,observed,text", [
    (LEND, Step.DRAIN, node(ON_N), "back to online-normal"),  # reverted by hand mid-way
    (LEND, Step.DRAIN, node(ON_U), "not on the way online-to-offline"),
    (BACK, Step.PLANNED, node(OFF_U), "not on the way offline-to-online"),
    (LEND, Step.PLANNED, node(ON_N, pool=Pool.FIXED), "fixed-pool nodes are never lent"),
])
def test_conflicts_are_reported_not_acted_on(direction, step, observed, text):
    action = next_action(TransitionRecord("t4-1", direction, step), observed, NOW)
    assert isinstance(action, Conflict) and text in action.reason


def test_expected_after_lets_a_controller_run_a_tick_without_rereading():
    n = node(ON_N, inf("a"), inf("b"))
    rec = TransitionRecord("t4-1", LEND)
    actions = []
    while not isinstance(action := next_action(rec, n, NOW), (Wait, Done, Conflict)):
        actions.append(action)
        n, rec = expected_after(n, action), TransitionRecord("t4-1", LEND, action.step)
    assert [type(a) for a in actions] == [SetState, DetachPod, DetachPod]
    assert isinstance(action, Wait) and rec.step is Step.DRAIN


@pytest.mark.parametrize("limit,expected", [(8, [SetState, DetachPod, DetachPod, Wait]), (2, [SetState, DetachPod])])
def test_drive_plans_each_action_on_the_node_as_it_is_then_until_final_or_the_limit(limit, expected):
    seen = {"node": node(ON_N, inf("a"), inf("b"))}
    actions = []
    for action in drive(TransitionRecord("t4-1", LEND), lambda: seen["node"], NOW, limit):
        actions.append(action)
        seen["node"] = expected_after(seen["node"], action)  # the caller acted: the cluster moved
    assert [type(a) for a in actions] == expected


# graceful take-back: cordoned (online-unnormal) at once, training evicted only at the record's evict_at
@pytest.mark.parametrize("evict_at,now,observed,expected", [
    # before the deadline: wait, the jobs may finish
    (NOW + 900, NOW, node(ON_U, train("j"), train("k")),
     Wait("t4-1", "cordoned: 2 training pods may finish until 22:28 UTC")),
    (NOW + 900, NOW + 899, node(ON_U, train("j")), Wait("t4-1", "cordoned: 1 training pods may finish until 22:28 UTC")),
    # at and after the deadline: evict what still runs
    (NOW + 900, NOW + 900, node(ON_U, train("j")), EvictTraining("t4-1", "j")),
    (NOW + 900, NOW + 5000, node(ON_U, train("j", True), train("k")), EvictTraining("t4-1", "k")),
    # urgent (evict_at = now) or none (0): at once
    (NOW, NOW, node(ON_U, train("j")), EvictTraining("t4-1", "j")),
    (0.0, NOW, node(ON_U, train("j")), EvictTraining("t4-1", "j")),
    # the jobs finished before the deadline: nothing is killed, the take-back completes early
    (NOW + 900, NOW + 300, node(ON_U), SetState("t4-1", Event.TAKE_BACK_DONE, ON_N, Step.MARK_NORMAL)),
    # the node is cordoned first even with a deadline (nothing new lands on it)
    (NOW + 900, NOW, node(OFF_N, train("j")), SetState("t4-1", Event.TAKE_BACK, ON_U, Step.MARK_UNNORMAL)),
])
def test_graceful_take_back_evicts_only_at_its_deadline(evict_at, now, observed, expected):
    record = TransitionRecord("t4-1", BACK, Step.MARK_UNNORMAL if observed.state is ON_U else Step.PLANNED,
                              evict_at=evict_at)
    assert next_action(record, observed, now) == expected


def test_a_lend_ignores_evict_at():
    record = TransitionRecord("t4-1", LEND, Step.DRAIN, evict_at=NOW + 900)
    assert next_action(record, node(OFF_U, train("j")), NOW) == SetState("t4-1", Event.LEND_DONE, OFF_N,
                                                                        Step.MARK_NORMAL)
