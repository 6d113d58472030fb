"""Reads of the notifications app: preferences (with their defaults), subscriptions, deliveries."""
from datetime import datetime, timedelta

from django.db.models import Q, QuerySet

from core.models import Department, Membership
from notifications.models import DepartmentSubscription, Delivery, Preference

PENDING_STALE_AFTER = timedelta(minutes=5)  # a delivery queued that long ago and never tried lost its message


def preference_of(*, user) -> Preference:
    """The user's preference; the defaults (unsaved) until they save one."""
    return Preference.objects.filter(user=user).first() or Preference(user=user)


def subscriptions() -> QuerySet[DepartmentSubscription]:
    return DepartmentSubscription.objects.select_related("department", "user")


def subscriptions_of(*, user) -> QuerySet[DepartmentSubscription]:
    """The user's own (the console's department section)."""
    return subscriptions().filter(user=user)


def administered_departments(*, user) -> QuerySet[Department]:
    """Where the user may subscribe: the departments they administer (operators: every one)."""
    if user.is_staff:
        return Department.objects.all()
    return Department.objects.filter(memberships__user=user, memberships__role=Membership.Role.ADMIN)


def admin_pairs(*, department_ids: set[int]) -> set[tuple[int, int]]:
    """(user id, department id) of every admin of these departments."""
    return set(Membership.objects.filter(department_id__in=department_ids, role=Membership.Role.ADMIN)
               .values_list("user_id", "department_id"))


def deliveries() -> QuerySet[Delivery]:
    return Delivery.objects.select_related("event", "event__department", "user")


def deliveries_to(*, user) -> QuerySet[Delivery]:
    """What was sent to the user (the console's "Sent to me", operators' included)."""
    return deliveries().filter(user=user)


def stale_pending(*, now: datetime) -> list[int]:
    """Deliveries whose queue message was lost (a worker died): never tried since long after they were made, or
    claimed by an attempt that never recorded its outcome (its claim expired; the message was taken with it)."""
    never_tried = Q(status=Delivery.Status.PENDING, attempts=0, created_at__lt=now - PENDING_STALE_AFTER)
    abandoned = Q(status__in=[Delivery.Status.PENDING, Delivery.Status.RETRYING], claimed_until__lt=now)
    return list(Delivery.objects.filter(never_tried | abandoned).values_list("pk", flat=True)[:500])
