"""Job logs end to end (docs/concepts/job-logs.md): a running job's log read live through the API, and after its run ends —
finished, preempted, cancelled, a gang stopped — from the archive the loop took; a gang's worker 1; permissions and
bad parameters; following; retention. On the simulated cluster (as the demo's loops keep it in Redis) and on the real
Kubernetes control plane (tests/integration/kubecluster.py), where kwok serves a training pod's log through the API
server's pods/log from the file the kwok log writer writes (cluster/simulated/kwok_logs.py)."""
from __future__ import annotations

import logging
import os
import time
import uuid
from datetime import timedelta

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.utils import timezone
from redis import Redis

from cluster.backend import RUNTIME_LABEL, BackendError, BackendUnavailable
from cluster.clock import VirtualClock
from cluster.kubernetes.objects import timestamp
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from colocation import live_backend
from colocation.selectors import node_views
from core.api.throttling import SignInThrottle
from scheduler import live, logs
from scheduler.lifecycle import job_cancel
from scheduler.models import JobStatus, TrainingJob
from scheduler.policy.decisions import Preempt, Reason
from scheduler.policy.profile import get_profile
from tests.integration.gangs import add_gang_nodes, gang_admit, gang_job
from tests.integration.kubecluster import tidal_on_kwok
from tests.integration.livecluster import T0, tick
from tests.integration.tidalcli import Tidal

NS = "tidal-workloads"


@pytest.fixture
def stored(settings):
    """The simulated cluster as the demo's loops keep it: in Redis, under a namespace of this test."""
    settings.TIDAL_CLUSTER_BACKEND = "simulated"
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"test-logs-{uuid.uuid4().hex[:8]}"
    redis = Redis.from_url(settings.REDIS_URL)
    yield lambda cluster: store.save(redis, namespace, cluster)
    for key in redis.scan_iter(f"{namespace}:*"):
        redis.delete(key)


def submit(world, runtime_s: int | None = 600, **fields) -> TrainingJob:
    job = world.submit(gpus="1", **fields)
    if runtime_s is not None:
        job.annotations = {RUNTIME_LABEL: str(runtime_s)}
        job.save()
    return job


def get_log(world, job, role: str = "member", **params):
    return world.client(role).get(f"/api/jobs/{job.pk}/logs/", params)


def text_of(response) -> str:
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    return response.content.decode()


def archived(job, attempt: int = 1, rank: int = 0) -> str:
    with storages["logs"].open(logs.archive_path(job.pk, attempt, rank)) as f:
        return f.read().decode()


def preempt(job, backend, now: float) -> None:
    victim = Preempt(job_id=job.pk, job_name=job.name, node="t4-0", for_job_id=999, run_time_s=60, requeue=True,
                     reason=Reason.PREEMPTED_PRIORITY, message="preempted for job 999 (higher score)")
    live.preempt(victim, backend, now)


# --- the simulated cluster ----------------------------------------------------------------------------------

pytestmark = pytest.mark.django_db


def test_a_running_log_reads_live_and_after_it_finished_from_the_archive(world, cluster, stored):
    job = submit(world)
    tick(cluster)
    tick(cluster, seconds=300)
    stored(cluster[0])
    response = get_log(world, job)
    live_text = text_of(response)
    assert response["X-Tidal-Log-Source"] == "live"
    assert "torchrun --nnodes=1" in live_text and " step " in live_text and live_text.endswith("\n")
    assert text_of(get_log(world, job, tail=2)).splitlines() == live_text.splitlines()[-2:]
    tick(cluster, seconds=301)  # past its run time: finished, its end recorded and its log archived
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED
    stored(SimulatedCluster([], cluster[1]))  # the cluster forgot it: only the archive is left
    response = get_log(world, job)
    assert response["X-Tidal-Log-Source"] == "archive"
    text = text_of(response)
    assert text == archived(job) and text.startswith(live_text) and "exiting with code 0" in text


def test_a_preempted_run_keeps_its_sigterm_lines_and_the_next_run_is_read_live(world, cluster, stored):
    job = submit(world, runtime_s=None)
    tick(cluster)
    tick(cluster, seconds=120)
    preempt(job, cluster[0], cluster[1].now())
    assert "Received SIGTERM (signal 15): preempted for job 999" in archived(job)
    tick(cluster, seconds=30)  # admitted again: run 2
    stored(cluster[0])
    assert TrainingJob.objects.get(pk=job.pk).runs.count() == 2
    newest = get_log(world, job)
    assert newest["X-Tidal-Log-Source"] == "live" and "SIGTERM" not in text_of(newest)
    first = get_log(world, job, run=1)
    assert first["X-Tidal-Log-Source"] == "archive" and text_of(first) == archived(job)


def test_a_cancelled_jobs_pod_is_archived_when_the_loop_evicts_it(world, cluster, stored):
    job = submit(world, runtime_s=None)
    tick(cluster)
    tick(cluster, seconds=60)
    job_cancel(job=TrainingJob.objects.get(pk=job.pk), actor=world.users["member"])
    tick(cluster)  # the orphan pod is evicted, its log archived first
    assert "Received SIGTERM (signal 15): orphan" in archived(job)
    stored(cluster[0])
    assert "orphan" in text_of(get_log(world, job, role="operator"))


def test_a_gangs_worker_1_has_its_own_log_and_every_worker_is_archived_when_it_stops(world, cluster, stored):
    add_gang_nodes(world)
    clock = VirtualClock(T0)
    backend = SimulatedCluster(node_views(), clock, store.labelled_runtime)
    job = gang_job(world)
    assert live.admit(gang_admit(job), backend, clock.now())
    clock.advance(90)
    stored(backend)
    worker1 = text_of(get_log(world, job, worker=1))
    assert "--nnodes=4 --node_rank=1" in worker1 and "[rank1]" in worker1 and "[rank0]" not in worker1
    bad = get_log(world, job, worker=4)
    assert bad.status_code == 400 and "worker" in bad.json()["extra"]["fields"]
    assert "workers 0-3" in bad.json()["message"]
    preempt(job, backend, clock.now())
    for rank in range(4):
        assert f"[rank{rank}] Received SIGTERM" in archived(job, rank=rank)


def test_a_take_back_archives_the_killed_jobs_log(world, cluster, stored):
    from colocation import controller, services
    from colocation.models import Node
    from colocation.policy import DEFAULT, Direction

    for group in world.groups.values():  # automation off: only the operator's take-back acts
        group.lending = False
        group.save()
    job = submit(world, runtime_s=None, gpu_model="A100")
    tick(cluster, seconds=60)
    assert TrainingJob.objects.get(pk=job.pk).node.name == "a100-0"
    services.transition_request(node=Node.objects.get(name="a100-0"), direction=Direction.TAKE_BACK,
                                actor=world.users["operator"], reason="operator", message="by hand")
    cluster[1].advance(120)
    controller.lending_tick(backend=cluster[0], now=cluster[1].now(), profile=DEFAULT)
    assert [r.outcome for r in TrainingJob.objects.get(pk=job.pk).runs.all()] == ["killed"]
    assert "Received SIGTERM (signal 15): a100-0 taken back for inference" in archived(job)
    stored(cluster[0])
    assert get_log(world, job)["X-Tidal-Log-Source"] == "archive"  # an ended run reads its archive first


def test_who_may_read_and_what_is_refused(world, cluster, stored):
    job = submit(world)
    never = submit(world, name="never-ran")
    never.status = JobStatus.CANCELLED
    never.save()
    tick(cluster)
    stored(cluster[0])
    assert get_log(world, job, role="outsider").status_code == 404  # another department's job: as the job itself
    assert get_log(world, job, role="anonymous").status_code == 401
    assert get_log(world, job, role="dept_admin").status_code == 200
    no_run = get_log(world, never)
    assert no_run.status_code == 404 and no_run.json()["message"].endswith("has no run yet: its log starts when it runs")
    missing = get_log(world, job, run=3)
    assert missing.status_code == 404 and f"job {job.pk} has no run 3 (it has run 1)" == missing.json()["message"]
    for params, field in (({"tail": "-1"}, "tail"), ({"follow": "yes"}, "follow"), ({"worker": ""}, "worker"),
                          ({"run": "0"}, "run"), ({"tail": "x"}, "tail")):
        bad = get_log(world, job, **params)
        assert bad.status_code == 400 and field in bad.json()["extra"]["fields"], params
    assert get_log(world, job, HTTP_ACCEPT="text/plain").status_code == 200


def test_download_names_the_file(world, cluster, stored):
    job = submit(world)
    tick(cluster)
    stored(cluster[0])
    response = get_log(world, job, download="1")
    assert response["Content-Disposition"] == f'attachment; filename="job-{job.pk}-run-1-worker-0.log"'


def test_follow_streams_the_log_and_ends_with_the_pod(world, cluster, stored):
    job = submit(world, runtime_s=None)
    tick(cluster)
    tick(cluster, seconds=60)
    stored(cluster[0])
    response = get_log(world, job, follow="true")
    assert response.streaming and response["Content-Type"] == "text/plain; charset=utf-8"
    chunks = iter(response.streaming_content)
    so_far = cluster[0].pod_logs(job.runs.get().pod)
    first = [next(chunks).decode() for _ in so_far.splitlines()]
    assert "".join(first) == so_far
    cluster[1].advance(40)
    preempt(job, cluster[0], cluster[1].now())  # the pod ends: the follower's next poll sees it and stops
    stored(cluster[0])
    rest = "".join(chunk.decode() for chunk in chunks)
    assert "".join(first) + rest == archived(job) and rest.endswith("(terminated by SIGTERM)\n")


def test_a_log_that_cannot_be_read_never_stops_the_loop(world, cluster, monkeypatch, caplog):
    job = submit(world, runtime_s=None)
    tick(cluster)

    def unavailable(*args, **kwargs):
        raise BackendUnavailable("the API server did not answer")

    monkeypatch.setattr(cluster[0], "pod_logs", unavailable)
    with caplog.at_level(logging.WARNING, logger="scheduler.logs"):
        preempt(job, cluster[0], cluster[1].now())
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.PENDING and not cluster[0].pods()
    assert "not archived: it could not be read" in caplog.text
    assert not storages["logs"].exists(logs.archive_path(job.pk, 1, 0))


def test_retention_deletes_old_archives_only(world):
    storage = storages["logs"]
    for path in ("jobs/1/run-1/worker-0.log", "jobs/1/run-2/worker-0.log", "jobs/2/run-1/worker-0.log"):
        storage.save(path, ContentFile(b"line\n"))
    old = (timezone.now() - timedelta(days=31)).timestamp()
    for path in ("jobs/1/run-1/worker-0.log", "jobs/2/run-1/worker-0.log"):
        os.utime(storage.path(path), (old, old))
    assert logs.logs_expire(now=timezone.now(), days=30) == 2
    assert storage.exists("jobs/1/run-2/worker-0.log")
    assert not storage.exists("jobs/1/run-1") and not storage.exists("jobs/2")  # emptied folders go too
    assert logs.logs_expire(now=timezone.now(), days=30) == 0


# --- the real control plane: kwok serves the pod's log through the API server ------------------------------


@pytest.fixture
def kube(world, settings, tmp_path):
    """The world's inventory as kwok nodes, their training logs written; the live loops and the log reads on the
    control plane as Tidal's ServiceAccount; and a tick that waits for the cluster first."""
    with tidal_on_kwok(settings, tmp_path, node_views(), namespace=NS, prefix="test-k8s-logs") as (cluster, namespace):
        redis = Redis.from_url(settings.REDIS_URL)
        yield cluster, lambda: (cluster.settle(), live.run_live_tick(redis=redis, namespace=namespace,
                                                                     profile=get_profile("tidal")))


def until(step, done, ticks: int = 100, pause: float = 0.1) -> None:
    for _ in range(ticks):
        step()
        if done():
            return
        time.sleep(pause)
    raise AssertionError("did not converge")


def started(world, job, schedule) -> str:
    """Admit `job` and wait until its container wrote its first line: its pod's name."""
    schedule()
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.RUNNING
    until(lambda: None, lambda: get_log(world, job)["X-Tidal-Log-Source"] == "live")
    return job.runs.get().pod


@pytest.mark.django_db(transaction=True)
def test_on_kubernetes_a_running_log_reads_live_and_a_finished_one_from_the_archive(world, kube):
    cluster, schedule = kube
    job = submit(world, runtime_s=3)
    started(world, job, schedule)
    response = get_log(world, job)
    assert response["X-Tidal-Log-Source"] == "live" and "torchrun --nnodes=1" in text_of(response)
    assert len(text_of(get_log(world, job, tail=1)).splitlines()) == 1
    until(schedule, lambda: TrainingJob.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    assert "torchrun --nnodes=1" in archived(job) and archived(job).endswith("exiting with code 0\n")
    until(schedule, lambda: not cluster.pods())  # the terminal pod is cleaned up: the archive is left
    response = get_log(world, job)
    assert response["X-Tidal-Log-Source"] == "archive" and text_of(response) == archived(job)


@pytest.mark.django_db(transaction=True)
def test_on_kubernetes_a_preempted_pods_log_is_archived_and_read_from_the_archive(world, kube):
    """kwok removes an evicted pod at once: its archive is the log read right before the eviction."""
    cluster, schedule = kube
    job = submit(world, runtime_s=None)
    pod = started(world, job, schedule)
    before = live_backend.kubernetes_backend()[0].pod_logs(pod)
    preempt(job, live_backend.kubernetes_backend()[0], time.time())
    assert archived(job).startswith(before) and "torchrun --nnodes=1" in before
    until(lambda: None, lambda: not cluster.pods())
    response = get_log(world, job, run=1)
    assert response["X-Tidal-Log-Source"] == "archive" and text_of(response) == archived(job)
    assert get_log(world, job, role="outsider").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_on_kubernetes_follow_streams_lines_until_the_pod_ends(world, kube):
    _, schedule = kube
    job = submit(world, runtime_s=4)
    started(world, job, schedule)
    response = get_log(world, job, follow="1")
    lines = [chunk.decode() for chunk in response.streaming_content]  # kwok keeps the stream open: the backend
    # ends it once the pod ended
    assert lines[0].split(" ", 1)[1].startswith("torchrun") and lines[-1].endswith("exiting with code 0\n")
    assert all(line.endswith("\n") for line in lines)


@pytest.mark.django_db(transaction=True)
def test_the_api_server_serves_tail_and_since_and_refuses_a_pod_it_does_not_have(world, kube):
    cluster, schedule = kube
    job = submit(world, runtime_s=2)
    pod = started(world, job, schedule)
    until(lambda: None, lambda: (cluster.pod(pod) or {}).get("status", {}).get("phase") == "Succeeded")
    backend = live_backend.kubernetes_backend()[0]
    whole = backend.pod_logs(pod)  # the container has exited: its log is all written
    assert "torchrun --nnodes=1" in whole and whole.endswith("exiting with code 0\n")
    assert backend.pod_logs(pod, tail=2).splitlines() == whole.splitlines()[-2:]
    assert backend.pod_logs(pod, since=3600) == whole
    ended_at = timestamp(whole.splitlines()[-1].split(" ", 1)[0])
    until(lambda: None, lambda: time.time() - ended_at > 2)
    assert backend.pod_logs(pod, since=1) == ""  # nothing written in the last second
    with pytest.raises(BackendError, match="404"):
        backend.pod_logs("job-0-1")


@pytest.mark.django_db(transaction=True)
def test_on_kubernetes_tidal_logs_reads_live_then_the_archive(world, kube, live_server, tmp_path, monkeypatch):
    """`tidal logs` (the command line, in a subprocess) on the Kubernetes backend: the pod's log while it runs, `-f`
    until the pod ends, the archive once the run ended and its pod is gone."""
    cluster, schedule = kube
    monkeypatch.setattr(SignInThrottle, "rate", "1000/min", raising=False)
    tidal = Tidal(live_server.url, tmp_path)
    job = submit(world, runtime_s=3)
    started(world, job, schedule)
    assert tidal.login().returncode == 0
    before = text_of(get_log(world, job)).splitlines()
    live = tidal("logs", str(job.pk), "--tail", "2")
    assert live.returncode == 0, live.stderr
    # the pod writes on while the command runs: its lines are the last 2 of the log at some moment in between
    lines, after = live.stdout.splitlines(), text_of(get_log(world, job)).splitlines()
    last = after.index(lines[-1])
    assert last >= len(before) - 1 and lines == after[max(0, last - 1):last + 1]
    followed = tidal("logs", str(job.pk), "-f")  # returns once the pod ended
    assert followed.returncode == 0 and followed.stdout.endswith("exiting with code 0\n"), followed.stderr
    until(schedule, lambda: TrainingJob.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    until(schedule, lambda: not cluster.pods())
    ended = tidal("logs", str(job.pk))
    assert ended.returncode == 0 and ended.stdout == archived(job) and "exiting with code 0" in ended.stdout
