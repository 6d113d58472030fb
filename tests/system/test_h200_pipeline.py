"""Real GPU metrics through the real pipeline: the H200 solo run (../shared/traces/h200-workloads) backfilled into
Prometheus with promtool -> publisher -> Kafka -> Flink -> profile sink -> JobMinute rows, each pod's per-minute
mean and peak of GPU util, SM active, SM occupancy, tensor and DRAM activity and GPU memory equal to the same
figures computed straight from the trace's CSV (tests/system/h200.py says how)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import pytest
import redis
from django.core.management import call_command

from profiling.models import JobMinute
from profiling.sink import ProfileSink
from scheduler.models import JobRun
from streaming.publisher import cursor_key
from streaming.records import PodSample
from tests.integration import promwrite
from tests.integration.services import KAFKA_BOOTSTRAP, PROMETHEUS_URL, REDIS_URL
from tests.system import h200
from tests.system.flinkjob import ProfileJob, Reader, produce

pytestmark = [pytest.mark.flink, pytest.mark.django_db(transaction=True)]

RUN, STEP_S = "solo", 5


def test_h200_metrics_become_per_minute_profiles_equal_to_the_csv(world, settings, tmp_path):
    prefix = f"it-h200-{uuid.uuid4().hex[:8]}"
    settings.TIDAL_TOPIC_PREFIX, settings.KAFKA_BOOTSTRAP = prefix, KAFKA_BOOTSTRAP
    settings.PROMETHEUS_URL, settings.REDIS_URL = PROMETHEUS_URL, REDIS_URL
    settings.TIDAL_METRICS_STEP_S, settings.TIDAL_PUBLISHER_DELAY_S = STEP_S, 10
    first, last = h200.time_range(RUN)
    shift = (int(time.time()) - 4 * 3600 - int(first)) // 60 * 60  # whole minutes, ending > 3 h ago
    pods = h200.workload_pods(RUN)
    started = datetime.fromtimestamp(first + shift, UTC)
    runs = {pod: JobRun.objects.create(job=world.submit(), attempt=1, pod=pod, started_at=started) for pod in pods}
    jobs = {pod: run.job_id for pod, run in runs.items()}
    h200.backfill(PROMETHEUS_URL, h200.shifted_openmetrics(RUN, shift_s=shift, namespace=prefix, jobs=jobs), tmp_path)
    expected = h200.expected_minutes(RUN, pods=pods, shift_s=shift, step_s=STEP_S)
    end = last + shift + STEP_S  # the step holding the last sample
    promwrite.wait_queryable(PROMETHEUS_URL, f'count(count_over_time(kube_pod_labels{{namespace="{prefix}"}}[1h]))',
                             end, len(pods), timeout=150)  # blocks load at Prometheus' next reload (every minute)

    first_step_ms = int(first + shift) // STEP_S * STEP_S * 1000
    redis.Redis.from_url(REDIS_URL).set(cursor_key(prefix), first_step_ms - STEP_S * 1000)
    flink = ProfileJob.create(prefix, tmp_path)
    reader = Reader(flink.topics.job_minutes)
    try:
        flink.start()
        call_command("publish_metrics", "--until", str(end), "--selector", f'namespace="{prefix}"')
        produce(flink.topics.pod_samples, [PodSample(ts=int(end + 600) * 1000, namespace=prefix, pod="closer",
                                                     job=max(jobs.values()) + 10_000, run=1, gpu_util=0.0)])
        ours = set(jobs.values())
        reader.until(lambda seen: len([r for r in seen[flink.topics.job_minutes] if r["job"] in ours])
                     >= len(expected), timeout=120)
    finally:
        flink.stop()
        reader.close()
    ProfileSink(bootstrap=KAFKA_BOOTSTRAP, topics=flink.topics).run(max_idle_s=3)

    pod_of = {run.pk: pod for pod, run in runs.items()}
    got = {(pod_of[m.run_id], int(m.minute.timestamp() * 1000)): m
           for m in JobMinute.objects.filter(run__in=runs.values())}
    assert sorted(got) == sorted(expected)
    assert len({pod for pod, _ in got}) == len(pods) == 8
    for key, want in expected.items():
        row = got[key]
        assert row.samples == want.samples and not row.estimated, key
        for name, (mean, peak) in want.figures.items():
            assert getattr(row, f"{name}_mean") == pytest.approx(mean, rel=1e-9, abs=1e-12), (key, name)
            assert getattr(row, f"{name}_peak") == pytest.approx(peak, rel=1e-9, abs=1e-12), (key, name)
    # The trace's point, through the pipeline: GPU util reads a launch-bound job's SMs as far busier than they are.
    resnet = [m for (pod, _), m in got.items() if pod == "resnet50-bs32-0"]
    assert any(m.gpu_util_mean > 0.4 and m.sm_active_mean < 0.3 for m in resnet)
