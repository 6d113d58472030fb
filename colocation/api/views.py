"""Colocation API views: inventory (read) and inference services."""
from django.db.models import Count
from rest_framework import mixins, viewsets

from colocation import services
from colocation.api import serializers as s
from colocation.filtersets import InferenceServiceFilterSet, NodeFilterSet, ResourceGroupFilterSet
from colocation.models import InferenceService, Node, ResourceGroup
from scheduler.api.views import RestrictedMixin


class ResourceGroupViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = ResourceGroup.objects.select_related("gpu_model").annotate(node_count=Count("nodes"))
    serializer_class = s.ResourceGroupSerializer
    filterset_class = ResourceGroupFilterSet


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Node.objects.select_related("resource_group", "gpu_model")
    serializer_class = s.NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ["name", "gpu_count", "state_changed_at"]


class InferenceServiceViewSet(
    RestrictedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.UpdateModelMixin, viewsets.GenericViewSet,
):
    """Inference services and their autoscaling thresholds; department admins create and change them."""

    base_queryset = InferenceService.objects.select_related("department", "gpu_model").prefetch_related("thresholds")
    serializer_class = s.InferenceServiceSerializer
    filterset_class = InferenceServiceFilterSet
    http_method_names = ["get", "post", "patch", "head", "options"]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        serializer.instance = services.service_create(
            actor=self.request.user, thresholds=data.pop("thresholds", []), **data
        )

    def perform_update(self, serializer):
        serializer.instance = services.service_update(
            service=serializer.instance, actor=self.request.user, **serializer.validated_data
        )
