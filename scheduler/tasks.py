"""Celery tasks of the scheduler: each only calls a service."""
from celery import shared_task
from celery.signals import worker_process_init
from django.conf import settings
from django.utils import timezone
from redis import Redis

from core.expiring import Expiring
from scheduler import live, logs, services
from scheduler.policy.cache import CycleCache
from scheduler.policy.profile import get_profile

# The live loop's caches: one per worker process, which runs one tick at a time (prefork pool).
_CYCLE_CACHE = CycleCache()
_CALIBRATION = Expiring()  # the lending profile's run time calibration (colocation.selectors.lending_profile)


@worker_process_init.connect
def load_placement_kernel(**_: object) -> None:
    """Each worker process loads the placement kernel (on a fresh clone: compiles it, ~7 s) before its first tick."""
    from scheduler.policy import gpuloss  # numba: in the worker processes only, not in every importer of the tasks

    gpuloss.warm_up()


@shared_task(name="scheduler.tick", ignore_result=True)
def scheduler_tick() -> dict | None:
    report = live.run_live_tick(redis=Redis.from_url(settings.REDIS_URL), namespace=settings.TIDAL_REDIS_NAMESPACE,
                                profile=get_profile(settings.TIDAL_SCHEDULER_PROFILE), cache=_CYCLE_CACHE,
                                calibration=_CALIBRATION)
    return report and report.__dict__


@shared_task(name="scheduler.learn_workload", ignore_result=True)
def learn_workload() -> int:
    """The fragmentation measure's target workload from the last week's submissions (settings: hourly)."""
    return len(services.workload_learn(now=timezone.now()).shapes)


@shared_task(name="scheduler.logs_expire", ignore_result=True)
def logs_expire() -> int:
    """Delete job log archives older than TIDAL_LOG_RETENTION_DAYS (settings: daily)."""
    return logs.logs_expire(now=timezone.now(), days=settings.TIDAL_LOG_RETENTION_DAYS)
