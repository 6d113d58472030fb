from django.contrib import admin

from colocation.models import InferenceService, Node, NodeTransition, ResourceGroup, ScalingThreshold
from core.admin import OperatorAdmin, OperatorInline


@admin.register(ResourceGroup)
class ResourceGroupAdmin(OperatorAdmin):
    list_display = ["name", "hardware_class", "gpu_model", "lending", "min_rate", "expect_rate", "max_rate"]
    search_fields = ["name"]


@admin.register(Node)
class NodeAdmin(OperatorAdmin):
    list_display = ["name", "resource_group", "gpu_model", "gpu_count", "cpu_milli", "memory_mib", "pool", "state",
                    "pinned"]
    list_filter = ["state", "pool", "pinned", "resource_group", "gpu_model"]
    search_fields = ["name"]


class ScalingThresholdInline(OperatorInline):
    model = ScalingThreshold


@admin.register(InferenceService)
class InferenceServiceAdmin(OperatorAdmin):
    list_display = ["name", "department", "priority", "replicas", "min_replicas", "max_replicas", "autoscaling"]
    list_filter = ["department", "autoscaling"]
    search_fields = ["name"]
    inlines = [ScalingThresholdInline]


@admin.register(NodeTransition)
class NodeTransitionAdmin(OperatorAdmin):
    """History of conversions. Start them through the API (validated); here operators read and annotate."""

    list_display = ["started_at", "node", "direction", "status", "step", "requested_by", "reason", "waiting_for"]
    list_filter = ["status", "direction", "node__resource_group"]
    search_fields = ["node__name", "message"]
    readonly_fields = ["node", "direction", "step", "status", "requested_by", "reason", "message", "waiting_for",
                       "evict_at", "started_at", "updated_at", "finished_at"]

    def has_add_permission(self, request) -> bool:
        return False  # a transition by hand would skip the checks in colocation.services.transition_request
