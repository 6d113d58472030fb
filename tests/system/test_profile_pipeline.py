"""End to end on the real services: known metrics in Prometheus -> publisher -> Kafka -> Flink -> Kafka ->
profile sink -> exact rows in PostgreSQL, with an out-of-order and a late sample, and every stage restarted
part-way (publisher, Flink job, sink) without losing or duplicating anything.

The scenario, at exact 5-s steps k = 0..47 (four minutes from T, a minute boundary 15 min ago):
  train pod (job J, run 1, 2 GPUs): GPU0 util 20/30/40/50 % (k mod 4), GPU1 60 % -> 0.475 mean, 0.55 peak
      per minute; FB used GPU0 1000*(m+1) MiB of 16000, GPU1 8000 of 16000 -> (1000(m+1)+8000)/32000 in
      minute m; CPU counter at 2 cores/s until k=23, then 3 (irate: the slope into each step) of 4
      requested; working set 3 GiB of 8 GiB.
  serve pod (service S): GPU 30 %; CPU 1 core/s of 2; istio 10 req/s answered 200 and 0.5 req/s 500;
      60 % of requests in (25, 50] ms, the rest in (50, 100]; mean 50 ms (by _sum) -> p99 98.75 ms.
Injected straight into the samples topic: a second pod of J at k=30 (85 s behind the newest sample: on
time), a sample of J at k=2 once minute 0 has closed (late: dropped and counted), and a far-ahead sample
of another job that closes the remaining minutes.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest
import redis
from django.core.management import call_command

from profiling.models import JobMinute, LateSample, RunSummary, ServiceMinute
from profiling.services import run_summary_compute
from profiling.sink import ProfileSink
from scheduler.models import JobRun
from streaming.publisher import cursor_key
from streaming.records import JobMinute as JobMinuteRecord
from streaming.records import PodSample
from tests.integration import promwrite
from tests.integration.services import KAFKA_BOOTSTRAP, PROMETHEUS_URL, REDIS_URL
from tests.system.flinkjob import ProfileJob, Reader, produce

pytestmark = [pytest.mark.flink, pytest.mark.django_db(transaction=True)]

STEP, STEPS = 5_000, 48
GiB = 1 << 30


def _series(T: int, namespace: str, train: str, serve: str, job: int, service: str) -> list[promwrite.Series]:
    ks = range(-1, STEPS)  # counters start a step early, so irate has a value at k = 0

    def add(name: str, labels: dict, value, first: int = 0) -> promwrite.Series:
        samples = [(T + k * STEP, float(value(k))) for k in ks if k >= first]
        samples.append((T + STEPS * STEP, promwrite.STALE))  # the pod ended
        return {"__name__": name, "namespace": namespace, **labels}, samples

    def gauge(name: str, labels: dict, value) -> promwrite.Series:
        return add(name, labels, value, first=0)

    def counter(name: str, labels: dict, value) -> promwrite.Series:
        return add(name, labels, value, first=-1)

    def requests(pod: str, cpu: float, mem: float, gpus: float) -> list[promwrite.Series]:
        return [gauge("kube_pod_container_resource_requests",
                      {"pod": pod, "container": "main", "resource": r, "unit": u}, lambda k, v=v: v)
                for r, u, v in (("cpu", "core", cpu), ("memory", "byte", mem), ("nvidia_com_gpu", "integer", gpus))]

    def gpu(pod: str, index: int, util, used) -> list[promwrite.Series]:
        labels = {"pod": pod, "container": "main", "gpu": str(index)}
        return [gauge("DCGM_FI_DEV_GPU_UTIL", labels, util), gauge("DCGM_FI_DEV_FB_USED", labels, used),
                gauge("DCGM_FI_DEV_FB_FREE", labels, lambda k: 16000 - used(k))]

    cpu = {"container": "main"}
    istio = {"pod": serve, "destination_workload": service, "reporter": "destination"}
    per_step = 52.5  # (10 + 0.5) requests/s x 5 s
    return [
        gauge("kube_pod_labels", {"pod": train, "label_tidal_io_job": str(job), "label_tidal_io_run": "1"},
              lambda k: 1),
        *gpu(train, 0, lambda k: 20 + 10 * (k % 4), lambda k: 1000 * (1 + k // 12)),
        *gpu(train, 1, lambda k: 60, lambda k: 8000),
        counter("container_cpu_usage_seconds_total", {"pod": train, **cpu},
                lambda k: 10 * (k + 1) if k <= 23 else 240 + 15 * (k - 23)),
        gauge("container_memory_working_set_bytes", {"pod": train, **cpu}, lambda k: 3 * GiB),
        *requests(train, 4, 8 * GiB, 2),
        gauge("kube_pod_labels", {"pod": serve, "label_tidal_io_service": service}, lambda k: 1),
        *gpu(serve, 0, lambda k: 30, lambda k: 4000),
        counter("container_cpu_usage_seconds_total", {"pod": serve, **cpu}, lambda k: 5 * (k + 1)),
        gauge("container_memory_working_set_bytes", {"pod": serve, **cpu}, lambda k: GiB),
        *requests(serve, 2, 4 * GiB, 1),
        counter("istio_requests_total", {**istio, "response_code": "200"}, lambda k: 50 * (k + 1)),
        counter("istio_requests_total", {**istio, "response_code": "500"}, lambda k: 2.5 * (k + 1)),
        counter("istio_request_duration_milliseconds_count", istio, lambda k: per_step * (k + 1)),
        counter("istio_request_duration_milliseconds_sum", istio, lambda k: 50 * per_step * (k + 1)),
        *[counter("istio_request_duration_milliseconds_bucket", {**istio, "le": le}, lambda k, f=f: f * (k + 1))
          for le, f in (("25", 0.0), ("50", 0.6 * per_step), ("100", per_step), ("+Inf", per_step))],
    ]


def _sink(prefix: str, **options) -> None:
    from streaming.topics import Topics

    ProfileSink(bootstrap=KAFKA_BOOTSTRAP, topics=Topics(prefix), **options).run(max_idle_s=3)


def _minutes(run: JobRun) -> dict[int, JobMinute]:
    return {int(m.minute.timestamp() * 1000): m for m in JobMinute.objects.filter(run=run)}


def test_known_metrics_become_exact_profiles_through_restarts_of_every_stage(world, settings, tmp_path):
    T = (int(time.time()) // 60 - 15) * 60_000
    prefix = f"it-e2e-{uuid.uuid4().hex[:8]}"
    settings.TIDAL_TOPIC_PREFIX, settings.KAFKA_BOOTSTRAP = prefix, KAFKA_BOOTSTRAP
    settings.PROMETHEUS_URL, settings.REDIS_URL = PROMETHEUS_URL, REDIS_URL
    settings.TIDAL_METRICS_STEP_S, settings.TIDAL_PUBLISHER_DELAY_S = STEP // 1000, 10
    job = world.submit()
    run = JobRun.objects.create(job=job, attempt=1, pod=f"train-{prefix}", started_at=_at(T - 30_000))
    service = world.service(name=f"svc-{prefix}")
    train, serve = f"train-{prefix}", f"serve-{prefix}"

    # Its own namespace: the publisher reads only that, not other tests' pods of the same job id.
    settings.TIDAL_PUBLISHER_SELECTOR = f'namespace="{prefix}"'
    promwrite.write(PROMETHEUS_URL, _series(T, prefix, train, serve, job.pk, service.name))
    promwrite.wait_queryable(PROMETHEUS_URL, f'count(DCGM_FI_DEV_GPU_UTIL{{pod=~".*{prefix}"}})',
                             (T + (STEPS - 1) * STEP) / 1000, 3)
    redis.Redis.from_url(REDIS_URL).set(cursor_key(prefix), T - STEP)

    flink = ProfileJob.create(prefix, tmp_path)
    topics = flink.topics
    reader = Reader(topics.job_minutes)
    try:
        flink.start()
        call_command("publish_metrics", "--until", str((T + 19 * STEP) / 1000))  # publisher stops at k=19
        flink.checkpoint_after(time.time() + 2)
        flink.stop()  # ... the Flink job restarts from its checkpoint ...
        flink.start()
        call_command("publish_metrics", "--once")  # ... and a new publisher resumes at k=20
        reader.until(lambda seen: any(r["job"] == job.pk for r in seen[topics.job_minutes]))  # minute 0 closed
        _sink(prefix)  # the sink's first life: minute 0
        assert set(_minutes(run)) == {T}

        produce(topics.pod_samples, [
            _sample(T + 30 * STEP, "train-2", job.pk, gpu_util=0.9, cpu_cores=1.0, req_cpu_cores=4.0),  # on time
            _sample(T + 2 * STEP, "train-3", job.pk, gpu_util=1.0),  # minute 0 closed 50+ s ago: late
            _sample(T + 120 * STEP, "elsewhere", job.pk + 10_000),  # moves the watermark past minute 3
        ])
        reader.until(lambda seen: len([r for r in seen[topics.job_minutes] if r["job"] == job.pk]) == 4)
        _sink(prefix, max_records=2)  # its second life, in small batches: minutes 1-3, services, late
        replayed = [r for r in reader.seen[topics.job_minutes] if r["job"] == job.pk]
    finally:
        flink.stop()
        reader.close()

    before = {m: (row.samples, row.gpu_util_mean, row.written_at) for m, row in _minutes(run).items()}
    produce(topics.job_minutes, [], raw=[_encode(r) for r in replayed])  # Flink re-emits all four minutes
    _sink(prefix)
    assert {m: (row.samples, row.gpu_util_mean, row.written_at) for m, row in _minutes(run).items()} == before

    minutes = _minutes(run)
    assert sorted(minutes) == [T + m * 60_000 for m in range(4)]
    for m, row in enumerate(minutes[T + m * 60_000] for m in range(4)):
        extra = m == 2  # train-2's on-time sample
        assert row.samples == 12 + extra
        gpu = [0.475] * 12 + [0.9] * extra
        cpu = [2.0 if m < 2 else 3.0] * 12 + [1.0] * extra
        assert row.gpu_util_mean == pytest.approx(sum(gpu) / len(gpu), rel=1e-12)
        assert row.gpu_util_peak == pytest.approx(max(0.55, *gpu), rel=1e-12)
        assert row.gpu_mem_util_mean == row.gpu_mem_util_peak == pytest.approx((1000 * (m + 1) + 8000) / 32000)
        assert row.cpu_cores_mean == pytest.approx(sum(cpu) / len(cpu), rel=1e-12)
        assert row.cpu_util_peak == pytest.approx((2.0 if m < 2 else 3.0) / 4, rel=1e-12)
        assert row.mem_util_mean == pytest.approx(3 / 8, rel=1e-12) and row.req_gpus == 2

    loads = list(ServiceMinute.objects.filter(service=service).order_by("minute"))
    assert [int(s.minute.timestamp() * 1000) for s in loads] == [T + m * 60_000 for m in range(4)]
    for load in loads:
        assert (load.samples, load.replicas) == (12, 1)
        assert (load.gpu_util_mean, load.cpu_util_mean) == (pytest.approx(0.3), pytest.approx(0.5))
        assert (load.qps, load.errors_per_s) == (pytest.approx(10.5), pytest.approx(0.5))
        assert load.latency_mean_ms == pytest.approx(50.0)
        assert load.latency_p99_ms == pytest.approx(50 + 50 * (0.99 * 10.5 - 6.3) / (10.5 - 6.3))  # 98.75

    (late,) = LateSample.objects.filter(job_id=job.pk)
    assert (late.pod, int(late.ts.timestamp() * 1000)) == ("train-3", T + 2 * STEP)

    run.ended_at, run.outcome = _at(T + 240_000), JobRun.Outcome.SUCCEEDED
    run.save()
    run_summary_compute(run=run)
    summary = RunSummary.objects.get(run=run)
    assert (summary.samples, summary.minutes) == (49, 4)
    assert summary.gpu_util_mean == pytest.approx((0.475 * 48 + 0.9) / 49, rel=1e-12)
    assert summary.gpu_util_peak == pytest.approx(0.9)
    assert summary.cpu_cores_mean == pytest.approx((2 * 24 + 3 * 24 + 1) / 49, rel=1e-12)
    assert summary.cpu_cores_peak == pytest.approx(3.0)
    assert summary.run_s == pytest.approx(270.0)


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _sample(ts: int, pod: str, job: int, **values) -> PodSample:
    return PodSample(ts=ts, namespace="tidal-it", pod=pod, job=job, run=1, **values)


def _encode(row: dict) -> bytes:
    from streaming.records import encode

    return encode(JobMinuteRecord(**row))
