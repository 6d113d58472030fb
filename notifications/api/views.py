"""Notification API views: thin — validate, call a service (writes) or a selector (reads), render."""
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, mixins, viewsets

from core.api.views import RestrictedMixin
from core.errors import ApplicationError
from notifications import selectors, services
from notifications.api import serializers as s
from notifications.filtersets import DeliveryFilterSet, SubscriptionFilterSet
from notifications.models import DepartmentSubscription, Delivery

RULES = ("Beyond the schema (a 400 naming the field): every event is a known one; `webhook_url` is empty or an "
         "http(s) URL with a host")
ADDRESS = "`email_address` is empty or a valid e-mail address (left out: unchanged)"


class PreferenceView(generics.RetrieveUpdateAPIView):
    """Your notification settings: which events of your jobs reach you, by e-mail and/or webhook. Until you save
    them, the defaults (preempted, taken_back and failed by e-mail; no webhook)."""

    serializer_class = s.PreferenceSerializer
    filter_backends = []

    def get_object(self):
        return selectors.preference_of(user=self.request.user)

    @extend_schema(description=f"Replace your settings. {RULES}; {ADDRESS}; `waiting_hours` is 1 to 720.")
    def put(self, request, *args, **kwargs):
        return super().put(request, *args, **kwargs)

    @extend_schema(description=f"Change some of your settings. {RULES}; {ADDRESS}; `waiting_hours` is 1 to 720.")
    def patch(self, request, *args, **kwargs):
        return super().patch(request, *args, **kwargs)

    def perform_update(self, serializer):
        current, given = serializer.instance, serializer.validated_data
        serializer.instance = services.preference_set(
            user=self.request.user, events=given.get("events", current.events),
            waiting_hours=given.get("waiting_hours", current.waiting_hours), email=given.get("email", current.email),
            webhook_url=given.get("webhook_url", current.webhook_url),
            email_address=given.get("user", {}).get("email"))


class DeliveryViewSet(RestrictedMixin, viewsets.ReadOnlyModelViewSet):
    """Your notifications and what became of each: status (pending, retrying, delivered, failed), attempts, the
    last error and when it was delivered. Operators see everyone's (`?user=` for one user's)."""

    base_queryset = selectors.deliveries()
    serializer_class = s.DeliverySerializer
    filterset_class = DeliveryFilterSet
    ordering_fields = ["created_at", "id"]
    queryset = Delivery.objects.none()  # for the schema; requests read base_queryset.restrict(user)


@extend_schema_view(
    create=extend_schema(description=f"Subscribe to a department's events (its admins and operators); a second "
                                     f"subscription to the same department replaces the first. {RULES}; you "
                                     f"administer `department`."),
    partial_update=extend_schema(description=f"Change a subscription. {RULES}."),
)
class SubscriptionViewSet(RestrictedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
                          mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Your subscriptions to department events (department admins): quota full, jobs failing repeatedly, and any
    of the department's jobs' events. Operators see and manage everyone's."""

    base_queryset = selectors.subscriptions()
    serializer_class = s.SubscriptionSerializer
    queryset = DepartmentSubscription.objects.none()  # for the schema; requests read base_queryset.restrict(user)
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    filterset_class = SubscriptionFilterSet

    def perform_create(self, serializer):
        serializer.instance = services.subscription_set(user=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        current, given = serializer.instance, serializer.validated_data
        if given.get("department", current.department) != current.department:
            raise ApplicationError.for_field("department", "cannot be changed: subscribe to the other department")
        serializer.instance = services.subscription_set(  # its subscriber's, changed by them or an operator
            user=current.user, department=current.department,
            events=given.get("events", current.events), email=given.get("email", current.email),
            webhook_url=given.get("webhook_url", current.webhook_url))

    def perform_destroy(self, instance):
        services.subscription_delete(subscription=instance)
