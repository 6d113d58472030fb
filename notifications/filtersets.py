"""The deliveries' FilterSet, shared by the API and the console."""
import django_filters

from colocation.filtersets import IntegerFilter
from core.filtersets import UtcDateTimeFilter
from notifications.models import EVENT_CHOICES, Channel, DepartmentSubscription, Delivery


class DeliveryFilterSet(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=Delivery.Status.choices)
    channel = django_filters.ChoiceFilter(choices=Channel.choices)
    event = django_filters.ChoiceFilter(field_name="event__kind", choices=EVENT_CHOICES)
    job = IntegerFilter(field_name="event__job_id", min_value=1)
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Delivery
        fields = ["status", "channel", "event", "job", "since", "user"]


class SubscriptionFilterSet(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__name")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = DepartmentSubscription
        fields = ["department", "user"]
