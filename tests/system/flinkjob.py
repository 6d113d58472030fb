"""The profile job on the PyFlink local mini-cluster, for tests: one JVM per pytest session (PyFlink's
gateway is a process singleton), one job per test, each on its own topics and checkpoint folder."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer

from streaming.flink.job import Runtime, latest_checkpoint, newest_checkpoint, submit
from streaming.flink.sql import Spec
from streaming.records import encode
from streaming.topics import Topics, ensure_topics
from tests.integration.services import KAFKA_BOOTSTRAP


@dataclass
class ProfileJob:
    topics: Topics
    checkpoint_dir: Path
    bootstrap: str = KAFKA_BOOTSTRAP
    result: object = None

    @classmethod
    def create(cls, prefix: str, tmp: Path, bootstrap: str = KAFKA_BOOTSTRAP) -> ProfileJob:
        topics = Topics(prefix)
        ensure_topics(bootstrap, topics, partitions=1)  # one partition: a deterministic watermark
        return cls(topics, tmp / "checkpoints", bootstrap)

    def start(self) -> None:
        runtime = Runtime(checkpoint_dir=self.checkpoint_dir, checkpoint_interval_s=1.0)
        spec = Spec(bootstrap=self.bootstrap, topics=self.topics, group_id=f"{self.topics.prefix}.flink")
        self.result = submit(spec, runtime)
        client = self.result.get_job_client()
        wait_until(lambda: client.get_job_status().result().name == "RUNNING", 60, "the job to run")

    def stop(self) -> None:
        if self.result is not None:
            self.result.get_job_client().cancel().result()
            self.result = None

    def checkpoint_after(self, moment: float, timeout: float = 30) -> Path:
        """Wait for a checkpoint completed after `moment` (epoch s) and return it."""
        def newer() -> bool:
            found = newest_checkpoint(self.checkpoint_dir)
            return found is not None and found[0] > moment
        wait_until(newer, timeout, "a checkpoint")
        return latest_checkpoint(self.checkpoint_dir)


def produce(topic: str, records: Iterable, raw: Iterable[bytes] = ()) -> None:
    producer = KafkaProducer(bootstrap_servers=KAFKA_BOOTSTRAP, acks="all")
    for record in records:
        producer.send(topic, encode(record), key=record.pod.encode())
    for value in raw:
        producer.send(topic, value)
    producer.flush()
    producer.close()


class Reader:
    """Everything on some topics so far, read from the start by one consumer kept across calls."""

    def __init__(self, *topics: str) -> None:
        self.consumer = KafkaConsumer(*topics, bootstrap_servers=KAFKA_BOOTSTRAP, auto_offset_reset="earliest",
                                      consumer_timeout_ms=500)
        self.seen: dict[str, list[dict]] = {t: [] for t in topics}

    def until(self, done: Callable[[dict[str, list[dict]]], bool], timeout: float = 60) -> dict[str, list[dict]]:
        deadline = time.monotonic() + timeout
        while not done(self.seen):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; seen so far: {self.seen}")
            for message in self.consumer:
                self.seen[message.topic].append(json.loads(message.value))
        return self.seen

    def close(self) -> None:
        self.consumer.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
