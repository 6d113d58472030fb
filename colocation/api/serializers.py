"""Shapes of the colocation API."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from colocation.models import (InferenceService, Node, NodeTransition, ResourceGroup, ScalingSchedule, ScalingThreshold,
                               ServiceGroup)
from core.api.jsontypes import JSONTypes
from core.api.serializers import DecisionSerializer, NameField, UnsignedDecimalField, WholeItem, gpu_model_field
from core.models import Decision, Department


class ResourceGroupSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    node_count = serializers.IntegerField(read_only=True)
    fixed_pool_nodes = serializers.IntegerField(read_only=True)

    class Meta:
        model = ResourceGroup
        fields = ["id", "name", "hardware_class", "gpu_model", "node_count", "fixed_pool_nodes", "lending",
                  "lending_forecast", "min_rate", "expect_rate", "max_rate"]


class GroupAllocationSerializer(serializers.Serializer):
    """selectors.GroupAllocation: a group's capacity and what every pod on it holds, as the lending tick last saw it."""

    resource_group = serializers.CharField()
    observed_at = serializers.DateTimeField()
    gpus = serializers.FloatField()
    gpus_allocated = serializers.FloatField()
    gpus_fragmented = serializers.FloatField(allow_null=True, help_text="Idle GPUs the typical jobs cannot use.")
    cpu_milli = serializers.IntegerField()
    cpu_milli_allocated = serializers.IntegerField()
    memory_mib = serializers.IntegerField()
    memory_mib_allocated = serializers.IntegerField()
    gpus_used = serializers.FloatField(allow_null=True, help_text="GPUs really busy (utilization x GPUs) in "
                                       "used_minute, from the task profiles; null while the profile pipeline is down.")
    used_minute = serializers.DateTimeField(allow_null=True, help_text="The newest profiled minute.")


class ResourceGroupSettingsSerializer(JSONTypes, serializers.ModelSerializer):
    min_rate = serializers.FloatField(min_value=0, max_value=1, required=False)
    expect_rate = serializers.FloatField(min_value=0, max_value=1, required=False)
    max_rate = serializers.FloatField(min_value=0, max_value=1, required=False)

    class Meta:
        model = ResourceGroup
        fields = ["lending", "lending_forecast", "min_rate", "expect_rate", "max_rate"]


class TransitionSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = NodeTransition
        fields = ["id", "node", "direction", "step", "status", "requested_by", "reason", "message", "waiting_for",
                  "evict_at", "started_at", "updated_at", "finished_at"]


class PinSerializer(JSONTypes, serializers.Serializer):
    pinned = serializers.BooleanField()


class NodeSerializer(serializers.ModelSerializer):
    resource_group = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    transition = serializers.SerializerMethodField(help_text="The transition in progress, if any")

    class Meta:
        model = Node
        fields = [
            "id", "name", "resource_group", "gpu_model", "gpu_count", "cpu_milli", "memory_mib", "pool", "state",
            "state_changed_at", "pinned", "transition",
        ]

    @extend_schema_field(TransitionSerializer(allow_null=True))
    def get_transition(self, node: Node) -> dict | None:
        open_ = [t for t in node.transitions.all() if t.status == NodeTransition.Status.OPEN]
        return TransitionSerializer(open_[0]).data if open_ else None


@extend_schema_field({"type": "number", "format": "double", "minimum": 0, "exclusiveMinimum": True, "maximum": 1})
class RateField(serializers.FloatField):
    """A rate of an autoscaling threshold, 0 < rate ≤ 1 (0 < min_rate < expect_rate < max_rate ≤ 1: the order is the
    service's rule)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_value=1, **kwargs)  # no min_value: drf-spectacular would make the minimum inclusive

    def to_internal_value(self, data) -> float:
        value = super().to_internal_value(data)
        if value <= 0:
            raise serializers.ValidationError("must be above 0")
        return value


class ScalingThresholdSerializer(WholeItem, JSONTypes, serializers.ModelSerializer):
    min_rate = RateField()
    expect_rate = RateField()
    max_rate = RateField()

    class Meta:
        model = ScalingThreshold
        fields = ["metric", "min_rate", "expect_rate", "max_rate"]


@extend_schema_field({"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d$", "example": "08:00"})
class ClockTimeField(serializers.TimeField):
    """A local wall-clock time of day, HH:MM, in and out."""

    def __init__(self, **kwargs) -> None:
        super().__init__(format="%H:%M", input_formats=["%H:%M"], **kwargs)


class ScalingScheduleSerializer(WholeItem, JSONTypes, serializers.ModelSerializer):
    weekdays = serializers.CharField(max_length=32, required=False, default="*",
                                     help_text='Cron day-of-week: "*", "1-5", "mon-fri", "0,6" (0 and 7 = Sunday).')
    start = ClockTimeField(help_text="Local time (TIME_ZONE), inclusive.")
    end = ClockTimeField(help_text="Exclusive; at or before start: runs past midnight.")

    class Meta:
        model = ScalingSchedule
        fields = ["weekdays", "start", "end", "min_replicas"]


class ServiceGroupSerializer(serializers.ModelSerializer):
    """One group (replica) of a service as the group tick last saw it."""

    class Meta:
        model = ServiceGroup
        fields = ["index", "leader", "nodes", "pods_ready", "ready", "restarts", "pod_restarts", "backoff_until",
                  "revision", "updated_at"]


class InferenceServiceSerializer(JSONTypes, serializers.ModelSerializer):
    department = NameField(slug_field="name", queryset=Department.objects.all())
    gpu_model = gpu_model_field(required=False, allow_null=True)
    gpus_per_replica = UnsignedDecimalField(max_digits=6, decimal_places=3, required=False)
    thresholds = ScalingThresholdSerializer(many=True, required=False)
    schedules = ScalingScheduleSerializer(many=True, required=False)
    peak_start = ClockTimeField(required=False, allow_null=True,
                                help_text="Daytime peak window, local time: no scale-in inside it.")
    peak_end = ClockTimeField(required=False, allow_null=True)
    scale_to_zero_idle_min = serializers.IntegerField(min_value=1, max_value=7 * 24 * 60, required=False, allow_null=True,
                                                      help_text="Scale to zero after this many minutes without a "
                                                                "request; null: never.")
    group_size = serializers.IntegerField(
        min_value=1, max_value=256, required=False, default=1,
        help_text="Pods per replica (a leader and group_size - 1 workers); the *_per_replica resources are each "
                  "pod's, and replica counts count groups.")
    startup_s = serializers.IntegerField(min_value=0, max_value=86400, required=False, default=60,
                                         help_text="Seconds a replica takes from placed to ready.")
    max_surge = serializers.IntegerField(min_value=0, max_value=64, required=False, default=0,
                                         help_text="Rolling update: extra groups made before old ones go.")
    max_unavailable = serializers.IntegerField(min_value=0, max_value=64, required=False, default=1,
                                               help_text="Rolling update: groups that may be down at once.")
    groups = ServiceGroupSerializer(many=True, read_only=True)

    ttft_p99_target_s = serializers.FloatField(min_value=0.001, required=False, allow_null=True,
                                               help_text="SLO: time to first token, p99, seconds; null: none.")
    tpot_p99_target_s = serializers.FloatField(min_value=0.0001, required=False, allow_null=True,
                                               help_text="SLO: time per output token, p99, seconds; null: none.")
    kv_cache_target = serializers.FloatField(min_value=0.01, max_value=1, required=False, allow_null=True,
                                             help_text="Scale out above this KV-cache use; null: none.")
    queue_target = serializers.FloatField(min_value=0.01, required=False, allow_null=True,
                                          help_text="Scale out above this many waiting requests per replica.")
    slo_ttft_s = serializers.FloatField(min_value=0.001, required=False, allow_null=True,
                                        help_text="Request SLO: each request's time to first token within this, "
                                                  "seconds; null: none.")
    slo_tpot_s = serializers.FloatField(min_value=0.0001, required=False, allow_null=True,
                                        help_text="Request SLO: each request's time per output token within this, "
                                                  "seconds; null: none.")
    slo_min_gain = serializers.FloatField(
        min_value=0.001, max_value=1, required=False, allow_null=True,
        help_text="Size to the request SLO: one more replica while it brings at least this share of a fully used "
                  "replica's requests within it; needs slo_ttft_s and slo_tpot_s; null: not sized to the SLO.")

    class Meta:
        model = InferenceService
        fields = [
            "id", "name", "department", "gpu_model", "priority", "replicas", "min_replicas", "max_replicas",
            "gpus_per_replica", "cpu_milli_per_replica", "memory_mib_per_replica", "autoscaling", "offline",
            "manual_deploy", "peak_start", "peak_end", "scale_to_zero_idle_min", "busy_signal", "vertical",
            "ttft_p99_target_s", "tpot_p99_target_s", "kv_cache_target", "queue_target",
            "slo_ttft_s", "slo_tpot_s", "slo_min_gain",
            "thresholds", "schedules", "replicas_changed_at", "recommended_gpus_per_replica", "recommended_cpu_milli",
            "recommended_memory_mib", "group_size", "startup_s", "exclusive_topology", "max_surge",
            "max_unavailable", "group_restart_policy", "groups", "unready_gpu_seconds", "created_at",
        ]
        read_only_fields = ["replicas_changed_at", "recommended_gpus_per_replica", "recommended_cpu_milli",
                            "recommended_memory_mib", "unready_gpu_seconds"]


class ScalingHistoryPageSerializer(serializers.Serializer):
    """One page of a service's scaling history (the API's limit/offset pagination)."""

    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    results = DecisionSerializer(many=True)


class ScalingHistoryQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="From (inclusive)")
    until = serializers.DateTimeField(required=False, help_text="Until (exclusive)")
    kind = serializers.ChoiceField(choices=[Decision.Kind.SCALING, Decision.Kind.ALERT], required=False)

    def validate(self, attrs):
        if attrs.get("since") and attrs.get("until") and attrs["since"] >= attrs["until"]:
            raise serializers.ValidationError({"until": ["must be after since"]})
        return attrs
