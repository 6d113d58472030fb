"""Fixtures of the integration tests."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from colocation.selectors import node_views
from tests.integration.livecluster import T0


@pytest.fixture
def cluster(world) -> tuple[SimulatedCluster, VirtualClock]:
    """The `world` fixture's nodes as a simulated cluster whose pods run for their runtime label."""
    clock = VirtualClock(T0)
    return SimulatedCluster(node_views(), clock, store.labelled_runtime), clock


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
