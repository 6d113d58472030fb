"""Celery tasks of the notifications app: each only calls a service (docs/concepts/notifications.md#how-it-works)."""
from celery import shared_task
from django.utils import timezone

from notifications import selectors, services
from notifications.services import MAX_ATTEMPTS, DeliveryFailed


@shared_task(name="notifications.scan", ignore_result=True)
def scan() -> int:
    """Turn new decisions, long waits and department episodes into deliveries (settings.CELERY_BEAT_SCHEDULE:
    every TIDAL_NOTIFY_SCAN_S), and send each."""
    now = timezone.now()
    made = services.notifications_scan(now=now)
    # After the scan committed (the rows exist when a worker takes them); with the deliveries whose message was lost.
    for delivery_id in made + [pk for pk in selectors.stale_pending(now=now) if pk not in made]:
        deliver.delay(delivery_id)
    return len(made)


@shared_task(name="notifications.deliver", ignore_result=True, autoretry_for=(DeliveryFailed,),
             retry_backoff=True, retry_backoff_max=600, retry_jitter=True, max_retries=MAX_ATTEMPTS - 1)
def deliver(delivery_id: int) -> str:
    """One attempt (retried with exponential backoff while the service says another is due)."""
    delivery = services.delivery_attempt(delivery_id=delivery_id)
    return delivery.status if delivery is not None else "gone"
