"""Profiling API views (read-only): thin — validate the query, call a selector, render."""
from drf_spectacular.utils import extend_schema
from rest_framework import generics, viewsets
from rest_framework.response import Response

from colocation.models import InferenceService
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


class ServiceLoadView(RestrictedMixin, generics.GenericAPIView):
    """An inference service's per-minute load (GPU/CPU utilization, QPS, errors, latency, replicas) in
    [since, until): by default the last hour. Visible to whoever may see the service. Beyond the schema (a 400
    naming the field): since < until, at most 7 days apart (until defaults to now, since to an hour before until)."""

    base_queryset = InferenceService.objects.all()
    serializer_class = s.ServiceLoadSerializer
    filter_backends = []

    @extend_schema(parameters=[s.ServiceLoadQuerySerializer], responses=s.ServiceLoadSerializer)
    def get(self, request, pk=None):
        service = self.get_object()
        window = parse_query(s.ServiceLoadQuerySerializer, request)
        minutes = selectors.service_load(service=service, since=window["since"], until=window["until"])
        return Response(s.ServiceLoadSerializer({"service": service, **window, "minutes": minutes}).data)


class TaskProfileViewSet(RestrictedMixin, viewsets.ReadOnlyModelViewSet):
    """Historical profile of each task (all runs of jobs with the same task key), recomputed daily.
    Members see the tasks of their departments' jobs; operators all."""

    base_queryset = TaskProfile.objects.all()
    serializer_class = s.TaskProfileSerializer
    filterset_class = TaskProfileFilterSet
    ordering_fields = ["task_key", "runs", "computed_at"]


class ServiceForecastsView(RestrictedMixin, generics.GenericAPIView):
    """An inference service's forecast versus actual load per minute in [since, until) (by default the last hour):
    what the forecaster said `horizon` minutes earlier and what was measured. Beyond the schema (a 400 naming the
    field): since < until, at most 7 days apart."""

    base_queryset = InferenceService.objects.all()
    serializer_class = s.ForecastsSerializer
    filter_backends = []

    @extend_schema(parameters=[s.ForecastQuerySerializer], responses=s.ForecastsSerializer)
    def get(self, request, pk=None):
        service = self.get_object()
        q = parse_query(s.ForecastQuerySerializer, request)
        rows = selectors.forecasts_vs_actuals(service=service, since=q["since"], until=q["until"],
                                              horizon=q["horizon"], target=q["target"])
        return Response(s.ForecastsSerializer({"service": service, **q, "minutes": rows}).data)


class ForecastModelViewSet(viewsets.ReadOnlyModelViewSet):
    """The registry of trained load forecasters, newest first per target: training window, held-out MAE per
    horizon against the naive baselines, and whether the autoscaler uses it (and why not)."""

    queryset = ForecastModel.objects.defer("blob")
    serializer_class = s.ForecastModelSerializer
    filterset_class = ForecastModelFilterSet
    ordering_fields = ["created_at", "version"]
