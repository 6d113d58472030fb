"""Fixtures of the integration tests (the `world` and its simulated `cluster` are tests/conftest.py's)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest


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


@pytest.fixture
def eager(settings):
    """Tasks run in-process as a worker would run them (retries too, without their backoff wait); every decision is
    settled at once (the notifications scan takes it without its settle time)."""
    from tidal.celery import app

    settings.TIDAL_NOTIFY_SETTLE_S = 0
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False
