from django.contrib import admin

from scheduler.admin import OperatorAdmin, OperatorInline
from colocation.models import InferenceService, Node, ResourceGroup, ScalingThreshold


@admin.register(ResourceGroup)
class ResourceGroupAdmin(OperatorAdmin):
    list_display = ["name", "hardware_class", "gpu_model"]
    search_fields = ["name"]


@admin.register(Node)
class NodeAdmin(OperatorAdmin):
    list_display = ["name", "resource_group", "gpu_model", "gpu_count", "cpu_milli", "memory_mib", "pool", "state"]
    list_filter = ["state", "pool", "resource_group", "gpu_model"]
    search_fields = ["name"]


class ScalingThresholdInline(OperatorInline):
    model = ScalingThreshold


@admin.register(InferenceService)
class InferenceServiceAdmin(OperatorAdmin):
    list_display = ["name", "department", "priority", "replicas", "min_replicas", "max_replicas", "autoscaling"]
    list_filter = ["department", "autoscaling"]
    search_fields = ["name"]
    inlines = [ScalingThresholdInline]
