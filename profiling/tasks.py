"""Celery tasks of the profiling app: each only calls a service."""
import logging

from celery import shared_task
from django.utils import timezone

from core.errors import ApplicationError
from profiling import forecasting, services

log = logging.getLogger(__name__)


@shared_task(name="profiling.task_profiles_daily", ignore_result=True)
def task_profiles_daily() -> int:
    """Recompute every task's historical profile (settings.CELERY_BEAT_SCHEDULE: daily at 03:00)."""
    return services.task_profiles_compute()


@shared_task(name="profiling.forecast_train_daily", ignore_result=True)
def forecast_train_daily() -> list[int]:
    """Train new load forecasters on the last 30 days (settings.CELERY_BEAT_SCHEDULE: daily at 04:00); too little
    history is logged, and the autoscaler keeps the models it has."""
    try:
        return [m.pk for m in forecasting.forecast_train(until=timezone.now(), days=30)]
    except ApplicationError as error:
        log.warning("no new forecast models: %s", error.message)
        return []
