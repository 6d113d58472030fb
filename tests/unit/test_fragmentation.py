"""The FGD experiment harness (scheduler/fragmentation): the fragmentation measure, the six scorers on hand-made
clusters, tuning, the arrived/unallocated arithmetic, and that no policy ever places a pod that does not fit."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.simulated.alibaba import TraceError
from experiments.fragmentation import experiment as ex
from experiments.fragmentation.measure import FragMeasure, FragState
from experiments.fragmentation.scorers import SCORERS, Context, Scorer, TidalScorer, make, register, share_candidates
from experiments.fragmentation.state import MILLI, ClusterState, Placement, PodRequest
from scheduler.policy.workload import Shape, TargetWorkload, node_frag, shape_frag
from tests.unit.replay_fixtures import NODE_HEADER, POD_HEADER, write

POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "tidal")


def cluster(*nodes):
    """nodes: (model, gpus, cpu_milli[, memory_mib]) each, in tie-break order."""
    return ClusterState([f"n{i}" for i in range(len(nodes))], [n[0] for n in nodes], [n[1] for n in nodes],
                        [n[2] for n in nodes], [n[3] if len(n) > 3 else 1 << 20 for n in nodes])


def use(c: ClusterState, node: int, gpu_used: list[int], cpu: int = 0) -> None:
    """Occupy GPUs of a node with shares of the given milli (0: leave the GPU alone) and `cpu` millicores."""
    for g, milli in enumerate(gpu_used):
        if milli:
            pod = PodRequest(0, 0, 1, milli)
            c.place(Placement(node, (g,)), pod)
    if cpu:
        c.place(Placement(node, ()), PodRequest(cpu, 0))


def pod(cpu=1000, gpus=0.0, models=(), mem=0):
    return PodRequest.from_gpus(cpu, mem, gpus, models)


def workload(*shapes_counts):
    shapes = tuple(s for s, _ in shapes_counts)
    counts = tuple(n for _, n in shapes_counts)
    return TargetWorkload(shapes, counts, sum(counts))


def scorer(name, c=None, w=None, seed=0):
    measure = FragMeasure(w, c.model_names, c.max_gpus) if w is not None else None
    return make(name, Context(rng=np.random.default_rng(seed), measure=measure))


# -- the measure: each case of its definition -----------------------------------------------------------------
SHARE = Shape(2000, 500, 1, ())
TWO = Shape(4000, MILLI, 2, ())


def test_no_gpu_asked_leaves_every_idle_gpu_fragmented():
    assert shape_frag(Shape(1000, 0, 0), 64000, [1000, 300, 0], "T4") == 1300


def test_wrong_model_leaves_every_idle_gpu_fragmented():
    a100_only = Shape(1000, 500, 1, ("A100",))
    assert shape_frag(a100_only, 64000, [1000, 1000], "T4") == 2000
    assert shape_frag(a100_only, 64000, [1000, 1000], "A100") == 0


def test_a_shape_that_does_not_fit_leaves_every_idle_gpu_fragmented():
    assert shape_frag(SHARE, 1000, [1000, 1000], "T4") == 2000           # too little CPU
    assert shape_frag(SHARE, 64000, [400, 300, 0], "T4") == 700           # no GPU with 500 left
    assert shape_frag(TWO, 64000, [1000, 900, 0, 0], "T4") == 1900        # one fully free GPU, two needed


def test_a_shape_that_fits_counts_only_gpus_too_small_for_it():
    assert shape_frag(SHARE, 64000, [1000, 500, 499, 200, 0], "T4") == 699
    assert shape_frag(TWO, 64000, [1000, 1000, 900, 50], "T4") == 950
    assert shape_frag(SHARE, 64000, [1000, 1000], "T4") == 0


def test_node_fragmentation_is_the_frequency_weighted_sum():
    w = workload((SHARE, 3), (TWO, 1))
    # SHARE fits: 300 fragmented; TWO does not fit (one free GPU): all 1,300 idle
    assert node_frag(w, 64000, [1000, 300], "T4") == pytest.approx((3 * 300 + 1300) / 4)


def test_vectorised_measure_agrees_with_the_definition():
    w = workload((SHARE, 5), (TWO, 3), (Shape(1000, 0, 0), 4), (Shape(8000, MILLI, 1, ("A100",)), 2),
                 (Shape(1000, 250, 1, ("T4", "A100")), 1))
    c = cluster(("T4", 4, 16000), ("A100", 2, 64000), ("T4", 8, 96000), (None, 0, 8000))
    use(c, 0, [500, 250, 0, 750], cpu=9000)
    use(c, 2, [0, 0, 1000, 1000, 1000, 300])
    measure = FragMeasure(w, c.model_names, c.max_gpus)
    got = measure.of_nodes(c) / measure.weight
    names = (*c.model_names, None)
    want = [node_frag(w, int(c.cpu_left[n]), c.gpu_left[n, :c.gpu_count[n]].tolist(), names[c.model[n]])
            for n in range(len(c))]
    assert got == pytest.approx(want)
    assert got[3] == 0  # a node without GPUs has nothing to fragment
    # the compiled kernel's terms (scheduler/policy/gpuloss.py, tidal's placement) too, kept in step by place()
    loss = TidalScorer(Context(np.random.default_rng(0), measure)).loss(c)
    assert (loss.terms.frag / loss.shapes.weight).tolist() == pytest.approx(want)
    use(c, 1, [300], cpu=1000)
    assert loss.terms.frag[1] / loss.shapes.weight == pytest.approx(node_frag(w, int(c.cpu_left[1]), c.gpu_left[1, :2].tolist(),
                                                                 "A100"))


def test_target_workload_keeps_the_most_frequent_shapes_covering_95_percent():
    pods = [pod(1000)] * 60 + [pod(2000, 0.5)] * 30 + [pod(4000, 2)] * 6 + [pod(8000, 1, ("A100",))] * 4
    w = TargetWorkload.from_pods(pods)
    assert w.shapes == (Shape(1000, 0, 0), Shape(2000, 500, 1), Shape(4000, MILLI, 2))  # 96 % >= 95 %
    assert w.counts == (60, 30, 6) and w.pods == 100
    assert w.frequencies == pytest.approx((60 / 96, 30 / 96, 6 / 96))
    # equal counts: the artifact's order, larger CPU first
    tie = TargetWorkload.from_pods([pod(1000)] * 5 + [pod(3000)] * 5 + [pod(2000)] * 5, cover=0.5)
    assert tie.shapes == (Shape(3000, 0, 0), Shape(2000, 0, 0))


# -- incremental and vectorised changes ---------------------------------------------------------------------------
def test_frag_state_recomputes_only_the_changed_node_and_stays_exact():
    w = workload((SHARE, 5), (TWO, 3), (Shape(1000, 0, 0), 4))
    c = cluster(("T4", 4, 16000), ("T4", 2, 64000))
    measure = FragMeasure(w, c.model_names, c.max_gpus)
    state = FragState.attach(c, measure)
    assert FragState.attach(c, measure) is state
    before = state.frag.copy()
    c.place(Placement(0, (1,)), pod(2000, 0.3))
    assert state.frag[1] == before[1]
    assert list(state.frag) == list(measure.of_nodes(c)) and state.total == int(measure.of_nodes(c).sum())
    assert state.frag[0] != before[0]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(used=st.lists(st.lists(st.sampled_from([0, 0, 100, 250, 500, 700, 1000]), min_size=4, max_size=4),
                     min_size=3, max_size=3),
       cpus=st.lists(st.integers(0, 15000), min_size=3, max_size=3),
       req=st.tuples(st.sampled_from([1000, 2000, 6000]), st.sampled_from([0, 0.2, 0.5, 0.7, 1, 2, 3])))
def test_the_change_for_every_candidate_equals_recomputing_after_placing(used, cpus, req):
    w = workload((SHARE, 5), (TWO, 3), (Shape(1000, 0, 0), 4), (Shape(6000, 300, 1, ("T4",)), 2),
                 (Shape(1000, MILLI, 1), 3))
    c = cluster(("T4", 4, 16000), ("A100", 4, 16000), ("T4", 3, 24000))
    for n, (gpus, cpu) in enumerate(zip(used, cpus)):
        use(c, n, gpus[:c.gpu_count[n]], cpu=min(cpu, int(c.cpu_left[n])))
    measure = FragMeasure(w, c.model_names, c.max_gpus)
    state = FragState.attach(c, measure)
    p = pod(req[0], req[1])
    nodes = np.flatnonzero(c.feasible(p))
    if p.share:
        cn, cg = share_candidates(c, nodes, p.gpu_milli)
        deltas = state.delta_share(cn, c.gpu_left[cn, cg], p)
        pairs = list(zip(cn.tolist(), cg.tolist()))
    else:
        deltas = state.delta_whole(nodes, p)
        pairs = [(n, c.first_free_gpus(n, p.gpu_count)) for n in nodes.tolist()]
    for (n, g), d in zip(pairs, deltas):
        trial = cluster(("T4", 4, 16000), ("A100", 4, 16000), ("T4", 3, 24000))
        trial.cpu_left[:], trial.gpu_left[:] = c.cpu_left, c.gpu_left
        trial.idle[:], trial.free[:], trial.max_left[:] = c.idle, c.free, c.max_left
        after = FragMeasure(w, trial.model_names, trial.max_gpus)
        old = int(after.of_nodes(trial)[n])
        trial.place(Placement(n, g if isinstance(g, tuple) else (g,)), p)
        assert int(d) == int(after.of_nodes(trial)[n]) - old


# -- the scorers on hand-made tables --------------------------------------------------------------------------------
def test_random_picks_only_feasible_nodes_uniformly_and_a_random_fitting_gpu():
    c = cluster(("T4", 2, 8000), ("A100", 2, 8000), ("T4", 2, 500), ("T4", 2, 8000))
    use(c, 3, [800, 0])
    s = scorer("random", c, seed=1)
    share = pod(1000, 0.5, ("T4",))
    picks = [s.choose(c, share) for _ in range(400)]
    assert {p.node for p in picks} == {0, 3}  # A100: wrong model; node 2: too little CPU
    assert {p.gpus for p in picks if p.node == 0} == {(0,), (1,)}
    assert {p.gpus for p in picks if p.node == 3} == {(1,)}  # GPU 0 has only 200 left
    assert 150 < sum(p.node == 0 for p in picks) < 250


def test_dotprod_prefers_the_node_whose_free_resources_align_least():
    c = cluster(("T4", 8, 96000), ("T4", 1, 8000), ("T4", 4, 32000))
    assert scorer("dotprod", c).choose(c, pod(4000, 1)).node == 1
    # the share goes on the fullest GPU it fits (best fit inside the node)
    c2 = cluster(("T4", 4, 32000))
    use(c2, 0, [0, 600, 300, 0])
    assert scorer("dotprod", c2).choose(c2, pod(1000, 0.4)).gpus == (1,)


def test_clustering_prefers_same_shape_then_mixed_then_empty_then_other_shapes():
    def made(*kinds):
        """One 8-GPU node per entry: "other" holds a 2-GPU pod, "mixed" a share and a 2-GPU pod, "same" a
        share, "empty" nothing."""
        c = cluster(*[("T4", 8, 96000)] * len(kinds))
        for n, kind in enumerate(kinds):
            if kind in ("other", "mixed"):
                c.place(Placement(n, (6, 7)), pod(1000, 2))
            if kind in ("same", "mixed"):
                c.place(Placement(n, (0,)), pod(1000, 0.5))
        return c

    share = pod(1000, 0.3)
    for kinds, want in [(("other", "mixed", "empty", "same"), 3), (("other", "empty", "mixed"), 2),
                        (("other", "empty"), 1), (("other", "other"), 0)]:
        c = made(*kinds)
        assert scorer("clustering", c).choose(c, share).node == want, kinds
    # inside a bucket the node with less free GPU wins: 2-GPU nodes before 8-GPU ones when both are empty
    c2 = cluster(("T4", 8, 96000), ("T4", 2, 96000))
    assert scorer("clustering", c2).choose(c2, pod(1000, 1)).node == 1
    # CPU-only pods score alike everywhere: the first feasible node
    assert scorer("clustering", c2).choose(c2, pod(4000)).node == 0


def test_packing_prefers_shared_gpus_then_used_nodes_then_empty_nodes():
    c = cluster(("T4", 2, 96000), ("T4", 2, 96000), ("T4", 2, 96000))
    use(c, 1, [1000, 0])      # a used node, no shared GPU
    use(c, 2, [300, 0])       # a shared GPU with 700 left
    s = scorer("packing", c)
    assert s.choose(c, pod(1000, 0.5)) == Placement(2, (0,))
    assert s.choose(c, pod(1000, 1)).node == 1   # free GPU on a used node (node 2 too: lowest index wins)
    c3 = cluster(("T4", 8, 96000), ("T4", 2, 96000))
    assert scorer("packing", c3).choose(c3, pod(1000, 1)).node == 1   # empty nodes: fewer GPUs first


def test_bestfit_leaves_the_least_cpu_and_gpu():
    c = cluster(("T4", 8, 96000), ("T4", 2, 16000), ("T4", 4, 16000))
    s = scorer("bestfit", c)
    assert s.choose(c, pod(4000, 1)).node == 1
    use(c, 1, [1000, 1000])
    assert s.choose(c, pod(4000, 1)).node == 2


def test_fgd_keeps_gpus_usable_for_the_target_workload_where_bestfit_does_not():
    w = workload((Shape(1000, 500, 1), 1))
    c = cluster(("T4", 1, 64000), ("T4", 1, 64000))
    use(c, 0, [300])                      # 700 left: a 500 share after it would strand 200
    share = pod(1000, 0.5)
    assert scorer("bestfit", c).choose(c, share).node == 0
    assert scorer("fgd", c, w).choose(c, share) == Placement(1, (0,))
    # inside a node, the GPU whose fragmentation grows least
    c2 = cluster(("T4", 2, 64000))
    use(c2, 0, [300, 0])
    assert scorer("fgd", c2, w).choose(c2, share).gpus == (1,)
    assert scorer("bestfit", c2).choose(c2, share).gpus == (0,)


def test_fgd_ties_go_to_the_first_node_and_the_lowest_gpu():
    w = workload((Shape(1000, 500, 1), 1))
    c = cluster(("T4", 4, 64000), ("T4", 4, 64000))
    assert scorer("fgd", c, w).choose(c, pod(1000, 0.5)) == Placement(0, (0,))


def test_no_feasible_node_means_none():
    c = cluster(("T4", 2, 8000))
    w = workload((SHARE, 1))
    for name in POLICIES:
        assert scorer(name, c, w).choose(c, pod(1000, 4)) is None, name
        assert scorer(name, c, w).choose(c, pod(1000, 1, ("A100",))) is None, name
        assert scorer(name, c, w).choose(c, pod(9000)) is None, name


def test_a_new_scorer_plugs_in_by_name():
    class FirstFit(Scorer):
        name = "test-first-fit"

        def pick(self, cluster, pod, nodes):
            return Placement(int(nodes[0]), cluster.gpus_for(int(nodes[0]), pod))

    register(FirstFit)
    try:
        c = cluster(("T4", 1, 500), ("T4", 2, 8000))
        assert make("test-first-fit", Context(np.random.default_rng())).choose(c, pod(1000, 1)) == Placement(1, (0,))
        with pytest.raises(ValueError, match="registered twice"):
            register(FirstFit)
    finally:
        del SCORERS["test-first-fit"]
    with pytest.raises(ValueError, match="unknown scorer"):
        make("test-first-fit", Context(np.random.default_rng()))
    with pytest.raises(ValueError, match="needs the target workload"):
        make("fgd", Context(np.random.default_rng()))


# -- no policy ever places a pod that does not fit ----------------------------------------------------------------
MODELS = ("T4", "A100", "V100")
node_st = st.tuples(st.sampled_from(MODELS), st.sampled_from([1, 2, 4, 8]), st.sampled_from([4000, 16000, 64000]),
                    st.sampled_from([8192, 65536]))
pod_st = st.tuples(st.sampled_from([1000, 2000, 8000, 30000]), st.sampled_from([1024, 16384, 60000]),
                   st.sampled_from([0, 0.1, 0.25, 0.5, 0.6, 1, 2, 4, 8]),
                   st.sampled_from([(), ("T4",), ("A100", "V100")]))


def fits(c: ClusterState, n: int, p: PodRequest) -> bool:
    """An independent brute-force check of the fit rule."""
    left = [int(x) for x in c.gpu_left[n, :c.gpu_count[n]]]
    model = c.model_names[c.model[n]] if c.model[n] < len(c.model_names) else None
    if c.cpu_left[n] < p.cpu_milli or c.memory_left[n] < p.memory_mib:
        return False
    if not p.gpu_count:
        return True
    if p.models and model not in p.models:
        return False
    if p.share:
        return any(x >= p.gpu_milli for x in left)
    return sum(x == MILLI for x in left) >= p.gpu_count


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=6), pods=st.lists(pod_st, min_size=1, max_size=40),
       seed=st.integers(0, 3))
def test_no_policy_places_a_pod_that_does_not_fit(nodes, pods, seed):
    requests = [pod(cpu, gpus, models, mem) for cpu, mem, gpus, models in pods]
    w = TargetWorkload.from_pods(requests)
    for name in POLICIES:
        c = cluster(*nodes)
        s = scorer(name, c, w, seed)
        for p in requests:
            choice = s.choose(c, p)
            if choice is None:
                assert not any(fits(c, n, p) for n in range(len(c))), (name, p)
                continue
            n, gpus = choice.node, choice.gpus
            assert fits(c, n, p), (name, p, choice)
            assert len(gpus) == p.gpu_count and len(set(gpus)) == len(gpus)
            assert all(0 <= g < c.gpu_count[n] and c.gpu_left[n, g] >= p.gpu_milli for g in gpus)
            if p.gpu_count > 1 or p.gpu_milli == MILLI:
                assert all(c.gpu_left[n, g] == MILLI for g in gpus)
            c.place(choice, p)
        assert (c.cpu_left >= 0).all() and (c.memory_left >= 0).all()
        assert ((c.gpu_left >= 0) & (c.gpu_left <= MILLI)).all()
        assert c.allocated_milli == c.capacity_milli - int(c.gpu_left.sum())


# -- tuning, arrivals and the metric ------------------------------------------------------------------------------
def test_tuning_up_appends_draws_until_the_next_would_pass_the_target():
    pods = [PodRequest(1000, 0, 1, MILLI), PodRequest(1000, 0, 1, 500), PodRequest(1000, 0)]
    rng = np.random.default_rng(3)
    seq = ex.tune_pods(pods, [0, 1, 2], 10_000, rng)
    assert seq[:3] == [0, 1, 2] and len(seq) > 3
    total = sum(pods[i].total_milli for i in seq)
    assert 9_000 < total <= 10_000
    # a 2-GPU pod is compared with its milli per GPU, as the artifact's tuneUpPods does: it may pass the target
    two = [PodRequest(1000, 0, 2, MILLI)]
    seq = ex.tune_pods(two, [0], 5_000, np.random.default_rng(0))
    assert sum(two[i].total_milli for i in seq) == 6_000


def test_tuning_down_drops_random_pods_until_the_total_fits():
    pods = [PodRequest(1000, 0, 1, MILLI)] * 10 + [PodRequest(1000, 0)] * 5
    seq = ex.tune_pods(pods, list(range(15)), 6_500, np.random.default_rng(1))
    assert sum(pods[i].total_milli for i in seq) == 6_000
    assert len(set(seq)) == len(seq) and set(seq) <= set(range(15))
    assert seq == sorted(seq)  # order kept


def test_arrived_and_unallocated_arithmetic(tmp_path):
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, ["a,8000,16384,1,T4", "b,8000,16384,1,T4"])
    pods = write(tmp_path / "openb_pod_list_tiny.csv", POD_HEADER[:POD_HEADER.index(",qos")],
                 ["p1,1000,1024,1,1000,", "p3,1000,1024,1,300,T4"])
    setup = ex.load(nodes, pods, tune=1.5, seeds=[7])
    assert setup.capacity_milli == 2000
    whole, share = 0, 1  # sorted by name
    r = ex.run_one(setup, "bestfit", 7, [whole, share, share, whole, share])
    # arrived (failed pods included) / allocated, % of 2 GPUs:
    #   50/50, 65/65, 80/80, 130/80 (no free GPU left: dropped), 145/95 (0.3 fits the 0.4 left)
    assert r.pods == 5 and r.placed == 4
    assert [r.alloc_pct[a] for a in (50, 65, 80, 130, 145)] == [50.0, 65.0, 80.0, 80.0, 95.0]
    assert r.alloc_pct[66] == 65.0                   # no event rounds to 66: those at 65..67
    assert r.alloc_pct[100] is None and r.alloc_pct[10] is None
    # fragmentation of the idle GPUs (target workload: 1 whole GPU and a 0.3 share, equally frequent):
    # at 80 % arrived the idle 0.4 GPU takes the share but not the whole GPU: half of it is fragmented
    assert r.frag_pct[80] == pytest.approx(50.0)


def test_by_arrived_pct_rounds_half_to_even_and_falls_back_to_neighbours():
    gpus = 10  # 10,000 milli-GPU
    arrived = np.array([9950, 10050, 10150, 12000])   # 99.5 -> 100, 100.5 -> 100, 101.5 -> 102, 120
    values = np.array([90.0, 92.0, 94.0, 96.0])
    out = ex.by_arrived_pct(arrived, values, gpus, 125)
    assert out[100] == pytest.approx(91.0)
    assert out[102] == pytest.approx(94.0)
    assert out[101] == pytest.approx((90 + 92 + 94) / 3)   # none rounds to 101: events at 100 and 102
    assert out[121] == pytest.approx(96.0) and out[110] is None and out[0] is None


def test_summary_reports_unallocated_mean_sd_median_curve_and_frag():
    setup = ex.Setup("t", None, None, (ex.NodeSpec("n", "T4", 1, 1000, 1000),), (), workload((SHARE, 1)), 1.3,
                     (1, 2, 3))
    top = 131
    runs = {}
    for seed, at100 in zip((1, 2, 3), (95.0, 93.0, 94.0)):
        alloc = [None] * 75 + [float(a) for a in range(75, 100)] + [at100] * (top + 1 - 100)
        frag = [float(seed)] * (top + 1)
        runs[("fgd", seed)] = ex.RunResult("fgd", seed, 10, 9, alloc, frag, 0.1)
    out = ex.Outcome(setup, ("fgd",), runs, 0.3, 1, {"fgd": 0.3})
    s = ex.summary(out)
    assert s["capacity_gpus"] == 1 and s["nodes"] == 1
    f = s["policies"]["fgd"]
    assert f["at100"] == {"mean": 6.0, "sd": 1.0, "median": 6.0}
    assert list(f["curve"]) == [str(a) for a in range(75, 131)] and f["curve"]["75"] == 25.0
    assert f["frag_pct"] == {"60": 2.0, "80": 2.0, "90": 2.0}


def test_the_reader_keeps_gpu_spec_and_milli_and_refuses_a_bad_line(tmp_path):
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, ["a,8000,16384,2,T4", "b,8000,16384,1,A100"])
    pods = write(tmp_path / "pods.csv", POD_HEADER, [
        "s,1000,1024,1,460,T4|A100,LS,Running,0,10,0", "w,2000,1024,2,1000,,BE,Running,0,10,0",
        "c,3000,1024,0,0,,BE,Running,0,10,0"])
    setup = ex.load(nodes, pods, seeds=[1])
    by_cpu = {p.cpu_milli: p for p in setup.pods}
    assert by_cpu[1000] == PodRequest(1000, 1024, 1, 460, ("T4", "A100"))
    assert by_cpu[2000] == PodRequest(2000, 1024, 2, MILLI, ())
    assert by_cpu[3000] == PodRequest(3000, 1024)
    bad = write(tmp_path / "bad.csv", POD_HEADER, ["s,1000,1024,1,460,,LS,Running,0,10,0",
                                                   "x,1000,1024,3,500,,LS,Running,0,10,0"])
    with pytest.raises(TraceError, match=r"bad\.csv:3: 3 GPUs must be whole"):
        ex.load(nodes, bad)
    with pytest.raises(ValueError, match="tune must be > 0"):
        ex.load(nodes, pods, tune=0)


def test_runs_are_deterministic_per_seed_and_share_arrivals_across_policies(tmp_path):
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, [f"n{i},32000,65536,{g},{m}" for i, (g, m) in
                                                        enumerate([(2, "T4"), (4, "T4"), (8, "A100"), (1, "T4")])])
    rows = [f"p{i},{1000 * (1 + i % 4)},1024,{g},{mi},{spec}" for i, (g, mi, spec) in enumerate(
        [(1, 500, ""), (1, 1000, ""), (2, 1000, "A100"), (0, 0, ""), (1, 250, "T4"), (4, 1000, "")] * 3)]
    pods = write(tmp_path / "pods.csv", POD_HEADER[:POD_HEADER.index(",qos")], rows)
    setup = ex.load(nodes, pods, seeds=[5, 6])
    assert ex.arrivals(setup, 5) == ex.arrivals(setup, 5) != ex.arrivals(setup, 6)
    one = ex.run(setup, POLICIES, processes=1)
    two = ex.run(setup, POLICIES, processes=2)
    assert ex.summary(one) == ex.summary(two)
    for p in POLICIES:
        assert one.runs[(p, 5)].pods == one.runs[("fgd", 5)].pods
    with pytest.raises(ValueError, match="unknown policy nope"):
        ex.run(setup, ["nope"])
