"""Invariants over random clusters and workloads, across several cycles on the simulated backend."""

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.clock import VirtualClock
from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, JobStatus, QuotaKind, QuotaView
from experiments.builders.scheduling import NOW, JobBuilder, NodeBuilder
from experiments.simulated_training import SimulatedTraining
from scheduler.policy import Reason, get_profile

DEPTS = ("a", "b", "c")
MODELS = ("T4", "A100")
CERTIFIED = {"pytorch": frozenset(MODELS), "caffe": frozenset({"T4"})}

nodes_st = st.lists(st.tuples(st.sampled_from(MODELS), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=5)
quota_st = st.fixed_dictionaries({(d, m): st.tuples(st.integers(0, 8), st.integers(0, 8))
                                  for d in DEPTS for m in MODELS})
job_st = st.tuples(st.sampled_from(DEPTS), st.sampled_from([0.25, 0.5, 1, 2, 4]), st.sampled_from(MODELS),
                   st.sampled_from(sorted(CERTIFIED)), st.integers(60, 4000), st.floats(0, 1),
                   st.booleans())
workload_st = st.lists(st.lists(job_st, max_size=6), min_size=1, max_size=5)  # arrivals per cycle


def build(nodes, quotas) -> SimulatedTraining:
    views = [NodeBuilder(f"n{i}", model, gpus).build() for i, (model, gpus) in enumerate(nodes)]
    qs = [QuotaView(d, m, own, borrowed) for (d, m), (own, borrowed) in quotas.items()]
    qs += [QuotaView(d, key, 10**9, 10**9) for d in DEPTS for key in (CPU_KEY, MEMORY_KEY)]
    return SimulatedTraining(views, qs, CERTIFIED, VirtualClock(NOW))


def submit(sim: SimulatedTraining, spec, job_id: int) -> None:
    dept, gpus, model, framework, run_time, util, history = spec
    job = JobBuilder(job_id).dept(dept).gpus(gpus).model(model).framework(framework).cpu(2000)
    if history:
        job = job.history((util, util, 500, 900))
    sim.submit(job.submitted(sim.clock.now()).build(), float(run_time))


def check_invariants(sim: SimulatedTraining, submitted: set[int]) -> None:
    # No GPU over 1.0, and node usage equals what the running jobs hold.
    held = defaultdict(float)
    for job in sim.jobs.values():
        if job.allocation:
            for s in job.allocation.gpu_shares:
                held[(job.node, s.index)] += s.share
    for node in sim.backend.nodes():
        for i, used in enumerate(node.used_shares()):
            assert used <= 1.0 + GPU_EPS
            assert abs(used - held[(node.name, i)]) < 1e-6
    # Quotas never exceeded.
    usage = defaultdict(float)
    for job in sim.jobs.values():
        if job.allocation and job.allocation.quota_kind:
            usage[(job.department, job.assigned_gpu_model, job.allocation.quota_kind)] += job.allocation.gpus
    limits = {(q.department, q.resource): q for q in sim.quotas}
    for (dept, model, kind), used in usage.items():
        q = limits[(dept, model)]
        assert used <= (q.own if kind is QuotaKind.OWN else q.borrowed) + GPU_EPS
    # No job lost or duplicated: every job is in exactly one place, every running job has one pod.
    assert set(sim.jobs).isdisjoint(sim.done)
    assert set(sim.jobs) | set(sim.done) == submitted
    running = {j.id for j in sim.jobs.values() if j.status is JobStatus.RUNNING}
    pods = [p.spec.job_id for p in sim.backend.pods()]
    assert sorted(pods) == sorted(running)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_st, quota_st, workload_st)
def test_invariants_hold_across_cycles_with_preemption_and_requeue(nodes, quotas, workload):
    sim = build(nodes, quotas)
    submitted: set[int] = set()
    for arrivals in workload:
        for spec in arrivals:
            job_id = len(submitted) + 1
            submit(sim, spec, job_id)
            submitted.add(job_id)
        sim.step(get_profile("tidal"))
        check_invariants(sim, submitted)
        sim.clock.advance(400)
    for _ in range(3):  # let things finish and requeued jobs restart
        sim.step(get_profile("tidal"))
        check_invariants(sim, submitted)
        sim.clock.advance(2000)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4), st.data())
def test_own_quota_job_admitted_within_one_cycle_when_borrowers_hold_its_quota(node_gpus, data):
    nodes = [("T4", g) for g in node_gpus]
    total = sum(node_gpus)
    quotas = {(d, m): (0, 0) for d in DEPTS for m in MODELS}
    quotas[("a", "T4")] = (total, 0)  # a owns the whole fleet ...
    quotas[("b", "T4")] = (0, total)  # ... and b borrows all of it
    sim = build(nodes, quotas)
    borrower_sizes = data.draw(st.lists(st.sampled_from([0.25, 0.5, 1, 2]), min_size=total, max_size=4 * total))
    for i, gpus in enumerate(borrower_sizes):
        sim.submit(JobBuilder(100 + i).dept("b").gpus(gpus).model("T4").build())
    sim.step(get_profile("tidal"))
    sim.clock.advance(data.draw(st.sampled_from([10.0, 1000.0])))  # young or old borrowers alike
    want = data.draw(st.sampled_from([g for g in (0.25, 0.5, 1, 2, 4, 8) if g <= max(node_gpus)]))
    sim.submit(JobBuilder(1).dept("a").gpus(want).model("T4").build())
    result = sim.step(get_profile("tidal"))
    assert sim.jobs[1].status is JobStatus.RUNNING, [d.message for d in result.decisions if d.job_id == 1]
    assert sim.jobs[1].quota_kind is QuotaKind.OWN
    assert all(p.reason is Reason.PREEMPTED_RECLAIM for p in result.preempted)  # only borrowers evicted
