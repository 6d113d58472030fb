import django_tables2 as tables
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from core.models import Decision
from frontend.templatetags.console import when

SUBJECT_PAGES = {"job": "job", "department": "department", "service": "service"}


def subject_url(subject: str) -> str | None:
    """The console page a decision is about: job:42, node:n1, service:x, department:y."""
    kind, _, key = subject.partition(":")
    if kind == "node":
        return f"{reverse('ops-nodes')}?node={key}"
    try:
        return reverse(SUBJECT_PAGES[kind], args=[key]) if kind in SUBJECT_PAGES else None
    except NoReverseMatch:
        return None


class DecisionTable(tables.Table):
    created_at = tables.Column(verbose_name="When")
    kind = tables.Column()
    subject = tables.Column()
    department = tables.Column(linkify=("department", {"name": tables.A("department__name")}))
    reason = tables.Column(attrs={"td": {"class": "mono small"}})
    message = tables.Column(orderable=False)

    class Meta:
        model = Decision
        fields = ("created_at", "kind", "subject", "department", "reason", "message")
        order_by = ("-created_at",)
        empty_text = "No decision matches: widen the filters."

    def render_created_at(self, value) -> str:
        return when(value, "both")

    def render_kind(self, record) -> str:
        return format_html('<span class="badge kind">{}</span>', record.get_kind_display())

    def render_subject(self, value) -> str:
        url = subject_url(value)
        return format_html('<a href="{}">{}</a>', url, value) if url else value
