"""Profiling API views (read-only): thin — validate the query, call a selector, render."""
from drf_spectacular.utils import extend_schema
from rest_framework import generics, viewsets
from rest_framework.response import Response

from colocation.models import InferenceService
from profiling import selectors
from profiling.api import serializers as s
from profiling.filtersets import TaskProfileFilterSet
from profiling.models import TaskProfile
from scheduler.api.views import RestrictedMixin
from scheduler.models import TrainingJob


class JobProfileView(RestrictedMixin, generics.GenericAPIView):
    """A job's profile: every run's per-minute series and summary, late samples, right-sizing advice.
    Visible to whoever may see the job."""

    base_queryset = TrainingJob.objects.select_related("department", "framework", "gpu_model")
    serializer_class = s.JobProfileSerializer
    filter_backends = []

    @extend_schema(parameters=[s.JobProfileQuerySerializer], responses=s.JobProfileSerializer)
    def get(self, request, pk=None):
        job = self.get_object()  # 404 before 400: nothing is said about a job the user may not see
        query = s.JobProfileQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        profile = selectors.job_profile(job=job, attempt=query.validated_data.get("run"),
                                        since=query.validated_data.get("since"),
                                        until=query.validated_data.get("until"))
        return Response(s.JobProfileSerializer(profile).data)


class ServiceLoadView(RestrictedMixin, generics.GenericAPIView):
    """An inference service's per-minute load (GPU/CPU utilization, QPS, errors, latency, replicas) in
    [since, until): at most 7 days, by default the last hour. Visible to whoever may see the service."""

    base_queryset = InferenceService.objects.all()
    serializer_class = s.ServiceLoadSerializer
    filter_backends = []

    @extend_schema(parameters=[s.ServiceLoadQuerySerializer], responses=s.ServiceLoadSerializer)
    def get(self, request, pk=None):
        service = self.get_object()
        query = s.ServiceLoadQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        window = query.validated_data
        minutes = selectors.service_load(service=service, since=window["since"], until=window["until"])
        return Response(s.ServiceLoadSerializer({"service": service, **window, "minutes": minutes}).data)


class TaskProfileViewSet(RestrictedMixin, viewsets.ReadOnlyModelViewSet):
    """Historical profile of each task (all runs of jobs with the same task key), recomputed daily.
    Members see the tasks of their departments' jobs; operators all."""

    base_queryset = TaskProfile.objects.all()
    serializer_class = s.TaskProfileSerializer
    filterset_class = TaskProfileFilterSet
    ordering_fields = ["task_key", "runs", "computed_at"]
