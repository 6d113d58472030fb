"""Invariants of the co-location policy over random groups and random cluster behaviour."""

from dataclasses import replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cluster.types import NodeState, Pool
from colocation.policy import (DEFAULT, Conflict, Converting, DeletePod, DetachPod, Direction, Done, EvictTraining,
                               GroupNode, GroupView, Hold, InferencePod, Lend, NodeNow, NodePod, PendingPod, PodKind,
                               SetState, TakeBack, Thresholds, TrainingPod, TransitionRecord, Wait,
                               decide_group, next_action)
from experiments.builders.colocation import NOW

STATES = tuple(NodeState)
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

thresholds_st = st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)).map(lambda t: Thresholds(*sorted(t)))
pod_req_st = st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0])


@st.composite
def groups(draw) -> GroupView:
    nodes = []
    for i in range(draw(st.integers(1, 10))):
        state = draw(st.sampled_from(STATES))
        online = not state.offline
        inference = tuple(InferencePod(f"n{i}-p{j}", r, draw(st.booleans()) and state is NodeState.OFFLINE_UNNORMAL)
                          for j, r in enumerate(draw(st.lists(pod_req_st, max_size=4 if online else 1))))
        training = tuple(TrainingPod(f"n{i}-j{j}", j, NOW - draw(st.integers(0, 10**5)))
                         for j in range(draw(st.integers(0, 0 if online else 3))))
        pool = Pool.FIXED if draw(st.integers(0, 3)) == 0 else Pool.COLOCATION
        nodes.append(GroupNode(f"n{i}", state, pool, draw(st.sampled_from([1.0, 4.0, 8.0])), inference, training))
    names = [n.name for n in nodes]
    converting = tuple(Converting(n, draw(st.sampled_from(tuple(Direction))))
                       for n in draw(st.lists(st.sampled_from(names), max_size=3, unique=True)))
    pending = tuple(PendingPod(f"q{i}", r, draw(st.booleans()))
                    for i, r in enumerate(draw(st.lists(pod_req_st, max_size=4))))
    return GroupView("g", tuple(nodes), draw(thresholds_st), draw(st.integers(0, 5)), pending, converting)


@SETTINGS
@given(groups(), st.integers(0, 24 * 3600))
def test_lending_decisions_respect_limits_pools_and_states(group, second_of_day):
    d = decide_group(group, NOW - NOW % 86400 + second_of_day)
    if d is None or isinstance(d, Hold):
        return
    by_name = {n.name: n for n in group.nodes}
    flight = group.in_flight()
    chosen = [by_name[n] for n in d.nodes]
    assert chosen and len(set(d.nodes)) == len(d.nodes)
    assert len(flight) + len(chosen) <= DEFAULT.max_parallel  # never more than 3 converting per group
    assert all(n.pool is Pool.COLOCATION for n in chosen)  # never a fixed-pool node
    assert not set(d.nodes) & set(flight)
    th = group.thresholds
    if isinstance(d, Lend):
        assert group.pending_training > 0 and not group.urgent_pending
        assert group.projected_usage < th.min_rate
        assert all(n.state is NodeState.ONLINE_NORMAL for n in chosen)
        assert d.usage_after <= th.expect_rate + 1e-9
        assert Direction.TAKE_BACK not in flight.values()
    else:
        assert isinstance(d, TakeBack)
        assert group.urgent_pending or group.projected_usage > th.max_rate
        assert all(n.state is NodeState.OFFLINE_NORMAL for n in chosen)


@st.composite
def conversions(draw):
    direction = draw(st.sampled_from(tuple(Direction)))
    if direction is Direction.LEND:
        pods = tuple(NodePod(f"p{i}", PodKind.INFERENCE) for i in range(draw(st.integers(0, 5))))
        state = NodeState.ONLINE_NORMAL
    else:
        pods = tuple(NodePod(f"j{i}", PodKind.TRAINING) for i in range(draw(st.integers(0, 5))))
        state = NodeState.OFFLINE_NORMAL
    return direction, NodeNow("n", state, Pool.COLOCATION, pods)


@SETTINGS
@given(conversions(), st.data())
def test_step_machine_is_create_before_delete_crash_safe_and_ends_normal(conversion, data):
    """The cluster makes replacements ready and evicted pods exit at random moments; the controller
    crashes at random between acting and persisting. It always finishes, a deleted inference pod
    always had a ready replacement, and a finished conversion leaves the node normal."""
    direction, node = conversion
    record = TransitionRecord("n", direction)
    for _ in range(100):
        # the cluster moves on its own
        pods = []
        for p in node.pods:
            if p.detached and not p.replacement_ready and data.draw(st.booleans()):
                p = replace(p, replacement_ready=True)
            if p.terminating and data.draw(st.booleans()):
                continue  # the evicted training pod has exited
            pods.append(p)
        node = replace(node, pods=tuple(pods))
        action = next_action(record, node, 0.0)
        assert not isinstance(action, Conflict), action
        if isinstance(action, Done):
            assert node.state is direction.target and node.state.normal
            return
        if isinstance(action, DeletePod):
            pod = next(p for p in node.pods if p.name == action.pod)
            assert pod.kind is PodKind.INFERENCE and pod.detached and pod.replacement_ready
        if isinstance(action, SetState):
            node = replace(node, state=action.state)
        elif isinstance(action, DetachPod):
            node = replace(node, pods=tuple(replace(p, detached=True) if p.name == action.pod else p
                                            for p in node.pods))
        elif isinstance(action, DeletePod):
            node = replace(node, pods=tuple(p for p in node.pods if p.name != action.pod))
        elif isinstance(action, EvictTraining):
            node = replace(node, pods=tuple(replace(p, terminating=True) if p.name == action.pod else p
                                            for p in node.pods))
        else:
            assert isinstance(action, Wait)
            # fairness: the cluster eventually makes progress on something we wait for
            i = next(i for i, p in enumerate(node.pods) if (p.detached and not p.replacement_ready) or p.terminating)
            p = node.pods[i]
            rest = node.pods[:i] + node.pods[i + 1:]
            ready = (replace(p, replacement_ready=True),)
            node = replace(node, pods=rest if p.terminating else rest[:i] + ready + rest[i:])
        if not data.draw(st.integers(0, 4)) == 0:  # 1 in 5: crash after acting, before persisting
            record = replace(record, step=action.step)
    raise AssertionError(f"conversion did not finish: {record}, {node}")


@SETTINGS
@given(st.data())
def test_ticks_of_decide_and_convert_never_exceed_the_limit_nor_strand_a_node(data):
    """Several ticks of: random load -> decide -> open records -> controller steps (replacements become
    ready at once, crashes at random). At most 3 records per group at any time, fixed-pool nodes never
    change state, and every unnormal node has an open record (nothing is stuck half-way untracked)."""
    n_nodes = data.draw(st.integers(2, 8))
    sides = st.sampled_from([NodeState.ONLINE_NORMAL, NodeState.OFFLINE_NORMAL])
    nodes = {f"n{i}": GroupNode(f"n{i}", data.draw(sides), Pool.FIXED if i == 0 else Pool.COLOCATION, 4.0)
             for i in range(n_nodes)}
    fixed_state = nodes["n0"].state
    records: dict[str, TransitionRecord] = {}
    now, serial = NOW - NOW % 86400 + 12 * 3600, 0
    active = data.draw(st.integers(1, 8))
    for tick in range(active + 4):
        last = tick >= active  # the trailing ticks only finish what is open
        online = [n for n in nodes.values() if n.state is NodeState.ONLINE_NORMAL and n.name not in records]
        if online and not last:
            for req in data.draw(st.lists(pod_req_st, max_size=4)):
                target = data.draw(st.sampled_from(online))
                serial += 1
                nodes[target.name] = target = replace(
                    target, inference=target.inference + (InferencePod(f"p{serial}", req),))
        pending = tuple(PendingPod(f"q{i}", r) for i, r in enumerate(data.draw(st.lists(pod_req_st, max_size=2))))
        view = GroupView("g", tuple(nodes.values()), Thresholds(0.4, 0.6, 0.8), data.draw(st.integers(0, 3)),
                         pending, tuple(Converting(r.node, r.direction) for r in records.values()))
        d = decide_group(view, now)
        event(type(d).__name__)
        if isinstance(d, (Lend, TakeBack)) and not last:
            for name in d.nodes:
                assert name not in records
                records[name] = TransitionRecord(name, d.direction, started_at=now)
        assert len(records) <= 3
        for name in list(records):
            for _ in range(30):
                n = nodes[name]
                observed = NodeNow(name, n.state, n.pool, tuple(
                    [NodePod(p.name, PodKind.INFERENCE, p.detached, p.detached) for p in n.inference]
                    + [NodePod(p.name, PodKind.TRAINING) for p in n.training]))
                action = next_action(records[name], observed, now)
                assert not isinstance(action, Conflict), action
                if isinstance(action, Done):
                    assert n.state.normal
                    del records[name]
                    break
                if isinstance(action, Wait):
                    break
                nodes[name] = _execute(n, action, nodes, records)
                if data.draw(st.integers(0, 9)) == 0:  # crash after acting, before persisting
                    break
                records[name] = replace(records[name], step=action.step)
        assert nodes["n0"].state is fixed_state
        assert all(n.state.normal or n.name in records for n in nodes.values())
        now += 600


def _execute(n: GroupNode, action, nodes: dict[str, GroupNode], records) -> GroupNode:
    if isinstance(action, SetState):
        return replace(n, state=action.state)
    if isinstance(action, DetachPod):
        pod = next(p for p in n.inference if p.name == action.pod)
        # the ReplicaSet's replacement lands on some online-normal node and is ready at once
        home = next(m for m in nodes.values() if m.state is NodeState.ONLINE_NORMAL and m.name not in records)
        nodes[home.name] = replace(home, inference=home.inference + (InferencePod(pod.name + "-r", pod.request),))
        return replace(n, inference=tuple(replace(p, detached=True) if p is pod else p for p in n.inference))
    if isinstance(action, DeletePod):
        return replace(n, inference=tuple(p for p in n.inference if p.name != action.pod))
    if isinstance(action, EvictTraining):
        return replace(n, training=tuple(p for p in n.training if p.name != action.pod))
    raise AssertionError(action)
