"""Colocation API views: inventory (read) and inference services, with their load and forecasts (read from
profiling)."""
from django.db.models import Count, Q
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from cluster.types import Pool
from colocation import selectors, services
from colocation.api import serializers as s
from colocation.filtersets import InferenceServiceFilterSet, NodeFilterSet, ResourceGroupFilterSet, TransitionFilterSet
from colocation.models import InferenceService, Node, NodeTransition, ResourceGroup
from colocation.policy.states import Direction as PolicyDirection
from core.api.pagination import PAGE_PARAMETERS
from core.api.permissions import IsOperator, IsOperatorOrReadOnly
from core.api.query import parse_query
from core.api.serializers import DecisionSerializer
from core.api.views import RestrictedMixin
from profiling import selectors as profiling_selectors
from profiling.api import serializers as profiling_api


class ResourceGroupViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.UpdateModelMixin,
                           viewsets.GenericViewSet):
    """Resource groups with their lending thresholds; operators change thresholds and switch lending."""

    queryset = ResourceGroup.objects.select_related("gpu_model").annotate(
        node_count=Count("nodes"), fixed_pool_nodes=Count("nodes", filter=Q(nodes__pool=Pool.FIXED))
    )
    serializer_class = s.ResourceGroupSerializer
    permission_classes = [IsOperatorOrReadOnly]
    filterset_class = ResourceGroupFilterSet
    http_method_names = ["get", "patch", "head", "options"]

    @extend_schema(request=s.ResourceGroupSettingsSerializer, responses=s.ResourceGroupSerializer)
    def partial_update(self, request, *args, **kwargs):
        """Change a group's lending thresholds or switch lending (operators). Beyond the schema (a 400 naming the
        field): min_rate ≤ expect_rate ≤ max_rate, the unchanged ones included."""
        body = s.ResourceGroupSettingsSerializer(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        services.group_settings_set(group=self.get_object(), actor=request.user, **body.validated_data)
        return Response(s.ResourceGroupSerializer(self.get_object()).data)

    @extend_schema(responses=s.GroupAllocationSerializer(many=True))
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def allocation(self, request):
        """Each group's capacity and allocation — every pod counted, inference replicas too — and its idle GPUs the
        typical jobs cannot use, as the lending tick last saw the cluster (the figures /metrics serves), and the GPUs
        really busy in the newest profiled minute; an empty list before its first tick. Cluster-wide figures: every
        signed-in user reads them (`tidal top`)."""
        return Response(s.GroupAllocationSerializer(selectors.group_allocation(), many=True).data)


class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    """Nodes with state, pool and current transition; operators lend, take back or pin a node."""

    queryset = Node.objects.select_related("resource_group", "gpu_model").prefetch_related("transitions")
    serializer_class = s.NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ["name", "gpu_count", "state_changed_at"]

    def _move(self, request, direction: PolicyDirection, verb: str) -> Response:
        node = self.get_object()
        services.transition_request(node=node, direction=direction, actor=request.user, reason=f"operator-{verb}",
                                    message=f"{verb} of {node} requested by {request.user}")
        return Response(s.NodeSerializer(self.get_object()).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: s.NodeSerializer})
    @action(detail=True, methods=["post"], permission_classes=[IsOperator])
    def lend(self, request, pk=None):
        """Lend an online-normal co-location node to training; the controller moves it step by step."""
        return self._move(request, PolicyDirection.LEND, "lend")

    @extend_schema(request=None, responses={202: s.NodeSerializer})
    @action(detail=True, methods=["post"], url_path="take-back", permission_classes=[IsOperator])
    def take_back(self, request, pk=None):
        """Take a lent node back for inference; its training jobs are requeued onto the fixed pool."""
        return self._move(request, PolicyDirection.TAKE_BACK, "take-back")

    @extend_schema(request=s.PinSerializer, responses=s.NodeSerializer)
    @action(detail=True, methods=["post"], permission_classes=[IsOperator])
    def pin(self, request, pk=None):
        """Pin (or unpin) a node where it is: the lending automation leaves pinned nodes alone."""
        body = s.PinSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        services.node_pin(node=self.get_object(), actor=request.user, **body.validated_data)
        return Response(s.NodeSerializer(self.get_object()).data)


class TransitionViewSet(viewsets.ReadOnlyModelViewSet):
    """Every lend and take-back, open and finished, with the step it reached."""

    queryset = NodeTransition.objects.select_related("node", "requested_by")
    serializer_class = s.TransitionSerializer
    filterset_class = TransitionFilterSet
    ordering_fields = ["started_at", "updated_at"]


POLICY_RULES = (
    "Beyond the schema (a 400 naming the field): `department` and `gpu_model` name existing ones; min_replicas ≤ "
    "replicas ≤ max_replicas (replicas 0 needs scale_to_zero_idle_min); per threshold min_rate < expect_rate < "
    "max_rate, each metric once; peak_start and peak_end both or neither; a schedule's window is not empty, its "
    "weekdays parse as cron's day-of-week and its min_replicas ≤ max_replicas; busy_signal needs a busy threshold; "
    "max_surge and max_unavailable not both 0; group_restart_policy RecreateGroupOnPodRestart or None (LWS's "
    "spelling); with group_size > 1, whole GPUs per pod (gpus_per_replica) and a group "
    "that some block of the GPU model's nodes (any nodes, without exclusive_topology) could hold were they empty "
    "(group_size)."
)


@extend_schema_view(
    create=extend_schema(description="Create an inference service with its autoscaling policy (the department's "
                                     "admins, operators). " + POLICY_RULES),
    partial_update=extend_schema(description="Change an inference service or its autoscaling policy (the "
                                             "department's admins, operators); the rules hold for the result. "
                                             + POLICY_RULES),
)
class InferenceServiceViewSet(
    RestrictedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin,
    mixins.UpdateModelMixin, viewsets.GenericViewSet,
):
    """Inference services and their autoscaling thresholds; department admins create and change them."""

    base_queryset = (InferenceService.objects.select_related("department", "gpu_model")
                     .prefetch_related("thresholds", "schedules", "groups"))
    serializer_class = s.InferenceServiceSerializer
    filterset_class = InferenceServiceFilterSet
    http_method_names = ["get", "post", "patch", "head", "options"]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        serializer.instance = services.service_create(
            actor=self.request.user, thresholds=data.pop("thresholds", []), **data
        )

    @extend_schema(parameters=[s.ScalingHistoryQuerySerializer, *PAGE_PARAMETERS], responses=s.ScalingHistoryPageSerializer)
    @action(detail=True, methods=["get"], filter_backends=[])
    def scaling(self, request, pk=None):
        """The service's scaling history: every autoscaling decision and alert about it, newest first. Beyond the
        schema (a 400 naming the field): since < until."""
        service = self.get_object()
        query = parse_query(s.ScalingHistoryQuerySerializer, request)
        page = self.paginate_queryset(selectors.scaling_history(service=service, **query))
        return self.get_paginated_response(DecisionSerializer(page, many=True).data)

    def perform_update(self, serializer):
        serializer.instance = services.service_update(
            service=serializer.instance, actor=self.request.user, **serializer.validated_data
        )


class ServiceLoadView(RestrictedMixin, generics.GenericAPIView):
    """An inference service's per-minute load (GPU/CPU utilization, QPS, errors, latency, replicas) in
    [since, until): by default the last hour. Visible to whoever may see the service. Beyond the schema (a 400
    naming the field): since < until, at most 7 days apart (until defaults to now, since to an hour before until)."""

    base_queryset = InferenceService.objects.all()
    serializer_class = profiling_api.ServiceLoadSerializer
    filter_backends = []

    @extend_schema(parameters=[profiling_api.ServiceLoadQuerySerializer], responses=profiling_api.ServiceLoadSerializer)
    def get(self, request, pk=None):
        service = self.get_object()
        window = parse_query(profiling_api.ServiceLoadQuerySerializer, request)
        minutes = profiling_selectors.service_load(service_id=service.pk, since=window["since"], until=window["until"])
        return Response(profiling_api.ServiceLoadSerializer({"service": service, **window, "minutes": minutes}).data)


class ServiceForecastsView(RestrictedMixin, generics.GenericAPIView):
    """An inference service's forecast versus actual load per minute in [since, until) (by default the last hour):
    what the forecaster said `horizon` minutes earlier and what was measured. Beyond the schema (a 400 naming the
    field): since < until, at most 7 days apart."""

    base_queryset = InferenceService.objects.all()
    serializer_class = profiling_api.ForecastsSerializer
    filter_backends = []

    @extend_schema(parameters=[profiling_api.ForecastQuerySerializer], responses=profiling_api.ForecastsSerializer)
    def get(self, request, pk=None):
        service = self.get_object()
        q = parse_query(profiling_api.ForecastQuerySerializer, request)
        rows = profiling_selectors.forecasts_vs_actuals(service_id=service.pk, since=q["since"], until=q["until"],
                                              horizon=q["horizon"], target=q["target"])
        return Response(profiling_api.ForecastsSerializer({"service": service, **q, "minutes": rows}).data)
