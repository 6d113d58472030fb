"""The live loop acting on gang jobs (several workers started and ended together) on the real database against the
simulated cluster: success only when every worker has succeeded, any other end of one worker ends the whole run once,
a crash mid-bind repaired, preemption of every worker, reservations recorded once per change."""
import pytest

from cluster.backend import ClusterEvent, EventKind
from core.models import Decision
from scheduler import lifecycle, live
from scheduler.models import JobRun, JobStatus, TrainingJob
from scheduler.policy.decisions import CycleResult, Preempt, Reason, Reserve, StillPending
from scheduler.policy.priority import ScoreBreakdown
from tests.integration.gangs import add_gang_nodes, gang_admit, gang_job, gang_pods
from tests.integration.livecluster import tick

pytestmark = pytest.mark.django_db


class Crash(Exception):
    """Stands for the worker dying mid-tick."""


@pytest.fixture
def cluster(world):
    """The simulated cluster of the world's nodes plus four T4 nodes for a gang (tests/integration/gangs.py)."""
    from cluster.clock import VirtualClock
    from cluster.simulated import store
    from cluster.simulated.engine import SimulatedCluster
    from colocation.selectors import node_views
    from tests.integration.livecluster import T0

    add_gang_nodes(world)
    clock = VirtualClock(T0)
    return SimulatedCluster(node_views(), clock, store.labelled_runtime), clock


def running_gang(world, cluster, **kw) -> TrainingJob:
    backend, clock = cluster
    job = gang_job(world, **kw)
    assert live.admit(gang_admit(job), backend, clock.now())
    return job


def on_cluster(cluster, job) -> list[str]:
    return sorted(p.spec.name for p in cluster[0].pods() if p.spec.job_id == job.pk)


def with_events(monkeypatch, backend, *events: ClusterEvent) -> None:
    """The next drain also reports `events` (what a kubelet would: the simulated cluster has no failing pods)."""
    real = backend.drain_events
    monkeypatch.setattr(backend, "drain_events", lambda: [*real(), *events])


def states(job) -> list[str]:
    return [w["state"] for w in job.runs.get().workers]


def test_a_gang_succeeds_when_every_worker_has_and_its_service_goes(world, cluster):
    job = running_gang(world, cluster, runtime_s=600)
    assert cluster[0].services() and len(on_cluster(cluster, job)) == 4
    report = tick(cluster, seconds=601)
    job.refresh_from_db()
    assert report.finished == 1 and job.status == JobStatus.SUCCEEDED
    assert job.runs.get().outcome == JobRun.Outcome.SUCCEEDED and states(job) == ["succeeded"] * 4
    assert cluster[0].services() == {} and on_cluster(cluster, job) == []
    (finished,) = Decision.objects.filter(subject=f"job:{job.pk}", reason="finished")
    assert "all 4 workers" in finished.message


def test_one_worker_finishing_first_waits_for_the_others(world, cluster):
    job = running_gang(world, cluster)
    pods = gang_pods(job)
    at = cluster[1].now() + 1

    def finished(rank: int) -> ClusterEvent:
        return ClusterEvent(EventKind.POD_FINISHED, at, f"g-{rank}", pods[rank], job.pk)

    recorded = live.record_events([finished(0), finished(0), finished(2)], now=at)  # 0 reported twice
    job.refresh_from_db()
    assert recorded.finished == 0 and job.status == JobStatus.RUNNING
    assert states(job) == ["succeeded", "running", "succeeded", "running"]
    recorded = live.record_events([finished(1), finished(3)], now=at)
    job.refresh_from_db()
    assert recorded.finished == 1 and job.status == JobStatus.SUCCEEDED and states(job) == ["succeeded"] * 4
    assert [s.service for s in recorded.stops] == [f"gang-{job.pk}-1"]


def test_a_failed_worker_ends_the_gangs_run_once_and_stops_the_others(world, cluster, monkeypatch):
    job = running_gang(world, cluster)
    pods = gang_pods(job)
    failed = ClusterEvent(EventKind.POD_FAILED, cluster[1].now() + 1, "g-1", pods[1], job.pk, "Error: exit code 3")
    with_events(monkeypatch, cluster[0], failed, failed)  # a watch and a resync: counted once
    report = tick(cluster)
    # the other workers were stopped as the failure was recorded, not later as orphans (only the failed pod, which
    # the simulated cluster still holds, is one)
    assert report.repaired == [f"pod {pods[1]}: orphan evicted"]
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING  # requeued: the gang may run again (8 T4 is above its quota here)
    assert job.runs.get().outcome == JobRun.Outcome.FAILED
    assert states(job) == ["stopped", "failed", "stopped", "stopped"]
    assert on_cluster(cluster, job) == [] and cluster[0].services() == {}
    (requeued,) = Decision.objects.filter(subject=f"job:{job.pk}", reason="worker-failed")
    assert "worker 1 of 4" in requeued.message and "exit code 3" in requeued.message


def test_a_worker_evicted_by_someone_else_requeues_the_whole_gang(world, cluster):
    job = running_gang(world, cluster)
    cluster[0].evict(gang_pods(job)[3], "node drained by an operator")
    report = tick(cluster)
    assert report.repaired == []  # the other workers were stopped with the requeue, not found as orphans
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.pool_preference == "fixed"
    assert states(job) == ["stopped", "stopped", "stopped", "killed"]
    assert on_cluster(cluster, job) == [] and cluster[0].services() == {}
    assert Decision.objects.filter(subject=f"job:{job.pk}", reason="evicted").count() == 1


def test_a_crash_mid_bind_is_repaired_by_requeuing_the_gang_and_removing_its_workers(world, cluster, monkeypatch):
    backend = cluster[0]
    job = gang_job(world)
    real_bind, calls = backend.bind, []

    def bind_twice_then_die(spec, node):
        calls.append(spec.name)
        if len(calls) == 3:
            raise Crash()
        real_bind(spec, node)

    monkeypatch.setattr(backend, "bind", bind_twice_then_die)
    with pytest.raises(Crash):
        live.admit(gang_admit(job), backend, cluster[1].now())
    job.refresh_from_db()
    assert job.status == JobStatus.ADMITTED and len(on_cluster(cluster, job)) == 2 and backend.services()

    monkeypatch.setattr(backend, "bind", real_bind)
    report = tick(cluster)
    job.refresh_from_db()
    assert report.repaired == [f"job {job.pk}: 2 of 4 worker pods missing, requeued"]
    assert job.status == JobStatus.PENDING and states(job) == ["stopped", "stopped", "failed", "failed"]
    assert on_cluster(cluster, job) == [] and backend.services() == {}


def test_a_crash_after_binding_every_worker_is_repaired_by_marking_the_gang_running(world, cluster, monkeypatch):
    job = gang_job(world)
    monkeypatch.setattr(lifecycle, "job_start", lambda **kw: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        live.admit(gang_admit(job), cluster[0], cluster[1].now())
    monkeypatch.undo()
    report = tick(cluster)
    job.refresh_from_db()
    assert report.repaired == [f"job {job.pk}: all 4 worker pods found, marked running"]
    assert job.status == JobStatus.RUNNING and len(on_cluster(cluster, job)) == 4


def test_preempting_a_gang_evicts_every_worker(world, cluster):
    job = running_gang(world, cluster)
    victim = Preempt(job_id=job.pk, job_name=job.name, node="g-2", for_job_id=999, run_time_s=60, requeue=True,
                     reason=Reason.PREEMPTED_PRIORITY, message="preempted for job 999 (higher score)")
    assert not live.preempt(victim, cluster[0], cluster[1].now())  # nothing left shutting down
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and states(job) == ["preempted"] * 4
    assert on_cluster(cluster, job) == [] and cluster[0].services() == {}
    assert Decision.objects.filter(subject=f"job:{job.pk}", kind="preemption").count() == 1


def test_cancelling_a_running_gang_evicts_its_workers_and_its_service(world, cluster):
    job = running_gang(world, cluster)
    lifecycle.job_cancel(job=job, actor=world.users["member"])
    report = tick(cluster)
    assert sorted(report.repaired) == sorted(f"pod {p}: orphan evicted" for p in gang_pods(job))
    assert on_cluster(cluster, job) == [] and cluster[0].services() == {}


def test_a_reservation_is_kept_and_explained_once_per_change(world, cluster):
    job = gang_job(world)
    start = cluster[1].now() + 3600

    def cycle(*reserves: Reserve) -> None:
        pending = StillPending(job.pk, job.name, 0, ScoreBreakdown(1_000_000, 0, 0),
                               Reason.RESERVED if reserves else Reason.QUOTA_EXHAUSTED, "waiting")
        live.act(CycleResult(cluster[1].now(), (*reserves, pending)), cluster[0], cluster[1].now(),
                  live.TickReport())
        job.refresh_from_db()

    def reserve(nodes: tuple[str, ...], at: float) -> Reserve:
        return Reserve(job.pk, job.name, nodes, at, Reason.RESERVED, f"reserved {', '.join(nodes)} for job {job.pk}")

    def explained() -> list[str]:
        decisions = Decision.objects.filter(subject=f"job:{job.pk}", reason="reserved").order_by("pk")
        return list(decisions.values_list("message", flat=True))

    cycle(reserve(("g-0", "g-1"), start))
    assert job.reservation == {"nodes": ["g-0", "g-1"], "start_at": start} and job.pending_reason == "reserved"
    cycle(reserve(("g-0", "g-1"), start + 10))  # the estimate drifted a little: the same reservation
    assert job.reservation["start_at"] == start and len(explained()) == 1
    cycle(reserve(("g-0", "g-3"), start + 10))
    assert job.reservation == {"nodes": ["g-0", "g-3"], "start_at": start + 10}
    assert explained() == [f"reserved g-0, g-1 for job {job.pk}", f"reserved g-0, g-3 for job {job.pk}"]
    cycle()  # no longer reserved
    assert job.reservation == {} and job.pending_reason == "quota-exhausted"
    cycle(reserve(("g-0", "g-1"), start))  # reserved again: said again
    assert len(explained()) == 3 and job.reservation["nodes"] == ["g-0", "g-1"]
    live.admit(gang_admit(job), cluster[0], cluster[1].now())
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.reservation == {}  # a gang that starts holds no reservation


def test_the_cycle_admits_a_gang_and_the_loop_binds_it_whole(world, cluster):
    """Through the whole tick: the pure cycle places both workers, the loop binds them with their Service."""
    from cluster.backend import WORKER_LABEL

    job = world.submit(gpus="2", gpu_model="A100", name="ddp")  # 2 x 2 A100: within ml-search's own 4
    job.workers, job.annotations = 2, {"tidal.io/sim-runtime-s": "600"}
    job.save()
    report = tick(cluster)
    job.refresh_from_db()
    assert report.admitted == 1 and job.status == JobStatus.RUNNING
    run = job.runs.get()
    assert [w["pod"] for w in run.workers] == gang_pods(job)
    pods = {p.spec.name: p for p in cluster[0].pods() if p.spec.job_id == job.pk}
    assert sorted(pods) == gang_pods(job)
    assert [pods[w["pod"]].node for w in run.workers] == [w["node"] for w in run.workers]
    assert [pods[name].spec.labels[WORKER_LABEL] for name in gang_pods(job)] == ["0", "1"]
    assert {pods[name].spec.env["WORLD_SIZE"] for name in gang_pods(job)} == {"2"}
    assert cluster[0].services() == {f"gang-{job.pk}-1": {"tidal.io/job": str(job.pk), "tidal.io/run": "1"}}
    tick(cluster, seconds=601)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED and cluster[0].services() == {}
