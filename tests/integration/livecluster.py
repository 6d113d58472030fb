"""The live scheduler loop on a simulated cluster with a virtual clock, for integration tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from redis import Redis

from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from colocation import live_backend
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


@contextmanager
def scaling_lab(world, settings, *, clock: VirtualClock, prefix: str) -> Iterator[tuple[SimulatedCluster, Redis, str]]:
    """The autoscaler's room: the test world plus an online T4 node (t4-2), the simulated cluster on `clock`, no
    alert webhook, and a Redis namespace of its own (`prefix-…`), emptied afterwards."""
    from cluster.types import Pool
    from colocation.models import Node, NodeState
    from colocation.selectors import node_views

    Node.objects.create(name="t4-2", resource_group=world.groups["t4"], gpu_model=world.gpu_models["T4"], gpu_count=2,
                        cpu_milli=32000, memory_mib=131072, pool=Pool.COLOCATION, state=NodeState.ONLINE_NORMAL)
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    settings.TIDAL_ALERT_WEBHOOK_URL = ""
    redis = Redis.from_url(settings.REDIS_URL)
    try:
        yield SimulatedCluster(node_views(), clock, store.labelled_runtime), redis, namespace
    finally:
        for key in redis.scan_iter(f"{namespace}:*"):
            redis.delete(key)


def on_kubernetes(settings, kubeconfig, *, namespace: str, prefix: str) -> str:
    """Point the live loops and the log reads at a Kubernetes API server through `kubeconfig`: the workloads and lease
    `namespace`, one leader, a Redis namespace of the test's own (returned)."""
    settings.TIDAL_CLUSTER_BACKEND = "kubernetes"
    settings.TIDAL_KUBECONFIG = str(kubeconfig)
    settings.TIDAL_K8S_NAMESPACE = settings.TIDAL_K8S_LEASE_NAMESPACE = namespace
    settings.TIDAL_LEADER_ID = "worker-a"
    settings.TIDAL_REDIS_NAMESPACE = f"{prefix}-{uuid.uuid4().hex[:8]}"
    live_backend.kubernetes_backend.cache_clear()
    return settings.TIDAL_REDIS_NAMESPACE


class EnginesAt:
    """The cluster exporter's load (cluster/simulated/metrics.ServingLoad): the engines of each service at a fixed
    (requests/s, GPU utilization)."""

    def __init__(self, loads: dict[str, tuple[float, float]]) -> None:
        self.loads = loads

    def serves(self, service: str) -> bool:
        return service in self.loads

    def qps(self, service: str, now: float) -> float:
        return self.loads[service][0]

    def gpu(self, service: str, now: float, ready: int) -> float:
        return self.loads[service][1]
