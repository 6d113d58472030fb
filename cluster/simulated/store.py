"""Keep the live simulated cluster between control-loop ticks.

The demo's cluster is the in-process SimulatedCluster; Celery ticks run in short-lived task calls, so its
state is saved to Redis after each tick and loaded before the next — a crash of a worker loses at most the
actions of the tick it died in, which the next tick repairs from the database (scheduler/live.py)."""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from cluster.backend import RUNTIME_LABEL, PodSpec
from cluster.clock import SystemClock
from cluster.simulated.engine import SimulatedCluster
from cluster.types import NodeView

# Under the instance's namespace, e.g. "tidal:simulated-cluster-v2". The version changes whenever the pickled classes
# change shape: an older cluster is left behind, and the scheduler requeues the jobs whose pods it held.
KEY = "simulated-cluster-v2"


def labelled_runtime(pod: PodSpec) -> float | None:
    """Run time of a simulated pod, from its label (module-level, so the cluster pickles); absent: until evicted."""
    value = pod.labels.get(RUNTIME_LABEL)
    return float(value) if value is not None else None


def new_cluster(nodes: Iterable[NodeView]) -> SimulatedCluster:
    return SimulatedCluster(nodes, SystemClock(), labelled_runtime)


def load(redis, namespace: str) -> SimulatedCluster | None:
    raw = redis.get(f"{namespace}:{KEY}")
    return pickle.loads(raw) if raw else None  # our own Redis, written only by save() below


def save(redis, namespace: str, cluster: SimulatedCluster) -> None:
    redis.set(f"{namespace}:{KEY}", pickle.dumps(cluster, protocol=pickle.HIGHEST_PROTOCOL))


def sync_nodes(cluster: SimulatedCluster, inventory: Iterable[NodeView]) -> None:
    """Nodes added to the inventory since the cluster was created join it (with no pods)."""
    for node in inventory:
        cluster.add_node(node)


LOCK = "cluster-lock"  # one actor on the cluster at a time: the scheduler, the lending controller


@contextmanager
def session(redis, namespace: str, inventory: Callable[[], Iterable[NodeView]],
            lock_timeout_s: float = 120) -> Iterator[SimulatedCluster | None]:
    """The live simulated cluster for one control-loop tick, or None while another tick holds the lock.

    Loads the cluster (or creates it from `inventory`), adds new inventory nodes, advances it to now, and
    saves it afterwards even when the tick fails: what was bound or evicted happened, as on a real cluster.
    The lock expires, so a worker that dies holding it blocks the loops for at most `lock_timeout_s`."""
    lock = redis.lock(f"{namespace}:{LOCK}", timeout=lock_timeout_s)
    if not lock.acquire(blocking=False):
        yield None
        return
    cluster = None
    try:
        nodes = list(inventory())
        cluster = load(redis, namespace) or new_cluster(nodes)
        sync_nodes(cluster, nodes)
        cluster.advance()
        yield cluster
    finally:
        if cluster is not None:
            save(redis, namespace, cluster)
        lock.release()
