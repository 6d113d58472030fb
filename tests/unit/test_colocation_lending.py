"""Lending policy: triggers, sizing arithmetic, node choice, step control, fixed pool, busy windows.

Default thresholds: minRate 40%, expectRate 60%, maxRate 80%; nodes have 4 GPUs unless stated.
"""

from dataclasses import replace

import pytest

from colocation.policy import (Direction, GroupView, Hold, Lend, LendReason, TakeBack, TrainingPod, decide_group,
                               decide_lending)
from experiments.builders.colocation import NOW, OFF_U, ON_U, G, N, at, online_fleet

LEND, BACK = Direction.LEND, Direction.TAKE_BACK


def decide(group: G | GroupView, now: float = NOW):
    return decide_group(group.build() if isinstance(group, G) else group, now)


# ---- usage ---------------------------------------------------------------------------------------

def test_usage_is_inference_requests_over_online_normal_capacity():
    g = G().nodes(*online_fleet((1, 0.5), (2,)), N("t4-3").offline(60),
                  N("t4-4").state(OFF_U).inference(1),  # being lent: its pod still counts
                  N("t4-5").state(OFF_U).inference(1, detached=True)).build()  # replaced: counted elsewhere
    assert g.demand == 4.5
    assert g.online_capacity == 8
    assert g.usage == pytest.approx(4.5 / 8)


def test_projected_usage_counts_capacity_already_being_taken_back():
    g = G().nodes(*online_fleet((4,), (3,)), N("t4-3").state(ON_U), N("t4-4").offline(60)) \
        .converting("t4-4", BACK).build()
    assert g.usage == pytest.approx(7 / 8)
    assert g.projected_usage == pytest.approx(7 / 16)


# ---- lend: trigger and sizing -------------------------------------------------------------------

@pytest.mark.parametrize("loads,pending_training,chosen,after", [
    # 5 x 4 GPUs, 7 used: 35% < 40%. Without 2 nodes 7/12 = 58% <= 60%; without 3, 7/8 = 88%.
    ([(1, 1), (1, 1, 1), (1,), (1,), ()], 12, ("t4-5", "t4-3"), 7 / 12),
    # 8 x 4, 12 used: 37.5%. Without 3 nodes exactly 60% (<= expectRate is fine).
    ([(2,), (2,), (2,), (2,), (2,), (2,), (), ()], 1, ("t4-7", "t4-8", "t4-1"), 12 / 20),
    # 8 x 4, 0 used: the limit of 3 caps it.
    ([()] * 8, 5, ("t4-1", "t4-2", "t4-3"), 0.0),
    # 3 x 4, 0 used: one node stays online.
    ([(), (), ()], 5, ("t4-1", "t4-2"), 0.0),
])
def test_lend_sizing(loads, pending_training, chosen, after):
    d = decide(G().nodes(*online_fleet(*loads)).training_pending(pending_training))
    assert isinstance(d, Lend) and d.direction is LEND and d.reason is LendReason.LOW_USAGE
    assert d.nodes == chosen
    assert d.usage_after == pytest.approx(after)


def test_lend_message_has_the_numbers():
    d = decide(G().nodes(*online_fleet((1, 1), (1, 1, 1), (1,), (1,), ())).training_pending(12))
    assert d.message == ("lend t4-5, t4-3: online usage 35% < minRate 40%, 12 training jobs pending; "
                         "target expectRate 60%, usage after 58%")


@pytest.mark.parametrize("loads,pending_training", [
    ([(1, 1), (1, 1, 1), (1,), (1,), ()], 0),  # low usage but no training pending
    ([(2,), (2,), (2,), (2,), ()], 9),  # 8/20 = 40%: not below minRate
    ([(2, 1), (2,), (2,), (2,), ()], 9),  # 45%: between the thresholds, nothing moves
])
def test_no_lend(loads, pending_training):
    assert decide(G().nodes(*online_fleet(*loads)).training_pending(pending_training)) is None


def test_lend_prefers_fewest_pods_not_least_load():
    # 7.5/16 = 47% < 50%; one node may go (7.5/12 = 62.5% <= 70%). t4-2 holds one 2-GPU pod,
    # t4-1 three small ones (less load): t4-2 has the fewest pods.
    g = G().rates(0.5, 0.7, 0.9).nodes(*online_fleet((0.5, 0.5, 0.5), (2,), (1, 1), (1, 1))).training_pending(3)
    assert decide(g).nodes == ("t4-2",)


def test_lend_thresholds_are_per_group():
    loads = [(2, 1), (2,), (2,), (2,), ()]  # 45%
    assert decide(G().nodes(*online_fleet(*loads)).training_pending(1)) is None
    d = decide(G().rates(0.5, 0.7, 0.9).nodes(*online_fleet(*loads)).training_pending(1))
    assert d.nodes == ("t4-5",) and "minRate 50%" in d.message


def test_lend_refuses_when_moved_pods_would_not_fit():
    # Usage allows lending t4-4 (11/12 = 92% <= 95%) but its 2-GPU pod fits on no other node.
    g = G().rates(0.7, 0.95, 0.98).nodes(*online_fleet((3,), (3,), (3,), (2,))).training_pending(2).build()
    d = decide(g)
    assert isinstance(d, Hold) and d.reason is LendReason.NO_ROOM


def test_lend_keeps_one_node_online():
    d = decide(G().nodes(*online_fleet(()), N("t4-2").offline()).training_pending(3))
    assert d.reason is LendReason.NO_ROOM and "only 1 online-normal nodes left (keep 1)" in d.message


def test_lend_never_picks_a_fixed_pool_node():
    # 2/12 = 17%: two nodes may go, the fixed one (an odd online fixed node) stays.
    g = G().nodes(N("t4-1").online(), N("t4-2").online().fixed(), N("t4-3").online(2)).training_pending(2)
    assert decide(g).nodes == ("t4-1", "t4-3")


def test_lend_counts_conversions_in_flight_against_the_limit():
    # 8 x 4 online, 12 used (37.5%) would lend 3; one lend is in flight (t4-9), so only 2 more.
    nodes = online_fleet((2,), (2,), (2,), (2,), (2,), (2,), (), ())
    g = G().nodes(*nodes, N("t4-9").state(OFF_U)).training_pending(4)
    assert decide(g).nodes == ("t4-7", "t4-8")


def test_lend_counts_records_not_yet_applied():
    nodes = online_fleet((), (), (), ())
    g = G().nodes(*nodes).training_pending(4).converting("t4-1", LEND).converting("t4-2", LEND).build()
    d = decide(g)
    assert d.nodes == ("t4-3",)  # 3 - 2 in flight; t4-1/t4-2 are not candidates again


@pytest.mark.parametrize("in_flight", [3, 4])
def test_lend_holds_at_the_parallel_limit(in_flight):
    nodes = online_fleet((), (), (), (), (), ())
    g = G().nodes(*nodes, *[N(f"x-{i}").state(OFF_U) for i in range(in_flight)]).training_pending(4)
    d = decide(g)
    assert isinstance(d, Hold) and d.reason is LendReason.PARALLEL_LIMIT
    assert f"{in_flight} nodes already converting (max 3)" in d.message


def test_no_lend_while_a_take_back_is_in_flight():
    g = G().nodes(*online_fleet((), (), (1,)), N("t4-9").state(ON_U)).training_pending(4)
    assert decide(g).reason is LendReason.TAKE_BACK_IN_FLIGHT


def test_pending_online_pods_turn_low_usage_into_a_take_back():
    g = G().nodes(*online_fleet((1,), (), ()), N("t4-9").offline(60)).training_pending(4).pending(4)
    assert isinstance(decide(g), TakeBack)


# ---- take back: trigger and sizing -------------------------------------------------------------

def offline_side() -> list[N]:
    """Take-back candidates; by (jobs, run time so far): t4-8, t4-6, t4-5, t4-4."""
    return [N("t4-4").offline(3600, 600), N("t4-5").offline(3600), N("t4-6").offline(600),
            N("t4-7").offline().fixed(), N("t4-8").offline()]


def test_take_back_on_high_usage_sized_to_expect_rate():
    # 3 x 4 online, 11 used = 92% > 80%. 11/(12+4k) <= 60% needs k >= 1.6: 2 nodes, 11/20 = 55%.
    d = decide(G().nodes(*online_fleet((4,), (4,), (3,)), *offline_side()))
    assert isinstance(d, TakeBack) and d.direction is BACK and d.reason is LendReason.HIGH_USAGE
    assert d.nodes == ("t4-8", "t4-6")  # no jobs first, then the most recently started job
    assert d.usage_after == pytest.approx(11 / 20)
    assert d.message == ("take back t4-8, t4-6: online usage 92% > maxRate 80%; target expectRate 60%, "
                         "usage after 55%; cordoned, evicting what still runs at 14:15: 1 training jobs requeued "
                         "to the fixed pool")  # graceful (take_back_grace_s 15 min): nothing is pending


@pytest.mark.parametrize("pending,chosen", [
    ((4, 4), ("t4-8", "t4-6")),  # two whole-node pods: two nodes
    ((1, 1, 1), ("t4-8",)),  # they fit together on one node
    ((2, 2, 1), ("t4-8", "t4-6")),  # 5 GPUs: first-fit decreasing needs two nodes
    ((8,), None),  # bigger than any node: nothing to do for it
])
def test_take_back_for_pending_online_pods_sized_for_their_needs(pending, chosen):
    # 50% usage: only the pending pods trigger.
    d = decide(G().nodes(*online_fleet((2,), (2,), (2,)), *offline_side()).pending(*pending))
    if chosen is None:
        assert isinstance(d, Hold) and d.reason is LendReason.NO_CANDIDATE
        assert "pods of 8 GPU fit on no offline node (largest 4 GPU)" in d.message
    else:
        assert isinstance(d, TakeBack) and d.reason is LendReason.ONLINE_PENDING and d.nodes == chosen
        assert f"{len(pending)} online pods pending needing {sum(pending):g} GPU" in d.message


def test_take_back_takes_the_larger_of_usage_and_pending_sizing():
    # 11/12 used needs 2 nodes for expectRate; 3 pending 4-GPU pods need 3.
    d = decide(G().nodes(*online_fleet((4,), (4,), (3,)), *offline_side()).pending(4, 4, 4))
    assert d.nodes == ("t4-8", "t4-6", "t4-5")


def test_pods_pending_from_our_own_migration_do_not_trigger():
    assert decide(G().nodes(*online_fleet((2,), (2,), (2,)), *offline_side()).pending(4, replacement=True)) is None


def test_take_back_first_fills_capacity_already_on_its_way():
    g = G().nodes(*online_fleet((2,), (2,), (2,)), *offline_side(), N("t4-9").state(ON_U)).pending(4)
    assert decide(g).reason is LendReason.COVERED
    g = g.pending(4)
    assert decide(g).nodes == ("t4-8",)


def test_take_back_capped_by_parallel_limit_including_in_flight():
    # 12/12 used with one take-back in flight: 12/(16+4k) <= 60% needs k = 1 more... use pending to need 4.
    g = G().nodes(*online_fleet((4,), (4,), (4,)), *offline_side(), N("t4-9").state(ON_U)).pending(4, 4, 4, 4, 4)
    d = decide(g)
    assert d.nodes == ("t4-8", "t4-6")
    assert "capped at 2 of 4 by max 3 converting" in d.message


def test_a_pending_service_group_gets_all_its_machines_back_at_once_past_the_parallel_limit():
    # a group of 4 pods of 4 GPUs: one fits on t4-9, already on its way online; the other 3 need 3 machines now
    g = G().nodes(*online_fleet((2,), (2,), (2,)), *offline_side(), N("t4-9").state(ON_U))
    d = decide(g.pending(4, 4, 4, 4, group="group 1 of llm"))
    assert isinstance(d, TakeBack) and d.reason is LendReason.ONLINE_PENDING
    assert d.nodes == ("t4-8", "t4-6", "t4-5")  # 4 converting with t4-9: past max 3, the group's machines together
    assert "frees 3 machines at once for group 1 of llm, past max 3 converting" in d.message
    loose = decide(g.pending(4, 4, 4, 4))  # the same pods, no group: node by node within the limit
    assert loose.nodes == ("t4-8", "t4-6") and "capped at 2 of 3" in loose.message


def test_take_back_never_picks_a_fixed_pool_node():
    g = G().nodes(*online_fleet((4,), (4,), (4,)), N("t4-7").offline().fixed(), N("t4-8").offline().fixed())
    d = decide(g)
    assert isinstance(d, Hold) and d.reason is LendReason.NO_CANDIDATE


def test_take_back_skips_nodes_already_converting():
    # t4-8 has a take-back record (not applied yet): it takes one pending pod, t4-6 the other.
    g = G().nodes(*online_fleet((2,), (2,), (2,)), *offline_side()).converting("t4-8", BACK).pending(4, 4)
    assert decide(g).nodes == ("t4-6",)


def test_no_take_back_between_the_thresholds():
    assert decide(G().nodes(*online_fleet((4,), (4,), (1, 0.5)), *offline_side())) is None  # 79%


# ---- busy windows --------------------------------------------------------------------------------

LOW = G().nodes(*online_fleet((1,), (), (), ())).training_pending(3)
HIGH = G().nodes(*online_fleet((4,), (4,), (3,)), *offline_side())


@pytest.mark.parametrize("group,hhmm,expected", [
    (LOW, "09:00", LendReason.BUSY_WINDOW),  # no lending into the morning take-back window
    (LOW, "11:00", LendReason.LOW_USAGE),
    (LOW, "19:00", LendReason.LOW_USAGE),
    (HIGH, "19:00", LendReason.BUSY_WINDOW),  # usage alone is not urgent in the evening lending window
    (HIGH, "09:00", LendReason.HIGH_USAGE),
    (HIGH.pending(1), "19:00", LendReason.ONLINE_PENDING),  # pending pods always are
])
def test_busy_windows_hold_the_opposite_direction_unless_urgent(group, hhmm, expected):
    assert decide(group, at(hhmm)).reason is expected


def test_decide_lending_one_decision_per_group_sorted():
    groups = [G("t4").nodes(*online_fleet((), ())).training_pending(1).build(),
              G("cpu", "millicores").nodes(*online_fleet((30000,), (), prefix="cpu", capacity=64000)).build(),
              G("p40").nodes(*online_fleet((4,), prefix="p40"), N("p40-2").offline()).build()]
    decisions = decide_lending(groups, NOW)
    assert [(d.group, type(d)) for d in decisions] == [("p40", TakeBack), ("t4", Lend)]


def test_take_back_counts_a_gang_worker_as_its_whole_gang():
    # t4-5 holds one worker of a 4-worker gang started 10 min ago; t4-6 two single jobs started an hour ago.
    # Counting pods, t4-5 (1 job) goes first; counting what dies, the gang's 4 workers make it the costlier node.
    gang = replace(N("t4-5").build(), training=(TrainingPod("gang-w0", 77, NOW - 600, workers=4),))
    singles = N("t4-6").offline(3600, 3600)
    d = decide(G().nodes(*online_fleet((4,), (4,), (3,)), gang, singles, N("t4-7").offline(60, 60, 60, 60, 60)))
    assert isinstance(d, TakeBack)
    assert d.nodes == ("t4-6", "t4-5")  # 2 jobs lost first, then the gang's 4 workers, never t4-7's 5 jobs
    assert "3 training jobs requeued" in d.message  # the gang is one job
