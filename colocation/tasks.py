"""Celery tasks of the colocation app: each only calls a service."""
from celery import shared_task
from django.conf import settings
from redis import Redis

from colocation import autoscaler, controller
from colocation.loads import demo_lending_profile
from colocation.selectors import lending_profile


@shared_task(name="colocation.lending_tick", ignore_result=True)
def lending_tick() -> dict | None:
    profile = lending_profile()
    if settings.TIDAL_DEMO_TRAFFIC:  # the demo's day is compressed: real-time busy windows do not apply
        profile = demo_lending_profile(profile)
    report = controller.run_lending_tick(redis=Redis.from_url(settings.REDIS_URL),
                                         namespace=settings.TIDAL_REDIS_NAMESPACE, profile=profile)
    return report and report.__dict__


@shared_task(name="colocation.autoscale_tick", ignore_result=True)
def autoscale_tick() -> dict | None:
    report = autoscaler.run_autoscale_tick(redis=Redis.from_url(settings.REDIS_URL),
                                           namespace=settings.TIDAL_REDIS_NAMESPACE)
    return report and report.__dict__
