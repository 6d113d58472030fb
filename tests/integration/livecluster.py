"""The live scheduler loop on a simulated cluster with a virtual clock, for integration tests."""

from __future__ import annotations

import time

from cluster.simulated.engine import SimulatedCluster
from scheduler import live
from scheduler.policy.profile import get_profile

T0 = time.time() - 7200  # virtual time stays behind the wall clock that stamps submissions and cancels


def tick(cluster_and_clock: tuple[SimulatedCluster, object], seconds: float = 5):
    """Advance the clock and the cluster, then run one scheduler tick with the `tidal` profile."""
    cluster, clock = cluster_and_clock
    clock.advance(seconds)
    cluster.advance()
    return live.scheduler_tick(backend=cluster, now=clock.now(), profile=get_profile("tidal"))
