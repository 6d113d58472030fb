"""Celery tasks of the colocation app: each only calls a service."""
import time

from celery import Task, shared_task
from celery.signals import worker_init
from django.conf import settings
from redis import Redis

from colocation import autoscaler, controller, demand_history, live_backend
from colocation.loads import demo_lending_profile
from colocation.policy.calibration import RuntimeCalibration
from colocation.selectors import lending_profile
from core.expiring import Expiring


@worker_init.connect
def load_the_cluster_client(**_: object) -> None:
    if settings.TIDAL_CLUSTER_BACKEND == "kubernetes":
        live_backend.kubernetes_preload()


class LendingTask(Task):
    """The lending task keeps its worker's per-minute caches of the demand history and of the run time calibration
    (Celery makes one task object per worker process, so the caches live as long as the worker and are nobody
    else's)."""

    _history: demand_history.HistoryCache | None = None
    _calibration: Expiring[RuntimeCalibration] | None = None

    @property
    def history(self) -> demand_history.HistoryCache:
        if self._history is None:
            self._history = demand_history.HistoryCache()
        return self._history

    @property
    def calibration(self) -> Expiring[RuntimeCalibration]:
        if self._calibration is None:
            self._calibration = Expiring()
        return self._calibration


@shared_task(name="colocation.lending_tick", ignore_result=True, bind=True, base=LendingTask)
def lending_tick(self: LendingTask) -> dict | None:
    profile = lending_profile(now=time.time(), calibration=self.calibration)
    if settings.TIDAL_DEMO_TRAFFIC:  # the demo's day is compressed: real-time busy windows do not apply
        profile = demo_lending_profile(profile)
    report = controller.run_lending_tick(redis=Redis.from_url(settings.REDIS_URL),
                                         namespace=settings.TIDAL_REDIS_NAMESPACE, profile=profile,
                                         history=self.history)
    return report and report.__dict__


@shared_task(name="colocation.autoscale_tick", ignore_result=True)
def autoscale_tick() -> dict | None:
    report = autoscaler.run_autoscale_tick(redis=Redis.from_url(settings.REDIS_URL),
                                           namespace=settings.TIDAL_REDIS_NAMESPACE)
    return report and report.__dict__
