"""Shapes of the colocation API."""
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from colocation.models import InferenceService, Node, NodeTransition, ResourceGroup, ScalingThreshold
from scheduler.api.serializers import NameField, gpu_model_field
from scheduler.models import Department


class ResourceGroupSerializer(serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    node_count = serializers.IntegerField(read_only=True)
    fixed_pool_nodes = serializers.IntegerField(read_only=True)

    class Meta:
        model = ResourceGroup
        fields = ["id", "name", "hardware_class", "gpu_model", "node_count", "fixed_pool_nodes", "lending",
                  "min_rate", "expect_rate", "max_rate"]


class ResourceGroupSettingsSerializer(serializers.ModelSerializer):
    min_rate = serializers.FloatField(min_value=0, max_value=1, required=False)
    expect_rate = serializers.FloatField(min_value=0, max_value=1, required=False)
    max_rate = serializers.FloatField(min_value=0, max_value=1, required=False)

    class Meta:
        model = ResourceGroup
        fields = ["lending", "min_rate", "expect_rate", "max_rate"]


class TransitionSerializer(serializers.ModelSerializer):
    node = serializers.SlugRelatedField(slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = NodeTransition
        fields = ["id", "node", "direction", "step", "status", "requested_by", "reason", "message", "waiting_for",
                  "started_at", "updated_at", "finished_at"]


class PinSerializer(serializers.Serializer):
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


class ScalingThresholdSerializer(serializers.ModelSerializer):
    min_rate = serializers.FloatField(min_value=0, max_value=1)
    expect_rate = serializers.FloatField(min_value=0, max_value=1)
    max_rate = serializers.FloatField(min_value=0, max_value=1)

    class Meta:
        model = ScalingThreshold
        fields = ["metric", "min_rate", "expect_rate", "max_rate"]


class InferenceServiceSerializer(serializers.ModelSerializer):
    department = NameField(slug_field="name", queryset=Department.objects.all())
    gpu_model = gpu_model_field(required=False, allow_null=True)
    gpus_per_replica = serializers.DecimalField(max_digits=6, decimal_places=3, min_value=0, required=False)
    thresholds = ScalingThresholdSerializer(many=True, required=False)

    class Meta:
        model = InferenceService
        fields = [
            "id", "name", "department", "gpu_model", "priority", "replicas", "min_replicas", "max_replicas",
            "gpus_per_replica", "cpu_milli_per_replica", "memory_mib_per_replica", "autoscaling", "thresholds",
            "created_at",
        ]
