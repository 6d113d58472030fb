"""Celery tasks of the colocation app: each only calls a service."""
from celery import Task, shared_task
from celery.signals import worker_init
from django.conf import settings
from redis import Redis

from colocation import autoscaler, controller, demand_history, live_backend
from colocation.loads import demo_lending_profile
from colocation.selectors import lending_profile


@worker_init.connect
def load_the_cluster_client(**_: object) -> None:
    if settings.TIDAL_CLUSTER_BACKEND == "kubernetes":
        live_backend.kubernetes_preload()


class LendingTask(Task):
    """The lending task keeps its worker's per-minute cache of the demand history (Celery makes one task object per
    worker process, so the cache lives as long as the worker and is nobody else's)."""

    _history: demand_history.HistoryCache | None = None

    @property
    def history(self) -> demand_history.HistoryCache:
        if self._history is None:
            self._history = demand_history.HistoryCache()
        return self._history


@shared_task(name="colocation.lending_tick", ignore_result=True, bind=True, base=LendingTask)
def lending_tick(self: LendingTask) -> dict | None:
    profile = lending_profile()
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
