"""A task goes through the real Redis broker to a real Celery worker process and its result comes back."""
import os
import uuid

from tidal.celery import app, ping


def test_ping_round_trip_through_redis(worker_queue):
    payload = uuid.uuid4().hex
    result = ping.apply_async(args=[payload], queue=worker_queue)
    answer = result.get(timeout=60)
    assert answer["echo"] == payload
    assert answer["pid"] != os.getpid()  # answered by the worker process, not run eagerly here
    assert app.conf.broker_url.startswith("redis://")
