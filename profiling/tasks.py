"""Celery tasks of the profiling app: each only calls a service."""
from celery import shared_task

from profiling import services


@shared_task(name="profiling.task_profiles_daily", ignore_result=True)
def task_profiles_daily() -> int:
    """Recompute every task's historical profile (settings.CELERY_BEAT_SCHEDULE: daily at 03:00)."""
    return services.task_profiles_compute()
