"""Binding sets of pods whole (cluster/wholebind.py) on the simulated cluster: every pod of a set or none."""
from cluster.backend import PodSpec
from cluster.clock import VirtualClock
from cluster.simulated.engine import SimulatedCluster
from cluster.types import GpuShare
from cluster.wholebind import PodSet, bind_whole, unbind
from experiments.builders.scheduling import NodeBuilder


def pod(name: str, gpu: int) -> PodSpec:
    return PodSpec(name, 1, "T4", (GpuShare(gpu, 1.0),), 1000, 1024, {"tidal.io/job": name.split("-")[0]})


def test_a_set_with_one_pod_refused_reports_what_it_bound_and_unbind_removes_it_and_its_service():
    cluster = SimulatedCluster([NodeBuilder("n1", gpus=2).build(), NodeBuilder("n2", gpus=1).build()],
                               VirtualClock(0.0))
    fits = PodSet(((pod("a-0", 0), "n1"),), "a", {"tidal.io/job": "a"})
    half = PodSet(((pod("b-0", 1), "n1"), (pod("b-1", 0), "n2"), (pod("b-2", 1), "n2")), "b", {"tidal.io/job": "b"})
    ok, refused = bind_whole(cluster, [fits, half])
    assert ok is None
    assert refused.service_error is None and set(refused.pods) == {"b-2"} and refused.bound == ("b-0", "b-1")
    rank, spec, node, _ = refused.first(half)
    assert (rank, spec.name, node) == (2, "b-2", "n2")
    assert set(cluster.services()) == {"a", "b"}
    unbind(cluster, half, refused, "b could not start whole")
    cluster.advance()
    assert {p.spec.name for p in cluster.pods() if not p.terminating} == {"a-0"}
    assert set(cluster.services()) == {"a"}
