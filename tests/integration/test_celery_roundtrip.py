"""A task goes through the real Redis broker to a real Celery worker process and its result comes back."""
import os
import subprocess
import sys
import uuid

import pytest

from tidal.celery import app, ping


@pytest.fixture
def worker_queue():
    """A worker of our own on a queue of our own, so no other worker on this Redis can take the task."""
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tidal", "worker", "--pool", "solo", "--queues", queue,
         "--hostname", f"{queue}@%h", "--loglevel", "WARNING", "--without-mingle", "--without-gossip"],
        env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    yield queue
    worker.terminate()
    worker.wait(timeout=20)


def test_ping_round_trip_through_redis(worker_queue):
    payload = uuid.uuid4().hex
    result = ping.apply_async(args=[payload], queue=worker_queue)
    answer = result.get(timeout=60)
    assert answer["echo"] == payload
    assert answer["pid"] != os.getpid()  # answered by the worker process, not run eagerly here
    assert app.conf.broker_url.startswith("redis://")
