"""The shared simulated acting layer (experiments/simulated_training.py) with gangs: all workers or none, whole-gang
preemption, finish and take-back; and, over random workloads through the real cycle, no gang ever runs partially."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.backend import WORKER_LABEL
from cluster.clock import VirtualClock
from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, GpuShare, JobStatus, QuotaKind, QuotaView, Topology
from colocation.policy.pools import requeue_after_take_back
from experiments.builders.scheduling import NOW, JobBuilder, NodeBuilder
from experiments.simulated_training import SimulatedTraining, simulated_pod_name
from scheduler.policy import Admit, CycleResult, Preempt, Reason, Request, ScoreBreakdown, get_profile
from scheduler.policy.decisions import Worker

CERTIFIED = {"pytorch": frozenset({"T4"})}


def cluster(*gpus: int, own: float = 64) -> SimulatedTraining:
    nodes = [NodeBuilder(f"n{i}", "T4", g).build() for i, g in enumerate(gpus)]
    quotas = [QuotaView("a", "T4", own, 0), QuotaView("a", CPU_KEY, 10**9, 0), QuotaView("a", MEMORY_KEY, 10**9, 0)]
    return SimulatedTraining(nodes, quotas, CERTIFIED, VirtualClock(NOW))


def admit(job_id: int, *workers: tuple[str, tuple[int, ...]], gpus: float = 1.0, model: str = "T4") -> Admit:
    """An Admit of one worker per (node, whole GPU indices), as the cycle gives it."""
    ws = [Worker(node, tuple(GpuShare(i, 1.0) for i in idx)) for node, idx in workers]
    request = Request(gpus, 1000, 1000, 1024)
    return Admit(job_id, f"job-{job_id}", ws[0].node, model, ws[0].gpu_shares, QuotaKind.OWN, request, request,
                 ScoreBreakdown(1_000_000, 0, 0), (), Reason.ADMITTED_OWN, "admitted", peers=tuple(ws[1:]))


def apply(sim: SimulatedTraining, *decisions) -> None:
    sim.apply(CycleResult(NOW, tuple(decisions)))


def pods(sim: SimulatedTraining) -> dict[str, str]:
    return {p.spec.name: p.node for p in sim.backend.pods()}


def test_an_admitted_gang_binds_every_worker_and_records_them():
    sim = cluster(2, 2, 2)
    sim.submit(JobBuilder(7).gpus(2).workers(3).build(), 500.0)
    apply(sim, admit(7, ("n0", (0, 1)), ("n1", (0, 1)), ("n2", (0, 1)), gpus=2))
    assert pods(sim) == {"job-7": "n0", "job-7-w1": "n1", "job-7-w2": "n2"}
    assert [p.spec.labels[WORKER_LABEL] for p in sim.backend.pods()] == ["0", "1", "2"]
    job = sim.jobs[7]
    assert job.status is JobStatus.RUNNING and [a.node for a in job.allocations] == ["n0", "n1", "n2"]
    assert job.allocation.gpus == 2 and all(a.quota_kind is QuotaKind.OWN for a in job.peers)
    assert sim.pods_of(7) == ("job-7", "job-7-w1", "job-7-w2")


def test_a_refused_worker_undoes_the_others_and_the_gang_stays_pending():
    sim = cluster(2, 1)
    sim.submit(JobBuilder(7).gpus(2).workers(2).build(), 500.0)
    # n1 has one GPU: worker 1 cannot be bound there, so worker 0 on n0 must not stay either
    apply(sim, admit(7, ("n0", (0, 1)), ("n1", (0, 1)), gpus=2))
    assert pods(sim) == {} and sim.bind_failures == 1
    assert sim.jobs[7].status is JobStatus.PENDING and sim.jobs[7].allocation is None
    assert all(sum(n.used_shares()) == 0 for n in sim.backend.nodes())


def test_a_preempted_gang_loses_every_worker_once():
    sim = cluster(1, 1)
    sim.submit(JobBuilder(7).workers(2).build(), 500.0)
    apply(sim, admit(7, ("n0", (0,)), ("n1", (0,))))
    preempt = Preempt(7, "job-7", "n1", 9, 60.0, True, Reason.PREEMPTED_PRIORITY, "preempted")
    apply(sim, preempt)
    assert pods(sim) == {} and sim.preemptions[7] == 1
    assert sim.jobs[7].status is JobStatus.PENDING and sim.jobs[7].peers == ()
    apply(sim, preempt)  # a second decision for a job that holds nothing changes nothing
    assert sim.preemptions[7] == 1


def test_a_gang_finishes_when_its_workers_end_together():
    sim = cluster(1, 1, 1)
    sim.submit(JobBuilder(7).workers(3).build(), 300.0)
    sim.submit(JobBuilder(8).build(), 100.0)
    apply(sim, admit(7, ("n0", (0,)), ("n1", (0,)), ("n2", (0,))))
    sim.clock.advance(299)
    assert sim.finish_elapsed() == 0 and len(pods(sim)) == 3
    sim.clock.advance(1)
    assert sim.finish_elapsed() == 1  # one job, three workers
    assert sim.done[7].status is JobStatus.SUCCEEDED and 7 not in sim.jobs and pods(sim) == {}


def test_a_worker_taken_back_ends_the_gang_run_and_requeues_it_once():
    sim = cluster(1, 1, 1)
    sim.submit(JobBuilder(7).workers(3).duration(300).build(), 300.0)
    apply(sim, admit(7, ("n0", (0,)), ("n1", (0,)), ("n2", (0,))))
    sim.backend.evict("job-7-w1", "take-back")  # the lending controller's eviction, not ours
    job = sim.worker_lost("job-7-w1", "take-back", requeue_after_take_back)
    assert job is not None and job.status is JobStatus.RUNNING  # the job as it ran
    assert pods(sim) == {}  # the other workers went at once
    requeued = sim.jobs[7]
    assert requeued.status is JobStatus.PENDING and requeued.allocation is None and requeued.peers == ()
    assert requeued.preferred_pool is not None  # requeue_after_take_back pins it to the fixed pool
    assert sim.worker_lost("job-7-w2", "take-back") is None and sim.requeues[7] == 1  # once


def test_the_cycle_admits_a_gang_through_the_acting_layer_and_it_runs_whole():
    sim = cluster(4, 4, 4)
    sim.submit(JobBuilder(1).gpus(4).workers(3).build(), 600.0)
    result = sim.step(get_profile("tidal"))
    assert [d.job_id for d in result.admitted] == [1] and len(result.admitted[0].workers) == 3
    assert sorted(pods(sim)) == [simulated_pod_name(1, r) for r in range(3)]
    assert len(set(pods(sim).values())) == 3  # 4 GPUs a worker: one node each


# -- properties over random workloads through the real cycle --------------------------------------
job_st = st.tuples(st.sampled_from([1, 1, 2, 3, 4]), st.sampled_from([0.5, 1, 2, 4]), st.integers(60, 3000),
                   st.sampled_from([Topology.PACK, Topology.SPREAD]))
workload_st = st.lists(st.lists(job_st, max_size=5), min_size=1, max_size=5)


def check_whole(sim: SimulatedTraining) -> None:
    """Every running job has exactly its workers' pods bound; no other pod exists; GPUs never above 1."""
    expected = {}
    for job in sim.jobs.values():
        if job.status is JobStatus.RUNNING:
            assert len(job.allocations) == job.workers
            expected.update({simulated_pod_name(job.id, r): a.node for r, a in enumerate(job.allocations)})
        else:
            assert job.allocation is None and job.peers == ()
    assert pods(sim) == expected
    assert all(u <= 1 + GPU_EPS for n in sim.backend.nodes() for u in n.used_shares())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=5), workload_st, st.data())
def test_a_gang_never_runs_partially_through_cycles_preemptions_and_take_backs(gpus, workload, data):
    sim = cluster(*gpus, own=sum(gpus))
    next_id = 1
    for arrivals in workload:
        for workers, per_worker, run_s, topology in arrivals:
            job = JobBuilder(next_id).workers(workers, topology).gpus(per_worker if workers == 1 else
                                                                         max(1, per_worker))
            sim.submit(job.submitted(sim.clock.now()).build(), float(run_s))
            next_id += 1
        sim.step(get_profile("tidal"))
        check_whole(sim)
        running = sorted(pods(sim))
        if running and data.draw(st.booleans()):  # someone else evicts one worker (a take-back)
            pod = data.draw(st.sampled_from(running))
            sim.backend.evict(pod, "take-back")
            assert sim.worker_lost(pod, "take-back") is not None
            check_whole(sim)
        sim.clock.advance(500)
    for _ in range(4):
        sim.step(get_profile("tidal"))
        check_whole(sim)
        sim.clock.advance(3000)
