"""The live scheduler loop on a simulated cluster with a virtual clock, for integration tests."""

from __future__ import annotations

import time

from cluster.simulated.engine import SimulatedCluster
from scheduler import live
from scheduler.policy.profile import get_profile

# Yesterday 03:00 UTC: behind the wall clock that stamps submissions and cancels, and outside every busy
# window of the lending profile (08-11, 18-22 UTC), so no test depends on the hour CI runs at.
T0 = (time.time() // 86400 - 1) * 86400 + 3 * 3600


def tick(cluster_and_clock: tuple[SimulatedCluster, object], seconds: float = 5):
    """Advance the clock and the cluster, then run one scheduler tick with the `tidal` profile."""
    cluster, clock = cluster_and_clock
    clock.advance(seconds)
    cluster.advance()
    return live.scheduler_tick(backend=cluster, now=clock.now(), profile=get_profile("tidal"))
