"""Raw profile records for operators: read-only (the profile sink and the daily batch write them)."""
from django.contrib import admin

from core.admin import OperatorAdmin
from profiling.models import JobMinute, LateSample, RunSummary, ServiceMinute, TaskProfile


class ReadOnlyOperatorAdmin(OperatorAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(JobMinute)
class JobMinuteAdmin(ReadOnlyOperatorAdmin):
    list_display = ["run", "minute", "samples", "gpu_util_mean", "gpu_mem_util_peak", "cpu_cores_mean",
                    "cpu_cores_peak", "emitted_at", "written_at"]
    list_select_related = ["run__job"]
    search_fields = ["run__job__name", "run__job__task_key", "run__pod"]
    date_hierarchy = "minute"


@admin.register(RunSummary)
class RunSummaryAdmin(ReadOnlyOperatorAdmin):
    list_display = ["run", "outcome", "samples", "minutes", "gpu_util_mean", "gpu_mem_util_peak", "cpu_cores_mean",
                    "cpu_cores_peak", "run_s", "wait_s", "computed_at"]
    list_filter = ["outcome"]
    list_select_related = ["run__job"]
    search_fields = ["run__job__name", "run__job__task_key"]


@admin.register(TaskProfile)
class TaskProfileAdmin(ReadOnlyOperatorAdmin):
    list_display = ["task_key", "runs", "mean_run_s", "mean_wait_s", "computed_at"]
    search_fields = ["task_key"]


@admin.register(ServiceMinute)
class ServiceMinuteAdmin(ReadOnlyOperatorAdmin):
    list_display = ["service", "minute", "samples", "replicas", "gpu_util_mean", "cpu_util_mean", "qps",
                    "errors_per_s", "latency_mean_ms", "latency_p99_ms", "emitted_at", "written_at"]
    list_filter = ["service"]
    search_fields = ["service__name"]
    date_hierarchy = "minute"


@admin.register(LateSample)
class LateSampleAdmin(ReadOnlyOperatorAdmin):
    list_display = ["ts", "pod", "job_id", "run_attempt", "service", "emitted_at", "first_seen"]
    search_fields = ["pod", "service"]
    date_hierarchy = "ts"
