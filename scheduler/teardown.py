"""Stopping what is left of a run on the cluster: its pods evicted (each log archived first,
docs/concepts/job-logs.md#archive) and a gang's headless Service deleted. The live loop stops the runs it preempts,
ends or cannot start whole, and orphans; the lending controller stops a gang whose worker's node it took back."""
import logging
from dataclasses import dataclass

from cluster.backend import BackendError, ClusterBackend
from scheduler.logs import pod_evict

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stop:
    """What is left on the cluster of a run that ended in the database: its pods to evict, its Service to delete."""

    pods: tuple[str, ...]
    service: str | None
    reason: str


def run_stop(*, backend: ClusterBackend, stop: Stop) -> None:
    """Evict the pods, then delete the Service. What the cluster refuses is logged and the rest goes on: a pod gone
    already frees nothing, one refused for now (a disruption budget) is evicted as an orphan later, and a Service
    without pods holds nothing."""
    for pod in stop.pods:
        try:
            pod_evict(backend=backend, pod=pod, reason=stop.reason)
        except BackendError as error:
            log.info("evict %s: %s", pod, error)
    if stop.service:
        try:
            backend.delete_service(stop.service)
        except BackendError as error:
            log.warning("delete service %s: %s", stop.service, error)
