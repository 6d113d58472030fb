"""The tidal placement (scheduler/policy/gpuloss.py, as the experiment's TidalScorer runs it) on hand-made tables,
one per rule, and the held-out variant generator (experiments/fragmentation/variants.py)."""
import numpy as np
import pytest

from experiments.fragmentation import variants as va
from experiments.fragmentation.measure import FragMeasure
from experiments.fragmentation.scorers import Context, make
from experiments.fragmentation.state import MILLI, ClusterState, Placement, PodRequest
from scheduler.policy.gpuloss import quantized
from scheduler.policy.workload import Shape, TargetWorkload, cpu_per_gpu, pressure


def cluster(*nodes):
    """nodes: (model, gpus, cpu_milli) each, in tie-break order."""
    return ClusterState([f"n{i}" for i in range(len(nodes))], [n[0] for n in nodes], [n[1] for n in nodes],
                        [n[2] for n in nodes], [1 << 20] * len(nodes))


def workload(*shapes_counts):
    return TargetWorkload(tuple(s for s, _ in shapes_counts), tuple(n for _, n in shapes_counts),
                          sum(n for _, n in shapes_counts))


def scorer(name, c, w):
    return make(name, Context(rng=np.random.default_rng(0), measure=FragMeasure(w, c.model_names, c.max_gpus)))


def pressure_of(w, c):
    return pressure(w, c.node_models(), c.gpu_count, c.cpu_capacity)


def take(c, node, gpus, cpu=0):
    """Whole GPUs `gpus` of `node` and `cpu` millicores taken by one pod each."""
    for g in gpus:
        c.place(Placement(node, (g,)), PodRequest(0, 0, 1, MILLI))
    if cpu:
        c.place(Placement(node, ()), PodRequest(cpu, 0))


ONE = Shape(8000, MILLI, 1)   # a typical 1-GPU task: 8 cores per GPU


def test_cpu_per_gpu_is_the_gpu_shapes_cpu_over_their_gpu():
    w = workload((ONE, 3), (Shape(2000, 500, 1), 2), (Shape(30000, 0, 0), 5))   # the CPU-only shape is left out
    assert cpu_per_gpu(w) == pytest.approx((3 * 8000 + 2 * 2000) / (3 * 1000 + 2 * 500))
    assert cpu_per_gpu(workload((Shape(1000, 0, 0), 1))) == 0.0


def test_stranding_keeps_a_cpu_hungry_pod_off_the_cpu_a_nodes_gpus_need():
    # node 0 has exactly the CPU its 4 GPUs need (8 cores each); node 1 plenty. FGD sees no shape stop fitting
    # on either (8 cores are left for a 1-GPU task) and takes the first node; tidal sees node 0 strand 2 GPUs.
    w = workload((ONE, 1))
    c = cluster(("T4", 4, 32000), ("T4", 4, 128000))
    cpu_pod = PodRequest(16000, 0)
    assert scorer("fgd", c, w).choose(c, cpu_pod).node == 0
    assert scorer("tidal", c, w).choose(c, cpu_pod).node == 1
    # the reverse: a GPU pod asking little CPU goes where CPU is short, and un-strands nothing it need not
    take(c, 0, [], cpu=16000)        # node 0: 4 idle GPUs, 16 cores: 2 GPUs stranded
    lean = PodRequest(1000, 0, 1, MILLI)
    assert scorer("tidal", c, w).choose(c, lean).node == 0


def test_pressure_is_demand_share_over_capacity_share_of_the_nodes_a_shape_fits():
    c = cluster(("A100", 4, 64000), ("T4", 4, 64000), ("T4", 4, 16000))
    anywhere = Shape(1000, MILLI, 1)
    a100 = Shape(1000, MILLI, 2, ("A100",))
    big = Shape(32000, MILLI, 4)                        # CPU: nodes 0 and 1 only
    p = pressure_of(workload((anywhere, 4), (a100, 3), (big, 1)), c)
    share = np.array([4, 6, 4]) / 14                    # GPU demand shares
    assert p == pytest.approx([share[0] + 1.0 + share[2] / (2 / 3),   # A100-only: 6/14 over 1/3 > 1, capped
                               share[0] + share[2] / (2 / 3),
                               share[0]])
    # a workload of shapes that fit everywhere presses every node alike
    assert np.ptp(pressure_of(workload((anywhere, 1)), c)) == 0


def test_displacement_keeps_other_pods_off_the_nodes_only_some_tasks_can_use():
    # both nodes have one free GPU: the 2-GPU A100-only shape fits neither now, and FGD's change is the same
    # on both (the first wins); tidal keeps the A100 for the tasks that can run nowhere else
    w = workload((Shape(1000, MILLI, 1), 1), (Shape(1000, MILLI, 2, ("A100",)), 1))
    c = cluster(("A100", 4, 64000), ("T4", 4, 64000))
    take(c, 0, [0, 1, 2])
    take(c, 1, [0, 1, 2])
    pod = PodRequest(1000, 0, 1, MILLI)
    assert scorer("fgd", c, w).choose(c, pod).node == 0
    assert scorer("tidal", c, w).choose(c, pod) == Placement(1, (3,))
    # a pod that may only use the A100 still goes there: displacement is relative to the cheapest candidate
    assert scorer("tidal", c, w).choose(c, PodRequest(1000, 0, 1, MILLI, ("A100",))).node == 0


def test_fragmentation_still_rules_shares_inside_and_across_nodes():
    w = workload((Shape(1000, 500, 1), 1))
    c = cluster(("T4", 1, 64000), ("T4", 1, 64000))
    c.place(Placement(0, (0,)), PodRequest(0, 0, 1, 300))  # 700 left: a 500 share there would strand 200
    share = PodRequest(1000, 0, 1, 500)
    assert scorer("tidal", c, w).choose(c, share) == Placement(1, (0,))
    c2 = cluster(("T4", 2, 64000))
    c2.place(Placement(0, (0,)), PodRequest(0, 0, 1, 300))
    assert scorer("tidal", c2, w).choose(c2, share).gpus == (1,)


def test_near_equal_growth_ties_and_goes_to_the_first_node():
    w = workload((ONE, 1))
    c = cluster(("T4", 4, 64000), ("T4", 4, 64000))
    assert scorer("tidal", c, w).choose(c, PodRequest(8000, 0, 1, MILLI)) == Placement(0, (0,))
    # growths a few milli-GPU apart score alike (100 x sigmoid(-growth / 1000), truncated)
    assert [quantized(g) for g in (0.0, 5.0, 30.0, -3000.0)] == [50, 49, 49, 95]


# -- the variant generator ------------------------------------------------------------------------------------------
def base_pods():
    whole = [PodRequest(8000, 1024, 1, MILLI)] * 60
    shares = [PodRequest(4000, 1024, 1, 500), PodRequest(2000, 1024, 1, 250)] * 10
    multi = [PodRequest(64000, 1024, 8, MILLI)] * 4
    cpu = [PodRequest(12000, 1024)] * 16
    return whole + shares + multi + cpu


def test_variants_are_deterministic_and_reach_their_mix():
    pods = base_pods()
    assert va.variant(pods, "share50") == va.variant(pods, "share50") != va.variant(pods, "share50", seed=1)
    s = va.variant(pods, "share50")
    assert sum(p.share for p in s) == 20 + 30 and len(s) == len(pods)
    assert {p for p in s if p.share} <= {p for p in pods if p.share}           # copies of the list's shares
    m = va.variant(pods, "multi30")
    gpu = [p for p in m if p.gpu_count]
    assert sum(p.gpu_count > 1 for p in gpu) == round(0.3 * len(gpu))
    assert sum(not p.gpu_count for p in va.variant(pods, "cpu2")) == 32
    assert sum(not p.gpu_count for p in va.variant(pods, "cpu0.5")) == 8
    spec = va.variant(pods, "spec20", gpu_models={"T4": 90, "A100": 10})
    constrained = [p for p in spec if p.models]
    assert len(constrained) == round(0.2 * 84) and all(set(p.models) <= {"T4", "A100"} for p in constrained)
    assert sum("T4" in p.models for p in constrained) > sum("A100" in p.models for p in constrained)
    with pytest.raises(ValueError, match="unknown variant"):
        va.variant(pods, "bigger")
    with pytest.raises(ValueError, match="GPUs per model"):
        va.variant(pods, "spec10")


def test_variant_csv_reads_back_as_the_same_pods(tmp_path):
    from experiments.fragmentation import experiment as ex
    from tests.unit.replay_fixtures import NODE_HEADER, write

    pods = va.variant(base_pods(), "spec33", gpu_models={"T4": 1})
    path = va.write_csv(pods, tmp_path / "openb_pod_list_x.csv")
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, ["a,96000,1048576,8,T4"])
    assert list(ex.load(nodes, path).pods) == pods
