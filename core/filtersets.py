"""Filters every app's FilterSets share: times in UTC and strict booleans."""
from datetime import timezone

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django_filters.fields import IsoDateTimeField


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
