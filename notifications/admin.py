from django.contrib import admin

from core.admin import OperatorAdmin
from notifications.models import DepartmentSubscription, Delivery, Episode, Event, Preference


@admin.register(Preference)
class PreferenceAdmin(OperatorAdmin):
    list_display = ["user", "events", "waiting_hours", "email", "updated_at"]
    search_fields = ["user__username"]


@admin.register(DepartmentSubscription)
class DepartmentSubscriptionAdmin(OperatorAdmin):
    list_display = ["user", "department", "events", "email"]
    list_filter = ["department"]


@admin.register(Event)
class EventAdmin(OperatorAdmin):
    list_display = ["id", "kind", "subject", "created_at"]
    list_filter = ["kind"]
    readonly_fields = ["kind", "key", "department", "job", "decision", "subject", "body", "fields", "created_at"]


@admin.register(Delivery)
class DeliveryAdmin(OperatorAdmin):
    list_display = ["id", "user", "channel", "status", "attempts", "delivered_at", "created_at"]
    list_filter = ["status", "channel"]
    readonly_fields = ["event", "user", "channel", "target", "attempts", "last_error", "delivered_at", "claimed_until",
                       "created_at"]


@admin.register(Episode)
class EpisodeAdmin(OperatorAdmin):
    list_display = ["department", "kind", "resource", "opened_at", "closed_at"]
    list_filter = ["kind"]
