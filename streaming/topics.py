"""Every Kafka topic of the profile pipeline, in one place.

    metrics.pods           publisher -> Flink       one PodSample per pod per step, keyed by pod
    profiles.job-minute    Flink -> profile sink    one JobMinute per training run per minute, keyed by job
    profiles.service-minute Flink -> profile sink   one ServiceMinute per inference service per minute
    metrics.late           Flink -> profile sink    one LateSample per record dropped as > 2 min late

Names carry a prefix (settings.TIDAL_TOPIC_PREFIX, default "tidal") so tests and benchmarks run
on their own topics beside a live demo.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Topics:
    prefix: str = "tidal"

    @property
    def pod_samples(self) -> str:
        return f"{self.prefix}.metrics.pods"

    @property
    def late_samples(self) -> str:
        return f"{self.prefix}.metrics.late"

    @property
    def job_minutes(self) -> str:
        return f"{self.prefix}.profiles.job-minute"

    @property
    def service_minutes(self) -> str:
        return f"{self.prefix}.profiles.service-minute"

    def all(self) -> tuple[str, ...]:
        return (self.pod_samples, self.late_samples, self.job_minutes, self.service_minutes)


def ensure_topics(bootstrap: str, topics: Topics, partitions: int = 3) -> None:
    """Create the topics that do not exist yet (idempotent)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tidal-topics")
    try:
        missing = set(topics.all()) - set(admin.list_topics())
        if missing:
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)
                                 for name in sorted(missing)])
    finally:
        admin.close()
