"""Celery tasks of the colocation app: each only calls a service."""
from celery import shared_task
from django.conf import settings
from redis import Redis

from colocation import controller
from colocation.selectors import lending_profile


@shared_task(name="colocation.lending_tick", ignore_result=True)
def lending_tick() -> dict | None:
    report = controller.run_lending_tick(redis=Redis.from_url(settings.REDIS_URL),
                                         namespace=settings.TIDAL_REDIS_NAMESPACE,
                                         profile=lending_profile())
    return report and report.__dict__
