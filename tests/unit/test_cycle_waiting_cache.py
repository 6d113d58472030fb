"""The cycle's waiting cache (a job that reads like one that just waited is not tried again) and the other speed-ups
of issue 25's benchmark change no decision: every decision, sentence included, equals the one a full try gives."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.types import Allocation, GpuShare, JobStatus, JobView, QuotaKind, QuotaView
from experiments.builders.cluster import BUILTIN_SHAPES, queued_cluster
from experiments.builders.scheduling import MIN, JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import Reason, get_profile, schedule
from scheduler.policy.cache import CycleCache
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import _by_counts, _by_sorting
from scheduler.policy.profile import QueueOrder
from scheduler.policy.quota import QuotaLedger, allocation_demand
from tests.unit.helpers import admit, cycle as run_cycle, pending


def _decisions(seed: int, gang_share: float, profile: str, remember_waits: bool = True, cycles: int = 4
               ) -> tuple[list[str], CycleCache]:
    """repr() of every decision of a few cycles on a small bench cluster, and the loop's cache (how many jobs its
    cycles tried, how many in full)."""
    sim, clock, arrive = queued_cluster(160, BUILTIN_SHAPES, random.Random(seed), 400, gang_share=gang_share)
    chosen = get_profile(profile)
    lines: list[str] = []
    cache = CycleCache(remember_waits=remember_waits)  # the loop's, kept from cycle to cycle
    for _ in range(cycles):
        sim.finish_elapsed()
        result = schedule(sim.snapshot(), chosen, cache=cache)
        lines.extend(repr(d) for d in result.decisions)
        sim.apply(result)
        clock.advance(300.0)
        arrive(max(0, 400 - sum(j.status is JobStatus.PENDING for j in sim.jobs.values())))
    return lines, cache


@pytest.mark.parametrize("seed, gang_share, profile", [
    (3, 0.0, "tidal"), (5, 0.2, "tidal"), (8, 0.5, "tidal"), (13, 0.2, "fifo"), (21, 0.3, "quota-borrowing"),
])
def test_waiting_cache_changes_no_decision(seed, gang_share, profile):
    cached, with_cache = _decisions(seed, gang_share, profile)
    plain, without = _decisions(seed, gang_share, profile, remember_waits=False)
    assert without.tried_in_full == without.tried == with_cache.tried  # without the cache every job is tried in full
    assert cached == plain
    if profile == "tidal":
        assert with_cache.tried_in_full < with_cache.tried  # and with it some were not: the comparison covers hits


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.sampled_from([QuotaKind.OWN, QuotaKind.BORROWED]),
                          st.sampled_from(["G2", "T4"]), st.sampled_from([0.1, 0.3, 0.25, 0.7, 1.0]),
                          st.integers(1, 3), st.integers(0, 9000), st.integers(0, 90000)), max_size=40))
def test_ledger_sums_as_charging_one_by_one(holders):
    """The ledger sums its holders per department, kind and resource before charging: the same floats as
    charging allocation by allocation, fractions of GPUs included."""
    quotas = tuple(QuotaView(d, r, 10.0, 5.0) for d in "ab" for r in ("G2", "T4", "cpu", "memory"))
    jobs = []
    for i, (dept, kind, model, share, count, cpu, mem) in enumerate(holders):
        shares = tuple(GpuShare(g, share) for g in range(count))
        alloc = Allocation(f"n{i}", model, shares, cpu, mem, kind)
        jobs.append(JobView(i, f"j{i}", "t", dept, "pytorch", model, float(count), cpu, mem, JobStatus.RUNNING,
                            submitted_at=0.0, allocation=alloc))
    one_by_one = QuotaLedger(quotas, [])
    for job in jobs:
        one_by_one.charge(job.department, job.allocation.quota_kind, allocation_demand(job.allocation))
    assert QuotaLedger(quotas, jobs).usage() == one_by_one.usage()


@pytest.mark.parametrize("pod", [PodRequest("G2", 2.0, 4000, 32768), PodRequest(None, 0.0, 750, 16384),
                                 PodRequest("T4", 0.5, 1200, 8192)])
def test_a_request_written_with_its_cpu_reads_as_itself(pod):
    assert pod.describe(f"{pod.cpu_milli}") == str(pod)
    assert pod.describe("\x00").count("\x00") == 1


# -- the cache's conditions, one by one: each case is a job the cache must NOT answer from the one before it --------


def test_a_job_asking_less_cpu_is_tried_after_a_larger_one_waited():
    """Same shape but CPU: the first (older, so first in the queue) fits no node; the second does."""
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4).cpu(8000)).quota("a", "T4", own=8).job(
        JobBuilder(1).cpu(20000).waited(30 * MIN), JobBuilder(2).cpu(2000).waited(MIN)).build()
    result = run_cycle(snap)
    assert pending(result, 1).reason is Reason.NO_CAPACITY
    assert admit(result, 2).node == "n1"


def test_a_job_asking_more_cpu_waits_with_its_own_cpu_in_the_sentence():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4).cpu(8000)).quota("a", "T4", own=8).job(
        JobBuilder(1).cpu(20000).waited(30 * MIN), JobBuilder(2).cpu(30000).waited(MIN)).build()
    result = run_cycle(snap)
    first, second = pending(result, 1), pending(result, 2)
    assert "20000m CPU" in first.message and "30000m CPU" in second.message
    assert second.message == first.message.replace("20000m CPU", "30000m CPU")
    assert second.reason is first.reason


def test_a_higher_score_is_tried_again_it_may_preempt_what_a_lower_one_could_not():
    """In submit order the older job comes first and ranks below the running job (poor utilization: -20, no
    history: 0); the next one, of the same shape once right-sized, ranks above it (+20) and preempts it."""
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=1)).quota("a", "T4", own=8).job(
        JobBuilder(9).running("n1", 0).waited(10 * MIN),
        JobBuilder(1).history((0.1, 0.1, 100, 100)).waited(40 * MIN),
        JobBuilder(2).history((0.9, 0.9, 100, 100)).waited(20 * MIN)).build()
    result = run_cycle(snap, "tidal", order=QueueOrder.FIFO, min_runtime_s=0.0)
    assert pending(result, 1).reason is Reason.NO_CAPACITY
    assert admit(result, 2).preempting == (9,)


def test_a_job_that_ranks_higher_for_preemption_is_tried_again_though_its_aging_scores_lower():
    """The cache compares what preemption compares (base + utilization), not the total: the older job's aging puts
    its total above the next one's, but its poor utilization leaves it no victim; the next one preempts."""
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=1)).quota("a", "T4", own=8).job(
        JobBuilder(9).history((0.1, 0.1, 100, 100)).running("n1", 0).waited(0),
        JobBuilder(1).history((0.1, 0.1, 100, 100)).waited(80 * MIN),  # 999980 + aging 25
        JobBuilder(2).waited(0)).build()  # 1000000 + 0
    result = run_cycle(snap, "tidal", order=QueueOrder.FIFO, min_runtime_s=0.0)
    assert pending(result, 1).reason is Reason.NO_CAPACITY
    assert admit(result, 2).preempting == (9,)


def test_a_job_short_of_host_quota_is_tried_itself():
    """The first job's CPU fits its department's quota, the second's does not: a quota sentence of its own."""
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4).cpu(8000)).quota(
        "a", "T4", own=8, unlimited_cpu_memory=False).quota("a", "cpu", own=25000).quota("a", "memory", own=10**6) \
        .job(JobBuilder(1).cpu(20000).waited(30 * MIN), JobBuilder(2).cpu(30000).waited(MIN)).build()
    result = run_cycle(snap)
    assert "cpu" not in pending(result, 1).message.split(";")[0]
    assert pending(result, 2).reason is Reason.QUOTA_EXHAUSTED


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 9)), min_size=1, max_size=60), st.integers(1, 30))
def test_best_block_by_counts_is_the_one_sorting_finds(nodes, workers):
    """gang._by_counts (nodes counted per block and workers they take) picks the block the sort picks."""
    blocks = np.array([b for b, _ in nodes], dtype=np.int64)
    k = np.array([w for _, w in nodes], dtype=np.int64)
    rows = np.arange(len(nodes))
    assert _by_counts(blocks, k, int(k.max()), workers, 6) == _by_sorting(rows, blocks, k, workers, 6)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 20000), st.floats(0, 40000)), max_size=5),
       st.sampled_from([0.25, 0.5, 1.0, 2.0, 8.0]), st.integers(100, 16000))
def test_rightsize_reads_the_recent_use_it_shows(runs, gpus, cpu):
    """The request rightsize() gives is the one the figures recent_use() shows give."""
    import math

    from cluster.types import RunProfile
    from scheduler.policy.rightsizing import recent_use, rightsize

    profile = get_profile("tidal")
    job = JobBuilder(1).gpus(gpus).cpu(cpu).history(*runs).build() if runs else JobBuilder(1).gpus(gpus).cpu(cpu).build()
    assert all(isinstance(r, RunProfile) for r in job.history)
    use = recent_use(job, profile)
    got = rightsize(job, profile)
    if use is None:
        assert (got.gpus, got.cpu_request_milli) == (gpus, cpu)
        return
    want_gpus = max(min(gpus, 1.0), min(gpus, math.ceil(gpus * use.gpu_util / profile.gpu_util_target - 1e-9)))
    want_cpu = int(max(min(profile.cpu_floor_milli, cpu),
                       min(cpu, math.ceil(use.mean_cpu_milli / profile.cpu_util_target - 1e-9))))
    assert (got.gpus, got.cpu_request_milli) == (float(want_gpus), want_cpu)
