"""One FilterSet per model, shared by the REST API and the console so their filters cannot drift."""
import django_filters

from core.filtersets import UtcDateTimeFilter
from scheduler.models import Framework, JobStatus, Quota, TrainingJob


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
