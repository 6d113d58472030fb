"""Celery tasks of the colocation app: each only calls a service."""
from celery import shared_task
from celery.signals import worker_init
from django.conf import settings
from redis import Redis

from colocation import autoscaler, controller, live_backend
from colocation.loads import demo_lending_profile
from colocation.selectors import lending_profile


@worker_init.connect
def load_the_cluster_client(**_: object) -> None:
    if settings.TIDAL_CLUSTER_BACKEND == "kubernetes":
        live_backend.kubernetes_preload()


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
