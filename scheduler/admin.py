from django.contrib import admin

from core.admin import DepartmentAdmin as CoreDepartmentAdmin, OperatorAdmin, OperatorInline
from core.models import Department
from scheduler.models import Framework, JobRun, Quota, TrainingJob


class QuotaInline(OperatorInline):
    model = Quota


# A department's page in the admin shows its quotas too: the scheduler's, so added here.
admin.site.unregister(Department)


@admin.register(Department)
class DepartmentAdmin(CoreDepartmentAdmin):
    inlines = [QuotaInline, *CoreDepartmentAdmin.inlines]


@admin.register(Framework)
class FrameworkAdmin(OperatorAdmin):
    list_display = ["name", "version", "certified"]
    filter_horizontal = ["certified_on"]

    @admin.display(description="certified on")
    def certified(self, obj: Framework) -> str:
        return ", ".join(m.name for m in obj.certified_on.all())

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("certified_on")


@admin.register(Quota)
class QuotaAdmin(OperatorAdmin):
    list_display = ["department", "resource_kind", "gpu_model", "own", "borrowed"]
    list_filter = ["resource_kind", "gpu_model", "department"]


class JobRunInline(OperatorInline):
    model = JobRun
    readonly_fields = ["attempt", "node", "gpu_model", "started_at", "ended_at", "outcome"]


@admin.register(TrainingJob)
class TrainingJobAdmin(OperatorAdmin):
    list_display = ["id", "name", "department", "status", "quota_kind", "gpus", "gpu_model", "assigned_gpu_model",
                    "node", "submitted_at"]
    list_filter = ["status", "quota_kind", "department", "gpu_model"]
    search_fields = ["name", "task_key", "submitter__username"]
    raw_id_fields = ["node", "submitter"]
    date_hierarchy = "submitted_at"
    inlines = [JobRunInline]
