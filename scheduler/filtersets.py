"""One FilterSet per model, shared by the REST API and the console so their filters cannot drift."""
import django_filters
from django import forms
from django.db.models import Q

from core.filtersets import UtcDateTimeFilter
from core.models import Decision, Membership
from scheduler.models import Framework, JobStatus, Quota, TrainingJob


class MembershipFilterSet(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__name")
    user = django_filters.CharFilter(field_name="user__username")

    class Meta:
        model = Membership
        fields = ["department", "user", "role"]


class FrameworkFilterSet(django_filters.FilterSet):
    certified_on = django_filters.CharFilter(field_name="certified_on__name", help_text="GPU model name")

    class Meta:
        model = Framework
        fields = ["name", "version", "certified_on"]


class QuotaFilterSet(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__name")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")

    class Meta:
        model = Quota
        fields = ["department", "resource_kind", "gpu_model"]


class TrainingJobFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="part of the job's name")
    department = django_filters.CharFilter(field_name="department__name")
    submitter = django_filters.CharFilter(field_name="submitter__username")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    # A column of the job itself: no join can repeat a row, so no DISTINCT (which the page count would sort by).
    status = django_filters.MultipleChoiceFilter(choices=JobStatus.choices, distinct=False)
    submitted_after = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = UtcDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = TrainingJob
        fields = ["department", "submitter", "gpu_model", "status", "task_key", "quota_kind"]


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
