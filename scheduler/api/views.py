"""Scheduler API views: thin — parse input, call a service or selector, render output."""
from django.db.models import Prefetch
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from core import selectors as core_selectors
from core.api import views as core_views
from core.api.permissions import IsOperatorOrReadOnly
from core.api.query import parse_query
from core.api.throttling import SubmitThrottle
from core.api.views import RestrictedMixin
from core.errors import ApplicationError
from core.models import Department
from scheduler import lifecycle, logs, selectors, services, submission
from scheduler.api import serializers as s
from scheduler.filtersets import FrameworkFilterSet, QuotaFilterSet, TrainingJobFilterSet
from scheduler.models import Framework, JobRun, Quota, TrainingJob


@extend_schema_view(
    create=extend_schema(description="Add a framework version and the GPU models it is certified on (operators). "
                                     "Beyond the schema (a 400 naming the field): each name in `certified_on` is an "
                                     "existing GPU model."),
    partial_update=extend_schema(description="Replace the GPU models a framework is certified on (operators). Beyond "
                                             "the schema (a 400 naming the field): each name in `certified_on` is an "
                                             "existing GPU model."),
)
class FrameworkViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, mixins.UpdateModelMixin,
    mixins.DestroyModelMixin, viewsets.GenericViewSet,
):
    """Framework versions and the GPU models each is certified on."""

    queryset = Framework.objects.prefetch_related("certified_on")
    serializer_class = s.FrameworkSerializer
    permission_classes = [IsOperatorOrReadOnly]
    filterset_class = FrameworkFilterSet
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_serializer_class(self):
        return s.FrameworkCertificationSerializer if self.action == "partial_update" else s.FrameworkSerializer

    def perform_create(self, serializer):
        serializer.instance = services.framework_create(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = services.framework_update(framework=serializer.instance, **serializer.validated_data)


@extend_schema_view(create=extend_schema(description=(
    "Create a department's quota for a resource or, when it has one, change it (operators; department admins for the "
    "departments below theirs). Beyond the schema (a 400 naming the field): `department` and `gpu_model` name "
    "existing ones (for an admin, a department they can see); a `gpu` quota names its GPU model, a `cpu` or `memory` "
    "quota none; `lend_limit` is at most `own`. A quota below what the department's jobs hold is a 409.")))
class QuotaViewSet(RestrictedMixin, viewsets.ModelViewSet):
    """Own, borrowed (the borrow limit) and lend limit per department and resource. Operators write any; department
    admins those of the departments below theirs; members read their department's.

    POST creates the quota or, when the department already has one for that resource, changes it."""

    base_queryset = Quota.objects.select_related("department", "gpu_model")
    serializer_class = s.QuotaSerializer
    permission_classes = [IsAuthenticated]
    filterset_class = QuotaFilterSet
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        """Members see their departments' quotas; an admin also those of the departments below theirs."""
        rows = super().get_queryset()
        managed = core_selectors.managed_departments(user=self.request.user)
        return rows if not managed else rows | self.base_queryset.filter(department__in=managed)

    def get_serializer_class(self):
        return s.QuotaAmountsSerializer if self.action == "partial_update" else s.QuotaSerializer

    @extend_schema(request=s.QuotaAmountsSerializer, responses=s.QuotaSerializer)
    def partial_update(self, request, *args, **kwargs):
        quota = self.get_object()
        amounts = s.QuotaAmountsSerializer(data=request.data, partial=True)
        amounts.is_valid(raise_exception=True)
        quota = services.quota_set(
            department=quota.department, resource_kind=quota.resource_kind, gpu_model=quota.gpu_model,
            actor=request.user, **{"own": quota.own, "borrowed": quota.borrowed, "lend_limit": quota.lend_limit,
                                   **amounts.validated_data},
        )
        return Response(s.QuotaSerializer(quota).data)

    def perform_create(self, serializer):
        department, user = serializer.validated_data["department"], self.request.user
        managed = core_selectors.managed_departments(user=user)
        if managed is not None and department.pk not in managed and not department_visible(user, department):
            # one they cannot see reads as one that does not exist (a 400 naming the field); one of theirs is a 403
            raise ApplicationError.for_field("department", f"no department you manage is named {department}")
        serializer.instance = services.quota_set(actor=self.request.user, **serializer.validated_data)

    def perform_destroy(self, instance):
        services.quota_delete(quota=instance, actor=self.request.user)


def department_visible(user, department: Department) -> bool:
    return Department.objects.restrict(user).filter(pk=department.pk).exists()


FLAGS = ["true", "false", "1", "0"]


class JobLogQuerySerializer(serializers.Serializer):
    run = serializers.IntegerField(min_value=1, max_value=2**31 - 1, required=False,
                                   help_text="The run (attempt); default: the newest")
    worker = serializers.IntegerField(min_value=0, max_value=2**15 - 1, default=0,
                                      help_text="The worker's rank (0 for a one-worker job)")
    tail = serializers.IntegerField(min_value=0, max_value=10**6, required=False,
                                    help_text="Only the last N lines; default: the whole log, at most the archive's "
                                              "size (TIDAL_LOG_ARCHIVE_BYTES)")
    follow = serializers.ChoiceField(choices=FLAGS, default="false",
                                     help_text="Keep the response open and stream new lines until the pod ends")
    download = serializers.ChoiceField(choices=FLAGS, default="false",
                                       help_text="Answer as a file to save (Content-Disposition: attachment)")


class JsonErrors(BaseContentNegotiation):
    """The log answers text/plain itself (an HttpResponse); what goes through DRF's renderers is an error: JSON,
    whatever the client accepts (a text/plain-only client still gets a readable error, not a 406)."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class TrainingJobViewSet(
    RestrictedMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Training jobs of the departments the user belongs to (operators: all)."""

    base_queryset = TrainingJob.objects.select_related("department", "submitter", "framework", "gpu_model")
    filterset_class = TrainingJobFilterSet
    ordering_fields = ["submitted_at", "status", "gpus"]

    def get_serializer_class(self):
        return s.TrainingJobDetailSerializer if self.action == "retrieve" else s.TrainingJobSerializer

    def get_throttles(self):
        return [SubmitThrottle()] if self.action == "create" else super().get_throttles()

    def get_queryset(self):
        queryset = super().get_queryset()
        if self.action == "list":
            return selectors.job_rows(queryset)
        return queryset.select_related("assigned_gpu_model", "node").prefetch_related(
            Prefetch("runs", JobRun.objects.select_related("node", "gpu_model")))

    @extend_schema(request=s.TrainingJobInputSerializer, responses={201: s.TrainingJobDetailSerializer})
    def create(self, request):
        """Submit a training job into one of your departments.

        `gpus`, `cpu_milli` and `memory_mib` are per worker; `workers` > 1 makes a gang, whose workers start
        together or not at all, on one GPU model. Beyond the schema (a 400 naming the field, nothing written):
        `department`, `framework` ("name-version") and `gpu_model` name existing ones, and you are a member of the
        department (operators: of any), a leaf of the quota tree; the framework is certified on the GPU model (without one: on some model,
        and placement chooses among them); above 1, `gpus` is whole, and a gang's workers ask for whole GPUs; one
        worker's GPUs, CPU and memory fit a single node that could run it; a gang's workers × GPUs (and CPU and memory, where the
        department has such quotas) fit the department's own + borrowed quota of at least one GPU model it may run
        on."""
        payload = s.TrainingJobInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        job = submission.job_submit(submitter=request.user, **payload.validated_data)
        return Response(s.TrainingJobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=s.TrainingJobDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        """Cancel an unfinished job (its submitter, department admins and operators)."""
        job = lifecycle.job_cancel(job=self.get_object(), actor=request.user)
        return Response(s.TrainingJobDetailSerializer(job).data)


    @extend_schema(request=s.KeepRequestSerializer, responses=s.TrainingJobDetailSerializer)
    @action(detail=True, methods=["post"], url_path="keep-request")
    def keep_request(self, request, pk=None):
        """Bind the request as asked (no right-sizing), or right-size again: department admins and operators."""
        body = s.KeepRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        job = submission.job_keep_request(job=self.get_object(), keep=body.validated_data["keep_request"],
                                        actor=request.user)
        return Response(s.TrainingJobDetailSerializer(job).data)


    @extend_schema(
        parameters=[JobLogQuerySerializer],
        responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description=(
            "The worker's log, newline-terminated lines; header X-Tidal-Log-Source: live, archive or none (a pod "
            "still starting: empty)"))},
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer], content_negotiation_class=JsonErrors,
            filter_backends=[], pagination_class=None)
    def logs(self, request, pk=None):
        """A run's log, one worker's: read live from the cluster while its pod exists, from the archive after the run
        ends (the last TIDAL_LOG_ARCHIVE_BYTES of each worker's log, kept TIDAL_LOG_RETENTION_DAYS days). Visible
        to whoever may see the job. `follow=true` keeps the response open and streams each new line until the pod
        ends (at most TIDAL_LOG_FOLLOW_MAX_S; a pod not started yet is waited for; a finished run's log is sent
        once). A job that never ran, a run it does not have, or a finished run whose log was not kept is a 404
        saying so; beyond the schema (a 400 naming the field): `worker` is one of the run's workers."""
        job = self.get_object()  # 404 before 400: nothing is said about a job the user may not see
        query = parse_query(JobLogQuerySerializer, request)
        target = logs.log_target(job=job, attempt=query.get("run"), worker=query["worker"])
        headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
        if query["download"] in ("true", "1"):
            headers["Content-Disposition"] = f'attachment; filename="{target.filename}"'
        if query["follow"] in ("true", "1"):
            lines = logs.log_follow(target=target, tail=query.get("tail"))
            response = StreamingHttpResponse(lines, content_type="text/plain; charset=utf-8", headers=headers)
            response["X-Accel-Buffering"] = "no"  # a proxy passes lines on as they come
            return response
        read = logs.log_read(target=target, tail=query.get("tail"))
        return HttpResponse(read.text, content_type="text/plain; charset=utf-8",
                            headers={**headers, "X-Tidal-Log-Source": read.source})


class DepartmentViewSet(core_views.DepartmentViewSet):
    # Core's departments, with the quota usage and tree figures the scheduler keeps (served here: core imports no app).

    @extend_schema(responses=s.DepartmentTreeSerializer, parameters=[])
    @action(detail=False, methods=["get"], pagination_class=None, filter_backends=[])
    def tree(self, request):
        """The quota tree: each department with, per GPU model, its own quota, borrow and lend limits, weight, what
        its subtree uses and asks for, lends and borrows, and its fair share; a warning for each model whose own
        quotas sum past the cluster. Members see their departments with those above and below them."""
        return Response(s.DepartmentTreeSerializer(selectors.department_tree(user=request.user)).data)

    @extend_schema(responses=s.QuotaUsageSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filter_backends=[])
    def usage(self, request, pk=None):
        """Own and borrowed quota per resource, with what the department's admitted and running jobs hold."""
        usages = selectors.quota_usage(department=self.get_object())
        return Response(s.QuotaUsageSerializer(usages, many=True).data)
