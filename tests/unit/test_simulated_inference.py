"""Inference in the simulated backend (ReplicaSets, readiness, detach, pending) and the
real-time threshold rule (docs/concepts/autoscaling.md#the-policy)."""

import pytest

from cluster.backend import (DETACHED_FROM_LABEL, KIND_LABEL, REPLACED_BY_LABEL, REPLACES_LABEL,
                             REPLICASET_LABEL, BackendError, EventKind, PodSpec)
from cluster.clock import VirtualClock
from cluster.simulated import SimulatedCluster
from cluster.types import GpuShare, NodeState
from experiments.builders.scheduling import NodeBuilder

TEMPLATE = PodSpec("web", None, "T4", (GpuShare(0, 0.5),), 1000, 1024)


def online(name: str, gpus: int = 2, model: str = "T4"):
    return NodeBuilder(name, model=model, gpus=gpus).state(NodeState.ONLINE_NORMAL).build()


def cluster(*names: str, gpus: int = 2, startup_s: float = 30.0):
    clock = VirtualClock(1000.0)
    return SimulatedCluster([online(n, gpus) for n in names], clock, startup_s=startup_s), clock


def gpu_totals(sim):
    return {n.name: n.used_shares() for n in sim.nodes()}


def test_replicaset_places_first_fit_labels_and_becomes_ready_after_startup():
    sim, clock = cluster("a", "b")
    sim.apply_replicaset("web", TEMPLATE, 3)
    pods = sim.pods()
    assert [(p.spec.name, p.node) for p in pods] == [("web-0", "a"), ("web-1", "a"), ("web-2", "a")]
    assert all(p.spec.labels[KIND_LABEL] == "inference" and p.spec.labels[REPLICASET_LABEL] == "web" for p in pods)
    assert not any(p.ready for p in pods)
    assert sim.nodes()[0].gpu_used == (1.0, 0.5)
    clock.advance(29)
    sim.advance()
    assert sim.replicaset("web").ready == 0
    clock.advance(1)
    sim.advance()
    assert sim.replicaset("web").ready == 3 and all(p.ready for p in sim.pods())
    kinds = [e.kind for e in sim.drain_events()]
    assert kinds.count(EventKind.POD_CREATED) == 3 and kinds.count(EventKind.POD_READY) == 3


def test_training_pods_are_ready_at_once_and_labelled():
    sim, _ = cluster("a")
    sim.set_node_state("a", NodeState.OFFLINE_NORMAL)
    sim.bind(PodSpec("job-1", 1, "T4", (GpuShare(0, 1.0),), 1000, 1024), "a")
    (pod,) = sim.pods()
    assert pod.ready and pod.spec.labels[KIND_LABEL] == "training" and pod.kind == "training"


def test_scale_up_and_down_deletes_pending_then_not_ready_then_newest():
    sim, clock = cluster("a", gpus=1)
    sim.apply_replicaset("web", TEMPLATE, 2)
    clock.advance(30)
    sim.advance()
    sim.apply_replicaset("web", TEMPLATE, 4)  # room for none of the two new ones
    assert len(sim.pending_pods()) == 2 and sim.replicaset("web").pending == 2
    sim.apply_replicaset("web", TEMPLATE, 1)
    assert sim.pending_pods() == () and [p.spec.name for p in sim.pods()] == ["web-0"]
    assert EventKind.POD_DELETED in {e.kind for e in sim.drain_events()}
    sim.apply_replicaset("web", TEMPLATE, 2)
    sim.apply_replicaset("web", TEMPLATE, 1)  # the new, not ready pod goes first
    assert [p.spec.name for p in sim.pods()] == ["web-0"]


def test_pending_when_no_room_then_placed_on_advance_when_a_node_turns_online():
    sim, clock = cluster("a", "b", gpus=1)
    sim.set_node_state("b", NodeState.OFFLINE_NORMAL)
    sim.apply_replicaset("web", TEMPLATE, 3)
    (pending,) = sim.pending_pods()
    assert pending.spec.name == "web-2" and pending.spec.gpu_shares[0].share == 0.5 and pending.since == 1000.0
    clock.advance(60)
    sim.advance()
    assert len(sim.pending_pods()) == 1  # still no online-normal room
    sim.set_node_state("b", NodeState.ONLINE_NORMAL)
    assert sim.pending_pods() == () and sim.pod("web-2").node == "b"


def test_never_over_one_gpu():
    sim, clock = cluster("a", "b", gpus=2)
    big = PodSpec("big", None, "T4", (GpuShare(0, 0.75),), 100, 100)
    sim.apply_replicaset("big", big, 6)
    sim.apply_replicaset("web", TEMPLATE, 6)
    for _ in range(3):
        clock.advance(60)
        sim.advance()
    assert all(u <= 1.0 + 1e-9 for shares in gpu_totals(sim).values() for u in shares)
    placed = sum(1 for p in sim.pods())
    assert placed + len(sim.pending_pods()) == 12 and placed < 12


def test_detach_is_create_before_delete():
    sim, clock = cluster("a", "b", gpus=1)
    sim.apply_replicaset("web", TEMPLATE, 2)  # both on a
    clock.advance(30)
    sim.advance()
    sim.set_node_state("a", NodeState.OFFLINE_UNNORMAL)  # being lent
    replacement = sim.detach_pod("web-0")
    old = sim.pod("web-0")
    assert old.detached_from == "web" and REPLICASET_LABEL not in old.spec.labels
    assert old.spec.labels[REPLACED_BY_LABEL] == replacement and old.spec.labels[DETACHED_FROM_LABEL] == "web"
    new = sim.pod(replacement)
    assert new.node == "b" and not new.ready and new.spec.labels[REPLACES_LABEL] == "web-0"
    assert sim.replicaset("web").pods == ("web-1", replacement)
    clock.advance(10)
    sim.advance()
    assert sim.pod("web-0") is not None and sim.pod("web-0").ready  # still serving
    clock.advance(20)
    sim.advance()
    assert sim.pod(replacement).ready
    sim.evict("web-0", "migrated")  # part 2: the old pod goes, the ReplicaSet does not notice
    assert sim.pod("web-0") is None and sim.replicaset("web").replicas == 2 and sim.pending_pods() == ()
    sim.bind(PodSpec("x", 1, "T4", (), 1, 1), "b")
    with pytest.raises(BackendError, match="no replicaset"):
        sim.detach_pod("x")


def test_evicting_an_owned_pod_is_recreated():
    sim, _ = cluster("a")
    sim.apply_replicaset("web", TEMPLATE, 1)
    sim.evict("web-0", "node-problem")
    assert [p.spec.name for p in sim.pods()] == ["web-1"]


def test_node_selector_and_gpu_model_choose_the_node():
    clock = VirtualClock(0.0)
    sim = SimulatedCluster([online("a"), online("p", model="P100")], clock)
    sim.apply_replicaset("p-web", PodSpec("t", None, "P100", (GpuShare(0, 1.0),), 10, 10), 1,
                         node_selector={"tidal.io/resource-group": "P100"})
    assert sim.pod("p-web-0").node == "p"


def test_bad_replicas_refused():
    sim, _ = cluster("a")
    with pytest.raises(BackendError, match="replicas must be >= 0"):
        sim.apply_replicaset("web", TEMPLATE, -1)

