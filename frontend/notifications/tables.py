import urllib.parse

import django_tables2 as tables

from frontend.templatetags.console import badge, when
from notifications.models import Delivery

STATUS_BADGES = {"delivered": "succeeded", "failed": "failed", "retrying": "preempted", "pending": "pending"}


class DeliveryTable(tables.Table):
    created_at = tables.Column(verbose_name="When")
    subject = tables.Column(accessor="event__subject", verbose_name="Notification", orderable=False)
    channel = tables.Column()
    target = tables.Column(verbose_name="To", orderable=False)
    status = tables.Column()
    attempts = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    last_error = tables.Column(verbose_name="Last error", orderable=False, default="")

    class Meta:
        model = Delivery
        fields = ()
        sequence = ("created_at", "subject", "channel", "target", "status", "attempts", "last_error")
        order_by = ("-created_at",)
        empty_text = "Nothing sent to you yet."

    def render_created_at(self, value):
        return when(value)

    def render_status(self, value, record):
        return badge(STATUS_BADGES.get(record.status, "pending"), value)

    def render_target(self, value, record):
        # The host only: a webhook's URL often carries its token.
        return value if record.channel == "email" else f"webhook at {urllib.parse.urlsplit(value).netloc}"
