"""Celery tasks of the scheduler: each only calls a service."""
from celery import shared_task
from django.conf import settings
from redis import Redis

from scheduler import live, whatif_run
from scheduler.policy.profile import get_profile


@shared_task(name="scheduler.tick", ignore_result=True)
def scheduler_tick() -> dict | None:
    report = live.run_live_tick(redis=Redis.from_url(settings.REDIS_URL), namespace=settings.TIDAL_REDIS_NAMESPACE,
                                profile=get_profile(settings.TIDAL_SCHEDULER_PROFILE))
    return report and report.__dict__


@shared_task(name="scheduler.replay", ignore_result=True)
def replay_run(run_id: int) -> str:
    return whatif_run.replay_execute(run_id=run_id).status
