"""The profile job on a real PyFlink mini-cluster and the real broker: exact per-minute values from known
samples, with duplicates, reordering within the 2-minute bound, a late sample, junk, and a restart."""

from __future__ import annotations

import time
import uuid

import pytest

from streaming.records import PodSample
from tests.system.flinkjob import ProfileJob, Reader, produce

pytestmark = pytest.mark.flink

T = (int(time.time()) // 60 - 30) * 60_000  # a minute boundary, in epoch ms
STEP = 5_000


def a(k: int, **values) -> PodSample:
    """Pod a of job 1 run 1 at step k: GPU k*5%, FB k*5% used, CPU 1+0.1k of 4 cores, 1 of 2 GB."""
    defaults = dict(gpu_util=0.05 * k, gpu_mem_used_mib=50.0 * k, gpu_mem_free_mib=1000 - 50.0 * k,
                    cpu_cores=1 + 0.1 * k, mem_bytes=1e9)
    return _training("a", k, **{**defaults, **values})


def b(k: int, **values) -> PodSample:
    defaults = dict(gpu_util=0.9, gpu_mem_used_mib=500.0, gpu_mem_free_mib=500.0, cpu_cores=2.0, mem_bytes=1.5e9)
    return _training("b", k, **{**defaults, **values})


def _training(pod: str, k: int, job: int = 1, **values) -> PodSample:
    return PodSample(ts=T + k * STEP, namespace="tidal-training", pod=pod, job=job, run=1, req_gpus=1.0,
                     req_cpu_cores=4.0, req_mem_bytes=2e9, **values)


def replica(pod: str, k: int, qps: float, p99: float, gpu: float, **values) -> PodSample:
    return PodSample(ts=T + k * STEP, namespace="tidal-inference", pod=pod, service="svc", gpu_util=gpu,
                     cpu_cores=1.0, req_cpu_cores=2.0, qps=qps, errors_per_s=qps / 100,
                     latency_mean_ms=100.0 if pod == "s1" else 200.0, latency_p99_ms=p99, **values)


def assert_values(row: dict, expected: dict) -> None:
    assert {k: row[k] for k in expected} == pytest.approx(expected, rel=1e-12)


def _window(rows: list[dict], minute: int) -> list[dict]:
    return [r for r in rows if r["window_start"] == T + minute * 60_000]


def test_minutes_are_exact_through_reordering_duplicates_late_samples_and_a_restart(tmp_path):
    job = ProfileJob.create(f"it-flink-{uuid.uuid4().hex[:8]}", tmp_path)
    topics = job.topics
    reader = Reader(topics.job_minutes, topics.service_minutes, topics.late_samples)
    try:
        job.start()
        # Minute 0 for pod a, minute 1 for pod a, THEN pod b's minute-0 samples (reordered by up to 85 s),
        # a duplicate delivery of two of a's samples, the service's two replicas, and junk. Pod b shares its GPU:
        # its SM active is estimated, and it carries the publisher's per-step peaks.
        first = ([a(k) for k in range(12)] + [a(k, gpu_util=0.2, cpu_cores=1.0) for k in range(12, 24)]
                 + [b(k, gpu_util_peak=0.95, sm_active=0.3, sm_active_peak=0.5, estimated=1) for k in range(6, 12)]
                 + [a(3), a(4)]
                 + [replica("s1", k, 10.0, 300.0, 0.4) for k in range(12)]
                 + [replica("s2", k, 30.0, 900.0 if k == 5 else 500.0, 0.6, estimated=1) for k in range(12)]
                 + [PodSample(ts=T, namespace="x", pod="orphan", gpu_util=1.0)])  # works for nobody: filtered
        produce(topics.pod_samples, first, raw=[b"not a sample", b'{"pod": "old-json", "job": 1, "run": 1}',
                                               b"no-ts,tidal-training,a,1,1"])  # junk: no ts, all dropped
        sent = time.time()

        # Restart: cancel after a checkpoint holds all of the above, start again from that checkpoint.
        job.checkpoint_after(sent + 2)
        job.stop()
        job.start()

        produce(topics.pod_samples, [a(37, gpu_util=0.3)])  # watermark T+65 s: minute 0 closes
        seen = reader.until(lambda s: _window(s[topics.job_minutes], 0) and _window(s[topics.service_minutes], 0))
        # Now a sample of minute 0 is > 2 min late (dropped, counted); one of minute 1 is still on time.
        produce(topics.pod_samples, [_training("c", 4, gpu_util=1.0), b(20, gpu_util=0.6)])
        produce(topics.pod_samples, [_training("z", 120, job=2)])  # watermark T+480 s: minutes 1 and 3 close
        seen = reader.until(lambda s: _window(s[topics.job_minutes], 3) and s[topics.late_samples])
    finally:
        job.stop()
        reader.close()

    jobs = seen[topics.job_minutes]
    assert sorted((r["job"], r["window_start"]) for r in jobs) == [(1, T), (1, T + 60_000), (1, T + 180_000)]
    minute0 = _window(jobs, 0)[0]
    # Pod a: 12 steps k=0..11 (each once despite the duplicates); pod b: 6 steps, 0.9 GPU, 0.5 FB, 2 cores.
    assert minute0["samples"] == 18
    assert_values(minute0, {
        "run": 1, "window_end": T + 60_000,
        "gpu_util_mean": (0.05 * 66 + 0.9 * 6) / 18, "gpu_util_peak": 0.95,  # 8.7 / 18; b's step peak
        "sm_active_mean": 0.3, "sm_active_peak": 0.5, "estimated": 1,
        "gpu_mem_util_mean": (0.05 * 66 + 0.5 * 6) / 18, "gpu_mem_util_peak": 0.55,  # 6.3 / 18
        "cpu_util_mean": ((12 + 6.6) / 4 + 0.5 * 6) / 18, "cpu_util_peak": 2.1 / 4,  # 7.65 / 18
        "mem_util_mean": (0.5 * 12 + 0.75 * 6) / 18, "mem_util_peak": 0.75,
        "cpu_cores_mean": (18.6 + 12) / 18, "cpu_cores_peak": 2.1,
        "req_gpus": 1.0, "req_cpu_cores": 4.0, "req_mem_bytes": 2e9,
    })
    minute1 = _window(jobs, 1)[0]
    assert (minute1["samples"], minute1["gpu_util_peak"]) == (13, 0.6)  # a's 12 steps + b's on-time one
    assert minute1.get("estimated") is None
    assert minute1["gpu_util_mean"] == pytest.approx((12 * 0.2 + 0.6) / 13, rel=1e-12)
    assert (_window(jobs, 3)[0]["samples"], _window(jobs, 3)[0]["gpu_util_mean"]) == (1, 0.3)

    (service,) = seen[topics.service_minutes]
    assert service["service"] == "svc"
    assert_values(service, {
        "window_start": T, "samples": 24, "replicas": 2,
        "gpu_util_mean": 0.5, "cpu_util_mean": 0.5,
        "qps": 40.0, "errors_per_s": 0.4,  # summed over replicas, averaged over 12 steps
        "latency_mean_ms": (10 * 100 + 30 * 200) / 40, "latency_p99_ms": 900.0, "estimated": 1,
    })

    (late,) = seen[topics.late_samples]
    assert {k: late[k] for k in ("ts", "pod", "job", "run", "service")} == {
        "ts": T + 4 * STEP, "pod": "c", "job": 1, "run": 1, "service": None}
