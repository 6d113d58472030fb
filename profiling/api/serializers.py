"""Shapes of the profiling API (read-only). Utilizations are fractions 0..1, CPU used in cores."""
from datetime import timedelta

from django.utils import timezone
from rest_framework import serializers

from profiling.models import ForecastModel, JobMinute, ServiceMinute, TaskProfile

MAX_LOAD_WINDOW = timedelta(days=7)
DEFAULT_LOAD_WINDOW = timedelta(hours=1)


class StatSerializer(serializers.Serializer):
    mean = serializers.FloatField(allow_null=True)
    peak = serializers.FloatField(allow_null=True)


class ResourcesSerializer(serializers.Serializer):
    """Mean and peak per resource; null where nothing was measured (e.g. GPU figures of a CPU-only job)."""

    gpu_util = StatSerializer(help_text="GPU utilization of the GPUs held")
    gpu_mem_util = StatSerializer(help_text="GPU memory used / (used + free)")
    cpu_util = StatSerializer(help_text="CPU cores used / requested")
    mem_util = StatSerializer(help_text="memory used / requested")
    cpu_cores = StatSerializer(help_text="CPU cores used")
    # DCGM profiling ratios 0-1; null in profiles stored before they were recorded
    sm_active = StatSerializer(allow_null=True, help_text="DCGM_FI_PROF_SM_ACTIVE (null where not measured)")
    sm_occupancy = StatSerializer(allow_null=True, help_text="DCGM_FI_PROF_SM_OCCUPANCY")
    tensor_active = StatSerializer(allow_null=True, help_text="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    dram_active = StatSerializer(allow_null=True, help_text="DCGM_FI_PROF_DRAM_ACTIVE")


class RunSummarySerializer(ResourcesSerializer):
    samples = serializers.IntegerField()
    minutes = serializers.IntegerField()
    run_s = serializers.FloatField(help_text="Run time: end (or now, while running) - start")
    wait_s = serializers.FloatField(help_text="Queue time before this attempt: from the job's submission for "
                                              "attempt 1, from the previous attempt's end for a requeued job")
    outcome = serializers.CharField()
    final = serializers.BooleanField(help_text="Stored when the run ended (else computed on read, still going)")
    computed_at = serializers.DateTimeField(allow_null=True)


class JobMinuteSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobMinute
        fields = ["minute", "samples", "gpu_util_mean", "gpu_util_peak", "gpu_mem_util_mean", "gpu_mem_util_peak",
                  "cpu_util_mean", "cpu_util_peak", "mem_util_mean", "mem_util_peak", "cpu_cores_mean",
                  "cpu_cores_peak", "sm_active_mean", "sm_active_peak", "sm_occupancy_mean", "sm_occupancy_peak",
                  "tensor_active_mean", "tensor_active_peak", "dram_active_mean", "dram_active_peak",
                  "estimated", "req_gpus", "req_cpu_cores", "req_mem_bytes", "emitted_at", "written_at"]


class RunSeriesSerializer(serializers.Serializer):
    attempt = serializers.IntegerField(source="run.attempt")
    pod = serializers.CharField(source="run.pod")
    started_at = serializers.DateTimeField(source="run.started_at")
    ended_at = serializers.DateTimeField(source="run.ended_at", allow_null=True)
    outcome = serializers.CharField(source="run.outcome")
    late_samples = serializers.IntegerField(help_text="Samples of this run the pipeline dropped as late")
    summary = RunSummarySerializer()
    minutes = JobMinuteSerializer(many=True)


class ResourceRequestSerializer(serializers.Serializer):
    gpus = serializers.FloatField()
    cpu_request_milli = serializers.IntegerField()
    cpu_limit_milli = serializers.IntegerField()
    memory_mib = serializers.IntegerField()


class AdviceSerializer(serializers.Serializer):
    runs = serializers.IntegerField(help_text="Past runs of the task the advice is from (the last 3 at most)")
    requested = ResourceRequestSerializer()
    rightsized = ResourceRequestSerializer(help_text="What the scheduler would bind now")
    utilization_points = serializers.IntegerField(help_text="Utilization term of the priority score (+20 / -20)")


class JobProfileSerializer(serializers.Serializer):
    job = serializers.IntegerField(source="job.pk")
    task_key = serializers.CharField(source="job.task_key")
    late_samples = serializers.IntegerField(help_text="Samples of the job the pipeline dropped as late")
    advice = AdviceSerializer(allow_null=True, help_text="Right-sizing from the task's past runs; null: no "
                                                         "history, the request is kept")
    runs = RunSeriesSerializer(many=True)


class JobProfileQuerySerializer(serializers.Serializer):
    run = serializers.IntegerField(min_value=1, required=False, help_text="Only this attempt")
    since = serializers.DateTimeField(required=False, help_text="Minutes from (inclusive)")
    until = serializers.DateTimeField(required=False, help_text="Minutes until (exclusive)")

    def validate(self, attrs):
        if "since" in attrs and "until" in attrs and attrs["since"] >= attrs["until"]:
            raise serializers.ValidationError({"until": ["must be after since"]})
        return attrs


class TaskProfileWindowSerializer(ResourcesSerializer):
    runs = serializers.IntegerField(help_text="Profiled runs in the window")


class TaskProfileSerializer(serializers.ModelSerializer):
    last_3 = TaskProfileWindowSerializer(help_text="Over the last 3 profiled runs: mean of the run means, "
                                                   "max of the peaks (what right-sizing uses)")
    all_runs = TaskProfileWindowSerializer(help_text="Over every profiled run")

    class Meta:
        model = TaskProfile
        fields = ["id", "task_key", "runs", "last_3", "all_runs", "mean_run_s", "mean_wait_s", "computed_at"]


class ServiceMinuteSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceMinute
        fields = ["minute", "samples", "replicas", "gpu_util_mean", "sm_active_mean", "estimated", "cpu_util_mean",
                  "qps", "errors_per_s", "latency_mean_ms", "latency_p99_ms", "emitted_at"]


class ServiceLoadQuerySerializer(serializers.Serializer):
    since = serializers.DateTimeField(required=False, help_text="From (inclusive); default: an hour before until")
    until = serializers.DateTimeField(required=False, help_text="Until (exclusive); default: now")

    def validate(self, attrs):
        until = attrs.get("until") or timezone.now()
        since = attrs.get("since") or until - DEFAULT_LOAD_WINDOW
        if since >= until:
            raise serializers.ValidationError({"until": ["must be after since"]})
        if until - since > MAX_LOAD_WINDOW:
            raise serializers.ValidationError({"since": [f"at most {MAX_LOAD_WINDOW.days} days before until"]})
        return {"since": since, "until": until}


class ServiceLoadSerializer(serializers.Serializer):
    service = serializers.CharField(source="service.name")
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    minutes = ServiceMinuteSerializer(many=True)


class ForecastQuerySerializer(ServiceLoadQuerySerializer):
    horizon = serializers.IntegerField(required=False, default=5, min_value=1, max_value=5,
                                       help_text="Minutes ahead the forecast was made (1-5)")
    target = serializers.ChoiceField(choices=ForecastModel.Target.choices, required=False, default="gpu")

    def validate(self, attrs):
        return {**super().validate(attrs), "horizon": attrs["horizon"], "target": attrs["target"]}


class ForecastPointSerializer(serializers.Serializer):
    minute = serializers.DateTimeField()
    forecast = serializers.FloatField(allow_null=True, help_text="Utilization forecast `horizon` minutes earlier, "
                                                                 "at the replicas that served the minute")
    actual = serializers.FloatField(allow_null=True)
    replicas = serializers.IntegerField(allow_null=True)


class ForecastsSerializer(serializers.Serializer):
    service = serializers.CharField(source="service.name")
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    horizon = serializers.IntegerField()
    target = serializers.CharField()
    minutes = ForecastPointSerializer(many=True)


class ForecastModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = ForecastModel
        fields = ["id", "target", "version", "created_at", "trained_from", "trained_to", "minutes", "services", "mae",
                  "evaluated_minutes", "seasonal_lag_min", "usable", "note"]
