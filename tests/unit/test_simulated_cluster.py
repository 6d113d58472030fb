"""The simulated backend: sharing, eviction, finishing on the clock, events, loader."""

import pytest

from cluster.backend import BackendError, EventKind, PodSpec
from cluster.clock import VirtualClock
from cluster.simulated import SimulatedCluster
from cluster.simulated.alibaba import read_nodes
from cluster.types import GpuShare, NodeState, Resources
from experiments.builders.scheduling import NodeBuilder


def pod(name: str, *shares: tuple[int, float], cpu: int = 1000, job_id: int = 1) -> PodSpec:
    return PodSpec(name, job_id, "T4", tuple(GpuShare(i, s) for i, s in shares), cpu, 1024)


def cluster(duration=lambda p: None) -> tuple[SimulatedCluster, VirtualClock]:
    clock = VirtualClock(100.0)
    return SimulatedCluster([NodeBuilder("n1", gpus=2).build()], clock, duration), clock


def test_fractional_pods_share_a_gpu_up_to_one():
    sim, _ = cluster()
    sim.bind(pod("a", (0, 0.5)), "n1")
    sim.bind(pod("b", (0, 0.5)), "n1")
    with pytest.raises(BackendError, match="GPU 0"):
        sim.bind(pod("c", (0, 0.25)), "n1")
    assert sim.nodes()[0].gpu_used == (1.0, 0.0)


def test_cpu_must_fit_and_names_are_unique():
    sim, _ = cluster()
    with pytest.raises(BackendError, match="CPU/memory"):
        sim.bind(pod("a", cpu=10**6), "n1")
    sim.bind(pod("a"), "n1")
    with pytest.raises(BackendError, match="already bound"):
        sim.bind(pod("a"), "n1")


def test_evict_frees_and_emits():
    sim, _ = cluster()
    sim.bind(pod("a", (0, 1.0), (1, 1.0)), "n1")
    sim.evict("a", "preempted-reclaim")
    node = sim.nodes()[0]
    assert (node.gpu_used, node.cpu_used, node.pods) == ((0.0, 0.0), 0, ())
    assert [(e.kind, e.detail) for e in sim.drain_events()] == [
        (EventKind.POD_STARTED, ""), (EventKind.POD_EVICTED, "preempted-reclaim")]
    assert sim.drain_events() == []


def test_pods_finish_when_their_run_time_elapsed():
    sim, clock = cluster(duration=lambda p: {"a": 50, "b": 10}[p.name])
    sim.bind(pod("a", (0, 0.5)), "n1")
    sim.bind(pod("b", (1, 0.5)), "n1")
    clock.advance(9)
    assert sim.advance() == []
    clock.advance(100)
    finished = sim.advance()
    assert [(e.pod, e.at) for e in finished] == [("b", 110.0), ("a", 150.0)]
    assert sim.pods() == ()


def test_evicted_then_rebound_pod_finishes_on_its_new_schedule():
    sim, clock = cluster(duration=lambda p: 50)
    sim.bind(pod("a", (0, 1.0)), "n1")
    clock.advance(30)
    sim.evict("a", "x")
    sim.bind(pod("a", (0, 1.0)), "n1")
    clock.advance(30)  # the first binding would have ended at 150
    assert sim.advance() == []
    clock.advance(20)
    assert [e.pod for e in sim.advance()] == ["a"]


def test_node_state_change_blocks_new_work_and_merges_labels():
    sim, _ = cluster()
    sim.set_node_state("n1", NodeState.OFFLINE_UNNORMAL, {"tidal.io/state": "offline-unnormal"})
    with pytest.raises(BackendError, match="offline-unnormal"):
        sim.bind(pod("a"), "n1")
    node = sim.nodes()[0]
    assert (node.state, node.labels["tidal.io/state"]) == (NodeState.OFFLINE_UNNORMAL, "offline-unnormal")
    assert sim.drain_events()[0].detail == "offline-normal->offline-unnormal"


def test_virtual_clock_never_goes_back():
    clock = VirtualClock(10)
    assert clock.set(15) == 15
    with pytest.raises(ValueError):
        clock.set(5)


def test_alibaba_loader(tmp_path):
    csv = tmp_path / "nodes.csv"
    csv.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,96000,393216,8,G2\n")
    cpu, gpu = read_nodes(csv)
    assert (cpu.gpu_model, cpu.gpu_count, cpu.resource_group) == (None, 0, "CPU")
    assert (gpu.name, gpu.gpu_model, gpu.gpu_count, gpu.cpu_milli, gpu.memory_mib) == ("n1", "G2", 8, 96000, 393216)
    assert gpu.state is NodeState.OFFLINE_NORMAL


def test_resource_vector_arithmetic():
    a = Resources.of("T4", 1.5, 1000, 2048)
    b = Resources.of("A100", 2, 500, 1024)
    total = a + b
    assert total.amounts() == {"A100": 2.0, "T4": 1.5, "cpu": 1500, "memory": 3072}
    assert (total - b) == a and total.gpu("A100") == 2.0
    assert a.fits(total) and not total.fits(a)


def test_a_removed_node_evicts_its_pods_and_its_replicasets_replace_them_elsewhere():
    clock = VirtualClock(100.0)
    online = [NodeBuilder(n, gpus=2).state(NodeState.ONLINE_NORMAL).build() for n in ("a", "b")]
    sim = SimulatedCluster(online, clock, startup_s=0)
    sim.apply_replicaset("web", PodSpec("web", None, "T4", (GpuShare(0, 1.0),), 1000, 1024), 1)
    sim.set_node_state("a", NodeState.OFFLINE_NORMAL)  # training on a, the web pod stays where it is
    sim.bind(pod("train", (1, 1.0)), "a")
    assert {p.spec.name: p.node for p in sim.pods()} == {"web-0": "a", "train": "a"}
    sim.drain_events()
    sim.remove_node("a", "node-left-inventory")
    assert [n.name for n in sim.nodes()] == ["b"]
    assert {p.spec.name: p.node for p in sim.pods()} == {"web-1": "b"}  # the replacement, on the node left
    evicted = [(e.pod, e.node, e.detail) for e in sim.drain_events() if e.kind is EventKind.POD_EVICTED]
    assert sorted(evicted) == [("train", "a", "node-left-inventory"), ("web-0", "a", "node-left-inventory")]
    sim.remove_node("a", "again")  # unknown now: nothing happens
    assert sim.drain_events() == [] and len(sim.nodes()) == 1


def test_sync_nodes_makes_the_cluster_hold_the_inventorys_nodes():
    from cluster.simulated.store import LEFT_INVENTORY, sync_nodes

    clock = VirtualClock(100.0)
    sim = SimulatedCluster([NodeBuilder("old", gpus=1).build(), NodeBuilder("kept", gpus=1).build()], clock)
    sim.bind(pod("job-1-run-1", (0, 1.0)), "old")
    sim.drain_events()
    sync_nodes(sim, [NodeBuilder("kept", gpus=1).build(), NodeBuilder("new", gpus=2).build()])
    assert sorted(n.name for n in sim.nodes()) == ["kept", "new"] and sim.pods() == ()
    assert [(e.kind, e.pod, e.detail) for e in sim.drain_events()] == [
        (EventKind.POD_EVICTED, "job-1-run-1", LEFT_INVENTORY)]
    sync_nodes(sim, [])  # no inventory at all: nothing seeded yet, not every node gone
    assert len(sim.nodes()) == 2
