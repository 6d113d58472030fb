"""Gang invariants over random clusters and workloads: on the pure cycle and across cycles on the simulated cluster.

- a gang never runs partially (every worker placed, or none; a preempted gang loses every worker);
- quotas are never exceeded by a gang (all its workers are charged);
- with exact run times, a backfilled job never delays a reserved gang's start (nor does borrowed work on its nodes,
  which the own-quota gang reclaims when it starts).
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cluster.clock import VirtualClock
from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, JobStatus, QuotaKind, QuotaView, Topology
from experiments.builders.scheduling import NOW, JobBuilder, NodeBuilder, SnapshotBuilder
from experiments.simulated_training import SimulatedTraining
from scheduler.policy import Admit, Preempt, Reserve, schedule
from scheduler.policy.profile import TIDAL

DEPTS = ("a", "b")
CERTIFIED = {"pytorch": frozenset({"G2"})}

nodes_st = st.lists(st.tuples(st.sampled_from([4, 8]), st.sampled_from(["x", "y", "z"])), min_size=1, max_size=8)
quota_st = st.fixed_dictionaries({d: st.tuples(st.integers(0, 40), st.integers(0, 40)) for d in DEPTS})
# (department, GPUs per worker, workers, topology, run time)
job_st = st.tuples(st.sampled_from(DEPTS), st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 1, 2, 3, 4]),
                   st.sampled_from(list(Topology)), st.integers(60, 3000))
workload_st = st.lists(st.lists(job_st, max_size=5), min_size=1, max_size=6)  # arrivals per cycle


def _quotas(quotas) -> list[QuotaView]:
    qs = [QuotaView(d, "G2", own, borrowed) for d, (own, borrowed) in quotas.items()]
    return qs + [QuotaView(d, key, 10**9, 10**9) for d in DEPTS for key in (CPU_KEY, MEMORY_KEY)]


def _job(job_id: int, spec, at: float) -> JobBuilder:
    dept, gpus, workers, topology, run_s = spec
    return (JobBuilder(job_id).dept(dept).model("G2").gpus(gpus).workers(workers, topology).cpu(2000)
            .duration(run_s).submitted(at))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_st, quota_st, st.lists(job_st, min_size=1, max_size=12), st.lists(job_st, max_size=6))
def test_one_cycle_places_whole_gangs_within_capacity_and_quota(nodes, quotas, pending, running_specs):
    snap = SnapshotBuilder().certify("pytorch", "G2")
    snap.quotas = _quotas(quotas)
    snap.node(*(NodeBuilder(f"n{i}", "G2", gpus).block(block) for i, (gpus, block) in enumerate(nodes)))
    # some running jobs, each placed where it fits (by a first cycle with generous quotas)
    first = SnapshotBuilder().certify("pytorch", "G2").node(*snap.nodes).quota("a", "G2", 1000).quota("b", "G2", 1000)
    first.job(*(_job(100 + i, s, NOW - 7200) for i, s in enumerate(running_specs)))
    running = []
    for d in schedule(first.build(), TIDAL).admitted:
        spec = running_specs[d.job_id - 100]
        kind = QuotaKind.OWN if d.job_id % 2 else QuotaKind.BORROWED
        running.append(_job(d.job_id, spec, NOW - 7200).running_gang(
            *((w.node, tuple(s.index for s in w.gpu_shares)) for w in d.workers), kind=kind, ran=1800).build())
    snap.job(*running, *(_job(i + 1, s, NOW - 60 * i) for i, s in enumerate(pending)))
    before = snap.build()
    result = schedule(before, TIDAL)

    jobs = {j.id: j for j in before.jobs}
    preempted = {d.job_id for d in result.decisions if isinstance(d, Preempt)}
    held = defaultdict(float)  # (node, gpu) -> share
    cpu = defaultdict(int)
    charged = defaultdict(float)  # (dept, kind) -> GPUs
    for job in before.jobs:
        if job.id in preempted or not job.allocations:
            continue
        for a in job.allocations:
            for s in a.gpu_shares:
                held[(a.node, s.index)] += s.share
            cpu[a.node] += a.cpu_milli
            charged[(job.department, a.quota_kind)] += a.gpus
    for d in result.decisions:
        if isinstance(d, Admit):
            job = jobs[d.job_id]
            assert len(d.workers) == job.workers  # all or nothing
            assert all(len(w.gpu_shares) == job.gpus for w in d.workers)
            if job.topology is Topology.SPREAD:
                assert len({w.node for w in d.workers}) == job.workers
            for w in d.workers:
                for s in w.gpu_shares:
                    held[(w.node, s.index)] += s.share
                cpu[w.node] += d.rightsized.cpu_request_milli
            charged[(job.department, d.quota_kind)] += job.gpus * job.workers
    nodes_by_name = {n.name: n for n in before.nodes}
    for (node, index), share in held.items():
        assert index < nodes_by_name[node].gpu_count and share <= 1.0 + GPU_EPS
    for node, used in cpu.items():
        assert used <= nodes_by_name[node].cpu_milli
    before_charge = defaultdict(float)
    for job in before.jobs:
        for a in job.allocations:
            before_charge[(job.department, a.quota_kind)] += a.gpus
    for (dept, kind), used in charged.items():
        if kind is None:
            continue
        own, borrowed = quotas[dept]
        limit = own if kind is QuotaKind.OWN else borrowed
        assert used <= max(limit, before_charge[(dept, kind)]) + GPU_EPS


def _sim(nodes, quotas) -> SimulatedTraining:
    views = [NodeBuilder(f"n{i}", "G2", gpus).block(block).build() for i, (gpus, block) in enumerate(nodes)]
    return SimulatedTraining(views, _quotas(quotas), CERTIFIED, VirtualClock(NOW))


def _check(sim: SimulatedTraining, quotas) -> None:
    pods = defaultdict(int)
    for pod in sim.backend.pods():
        pods[pod.spec.job_id] += 1
    charged = defaultdict(float)
    for job in sim.jobs.values():
        if job.status is JobStatus.RUNNING:
            assert pods[job.id] == job.workers == len(job.allocations)  # never partially running
            for a in job.allocations:
                charged[(job.department, a.quota_kind)] += a.gpus
        else:
            assert pods[job.id] == 0 and not job.peers
    for (dept, kind), used in charged.items():
        own, borrowed = quotas[dept]
        assert used <= (own if kind is QuotaKind.OWN else borrowed) + GPU_EPS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_st, quota_st, workload_st)
def test_on_the_simulated_cluster_gangs_run_whole_and_within_quota(nodes, quotas, workload):
    sim = _sim(nodes, quotas)
    next_id = 1
    for arrivals in workload:
        for spec in arrivals:
            sim.submit(_job(next_id, spec, sim.clock.now()).build(), float(spec[4]))
            next_id += 1
        sim.step(TIDAL)
        _check(sim, quotas)
        sim.clock.advance(300)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([4, 8]), min_size=2, max_size=6), st.integers(2, 4),
       st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(60, 5000), st.booleans()), min_size=1,
                max_size=25))
# found by this test: a borrowed job on the gang's node once pushed its start to that job's end, and an own job
# ending then backfilled
@example([4, 4], 2, [(1, 601, False), (1, 661, True)])
def test_with_exact_run_times_backfill_never_delays_the_reserved_gang(node_gpus, workers, small):
    """Nor does borrowed work on its nodes: the own-quota gang reclaims it when it starts."""
    step = 60.0
    if workers > node_gpus.count(max(node_gpus)):
        return  # the gang never fits this cluster
    sim = _sim([(g, "x") for g in node_gpus], {"a": (10**6, 0), "b": (0, 10**6)})  # b only borrows
    # the cluster busy first: every node full with jobs of known, different ends
    for i, gpus in enumerate(node_gpus):
        sim.submit(JobBuilder(1000 + i).model("G2").gpus(gpus).cpu(100).duration(600 * (i + 1))
                   .submitted(NOW - 10).build(), 600.0 * (i + 1))
    sim.step(TIDAL)
    sim.submit(JobBuilder(1).model("G2").gpus(max(node_gpus)).workers(workers).cpu(100).duration(600)
               .submitted(NOW).build(), 600.0)
    reserved_start = started = None
    stream = iter(small)
    while started is None and (reserved_start is None or sim.clock.now() <= reserved_start + step):
        spec = next(stream, None)  # a stream of small jobs, each behind the gang in the queue
        if spec is not None:
            gpus, run_s, borrows = spec
            sim.submit(JobBuilder(2 + len(sim.jobs) + len(sim.done)).dept("b" if borrows else "a").model("G2")
                       .gpus(gpus).cpu(100).duration(run_s).submitted(sim.clock.now()).build(), float(run_s))
        for d in sim.step(TIDAL).decisions:
            if isinstance(d, Reserve) and d.job_id == 1 and reserved_start is None:
                reserved_start = d.start_at
            if isinstance(d, Admit) and d.job_id == 1:
                started = sim.clock.now()
        sim.clock.advance(step)
    assert reserved_start is not None or started is not None
    assert started is not None and (reserved_start is None or started <= reserved_start + step)
