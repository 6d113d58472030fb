"""`bench streaming`: synthetic pod samples through Kafka -> Flink -> Kafka -> profile sink -> database.

The samples are produced first (a backlog on fresh topics), then the Flink job and the sink start and
drain it: samples/s = samples / (last profile row written - job running), i.e. the pipeline's sustained
processing rate with the producer's speed taken out (librdkafka sends fast, but encoding the samples in
Python is slower than the pipeline being measured). Lag = profile row written - window closed in Flink
(the row's `emitted_at`), per row. Samples come in step order, every other step swapped, so windows see
reordering.
"""

from __future__ import annotations

import os
import random
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from streaming.flink.job import Runtime, submit
from streaming.flink.sql import Spec
from streaming.records import PodSample, encode
from streaming.topics import Topics, ensure_topics

STEP_MS = 5_000
WINDOW_MS = 60_000


@dataclass(frozen=True, slots=True)
class Setup:
    samples: int
    pods: int
    prefix: str

    @property
    def steps(self) -> int:
        return max(self.samples // self.pods, 1)

    @property
    def minutes(self) -> int:
        """Windows every pod fills completely (the backlog is minute-aligned)."""
        return self.steps * STEP_MS // WINDOW_MS


def bench_streaming(*, samples: int, pods: int, progress: Callable[[str, int, int], None],
                    timeout_s: float = 600) -> dict[str, float | int]:
    setup = Setup(samples=samples, pods=pods, prefix=f"bench-{uuid.uuid4().hex[:8]}")
    topics = Topics(setup.prefix)
    ensure_topics(settings.KAFKA_BOOTSTRAP, topics)
    runs = _fixtures(setup)
    sink = None
    job = None
    try:
        _produce(setup, topics, runs, progress)
        sink = start_sink(setup.prefix)
        runtime = Runtime(checkpoint_dir=Path(settings.RUN_DIR) / "flink" / setup.prefix / "checkpoints")
        job = submit(Spec(bootstrap=settings.KAFKA_BOOTSTRAP, topics=topics, group_id=f"{setup.prefix}.flink"),
                     runtime)
        started = _running(job)
        cpu_before = children_cpu_s()
        written = _wait_rows(setup, runs, progress, timeout_s, sink)
        return {**_figures(setup, started, written), **_cpu(setup, children_cpu_s() - cpu_before)}
    finally:
        if job is not None:
            job.get_job_client().cancel().result()
        if sink is not None:
            sink.terminate()
            sink.wait(timeout=30)
        _cleanup(setup, runs)


def _fixtures(setup: Setup) -> list[int]:
    """A department with one running job per pod; the sink keeps only minutes of runs it knows."""
    from core.models import Department
    from scheduler.models import Framework, JobRun, TrainingJob

    user, _ = get_user_model().objects.get_or_create(username="bench")
    department = Department.objects.create(name=setup.prefix)
    framework, _ = Framework.objects.get_or_create(name="bench", version="0")
    now = timezone.now()
    jobs = TrainingJob.objects.bulk_create(
        TrainingJob(name=f"bench-{i}", task_key=f"{setup.prefix}-{i}", department=department, submitter=user,
                    image="bench", command="bench", framework=framework, cpu_milli=2000, memory_mib=4096,
                    status="running", started_at=now)
        for i in range(setup.pods))
    JobRun.objects.bulk_create(JobRun(job=j, attempt=1, pod=f"{setup.prefix}-{j.pk}", started_at=now) for j in jobs)
    return [j.pk for j in jobs]


def _produce(setup: Setup, topics: Topics, jobs: list[int], progress: Callable[[str, int, int], None]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": settings.KAFKA_BOOTSTRAP, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    first = (int(time.time() * 1000) // WINDOW_MS - setup.minutes - 10) * WINDOW_MS
    order = list(range(setup.steps))
    for k in range(0, len(order) - 1, 2):  # swap neighbouring steps: reordering within the 2-min bound
        order[k], order[k + 1] = order[k + 1], order[k]
    rng = random.Random(7)
    for done, step in enumerate(order):
        ts = first + step * STEP_MS
        for job in jobs:
            sample = _sample(ts, f"{setup.prefix}-{job}", job, round(rng.random(), 4))
            _send(producer, topics.pod_samples, encode(sample), key=sample.pod.encode())
        producer.poll(0)  # serve delivery reports
        progress("produce", done + 1, setup.steps)
    # One sample far ahead on every partition moves the watermark (their minimum) past every backlog window.
    flush = encode(PodSample(ts=first + (setup.steps + 60) * STEP_MS, namespace="bench", pod=f"{setup.prefix}-end",
                             job=jobs[0], run=1))
    for partition in producer.list_topics(topics.pod_samples).topics[topics.pod_samples].partitions:
        _send(producer, topics.pod_samples, flush, partition=partition)
    if producer.flush(60) > 0:
        raise TimeoutError(f"{topics.pod_samples}: samples not acked within 60 s")


def _send(producer, topic: str, value: bytes, **where) -> None:
    """Produce, waiting for room while librdkafka's local queue is full."""
    while True:
        try:
            return producer.produce(topic, value, **where)
        except BufferError:
            producer.poll(0.05)


def _sample(ts: int, pod: str, job: int, util: float) -> PodSample:
    """What the publisher would send for a 1-GPU, 2-core, 4 GiB training pod working at `util` (given to 4
    decimals, as the old hand-written JSON had it: DCGM reports whole percents; 17-digit floats parse slower)."""
    return PodSample(ts=ts, namespace="bench", pod=pod, job=job, run=1, gpu_util=util,
                     gpu_mem_used_mib=util * 16000, gpu_mem_free_mib=16000 - util * 16000, cpu_cores=2 * util,
                     mem_bytes=util * 4e9, req_gpus=1.0, req_cpu_cores=2.0, req_mem_bytes=4294967296.0)


def _running(job) -> float:
    client = job.get_job_client()
    while client.get_job_status().result().name != "RUNNING":
        time.sleep(0.05)
    return time.time()


def start_sink(prefix: str) -> subprocess.Popen:
    """The profile sink on the bench's topics, as in production (DEBUG off: no query log), its output in
    RUN_DIR/logs/bench-sink.log. DEBUG off needs a secret key; the sink signs nothing, so a fresh clone without
    DJANGO_SECRET_KEY gets a throwaway one rather than a sink that dies at import."""
    env = {**os.environ, "DJANGO_DEBUG": "0",
           "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50)}
    log = sink_log()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "manage.py", "profile_sink", "--prefix", prefix],
                                cwd=settings.BASE_DIR, stdout=out, stderr=subprocess.STDOUT, env=env)


def sink_log() -> Path:
    return Path(settings.RUN_DIR) / "logs" / "bench-sink.log"


def _wait_rows(setup: Setup, jobs: list[int], progress: Callable[[str, int, int], None],
               timeout_s: float, sink: subprocess.Popen) -> list[tuple[float, float]]:
    from profiling.models import JobMinute

    expected = setup.minutes * setup.pods
    rows = JobMinute.objects.filter(run__job_id__in=jobs)
    deadline = time.monotonic() + timeout_s
    while (count := rows.count()) < expected:
        progress("profile rows", count, expected)
        check_alive(sink)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} of {expected} profile rows after {timeout_s:.0f} s")
        time.sleep(0.2)
    progress("profile rows", expected, expected)
    return [(w.timestamp(), e.timestamp()) for w, e in rows.values_list("written_at", "emitted_at")]


def check_alive(sink: subprocess.Popen) -> None:
    """A sink that exited writes no more rows: say why now rather than after the whole timeout."""
    if sink.poll() is not None:
        tail = sink_log().read_text(errors="replace")[-2000:] if sink_log().exists() else ""
        raise RuntimeError(f"the profile sink exited ({sink.returncode}); {sink_log()} ends:\n{tail}")


def children_cpu_s(command: str = "java") -> float:
    """CPU seconds (user + system) so far of this process's running children named `command` (Linux /proc); by
    default PyFlink's mini-cluster JVM, where the job runs. Wall figures move with whatever else the two cores
    run, CPU per sample much less."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited meanwhile
            continue
        name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        if name == command and int(rest[1]) == os.getpid():  # rest: state, ppid, ..., utime [11], stime [12]
            total += (int(rest[11]) + int(rest[12])) / tick
    return total


def _cpu(setup: Setup, flink_cpu_s: float) -> dict[str, float]:
    """The JVM's CPU from job running to the last profile row written (Flink's, plus the idle JVM's after it)."""
    return {"flink_cpu_s": round(flink_cpu_s, 2),
            "flink_cpu_us_per_sample": round(flink_cpu_s / (setup.steps * setup.pods) * 1e6, 1)}


def _figures(setup: Setup, started: float, written: list[tuple[float, float]]) -> dict[str, float | int]:
    lags = sorted(w - e for w, e in written)
    elapsed = max(w for w, _ in written) - started
    return {
        "samples": setup.steps * setup.pods, "pods": setup.pods, "profile_rows": len(written),
        "elapsed_s": round(elapsed, 3), "samples_per_s": round(setup.steps * setup.pods / elapsed, 1),
        "flink_s": round(max(e for _, e in written) - started, 3),  # job running -> its last window closed
        "lag_p50_s": round(statistics.median(lags), 3),
        "lag_p99_s": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 3),
    }


def _cleanup(setup: Setup, jobs: list[int]) -> None:
    from kafka import KafkaAdminClient

    from core.models import Department
    from scheduler.models import TrainingJob

    TrainingJob.objects.filter(pk__in=jobs).delete()
    Department.objects.filter(name=setup.prefix).delete()
    admin = KafkaAdminClient(bootstrap_servers=settings.KAFKA_BOOTSTRAP)
    try:
        admin.delete_topics(list(Topics(setup.prefix).all()))
    finally:
        admin.close()
