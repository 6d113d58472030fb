"""Profiling API views (read-only): thin — validate the query, call a selector, render."""
from drf_spectacular.utils import extend_schema
from rest_framework import generics, viewsets
from rest_framework.response import Response

from core.api.query import parse_query
from core.api.views import RestrictedMixin
from profiling import selectors
from profiling.api import serializers as s
from profiling.filtersets import ForecastModelFilterSet, TaskProfileFilterSet
from profiling.models import ForecastModel, TaskProfile
from scheduler.models import TrainingJob


class JobProfileView(RestrictedMixin, generics.GenericAPIView):
    """A job's profile: every run's per-minute series and summary, late samples, right-sizing advice.
    Visible to whoever may see the job. Beyond the schema (a 400 naming the field): since < until."""

    base_queryset = TrainingJob.objects.select_related("department", "framework", "gpu_model")
    serializer_class = s.JobProfileSerializer
    filter_backends = []

    @extend_schema(parameters=[s.JobProfileQuerySerializer], responses=s.JobProfileSerializer)
    def get(self, request, pk=None):
        job = self.get_object()  # 404 before 400: nothing is said about a job the user may not see
        query = parse_query(s.JobProfileQuerySerializer, request)
        profile = selectors.job_profile(job=job, attempt=query.get("run"), since=query.get("since"),
                                        until=query.get("until"))
        return Response(s.JobProfileSerializer(profile).data)


class TaskProfileViewSet(RestrictedMixin, viewsets.ReadOnlyModelViewSet):
    """Historical profile of each task (all runs of jobs with the same task key), recomputed daily.
    Members see the tasks of their departments' jobs; operators all."""

    base_queryset = TaskProfile.objects.all()
    serializer_class = s.TaskProfileSerializer
    filterset_class = TaskProfileFilterSet
    ordering_fields = ["task_key", "runs", "computed_at"]


class ForecastModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The registry of trained load forecasters, newest first per target: training window, held-out MAE per
    horizon against the naive baselines, and whether the autoscaler uses it (and why not)."""

    queryset = ForecastModel.objects.defer("blob")
    serializer_class = s.ForecastModelSerializer
    filterset_class = ForecastModelFilterSet
    ordering_fields = ["created_at", "version"]
