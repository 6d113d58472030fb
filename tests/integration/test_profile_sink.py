"""The profile sink end to end against the real broker (Tansu) and database: records produced to unique-prefix
topics land as rows; a second run, a replay and a crash between writing and committing offsets change nothing
and lose nothing; SIGTERM stops the command gracefully."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from profiling.models import JobMinute, LateSample, ServiceMinute
from profiling.sink import ProfileSink
from streaming import records
from streaming.topics import Topics, ensure_topics
from tests.integration.profiles import job_minute, late_sample, service_minute, start_run
from tests.integration.services import KAFKA_BOOTSTRAP, ROOT

pytestmark = pytest.mark.django_db
IDLE_S = 3.0


class Crash(Exception):
    """Stands for the sink dying at a hook."""


@pytest.fixture
def topics():
    topics = Topics(prefix=f"tidal-it-{uuid.uuid4().hex[:10]}")
    ensure_topics(KAFKA_BOOTSTRAP, topics)
    yield topics
    admin = KafkaAdminClient(bootstrap_servers=KAFKA_BOOTSTRAP, client_id="tidal-it-admin")
    try:
        admin.delete_topics(list(topics.all()))
    finally:
        admin.close()


@pytest.fixture
def produce(topics):
    producer = KafkaProducer(bootstrap_servers=KAFKA_BOOTSTRAP, acks="all")

    def send(batch: list) -> None:
        topic_of = {records.JobMinute: topics.job_minutes, records.ServiceMinute: topics.service_minutes,
                    records.LateSample: topics.late_samples}
        for record in batch:
            if isinstance(record, tuple):  # (topic, raw bytes): a broken record
                producer.send(record[0], value=record[1])
            else:
                key = getattr(record, "job", None) or getattr(record, "service", None) or record.pod
                producer.send(topic_of[type(record)], key=str(key).encode(), value=records.encode(record))
        producer.flush(timeout=10)

    yield send
    producer.close()


@pytest.fixture
def workload(world):
    """A running job and a service, and records for them (5 job minutes, 3 service minutes, 2 late samples)."""
    job = world.submit()
    start_run(job)
    service = world.service()
    return ([job_minute(job.pk, 1, i, samples=10 + i) for i in range(5)]
            + [service_minute(service.name, i) for i in range(3)]
            + [late_sample(f"job-{job.pk}-1", i, job=job.pk, run=1) for i in range(2)])


def sink(topics: Topics, **kw) -> ProfileSink:
    return ProfileSink(bootstrap=KAFKA_BOOTSTRAP, topics=topics, **kw)


def rows() -> dict:
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in (JobMinute, ServiceMinute, LateSample)}


def test_records_land_once_and_a_second_run_or_a_replay_changes_nothing(topics, produce, workload):
    produce(workload + [(topics.job_minutes, b"not json"), job_minute(999_999, 1, 0)])
    stats = sink(topics).run(max_idle_s=IDLE_S)
    assert (stats.records, stats.undecodable, stats.job_minutes.skipped) == (12, 1, 1)
    assert (JobMinute.objects.count(), ServiceMinute.objects.count(), LateSample.objects.count()) == (5, 3, 2)
    assert sorted(JobMinute.objects.values_list("samples", flat=True)) == [10, 11, 12, 13, 14]
    written = rows()

    assert sink(topics).run(max_idle_s=IDLE_S).records == 0  # the offsets were committed
    produce(workload)  # Flink restarted and emitted the same records again
    replay = sink(topics).run(max_idle_s=IDLE_S)
    assert replay.records == 10 and replay.job_minutes.unchanged == 5 and replay.late_samples.unchanged == 2
    again = sink(topics, group=f"{topics.prefix}.other-group").run(max_idle_s=IDLE_S)  # everything from the start
    assert again.records == 22 and again.job_minutes.created == 0 and again.service_minutes.created == 0
    assert rows() == written


def test_crash_after_writing_before_committing_loses_nothing_and_duplicates_nothing(topics, produce, workload):
    produce(workload)

    def die(stage: str) -> None:
        if stage == "before-commit":
            raise Crash()

    crashed = sink(topics, hook=die)
    with pytest.raises(Crash):
        crashed.run(max_idle_s=IDLE_S)
    first_batch = crashed.stats.records
    assert first_batch > 0 and sum(len(v) for v in rows().values()) == first_batch  # written, not committed

    restarted = sink(topics).run(max_idle_s=IDLE_S)
    assert restarted.records == len(workload)  # the uncommitted batch is read again ...
    created = restarted.job_minutes.created + restarted.service_minutes.created + restarted.late_samples.created
    unchanged = (restarted.job_minutes.unchanged + restarted.service_minutes.unchanged
                 + restarted.late_samples.unchanged)
    assert (created, unchanged) == (len(workload) - first_batch, first_batch)  # ... and changes nothing
    assert (JobMinute.objects.count(), ServiceMinute.objects.count(), LateSample.objects.count()) == (5, 3, 2)
    assert sink(topics).run(max_idle_s=IDLE_S).records == 0


def test_crash_inside_the_batch_transaction_writes_nothing_and_loses_nothing(topics, produce, workload):
    produce(workload)

    def die(stage: str) -> None:
        if stage == "written":
            raise Crash()

    with pytest.raises(Crash):
        sink(topics, hook=die).run(max_idle_s=IDLE_S)
    assert sum(len(v) for v in rows().values()) == 0  # rolled back

    assert sink(topics).run(max_idle_s=IDLE_S).records == len(workload)
    assert (JobMinute.objects.count(), ServiceMinute.objects.count(), LateSample.objects.count()) == (5, 3, 2)


def test_the_command_stops_gracefully_on_sigterm(topics):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "KAFKA_BOOTSTRAP": KAFKA_BOOTSTRAP}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "profile_sink", "--prefix", topics.prefix], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        output, deadline = "", time.monotonic() + 60
        while "joined" not in output:
            assert time.monotonic() < deadline and process.poll() is None, output
            if select.select([process.stdout], [], [], 1)[0]:
                output += process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output + rest
    assert "profile sink stopped: 0 batches" in rest
