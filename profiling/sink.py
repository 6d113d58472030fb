"""The profile sink: Flink's output topics -> the profiling tables (docs/concepts/profiles.md#the-pipeline).

A librdkafka consumer (confluent-kafka) in group `<prefix>.profile-sink` reads profiles.job-minute,
profiles.service-minute and metrics.late. Per polled batch it decodes the records
(streaming.records.decode), writes them through the profiling services in ONE database transaction,
and only then commits the batch's offsets. A crash between the two leaves the offsets behind, so the
batch is read again; the upserts are idempotent (a replayed record changes nothing), so at-least-once
delivery + idempotent writes = each record's effect exactly once. A record that cannot be decoded is
logged and counted, never retried forever.

Run it with `manage.py profile_sink` (Django is set up there); several sinks in the same group share
the partitions. librdkafka rather than kafka-python: it fetches in C threads, leaving the sink's Python
thread to decoding and the database - the sink shares two cores with Flink here. With the binary
inserts of profiling.services, 50,000 job minutes cost it 2.1 CPU-s instead of 5.2. A broker that
restarts is reconnected to by librdkafka; a commit refused meanwhile leaves the batch to be read again.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import close_old_connections, transaction
from confluent_kafka import Consumer, KafkaException, Message

from profiling import services
from profiling.services import RecordCounts
from streaming import records
from streaming.topics import Topics, ensure_topics

log = logging.getLogger(__name__)
# Short group timeouts: a sink that died is replaced within seconds (DESIGN: measured here).
GROUP_TIMEOUTS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
JOIN_TIMEOUT_S = 60.0
SUMMARY_EVERY_S = 60.0


def group_id(prefix: str) -> str:
    return f"{prefix}.profile-sink"


@dataclass
class SinkStats:
    batches: int = 0
    records: int = 0
    undecodable: int = 0
    job_minutes: RecordCounts = field(default_factory=RecordCounts)
    service_minutes: RecordCounts = field(default_factory=RecordCounts)
    late_samples: RecordCounts = field(default_factory=RecordCounts)

    def __str__(self) -> str:
        return (f"{self.batches} batches, {self.records} records ({self.undecodable} undecodable); "
                f"job minutes: {self.job_minutes}; service minutes: {self.service_minutes}; "
                f"late samples: {self.late_samples}")


class ProfileSink:
    """`hook(stage)` is for tests: it is called with "written" inside the batch's transaction after the
    writes, and with "before-commit" after the transaction, before the offsets are committed; raising
    there stands for the process dying at that point."""

    def __init__(self, *, bootstrap: str, topics: Topics, group: str | None = None, max_records: int = 2000,
                 poll_timeout_ms: int = 500, hook: Callable[[str], None] | None = None) -> None:
        self.bootstrap, self.topics = bootstrap, topics
        self.group = group or group_id(topics.prefix)
        self.max_records, self.poll_timeout_ms, self.hook = max_records, poll_timeout_ms, hook
        self.kinds: dict[str, type] = {
            topics.job_minutes: records.JobMinute,
            topics.service_minutes: records.ServiceMinute,
            topics.late_samples: records.LateSample,
        }
        self.stats = SinkStats()
        self._stop = threading.Event()

    def stop(self) -> None:
        """Finish the batch in hand, commit it, leave the group (safe from a signal handler)."""
        self._stop.set()

    def run(self, *, max_idle_s: float | None = None) -> SinkStats:
        """Consume until stop() or, with `max_idle_s`, until no record came for that long after joining."""
        ensure_topics(self.bootstrap, self.topics)
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **GROUP_TIMEOUTS,
        }, logger=log)
        consumer.subscribe(list(self.kinds))
        started = last_summary = time.monotonic()
        idle_since: float | None = None
        joined = False
        log.info("profile sink: group %s on %s", self.group, ", ".join(self.kinds))
        try:
            while not self._stop.is_set():
                batch = self._records(consumer.consume(self.max_records, self.poll_timeout_ms / 1000))
                now = time.monotonic()
                if not joined and consumer.assignment():
                    joined = True
                    log.info("profile sink: joined %s, %d partitions", self.group, len(consumer.assignment()))
                if batch:
                    self._write(batch)
                    self._commit(consumer)
                    idle_since = None
                elif joined:
                    idle_since = idle_since or now
                    if max_idle_s is not None and now - idle_since >= max_idle_s:
                        break
                elif now - started > JOIN_TIMEOUT_S:
                    raise RuntimeError(f"profile sink: no partitions assigned in group {self.group} "
                                       f"after {JOIN_TIMEOUT_S:.0f} s")
                if now - last_summary >= SUMMARY_EVERY_S:
                    log.info("profile sink: %s", self.stats)
                    last_summary = now
        finally:
            consumer.close()  # no auto-commit: leaves the group, commits nothing
            log.info("profile sink stopped: %s", self.stats)
        return self.stats

    @staticmethod
    def _records(messages: list[Message]) -> list[Message]:
        """The records among `messages`; the rest are errors (e.g. the broker away), which librdkafka
        recovers from by itself: logged, nothing to write or commit."""
        for message in messages:
            if message.error() is not None:
                log.warning("profile sink: %s", message.error())
        return [message for message in messages if message.error() is None]

    def _decode(self, batch: list[Message]) -> dict[type, list]:
        decoded: dict[type, list] = {kind: [] for kind in self.kinds.values()}
        for message in batch:
            kind = self.kinds[message.topic()]
            try:
                decoded[kind].append(records.decode(kind, message.value()))
            except (ValueError, TypeError, AttributeError) as error:
                self.stats.undecodable += 1
                log.warning("profile sink: undecodable record at %s[%d]@%d: %s", message.topic(),
                            message.partition(), message.offset(), error)
        return decoded

    def _write(self, batch: list[Message]) -> None:
        decoded = self._decode(batch)
        if not transaction.get_connection().in_atomic_block:  # (tests run the sink inside their transaction)
            close_old_connections()  # a long-running consumer outlives database connections
        with transaction.atomic():
            job = services.job_minutes_record(records=decoded[records.JobMinute])
            service = services.service_minutes_record(records=decoded[records.ServiceMinute])
            late = services.late_samples_record(records=decoded[records.LateSample])
            self._at("written")
        stats = self.stats
        stats.batches += 1
        stats.records += len(batch)
        stats.job_minutes += job
        stats.service_minutes += service
        stats.late_samples += late
        log.debug("profile sink batch: job minutes %s; service minutes %s; late samples %s", job, service, late)

    def _commit(self, consumer: Consumer) -> None:
        self._at("before-commit")
        try:
            consumer.commit(asynchronous=False)  # the positions after the records just written
        except KafkaException as error:  # a rebalance or the broker away: the batch is re-read, the upsert absorbs it
            log.warning("profile sink: offsets not committed (%s); the batch will be read again", error)

    def _at(self, stage: str) -> None:
        if self.hook is not None:
            self.hook(stage)
