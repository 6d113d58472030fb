"""The per-cycle shortcuts give exactly what the plain computations give."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.types import GPU_EPS, GpuShare, NodeState, Pool, QuotaKind, Resources
from experiments.builders.scheduling import NOW, JobBuilder, NodeBuilder
from scheduler.policy import get_profile, score
from scheduler.policy.framework import PodRequest
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import SCORERS, allowed, attach_loss, least_loss, place, scan, total_score
from scheduler.policy.priority import rebased
from scheduler.policy.quota import demand
from scheduler.policy.workload import Shape, TargetWorkload

TIDAL = get_profile("tidal")
SHARES = st.sampled_from([0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 0.1, 0.3])
KINDS = st.sampled_from([QuotaKind.OWN, QuotaKind.BORROWED, None])


def table(rows: list[list[float]], model: str | None = "T4") -> NodeTable:
    return NodeTable(model, [NodeBuilder(f"n{i:02d}", model, len(used)).used(*used).build()
                             for i, used in enumerate(rows)])


gpu_rows = st.lists(st.lists(SHARES, min_size=1, max_size=8), min_size=1, max_size=12)


@given(st.sampled_from([None, "", "T4"]), st.sampled_from([0, 0.5, 1, 2.0]), st.sampled_from([0, 1, 4000]),
       st.sampled_from([0, 16384]))
def test_demand_lists_what_resources_amounts_lists(model, gpus, cpu, mem):
    assert demand(model, gpus, cpu, mem) == tuple(Resources.of(model, gpus, cpu, mem).amounts().items())


@given(KINDS, KINDS, st.floats(0, 1), st.floats(0, 7200))
def test_rebased_score_equals_score_under_that_kind(first, second, util, waited):
    job = JobBuilder().util(util).waited(waited).build()
    assert rebased(score(job, first, NOW, TIDAL), second, TIDAL) == score(job, second, NOW, TIDAL)


@given(gpu_rows, st.sampled_from([0.1, 0.25, 0.5, 0.75]))
def test_best_fit_score_equals_the_dense_formula(rows, gpus):
    t = table(rows)
    everywhere = np.arange(len(t))
    used = t.gpu_used
    dense = np.where(used + gpus <= 1.0 + GPU_EPS, used, 0.0).max(axis=1)
    got = SCORERS["gpu-share-best-fit"].score(PodRequest("T4", gpus, 0, 0), t, everywhere)
    assert got.tolist() == dense.tolist()


@given(gpu_rows, st.lists(st.tuples(st.integers(0, 11), st.integers(0, 7), SHARES, st.booleans()), max_size=10))
def test_per_node_summaries_follow_allocations_and_releases(rows, changes):
    t = table(rows)
    for row, index, share, release in changes:
        row, index = row % len(t), index % int(t.gpu_count[row % len(t)])
        (t.release if release else t.allocate)(row, (GpuShare(index, share),), 0, 0)
    fresh = table([t.gpu_used[i, : t.gpu_count[i]].tolist() for i in range(len(t))])
    for name in ("whole_free", "max_share_free", "least_shared"):
        assert getattr(t, name).tolist() == getattr(fresh, name).tolist(), name
    # what MostAllocated computed per call before it was kept per node
    assert t.allocated.tolist() == (t.used_sum / t.gpu_count).tolist()


def test_cpu_table_allocated_is_the_cpu_in_use():
    t = NodeTable(None, [NodeBuilder("c1", None, 0).cpu(8000).build()])
    t.allocate(0, (), 2000, 0)
    assert t.allocated.tolist() == [0.25]


def test_no_applicable_scorer_ties_every_node_and_takes_the_first():
    t = table([[0.0, 0.0], [0.5, 0.0]])
    whole = PodRequest("T4", 1.0, 0, 0)
    assert not SCORERS["gpu-share-best-fit"].applies(whole)
    assert total_score(whole, t, np.arange(2), []) is None
    assert place(whole, t, TIDAL.with_(scorers=())).node == "n00"
    assert place(whole, t, TIDAL).node == "n01"  # most allocated


AMOUNTS = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0])


@given(st.tuples(AMOUNTS, AMOUNTS, AMOUNTS, AMOUNTS), st.tuples(AMOUNTS, AMOUNTS, AMOUNTS, AMOUNTS),
       AMOUNTS, st.sampled_from([0, 1000, 4000]), st.sampled_from([0, 1024]), st.booleans())
def test_a_jobs_quota_checker_decides_as_the_ledger_on_the_whole_demand(gpu_quota, cpu_quota, gpus, cpu, mem,
                                                                       borrowing):
    """JobQuota checks the CPU/memory part once per job; it must agree with ledger.choose, which checks the
    whole demand in one pass in its order (GPUs, CPU, memory), on every model."""
    from cluster.types import CPU_KEY, QuotaView
    from scheduler.policy.quota import QuotaLedger, gpu_demand, host_demand

    quotas = (QuotaView("a", "T4", gpu_quota[0], gpu_quota[1]), QuotaView("a", CPU_KEY, cpu_quota[0] * 1000,
                                                                          cpu_quota[1] * 1000))
    ledger = QuotaLedger(quotas, ())
    ledger.charge("a", QuotaKind.OWN, (("T4", gpu_quota[2]), (CPU_KEY, cpu_quota[2] * 1000)))
    ledger.charge("a", QuotaKind.BORROWED, (("T4", gpu_quota[3]), (CPU_KEY, cpu_quota[3] * 1000)))
    host = host_demand(cpu, mem)
    checker = ledger.checker("a", host, borrowing)
    for model in ("T4", "V100", None):
        gpu = gpu_demand(model, gpus)
        expected = ledger.choose("a", gpu + host, borrowing)
        assert checker.choose(gpu) == expected
        assert checker.kind(gpu) is expected.kind


NODES = st.lists(st.tuples(st.lists(SHARES, min_size=1, max_size=8), st.sampled_from([4000, 16000, 64000]),
                           st.booleans(), st.booleans()), min_size=1, max_size=16)
CHANGES = st.lists(st.tuples(st.integers(0, 15), st.integers(0, 7), SHARES, st.booleans()), max_size=12)
WHOLE = st.tuples(st.sampled_from([1.0, 2.0, 3.0, 4.0, 8.0]), st.sampled_from([0, 2000, 8000, 32000]),
                  st.sampled_from([None, Pool.FIXED]))


def random_table(nodes) -> NodeTable:
    """A T4 table from NODES: GPU use, CPU, whether the node takes training, whether it is in the fixed pool."""
    return NodeTable("T4", [NodeBuilder(f"n{i:02d}", "T4", len(used)).used(*used).cpu(cpu)
                            .state(NodeState.OFFLINE_NORMAL if offline else NodeState.ONLINE_NORMAL)
                            .pool(Pool.FIXED if fixed else Pool.COLOCATION).build()
                            for i, (used, cpu, offline, fixed) in enumerate(nodes)])


def change(t: NodeTable, changes) -> None:
    """Apply CHANGES: a share of one GPU allocated or released on a row."""
    for row, index, share, release in changes:
        row = row % len(t)
        index %= int(t.gpu_count[row])
        (t.release if release else t.allocate)(row, (GpuShare(index, share),), 0, 0)


@given(NODES, CHANGES, st.lists(WHOLE, min_size=1, max_size=6))
def test_whole_gpu_index_picks_the_node_the_plain_scan_picks(nodes, changes, requests):
    """The index (packing.py) must agree with the plain scan (fits mask, filters, most-allocated argmax,
    ties to the first row) on random clusters, before and after allocations, releases and placements."""
    t = random_table(nodes)
    t.packing()  # built first, so every change below goes through its updates
    change(t, changes)
    for gpus, cpu, pool in requests:
        req = PodRequest("T4", gpus, cpu, 1024, pool)
        expected = scan(req, t, TIDAL, [("most-allocated", 1.0)])
        assert t.packing().best(gpus, cpu, 1024, allowed(req, t, TIDAL)) == expected
        placement = place(req, t, TIDAL)
        assert (placement and placement.row) == expected
        if placement is not None:
            t.allocate(placement.row, placement.gpu_shares, cpu, 1024)
    index = t.packing()
    filed = [row for row, level in enumerate(index.level) if level is not None]
    assert filed == np.flatnonzero(t.schedulable).tolist()
    for row in filed:  # every schedulable row filed under its current figures, once
        assert (index.level[row], index.free[row]) == (float(t.allocated[row]), int(t.whole_free[row]))
        assert row in index.groups[index.level[row]][index.free[row]]
    assert sum(len(rows) for group in index.groups.values() for rows in group) == len(filed)


WORKLOAD = TargetWorkload((Shape(8000, 1000, 1, ("T4",)), Shape(4000, 500, 1), Shape(16000, 1000, 2),
                           Shape(2000, 250, 1, ("V100",)), Shape(1000, 0, 0)), (5, 3, 2, 1, 2), 13)
REQUESTS = st.tuples(st.sampled_from([0.25, 0.5, 1.0, 2.0, 4.0]), st.sampled_from([0, 2000, 8000, 32000]),
                     st.sampled_from([None, Pool.FIXED, Pool.COLOCATION]))


@settings(deadline=None)  # the first example loads (or, on a fresh clone, compiles) the kernels
@given(NODES, CHANGES, st.lists(REQUESTS, min_size=1, max_size=6))
def test_least_loss_kernel_picks_the_row_the_plain_scan_picks(nodes, changes, requests):
    """The one-pass kernel (least_loss) agrees with the plain scan of the colocation-first and least-gpu-loss
    scorers (ties to the first row), and the loss terms kept row by row equal fresh ones, on random clusters
    before and after allocations, releases and placements."""
    t = random_table(nodes)
    attach_loss({"T4": t}, WORKLOAD)
    change(t, changes)
    for gpus, cpu, pool in requests:
        req = PodRequest("T4", gpus, cpu, 1024, pool)
        scorers = [(name, w) for name, w in TIDAL.scorers if SCORERS[name].applies(req)]
        expected = scan(req, t, TIDAL, scorers)
        row, gpu, _ = least_loss(req, t, TIDAL, dict(scorers))
        assert row == expected
        placement = place(req, t, TIDAL)
        assert (placement and placement.row) == expected
        if placement is not None:
            shares = placement.gpu_shares
            assert (gpu is None) == (gpus >= 1) and (gpu is None or shares == (GpuShare(gpu, gpus),))
            assert all(t.gpu_used[placement.row, s.index] + s.share <= 1 + GPU_EPS for s in shares)
            t.allocate(placement.row, shares, cpu, 1024)
    kept = t.loss
    attach_loss({"T4": t}, WORKLOAD)
    assert np.array_equal(kept.nodes.left, t.loss.nodes.left)
    for name in ("cnt", "sums", "frag", "idle", "state"):
        assert np.array_equal(getattr(kept.terms, name), getattr(t.loss.terms, name)), name
