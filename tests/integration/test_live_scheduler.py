"""The live loop on the real database against the in-process simulated cluster, including crashes
between deciding and acting."""
import uuid

import pytest
from redis import Redis

from cluster.simulated import store
from core.models import Decision
from scheduler import lifecycle, live
from scheduler.models import JobRun, JobStatus, TrainingJob
from scheduler.policy.profile import get_profile
from tests.integration.livecluster import tick

pytestmark = pytest.mark.django_db


class Crash(Exception):
    """Stands for the worker dying mid-tick."""


def submit(world, **kw):
    job = world.submit(**kw)
    job.annotations = {store.RUNTIME_LABEL: "600"}
    job.save()
    return job


def test_pending_job_is_admitted_bound_and_explained(world, cluster):
    job = submit(world, gpus="1")
    report = tick(cluster)
    job.refresh_from_db()
    assert report.admitted == 1
    assert job.status == JobStatus.RUNNING and job.quota_kind == "own"
    assert job.node.name == "t4-0" and job.assigned_gpu_model.name == "T4"
    run = job.runs.get()
    assert run.pod in {p.spec.name for p in cluster[0].pods()}
    admission = Decision.objects.get(subject=f"job:{job.pk}", kind="admission")
    assert admission.reason == "admitted-own-quota" and "t4-0" in admission.message


def test_finished_pod_ends_the_job(world, cluster):
    job = submit(world, gpus="0.5")
    tick(cluster)
    tick(cluster, seconds=601)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    assert job.runs.get().outcome == JobRun.Outcome.SUCCEEDED
    assert not cluster[0].pods()


def test_a_failed_pod_fails_its_job_once(world, cluster):
    from cluster.backend import ClusterEvent, EventKind

    job = submit(world, gpus="0.5")
    tick(cluster)
    run = TrainingJob.objects.get(pk=job.pk).runs.get()
    at = cluster[1].now() + 1
    failed = ClusterEvent(EventKind.POD_FAILED, at, run.node.name, run.pod, job.pk, "Error: exit code 3")
    assert live.record_events([failed, failed], now=at).finished == 1  # reported twice (a watch and a resync): once
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and job.runs.get().outcome == JobRun.Outcome.FAILED
    assert "exit code 3" in Decision.objects.get(subject=f"job:{job.pk}", reason="failed").message


def test_crash_after_deciding_before_binding_is_repaired(world, cluster, monkeypatch):
    job = submit(world, gpus="1")
    backend = cluster[0]
    real_bind = backend.bind
    monkeypatch.setattr(backend, "bind", lambda *a, **k: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        tick(cluster)
    job.refresh_from_db()
    assert job.status == JobStatus.ADMITTED and not backend.pods()  # decided, recorded, never acted

    monkeypatch.setattr(backend, "bind", real_bind)
    report = tick(cluster)
    job.refresh_from_db()
    assert report.repaired == [f"job {job.pk}: no pod, requeued"]
    assert job.status == JobStatus.RUNNING  # requeued and placed again in the same tick
    assert [r.outcome for r in job.runs.order_by("attempt")] == ["failed", "running"]
    assert len(backend.pods()) == 1


def test_crash_after_binding_before_recording_is_repaired(world, cluster, monkeypatch):
    job = submit(world, gpus="1")
    backend = cluster[0]
    real_bind = backend.bind

    def bind_then_die(*args, **kwargs):
        real_bind(*args, **kwargs)
        raise Crash()

    monkeypatch.setattr(backend, "bind", bind_then_die)
    with pytest.raises(Crash):
        tick(cluster)
    monkeypatch.setattr(backend, "bind", real_bind)
    report = tick(cluster)
    job.refresh_from_db()
    assert report.repaired == [f"job {job.pk}: pod found, marked running"]
    assert job.status == JobStatus.RUNNING and job.runs.count() == 1 and len(backend.pods()) == 1


def test_cancelled_running_job_loses_its_pod(world, cluster):

    job = submit(world, gpus="1")
    tick(cluster)
    lifecycle.job_cancel(job=job, actor=world.users["member"])
    report = tick(cluster)
    assert report.repaired == [f"pod job-{job.pk}-1: orphan evicted"]
    assert not cluster[0].pods()


def test_own_quota_job_reclaims_from_borrowers(world, cluster):
    # ml-ads: A100 own 4 + borrowed 2 on the one 8-GPU A100 node; ml-search then needs its own 4 on one node.
    ads = [submit(world, role="outsider", department="ml-ads", gpus="1", gpu_model="A100", name=f"ads-{i}")
           for i in range(6)]
    tick(cluster)
    running = TrainingJob.objects.filter(pk__in=[j.pk for j in ads], status=JobStatus.RUNNING)
    assert sorted(running.values_list("quota_kind", flat=True)) == ["borrowed"] * 2 + ["own"] * 4

    big = submit(world, gpus="4", gpu_model="A100", name="big")
    report = tick(cluster)
    big.refresh_from_db()
    assert big.status == JobStatus.RUNNING and big.quota_kind == "own" and big.node.name == "a100-0"
    assert report.preempted == 2
    victims = TrainingJob.objects.filter(pk__in=[j.pk for j in ads], status=JobStatus.PENDING)
    assert victims.count() == 2
    for victim in victims:
        assert [r.outcome for r in victim.runs.all()] == ["preempted"]  # history kept, back in the queue
        assert victim.submitted_at == next(j for j in ads if j.pk == victim.pk).submitted_at
        assert Decision.objects.get(subject=f"job:{victim.pk}", kind="preemption").reason == "preempted-reclaim"
    assert len(cluster[0].pods()) == 5  # 4 own ml-ads jobs + the reclaiming job


def test_still_pending_reason_recorded_once_until_it_changes(world, cluster):
    job = submit(world, gpus="8", gpu_model="A100")  # 8 A100 > own 4 + borrowed 2
    tick(cluster)
    tick(cluster)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.queue_position == 1
    assert job.score["base"] in (1_000_000, 1_000) and job.pending_reason
    assert Decision.objects.filter(subject=f"job:{job.pk}", kind="pending").exclude(reason="submitted").count() == 1


def test_only_one_live_tick_at_a_time(world, settings):
    settings.TIDAL_SCHEDULER_INTERVAL_S = 0.5  # it waits 0.4 s for the lock, then skips
    redis, namespace = Redis.from_url(settings.REDIS_URL), f"test-{uuid.uuid4().hex[:8]}"
    lock = redis.lock(f"{namespace}:{store.LOCK}", timeout=30)
    assert lock.acquire(blocking=False)
    try:
        assert live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal")) is None
    finally:
        lock.release()
    submit(world, gpus="1")
    try:
        report = live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal"))
        assert report is not None and report.admitted == 1
        saved = store.load(redis, namespace)
        assert len(saved.pods()) == 1  # the cluster's state survives the tick for the next one
    finally:
        redis.delete(f"{namespace}:{store.KEY}")


def test_job_killed_by_a_take_back_is_requeued_at_once_for_the_fixed_pool(world, cluster):
    job = submit(world, gpus="1", gpu_model="A100")
    tick(cluster)
    job.refresh_from_db()
    assert job.node.name == "a100-0" and job.node.pool == "colocation"  # on a lent (offline) node
    backend, clock = cluster
    backend.evict(f"job-{job.pk}-1", "take-back")  # what the lending controller does
    assert lifecycle.job_take_back(job_id=job.pk, node="a100-0", now=clock.now())
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.pool_preference == "fixed"
    assert [r.outcome for r in job.runs.all()] == ["killed"]
    assert not lifecycle.job_take_back(job_id=job.pk, node="a100-0", now=clock.now())  # only once
    tick(cluster)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.node.name == "t4-0"  # the fixed pool (T4 is compatible)
    assert job.runs.count() == 2


def test_long_jobs_go_to_the_fixed_pool_and_short_ones_to_the_colocation_pool(world, cluster):
    long_job = submit(world, gpus="1", gpu_model="A100", name="long")
    long_job.expected_duration_s = 13 * 3600  # > 12 h (and > the night bar at any hour)
    long_job.save()
    short_job = submit(world, gpus="1", gpu_model="A100", name="short")
    short_job.expected_duration_s = 3600
    short_job.save()
    tick(cluster)
    long_job.refresh_from_db()
    short_job.refresh_from_db()
    assert short_job.node.name == "a100-0"  # co-location pool (lent A100 node)
    assert long_job.node.name == "t4-0" and long_job.node.pool == "fixed"  # no fixed A100: compatible T4
