"""One FilterSet per model, shared by the REST API and the console so their filters cannot drift."""
import django_filters

from scheduler.models import Decision, Framework, JobStatus, Membership, Quota, TrainingJob


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
    department = django_filters.CharFilter(field_name="department__name")
    submitter = django_filters.CharFilter(field_name="submitter__username")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    status = django_filters.MultipleChoiceFilter(choices=JobStatus.choices)
    submitted_after = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")
    submitted_before = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")

    class Meta:
        model = TrainingJob
        fields = ["department", "submitter", "gpu_model", "status", "task_key", "quota_kind"]


class DecisionFilterSet(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__name")
    subject_prefix = django_filters.CharFilter(field_name="subject", lookup_expr="startswith")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")

    class Meta:
        model = Decision
        fields = ["kind", "subject", "reason", "department"]
