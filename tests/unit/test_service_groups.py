"""The service-group plan (colocation/policy/servicegroups.py): whole placement through the gang placer, exclusive
blocks, healing with back-off, scale-in by highest index, rolling by groups."""
from __future__ import annotations

from dataclasses import replace

import pytest

from cluster.types import NodeState
from colocation.policy import servicegroups as sg
from experiments.builders.scheduling import NodeBuilder

NOW = 1_000_000.0
SPEC = sg.GroupSpec("llm", 2, "T4", 2.0, 4000, 16384, "", "rev-a")


def online(name: str, block: str = "b0", gpus: int = 2, used: tuple[float, ...] = ()) -> object:
    node = NodeBuilder(name, gpus=gpus).state(NodeState.ONLINE_NORMAL).block(block)
    return (node.used(*used) if used else node).build()


def placed(spec: sg.GroupSpec, index: int, nodes: tuple[str, ...], ready: bool = True,
           revision: str | None = None) -> sg.ObservedGroup:
    pods = tuple(sg.GroupPod(sg.pod_name(spec.service, index, w), w, n, ready, False)
                 for w, n in enumerate(nodes))
    return sg.ObservedGroup(index, revision or spec.revision, pods)


def kinds(actions) -> list[tuple[str, int | None, str]]:
    return [(type(a).__name__, a.index, a.reason.value) for a in actions]


def test_a_group_is_placed_whole_one_pod_per_node_on_the_fewest_nodes():
    nodes = [online("n0"), online("n1"), online("n2")]
    (place,) = sg.plan(SPEC, 1, {}, nodes, {}, NOW, {})
    assert isinstance(place, sg.Place) and place.nodes == ("n0", "n1")
    assert place.shares == (((sg.GpuShare(0, 1.0), sg.GpuShare(1, 1.0))),) * 2


def test_a_group_that_does_not_fit_whole_places_nothing_and_says_why():
    nodes = [online("n0"), online("n1", used=(1.0,))]  # one pod's room and a half
    (note,) = sg.plan(SPEC, 1, {}, nodes, {}, NOW, {})
    assert isinstance(note, sg.Note) and note.reason is sg.Reason.NO_ROOM and "2 pods" in note.message


def test_exclusive_topology_keeps_a_group_in_one_block_no_other_group_uses():
    spec = replace(SPEC, exclusive=True)
    nodes = [online("a0", "a"), online("a1", "a"), online("b0", "b"), online("b1", "b"), online("c0", "c")]
    other = {"a0": {("other", 0)}}  # another service's group holds a pod in block a
    (place,) = sg.plan(spec, 1, {}, nodes, {}, NOW, other)
    assert place.nodes == ("b0", "b1")
    # two groups: each its own block
    actions = sg.plan(spec, 2, {}, nodes[2:] + [online("d0", "d"), online("d1", "d")], {}, NOW, {})
    assert [a.nodes for a in actions] == [("b0", "b1"), ("d0", "d1")]


def test_a_group_missing_a_pod_is_removed_whole_and_backs_off_before_it_returns():
    nodes = [online("n0"), online("n1")]
    broken = sg.ObservedGroup(0, SPEC.revision, placed(SPEC, 0, ("n0", "n1")).pods[:1])
    (remove,) = sg.plan(SPEC, 1, {0: broken}, nodes, {}, NOW, {})
    assert isinstance(remove, sg.Remove) and remove.failed and remove.pods == ("llm-0",)
    waiting = sg.plan(SPEC, 1, {}, nodes, {0: sg.GroupMemory(1, NOW + 10)}, NOW + 5, {})
    assert kinds(waiting) == [("Note", 0, "group-backoff")]
    assert kinds(sg.plan(SPEC, 1, {}, nodes, {0: sg.GroupMemory(1, NOW + 10)}, NOW + 10, {})) == \
        [("Place", 0, "group-placed")]


@pytest.mark.parametrize("restarts, wait", [(1, 10), (2, 20), (3, 40), (6, 300), (20, 300)])
def test_back_off_doubles_up_to_five_minutes(restarts, wait):
    assert sg.backoff_after(restarts) == wait


def test_scale_in_removes_the_highest_index_first():
    nodes = [online(f"n{i}") for i in range(6)]
    groups = {i: placed(SPEC, i, (f"n{2 * i}", f"n{2 * i + 1}")) for i in range(3)}
    assert kinds(sg.plan(SPEC, 1, groups, nodes, {}, NOW, {})) == \
        [("Remove", 2, "group-removed"), ("Remove", 1, "group-removed")]


def test_a_rollout_surges_where_there_is_room():
    spec = replace(SPEC, revision="rev-b", max_surge=1, max_unavailable=0)
    nodes = [online(f"n{i}", used=(1.0, 1.0) if i < 4 else ()) for i in range(6)]
    groups = {i: placed(spec, i, (f"n{2 * i}", f"n{2 * i + 1}"), revision="rev-a") for i in range(2)}
    assert kinds(sg.plan(spec, 2, groups, nodes, {}, NOW, {})) == [("Place", 2, "group-surge")]
    # the surge group ready: one old group goes (the highest), the surge group stands in for it
    groups[2] = placed(spec, 2, ("n4", "n5"))
    assert kinds(sg.plan(spec, 2, groups, nodes, {}, NOW, {})) == [("Remove", 1, "group-rolled")]


def test_a_rollout_without_room_to_surge_says_so_and_rolls_at_max_unavailable():
    spec = replace(SPEC, revision="rev-b", max_surge=1, max_unavailable=0)
    nodes = [online(f"n{i}", used=(1.0, 1.0)) for i in range(4)]
    groups = {i: placed(spec, i, (f"n{2 * i}", f"n{2 * i + 1}"), revision="rev-a") for i in range(2)}
    actions = sg.plan(spec, 2, groups, nodes, {}, NOW, {})
    assert kinds(actions) == [("Note", None, "rollout-no-surge-room"), ("Remove", 1, "group-rolled")]


def test_only_a_group_some_block_could_hold_fits_somewhere():
    nodes = [online("a0", "a"), online("a1", "a"), online("b0", "b", used=(1.0,))]
    assert sg.fits_somewhere(replace(SPEC, size=3), nodes)  # across blocks, counted empty
    assert not sg.fits_somewhere(replace(SPEC, size=3, exclusive=True), nodes)
    assert not sg.fits_somewhere(replace(SPEC, cpu_milli=100_000), nodes)


def test_lws_environment_names_the_leader_under_the_groups_headless_service():
    assert sg.lws_env("llm", 3, 2, 4) == {"LWS_LEADER_ADDRESS": "llm-3.llm-group-3", "LWS_GROUP_SIZE": "4",
                                          "LWS_WORKER_INDEX": "2", "LWS_GROUP_INDEX": "3"}



def test_scale_in_with_surge_allowed_and_no_rollout_removes_the_group_above():
    """Found by the property test: a ready group where a surge group would stand, with nothing to roll, just goes."""
    spec = replace(SPEC, max_surge=1)
    nodes = [online(f"n{i}") for i in range(4)]
    groups = {i: placed(spec, i, (f"n{2 * i}", f"n{2 * i + 1}")) for i in range(2)}
    assert kinds(sg.plan(spec, 1, groups, nodes, {}, NOW, {})) == [("Remove", 1, "group-removed")]


def test_a_group_leaving_a_node_is_moved_create_before_delete_by_a_stand_in_that_stays():
    lent = replace(online("n1"), state=NodeState.OFFLINE_UNNORMAL)
    nodes = [online("n0", used=(1.0, 1.0)), lent, online("n2"), online("n3")]
    spec = replace(SPEC, max_surge=1)
    group0 = placed(spec, 0, ("n0", "n1"))
    (place,) = sg.plan(spec, 1, {0: group0}, nodes, {}, NOW, {})
    assert (place.index, place.reason, place.nodes) == (2, sg.Reason.MOVING, ("n2", "n3"))  # above the surge range
    assert "standing in for group 0 that leaves n1" in place.message
    starting = placed(spec, 2, ("n2", "n3"), ready=False)
    (wait,) = sg.plan(spec, 1, {0: group0, 2: starting}, nodes, {}, NOW, {})
    assert (type(wait), wait.index, wait.reason) == (sg.Note, 0, sg.Reason.MOVING)  # the old group keeps serving
    stand_in = placed(spec, 2, ("n2", "n3"))
    (moved,) = sg.plan(spec, 1, {0: group0, 2: stand_in}, nodes, {}, NOW, {})
    assert (type(moved), moved.index, moved.reason, moved.failed) == (sg.Remove, 0, sg.Reason.MOVED, False)
    assert "group 2 stands in for it, ready on n2, n3" in moved.message
    assert sg.plan(spec, 1, {2: stand_in}, nodes, {}, NOW, {}) == []  # the stand-in fills the hole: nothing more
    assert kinds(sg.plan(spec, 0, {2: stand_in}, nodes, {}, NOW, {})) == [("Remove", 2, "group-removed")]


def test_a_group_with_no_room_for_a_stand_in_stays_where_it_is_and_says_why():
    lent = replace(online("n1"), state=NodeState.OFFLINE_UNNORMAL)
    (note,) = sg.plan(SPEC, 1, {0: placed(SPEC, 0, ("n0", "n1"))}, [online("n0", used=(1.0, 1.0)), lent], {}, NOW, {})
    assert (note.index, note.reason) == (0, sg.Reason.NO_ROOM) and "cannot leave n1 yet" in note.message


def test_a_container_restarted_in_place_recreates_its_group_whole():
    group = placed(SPEC, 0, ("n0", "n1"))
    restarted = replace(group, pods=(group.pods[0], replace(group.pods[1], restarts=1)))
    (remove,) = sg.plan(SPEC, 1, {0: restarted}, [online("n0"), online("n1")], {}, NOW, {})
    assert (type(remove), remove.reason, remove.failed) == (sg.Remove, sg.Reason.RECREATED, True)
    assert remove.pods == ("llm-0", "llm-0-1") and "RecreateGroupOnPodRestart" in remove.message


KEEP = replace(SPEC, restart_policy=sg.RestartPolicy.NONE)


def restarted(group: sg.ObservedGroup, worker: int, restarts: int = 1) -> sg.ObservedGroup:
    """`group` with worker's container restarted in place: the same pod, not ready until it is ready again."""
    pods = tuple(replace(p, restarts=restarts, ready=False) if p.worker == worker else p for p in group.pods)
    return replace(group, pods=pods)


def test_restart_policy_none_keeps_the_group_of_a_container_restarted_in_place_and_says_so_once():
    nodes = [online("n0"), online("n1"), online("n2"), online("n3")]
    group = restarted(placed(KEEP, 0, ("n0", "n1")), worker=1)
    assert not group.ready(KEEP.size)  # not ready while its pod is not
    (kept,) = sg.plan(KEEP, 1, {0: group}, nodes, {}, NOW, {})  # no removal, no back-off, nothing placed instead
    assert (type(kept), kept.index, kept.pod, kept.restarts, kept.reason) == \
        (sg.KeptInPlace, 0, "llm-0-1", 1, sg.Reason.POD_RESTARTED)
    assert "llm-0-1 on n1 restarted in place" in kept.message and "group 0 of llm kept" in kept.message
    seen = {0: sg.GroupMemory(pod_restarts={"llm-0-1": 1})}
    assert sg.plan(KEEP, 1, {0: group}, nodes, seen, NOW + 1, {}) == []  # acted on: not news again
    (again,) = sg.plan(KEEP, 1, {0: restarted(group, worker=1, restarts=2)}, nodes, seen, NOW + 2, {})
    assert (type(again), again.restarts) == (sg.KeptInPlace, 2)


def test_restart_policy_none_still_recreates_a_group_missing_a_pod_with_back_off():
    broken = sg.ObservedGroup(0, KEEP.revision, placed(KEEP, 0, ("n0", "n1")).pods[1:])
    (remove,) = sg.plan(KEEP, 1, {0: broken}, [online("n0"), online("n1")], {}, NOW, {})
    assert (type(remove), remove.reason, remove.failed, remove.pods) == (sg.Remove, sg.Reason.RECREATED, True,
                                                                         ("llm-0-1",))


def test_a_restart_already_acted_on_does_not_recreate_the_group():
    """A service switched from None back to RecreateGroupOnPodRestart: restarts kept in place before stay kept."""
    group = restarted(placed(SPEC, 0, ("n0", "n1")), worker=1)
    memory = {0: sg.GroupMemory(pod_restarts={"llm-0-1": 1})}
    assert sg.plan(SPEC, 1, {0: group}, [online("n0"), online("n1")], memory, NOW, {}) == []
    (remove,) = sg.plan(SPEC, 1, {0: restarted(group, worker=1, restarts=2)}, [online("n0"), online("n1")], memory,
                        NOW, {})
    assert (type(remove), remove.reason) == (sg.Remove, sg.Reason.RECREATED)
