"""Addresses of the real services started by ``platform/stack.sh start``.

Values come from the environment (``eval "$(platform/stack.sh env)"``) and fall
back to the stack's default ports, so the tests also run without the eval.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _port(name: str, default: int) -> int:
    return int(os.environ.get(f"TIDAL_{name}_PORT", default))


DATABASE_URL = os.environ.get(
    "DATABASE_URL", f"postgres://postgres@127.0.0.1:{_port('PG', 5432)}/tidal"
)
REDIS_URL = os.environ.get("REDIS_URL", f"redis://127.0.0.1:{_port('REDIS', 6379)}/0")
KAFKA_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", f"127.0.0.1:{_port('KAFKA', 9092)}")
PROMETHEUS_URL = os.environ.get(
    "PROMETHEUS_URL", f"http://127.0.0.1:{_port('PROMETHEUS', 9090)}"
)
PUSHGATEWAY_URL = os.environ.get(
    "PUSHGATEWAY_URL", f"http://127.0.0.1:{_port('PUSHGATEWAY', 9091)}"
)
# Prometheus scrapes every target listed in a JSON file here (file_sd, job "tidal").
PROMETHEUS_SD_DIR = Path(
    os.environ.get("PROMETHEUS_SD_DIR", ROOT / ".run" / "prometheus-sd" / "targets")
)


def drop_prefix(name: str) -> None:
    """Delete the topics and the publisher cursor of a test's pipeline prefix."""
    import redis
    from kafka import KafkaAdminClient

    from streaming.publisher import cursor_key
    from streaming.topics import Topics

    redis.Redis.from_url(REDIS_URL).delete(cursor_key(name))
    admin = KafkaAdminClient(bootstrap_servers=KAFKA_BOOTSTRAP, client_id="tidal-it-admin")
    try:
        admin.delete_topics([t for t in Topics(name).all() if t in set(admin.list_topics())])
    finally:
        admin.close()
