"""Filters every app's FilterSets share (times in UTC, strict booleans), and the FilterSets of core's own entities."""
from datetime import timezone

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q
from django_filters.fields import IsoDateTimeField

from core.models import Decision, Membership


class _UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time in UTC: PostgreSQL refuses offsets beyond ±15:59, which ISO 8601 (and Python) allow."""

    def to_python(self, value):
        if value == "":  # the parameter is there but empty: not a time (leave it out to not filter)
            raise ValidationError("a date-time, e.g. 2026-01-31T12:00:00Z", code="invalid")
        value = super().to_python(value)
        try:
            return value.astimezone(timezone.utc) if value is not None else None
        except OverflowError:
            raise ValidationError("the time is out of range once converted to UTC", code="overflow")


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = _UtcIsoDateTimeField


class _StrictBooleanField(forms.NullBooleanField):
    def to_python(self, value):
        if value in (None, True, False):
            return value
        if str(value).lower() in ("true", "false"):
            return str(value).lower() == "true"
        raise ValidationError("true or false", code="invalid")


class StrictBooleanFilter(django_filters.BooleanFilter):
    """true or false; anything else is a 400 (django-filter would quietly not filter)."""

    field_class = _StrictBooleanField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", forms.TextInput)  # the select widgets turn any unknown text into "no filter"
        super().__init__(*args, **kwargs)


class MembershipFilterSet(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__name")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["department", "user", "role"]


class DecisionFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search",
                                  help_text="text in the decision's message, subject or reason (any case)",
                                  widget=forms.SearchInput(attrs={"placeholder": "message, subject or reason"}))
    kind = django_filters.ChoiceFilter(choices=Decision.Kind.choices, empty_label="any")
    subject = django_filters.CharFilter(widget=forms.TextInput(attrs={"placeholder": "job:42, node:t4-1"}))
    department = django_filters.CharFilter(field_name="department__name", label="Department")
    subject_prefix = django_filters.CharFilter(field_name="subject", lookup_expr="startswith")
    created_after = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = Decision
        fields = ["q", "kind", "subject", "reason", "department"]

    def search(self, queryset, name: str, value: str):
        return queryset.filter(Q(message__icontains=value) | Q(subject__icontains=value) | Q(reason__icontains=value))
