"""Who wants to hear about what, the events found in the decision log, and each delivery's outcome
(docs/concepts/notifications.md#events-and-channels)."""
from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from core.models import Decision, Department
from notifications.events import DEFAULT_DEPARTMENT_EVENTS, DEFAULT_EVENTS, DEFAULT_WAITING_HOURS, EventKind
from scheduler.models import TrainingJob

EVENT_CHOICES = [(e.value, e.label) for e in EventKind]


def default_events() -> list[str]:
    return [e.value for e in DEFAULT_EVENTS]


def default_department_events() -> list[str]:
    return [e.value for e in DEFAULT_DEPARTMENT_EVENTS]


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class Preference(models.Model):
    """A user's choice for their own jobs; a user without a row has the defaults (an unsaved Preference)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="notification_preference")
    events = models.JSONField(default=default_events, help_text="Event names (EventKind values).")
    waiting_hours = models.PositiveSmallIntegerField(
        default=DEFAULT_WAITING_HOURS, validators=[MinValueValidator(1)],
        help_text="waiting_long: a pending period longer than this many hours.")
    email = models.BooleanField(default=True, help_text="E-mail to the user's address.")
    webhook_url = models.CharField(max_length=500, blank=True, help_text="http(s); empty: no webhook.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(waiting_hours__gte=1), name="notify_waiting_hours_min")]

    def __str__(self) -> str:
        return f"notifications of {self.user}"


class SubscriptionQuerySet(models.QuerySet):
    def restrict(self, user, role: str | None = None) -> "SubscriptionQuerySet":
        """Operators see every subscription, others their own."""
        if not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(user=user)


class DepartmentSubscription(models.Model):
    """A department admin's subscription to their department's events."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="department_subscriptions")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="notification_subscriptions")
    events = models.JSONField(default=default_department_events)
    email = models.BooleanField(default=True)
    webhook_url = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = SubscriptionQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "id"]
        constraints = [models.UniqueConstraint(fields=["user", "department"], name="notify_one_subscription")]

    def __str__(self) -> str:
        return f"{self.user} on {self.department}"


class ScanCursor(models.Model):
    """The last decision the scan handled, kept with the events it made (one transaction): a restart neither skips
    nor repeats."""

    name = models.CharField(max_length=32, primary_key=True)
    last_decision_id = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)


class Episode(models.Model):
    """A department condition (quota full on one resource, jobs failing repeatedly) from when it began to when it
    cleared: notified once per episode."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="notification_episodes")
    kind = models.CharField(max_length=24, choices=EVENT_CHOICES)
    resource = models.CharField(max_length=64, blank=True, help_text="The quota's resource (quota_full).")
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["department", "kind", "resource"],
                                               condition=Q(closed_at__isnull=True), name="notify_one_open_episode")]


class Event(models.Model):
    """Something someone asked to hear about; `key` makes it once (a decision, a pending period, an episode)."""

    kind = models.CharField(max_length=24, choices=EVENT_CHOICES, db_index=True)
    key = models.CharField(max_length=160, unique=True)
    department = models.ForeignKey(Department, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    job = models.ForeignKey(TrainingJob, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    decision = models.ForeignKey(Decision, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    subject = models.CharField(max_length=200)
    body = models.TextField()
    fields = models.JSONField(default=dict, help_text="The structured fields a webhook receives.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.subject


class DeliveryQuerySet(models.QuerySet):
    def restrict(self, user, role: str | None = None) -> "DeliveryQuerySet":
        """Operators see every delivery (docs/reference/permissions.md#roles), others their own: a delivery is personal."""
        if not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(user=user)


class Delivery(models.Model):
    """One event to one receiver on one channel, with its outcome."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        RETRYING = "retrying", "Retrying"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True,
                             related_name="notification_deliveries",
                             help_text="Empty: the operators' alert webhook (TIDAL_ALERT_WEBHOOK_URL).")
    channel = models.CharField(max_length=8, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="The e-mail address or webhook URL.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING, db_index=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(
        null=True, blank=True,
        help_text="Set while a worker sends it (no other worker sends until then); cleared with the outcome.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["event", "user", "channel", "target"], name="notify_once")]

    def __str__(self) -> str:
        return f"{self.channel} to {self.user or 'the operators'}: {self.event}"
