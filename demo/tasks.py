"""The demo's Celery task; it keeps the name the beat schedule (tidal/settings.py) has always sent."""
from celery import shared_task
from django.conf import settings
from redis import Redis

from demo import trace_jobs


@shared_task(name="scheduler.demo_workload", ignore_result=True)
def demo_workload_tick() -> int:
    return trace_jobs.demo_submit_due(redis=Redis.from_url(settings.REDIS_URL),
                                      namespace=settings.TIDAL_REDIS_NAMESPACE)
