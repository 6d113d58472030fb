"""The live loops' one way to the cluster, chosen by TIDAL_CLUSTER_BACKEND: `simulated` (the demo's in-process
cluster, kept in Redis between ticks) or `kubernetes` (kubeconfig or in-cluster config).

A tick gets the backend, or None when this worker must not act now. The loops are due at the same moments
whenever their intervals line up, so a tick that finds the cluster lock held waits for it, for most of its
interval (cluster/lock.py); it is skipped only when another tick holds the lock longer than that, another
worker holds the leader Lease (kubernetes), or the cluster failed recently and the tick is in backoff. When the
cluster cannot be reached (BackendUnavailable) the tick stops where it was — the acting order of the loops makes
that safe — and later ticks back off exponentially; after TIDAL_CLUSTER_ALERT_AFTER failures in a row an alert
Decision says so, and another says when the cluster answers again. While Redis (the cluster lock's home) is
unreachable the ticks skip, saying so; a tick that loses the lock mid-way stops where it is (cluster/lock.py).

Every tick ends with an outcome, counted per loop (tidal_loop_ticks_total{loop, outcome} in /metrics, the
operators' overview): `acted`, or why not. A loop that skips TIDAL_LOOP_SKIP_ALERT_AFTER ticks in a row for a
reason of its own (busy, Redis unreachable, the lock lost, an error) raises an alert Decision, and another when
it acts again; a cluster outage has its own alert, and a standby worker is not acting by design.

Reads that change nothing (a job's log, for the API) get read_backend(): the same choice, without lock or lease.
"""
from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache

from django.conf import settings
from redis import Redis
from redis.exceptions import RedisError

from cluster.backend import BackendError, BackendUnavailable, ClusterBackend
from cluster.lock import Fenced, LockLost, TickSkipped, cluster_lock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster, follow_logs
from cluster.simulated.metrics import INFERENCE_NAMESPACE
from colocation.selectors import node_views
from colocation.services import inventory_sync
from core import telemetry
from core.decisions import decision_record
from core.models import Decision

log = logging.getLogger(__name__)
FAILURES_KEY = "cluster:failures"
RETRY_AT_KEY = "cluster:retry-at"
MAX_BACKOFF_S = 300.0
LOCK_WAIT_SHARE = 0.8  # of its interval, a tick waits for the cluster lock: it gives up before the next is due
STREAK_OUTCOMES = ("busy", "redis-unreachable", "lock-lost", "error")  # skips that raise the loop's own alert


@contextmanager
def live_cluster(*, redis, namespace: str, loop: str, interval_s: float) -> Iterator[ClusterBackend | None]:
    """The configured cluster for one tick of `loop`, which is due every `interval_s` (see the module's docstring)."""
    try:
        backoff = _in_backoff(redis, namespace)
    except RedisError as error:
        log.warning("Redis unreachable (%s): skipping this tick", error)
        _ended(redis, namespace, loop, "redis-unreachable", f"Redis is unreachable ({error})")
        yield None
        return
    if backoff:
        _ended(redis, namespace, loop, "backoff")
        yield None
        return
    acting = False
    try:
        with _session(redis, namespace, LOCK_WAIT_SHARE * interval_s) as backend:
            acting = True
            yield backend
    except TickSkipped as skipped:
        _ended(redis, namespace, loop, skipped.outcome, skipped.why)
        yield None
        return
    except BackendUnavailable as error:
        _failed(redis, namespace, error)
        _ended(redis, namespace, loop, "cluster-unavailable")
        if not acting:  # failed before the tick began (e.g. asking for the lease): the tick skips
            yield None
        return
    except LockLost as error:  # Redis went away or forgot the lock mid-tick: stop here (the acting order makes it safe)
        log.error("tick stopped: %s", error)
        _ended(redis, namespace, loop, "lock-lost", str(error))
        return
    except Exception as error:
        _ended(redis, namespace, loop, "error", f"{type(error).__name__}: {error}")
        raise
    _ended(redis, namespace, loop, telemetry.ACTED)
    _recovered(redis, namespace)


def _session(redis, namespace: str, wait_s: float):
    if settings.TIDAL_CLUSTER_BACKEND == "kubernetes":
        return _kubernetes_session(redis, namespace, wait_s)
    return store.session(redis, namespace, node_views, lock_timeout_s=settings.TIDAL_CLUSTER_LOCK_S, wait_s=wait_s)


@contextmanager
def _kubernetes_session(redis, namespace: str, wait_s: float) -> Iterator[ClusterBackend]:
    with cluster_lock(redis, f"{namespace}:{store.LOCK}", settings.TIDAL_CLUSTER_LOCK_S, wait_s) as held:
        backend, elector = kubernetes_backend()
        if not elector.acquire(time.time()):
            log.info("not the leader (lease %s held by another worker): not acting", elector.name)
            raise TickSkipped("not-leader", f"another worker holds the leader lease {elector.name}")
        backend.refresh()
        inventory_sync(nodes=backend.nodes())
        yield Fenced(backend, held)


@cache
def kubernetes_backend():
    """One backend (and its watches) and one lease elector per process, from the settings. Imported here: the
    client takes seconds to import, which the simulated demo's processes never need."""
    from kubernetes import client, config

    from cluster.kubernetes.backend import KubeSettings, KubernetesCluster
    from cluster.kubernetes.conventions import LEASE_NAME
    from cluster.kubernetes.lease import LeaseElector

    configuration = client.Configuration()
    if settings.TIDAL_KUBECONFIG:
        config.load_kube_config(config_file=settings.TIDAL_KUBECONFIG, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.retries = 1  # a tick must fail fast: it is retried with backoff anyway
    api = client.ApiClient(configuration)
    backend = KubernetesCluster(api, KubeSettings(namespace=settings.TIDAL_K8S_NAMESPACE,
                                                  image=settings.TIDAL_K8S_POD_IMAGE))
    # One identity per host (a worker pod): its pool processes share the leadership, the cluster lock orders them.
    identity = settings.TIDAL_LEADER_ID or socket.gethostname()
    return backend, LeaseElector(api, settings.TIDAL_K8S_LEASE_NAMESPACE, LEASE_NAME, identity,
                                 duration_s=settings.TIDAL_K8S_LEASE_S)


def kubernetes_preload() -> None:
    """Import the Kubernetes client now (a worker's main process, before it forks its pool): the import takes
    seconds, which each pool process's first tick would otherwise spend holding the cluster lock."""
    import kubernetes.client  # noqa: F401

    import cluster.kubernetes.backend  # noqa: F401


# --- faults ------------------------------------------------------------------------------------------------


def _in_backoff(redis, namespace: str) -> bool:
    retry_at = redis.get(f"{namespace}:{RETRY_AT_KEY}")
    return retry_at is not None and time.time() < float(retry_at)


def _failed(redis, namespace: str, error: BackendUnavailable) -> None:
    failures = int(redis.incr(f"{namespace}:{FAILURES_KEY}"))
    delay = min(settings.TIDAL_CLUSTER_BACKOFF_S * 2 ** (failures - 1), MAX_BACKOFF_S)
    redis.set(f"{namespace}:{RETRY_AT_KEY}", time.time() + delay)
    log.warning("cluster unavailable (%d in a row): %s; next try in %.0f s", failures, error, delay)
    if failures == settings.TIDAL_CLUSTER_ALERT_AFTER:
        decision_record(kind=Decision.Kind.ALERT, subject="cluster", reason="cluster-unavailable",
                        message=f"the cluster has not answered {failures} ticks in a row ({error}); the control "
                                f"loops retry with backoff and act again when it answers",
                        data={"failures": failures, "error": str(error)})


def _recovered(redis, namespace: str) -> None:
    failures = int(redis.get(f"{namespace}:{FAILURES_KEY}") or 0)
    if not failures:
        return
    redis.delete(f"{namespace}:{FAILURES_KEY}", f"{namespace}:{RETRY_AT_KEY}")
    if failures >= settings.TIDAL_CLUSTER_ALERT_AFTER:
        decision_record(kind=Decision.Kind.ALERT, subject="cluster", reason="cluster-available",
                        message=f"the cluster answers again after {failures} failed ticks",
                        data={"failures": failures})


# --- tick outcomes -----------------------------------------------------------------------------------------


def _ended(redis, namespace: str, loop: str, outcome: str, why: str = "") -> None:
    """Count the tick's outcome; alert when `loop` has skipped too many ticks in a row, and when it acts again."""
    try:
        streak = telemetry.count_tick(redis, namespace, loop, outcome, skipped=outcome in STREAK_OUTCOMES)
    except RedisError as error:  # the counters live in Redis: a tick that could not reach it is logged, not counted
        log.warning("%s tick (%s) not counted: Redis unreachable (%s)", loop, outcome, error)
        return
    after = settings.TIDAL_LOOP_SKIP_ALERT_AFTER
    if outcome in STREAK_OUTCOMES and streak == after:
        decision_record(kind=Decision.Kind.ALERT, subject=f"loop:{loop}", reason="loop-skipping",
                        message=f"the {loop} loop has not acted on its last {streak} ticks (the last: {why}); "
                                f"its decisions wait until it acts again",
                        data={"loop": loop, "skipped": streak, "outcome": outcome, "why": why})
    elif outcome == telemetry.ACTED and streak >= after:
        decision_record(kind=Decision.Kind.ALERT, subject=f"loop:{loop}", reason="loop-acting",
                        message=f"the {loop} loop acts again after {streak} skipped ticks",
                        data={"loop": loop, "skipped": streak})


# --- the cluster, for reading ---------------------------------------------------------------------------------


def kube_namespace() -> str | None:
    """The Kubernetes namespace every pod runs in on the Kubernetes backend (TIDAL_K8S_NAMESPACE); None on the
    simulated cluster, whose exporter puts inference and training pods in namespaces of their own."""
    return settings.TIDAL_K8S_NAMESPACE if settings.TIDAL_CLUSTER_BACKEND == "kubernetes" else None


def serving_namespace() -> str:
    """The Kubernetes namespace the inference services' pods run in, as their metrics carry it (the `namespace` of
    kube_pod_labels and of the engines' series): kube_namespace, or the simulated cluster's inference namespace."""
    return kube_namespace() or INFERENCE_NAMESPACE


def read_backend():
    """A backend to read with (job logs, scheduler/logs.py), from the configuration as live_cluster's: the demo's
    simulated cluster as the loops last saved it, or the Kubernetes API. Reading takes no cluster lock
    and no leader lease: it changes nothing."""
    if settings.TIDAL_CLUSTER_BACKEND == "kubernetes":
        return kubernetes_backend()[0]  # the API client only: its watches start with a tick, not here
    return StoredSimulatedCluster(Redis.from_url(settings.REDIS_URL), settings.TIDAL_REDIS_NAMESPACE)


class StoredSimulatedCluster:
    """The simulated cluster as the control loops saved it to Redis after their last tick, loaded afresh for each
    read (a follower re-reads it every poll: pods end in another process)."""

    def __init__(self, redis: Redis, namespace: str) -> None:
        self._redis, self._namespace = redis, namespace

    def _load(self) -> SimulatedCluster:
        cluster = store.load(self._redis, self._namespace)
        if cluster is None:
            raise BackendError("the simulated cluster has not started yet")
        return cluster

    def pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None) -> str:
        return self._load().pod_logs(pod, since=since, tail=tail)

    def follow_pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None,
                        poll_s: float = 1.0) -> Iterator[str]:
        loader: Callable[[], SimulatedCluster] = self._load
        return follow_logs(loader, pod, since=since, tail=tail, poll_s=poll_s)
