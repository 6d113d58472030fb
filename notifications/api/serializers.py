"""Notification API shapes. Business rules (known events, http(s) webhooks, hours >= 1) are the services'; the
serializers hold JSON types (core.api.jsontypes)."""
import urllib.parse

from django.core.validators import RegexValidator
from rest_framework import serializers

from core.api.jsontypes import JSONTypes
from core.api.serializers import NameField
from core.models import Department
from notifications.channels import ADDRESS_MAX, WEBHOOK_URL_MESSAGE, WEBHOOK_URL_PATTERN
from notifications.events import DEPARTMENT_EVENTS, USER_EVENTS, EventKind, unknown_events
from notifications.models import DepartmentSubscription, Delivery, Preference
from notifications.services import MAX_WAITING_HOURS


def event_list(allowed: tuple[EventKind, ...], help_text: str) -> serializers.ListField:
    """Event names, stated as an enum in the schema; every unknown name is one message on the field."""
    return EventListField(child=serializers.ChoiceField(choices=[e.value for e in allowed]), help_text=help_text,
                          allowed=allowed)


class EventListField(serializers.ListField):
    def __init__(self, *, allowed: tuple[EventKind, ...], **kwargs):
        self.allowed = allowed
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, list):
            self.fail("not_a_list", input_type=type(data).__name__)
        if wrong := [item for item in data if not isinstance(item, str)]:
            raise serializers.ValidationError([f"{item!r} is not an event name (a string)" for item in wrong])
        if problems := unknown_events(data, self.allowed):
            raise serializers.ValidationError(problems)
        return list(data)


def webhook_field(**kwargs) -> serializers.CharField:
    return serializers.CharField(
        max_length=500, allow_blank=True, validators=[RegexValidator(WEBHOOK_URL_PATTERN, WEBHOOK_URL_MESSAGE)],
        help_text="An http(s) URL that receives a Slack-compatible JSON POST (`text`, plus `event`, `job`, "
                  "`department`, `message`, `at`, `url`); empty: none.", **kwargs)


class PreferenceSerializer(JSONTypes, serializers.ModelSerializer):
    events = event_list(USER_EVENTS, "Events of your jobs that reach you.")
    waiting_hours = serializers.IntegerField(min_value=1, max_value=MAX_WAITING_HOURS,
                                             help_text="waiting_long: after this many hours in one pending period.")
    email = serializers.BooleanField(help_text="E-mail to your account's address.")
    webhook_url = webhook_field()
    email_address = serializers.EmailField(source="user.email", required=False, allow_blank=True,
                                           max_length=ADDRESS_MAX,
                                           help_text="Where your e-mail goes, also your department subscriptions' "
                                                     "(empty: none); left out: unchanged.")
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text="null: the defaults.")

    class Meta:
        model = Preference
        fields = ["events", "waiting_hours", "email", "webhook_url", "email_address", "updated_at"]


class SubscriptionSerializer(JSONTypes, serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True, help_text="The subscriber (you, when you "
                                                                                   "create it).")
    department = NameField(slug_field="name", queryset=Department.objects.all())
    events = event_list(DEPARTMENT_EVENTS, "The department's events: any of its jobs' (admitted … failed), its GPU "
                                           "quota full, its jobs failing repeatedly (once per episode).")
    email = serializers.BooleanField(default=True)
    webhook_url = webhook_field(default="")

    class Meta:
        model = DepartmentSubscription
        fields = ["id", "user", "department", "events", "email", "webhook_url", "created_at"]
        read_only_fields = ["created_at"]
        validators = []  # one per department: an upsert in subscription_set


class DeliverySerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True, allow_null=True,
                                 help_text="Whom it was sent to; null: the operators' alert webhook.")
    event = serializers.CharField(source="event.kind", read_only=True)
    subject = serializers.CharField(source="event.subject", read_only=True)
    job = serializers.IntegerField(source="event.job_id", read_only=True, allow_null=True)
    department = serializers.CharField(source="event.department.name", read_only=True, allow_null=True, default=None)
    target = serializers.SerializerMethodField(help_text="The e-mail address, or the webhook's host (its URL may "
                                                         "hold a token).")

    class Meta:
        model = Delivery
        fields = ["id", "user", "event", "subject", "job", "department", "channel", "target", "status", "attempts",
                  "last_error", "delivered_at", "created_at"]

    def get_target(self, delivery: Delivery) -> str:
        return delivery.target if delivery.channel == "email" else urllib.parse.urlsplit(delivery.target).netloc
