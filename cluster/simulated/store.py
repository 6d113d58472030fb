"""Keep the live simulated cluster between control-loop ticks.

The demo's cluster is the in-process SimulatedCluster; Celery ticks run in short-lived task calls, so its
state is saved to Redis after each tick and loaded before the next. A worker killed mid-tick loses the
actions of that tick that were not saved yet, as if the cluster had undone them. The loops repair lost
binds, evictions and replica counts from the database (an admitted job without its pod is requeued, an
orphan pod evicted, replica counts applied again), but a node state or a detached pod that un-happens looks
like an operator's hand and stops a transition (colocation/policy/steps.py: Conflict), so those two actions
are saved the moment they are done, as a real cluster keeps them."""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from cluster.backend import RUNTIME_LABEL, PodSpec
from cluster.clock import SystemClock
from cluster.lock import Fenced, cluster_lock
from cluster.simulated.engine import SimulatedCluster
from cluster.types import NodeView

# Under the instance's namespace, e.g. "tidal:simulated-cluster-v2". The version changes whenever the pickled classes
# change shape: an older cluster is left behind, and the scheduler requeues the jobs whose pods it held.
KEY = "simulated-cluster-v4"  # v3: nodes carry their topology block; v4: pods their container restarts


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


LEFT_INVENTORY = "node-left-inventory"  # the eviction reason of pods on a node the inventory no longer has


def sync_nodes(cluster: SimulatedCluster, inventory: Iterable[NodeView]) -> None:
    """The cluster holds the inventory's nodes: those added since it was created join it (with no pods), and those
    the inventory lost leave it, their pods evicted (the loops requeue the jobs). A cluster kept in Redis from another
    database (a new demo database, the same Redis) so never offers a node the database does not know."""
    nodes = list(inventory)
    for node in nodes:
        cluster.add_node(node)
    names = {node.name for node in nodes}
    if not names:
        return  # an inventory with no node at all is not read as every node gone (nothing seeded yet)
    for view in cluster.nodes():
        if view.name not in names:
            cluster.remove_node(view.name, LEFT_INVENTORY)


LOCK = "cluster-lock"  # one actor on the cluster at a time: the scheduler, the lending controller


@contextmanager
def session(redis, namespace: str, inventory: Callable[[], Iterable[NodeView]],
            lock_timeout_s: float = 30, wait_s: float = 0.0) -> Iterator[Fenced]:
    """The live simulated cluster for one control-loop tick, once the cluster lock is taken (waiting at most
    `wait_s` for it; else TickSkipped).

    Loads the cluster (or creates it from `inventory`), adds new inventory nodes, advances it to now, and
    saves it afterwards even when the tick fails: what was bound or evicted happened, as on a real cluster.
    The lock is renewed while the tick runs (cluster/lock.py), so a worker that dies holding it blocks the
    loops for at most `lock_timeout_s`; the cluster comes fenced by it (each call checks the lock is still held)."""
    with cluster_lock(redis, f"{namespace}:{LOCK}", lock_timeout_s, wait_s) as held:
        cluster = None
        try:
            nodes = list(inventory())
            cluster = load(redis, namespace) or new_cluster(nodes)
            sync_nodes(cluster, nodes)
            cluster.advance()
            yield Fenced(_SavedOnTheSpot(cluster, lambda: save(redis, namespace, cluster)), held)
        finally:
            if cluster is not None and held.valid():  # a holder that lost the lock must not overwrite the next one's
                save(redis, namespace, cluster)


class _SavedOnTheSpot:
    """The session's cluster, saved right after the actions whose loss the loops cannot repair (see the module
    doc); everything else is the cluster's own."""

    def __init__(self, cluster: SimulatedCluster, save_now: Callable[[], None]) -> None:
        self._cluster, self._save_now = cluster, save_now

    def __getattr__(self, name: str):
        return getattr(self._cluster, name)

    def set_node_state(self, *args, **kwargs) -> None:
        self._cluster.set_node_state(*args, **kwargs)
        self._save_now()

    def detach_pod(self, pod: str) -> str:
        replacement = self._cluster.detach_pod(pod)
        self._save_now()
        return replacement
