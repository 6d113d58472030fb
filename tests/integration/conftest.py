"""Fixtures of the integration tests."""

from __future__ import annotations

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
