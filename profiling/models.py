"""Profiles from the streaming pipeline (docs/concepts/profiles.md#the-pipeline): what the profile sink writes and what the batch
derives.

- JobMinute, ServiceMinute: one row per training run / inference service per event-time minute, as the
  Flink job emitted it (topics profiles.job-minute, profiles.service-minute). These rows are the archive.
- LateSample: a pod sample Flink dropped as too late (topic metrics.late), kept for diagnosis.
- RunSummary: one ended run over all its minutes (written when the run ends, refined by late minutes).
- TaskProfile: all runs of one task (same task_key), recomputed daily.

Utilizations are fractions (0..1 of what the pod requested; GPU utilization 0..1 of the GPUs it holds),
CPU used in cores, memory requests in bytes, as on the topics. Times are aware datetimes.
"""
from django.db import models
from django.db.models import Q

from scheduler.models import JobRun, TrainingJob

ESTIMATED_HELP = ("SM active, occupancy, tensor and DRAM activity attributed from a GPU shared with other pods "
                  "(docs/reference/gpu-metrics.md#shared-gpus)")
RESOURCES = ("gpu_util", "gpu_mem_util", "cpu_util", "mem_util", "cpu_cores",
             "sm_active", "sm_occupancy", "tensor_active", "dram_active")


class ResourceStats(models.Model):
    """Mean and peak of every resource (nullable: a CPU-only pod has no GPU figures)."""

    gpu_util_mean = models.FloatField(null=True, blank=True)
    gpu_util_peak = models.FloatField(null=True, blank=True)
    gpu_mem_util_mean = models.FloatField(null=True, blank=True, help_text="GPU memory used / (used + free)")
    gpu_mem_util_peak = models.FloatField(null=True, blank=True)
    cpu_util_mean = models.FloatField(null=True, blank=True, help_text="CPU cores used / requested")
    cpu_util_peak = models.FloatField(null=True, blank=True)
    mem_util_mean = models.FloatField(null=True, blank=True, help_text="memory used / requested")
    mem_util_peak = models.FloatField(null=True, blank=True)
    cpu_cores_mean = models.FloatField(null=True, blank=True, help_text="CPU cores used (absolute)")
    cpu_cores_peak = models.FloatField(null=True, blank=True)
    # DCGM profiling ratios 0..1 (docs/reference/metrics.md); null where the exporter does not publish them
    sm_active_mean = models.FloatField(null=True, blank=True, help_text="DCGM_FI_PROF_SM_ACTIVE")
    sm_active_peak = models.FloatField(null=True, blank=True)
    sm_occupancy_mean = models.FloatField(null=True, blank=True, help_text="DCGM_FI_PROF_SM_OCCUPANCY")
    sm_occupancy_peak = models.FloatField(null=True, blank=True)
    tensor_active_mean = models.FloatField(null=True, blank=True, help_text="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    tensor_active_peak = models.FloatField(null=True, blank=True)
    dram_active_mean = models.FloatField(null=True, blank=True, help_text="DCGM_FI_PROF_DRAM_ACTIVE")
    dram_active_peak = models.FloatField(null=True, blank=True)

    class Meta:
        abstract = True


class JobMinute(ResourceStats):
    run = models.ForeignKey(JobRun, on_delete=models.CASCADE, related_name="minutes")
    minute = models.DateTimeField(help_text="Start of the event-time window (one minute).")
    samples = models.PositiveIntegerField(help_text="(pod, step) samples the means are over.")
    req_gpus = models.FloatField(null=True, blank=True)
    req_cpu_cores = models.FloatField(null=True, blank=True)
    req_mem_bytes = models.FloatField(null=True, blank=True)
    emitted_at = models.DateTimeField(help_text="When Flink closed the window.")
    written_at = models.DateTimeField(auto_now=True, help_text="When the sink last wrote this row.")
    estimated = models.BooleanField(default=False, help_text=ESTIMATED_HELP)

    class Meta(ResourceStats.Meta):
        ordering = ["run", "minute"]
        constraints = [
            models.UniqueConstraint(fields=["run", "minute"], name="jobminute_unique_run_minute"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} @ {self.minute:%Y-%m-%d %H:%M}"


class RunSummary(ResourceStats):
    """One ended run: its minutes combined (sample-weighted means, max peaks) with its run and wait time.

    wait_s: for attempt 1, run start - job submit; for a requeued job's later attempt, run start - the
    previous attempt's end (the time this attempt queued), so a task's waits are never counted twice."""

    run = models.OneToOneField(JobRun, on_delete=models.CASCADE, related_name="summary")
    samples = models.PositiveIntegerField(default=0)
    minutes = models.PositiveIntegerField(default=0)
    run_s = models.FloatField(help_text="ended_at - started_at")
    wait_s = models.FloatField(help_text="run start - job submit (attempt 1) or - previous attempt's end")
    outcome = models.CharField(max_length=16, choices=JobRun.Outcome.choices)
    computed_at = models.DateTimeField()

    class Meta(ResourceStats.Meta):
        ordering = ["run"]
        verbose_name_plural = "run summaries"
        constraints = [
            models.CheckConstraint(condition=Q(run_s__gte=0), name="runsummary_run_s_non_negative"),
        ]

    def __str__(self) -> str:
        return f"summary of run {self.run_id}"


def empty_window() -> dict:
    """A TaskProfile window over no runs."""
    return {"runs": 0, **{resource: {"mean": None, "peak": None} for resource in RESOURCES}}


class TaskProfileQuerySet(models.QuerySet):
    def restrict(self, user) -> "TaskProfileQuerySet":
        """Operators see every task; others the tasks of their departments' jobs."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(task_key__in=TrainingJob.objects.restrict(user).values("task_key"))


class TaskProfile(models.Model):
    """All runs of one task. `last_3` and `all_runs` are {"runs": n, "<resource>": {"mean", "peak"}, …} for
    the resources gpu_util, gpu_mem_util, cpu_util, mem_util, cpu_cores (means: mean of the runs' means)."""

    task_key = models.CharField(max_length=128, unique=True)
    runs = models.PositiveIntegerField(help_text="Ended runs summarized.")
    last_3 = models.JSONField(default=empty_window)
    all_runs = models.JSONField(default=empty_window)
    mean_run_s = models.FloatField(null=True, blank=True, help_text="Over succeeded runs.")
    mean_wait_s = models.FloatField(null=True, blank=True, help_text="Over all runs.")
    computed_at = models.DateTimeField()

    objects = TaskProfileQuerySet.as_manager()

    class Meta:
        ordering = ["task_key"]

    def __str__(self) -> str:
        return self.task_key


class ServiceMinute(models.Model):
    service = models.ForeignKey("colocation.InferenceService", on_delete=models.CASCADE, related_name="minutes")
    minute = models.DateTimeField(help_text="Start of the event-time window (one minute).")
    samples = models.PositiveIntegerField()
    replicas = models.PositiveIntegerField(help_text="Distinct pods seen in the minute.")
    gpu_util_mean = models.FloatField(null=True, blank=True)
    sm_active_mean = models.FloatField(null=True, blank=True, help_text="DCGM_FI_PROF_SM_ACTIVE")
    cpu_util_mean = models.FloatField(null=True, blank=True)
    qps = models.FloatField(null=True, blank=True)
    errors_per_s = models.FloatField(null=True, blank=True)
    latency_mean_ms = models.FloatField(null=True, blank=True)
    latency_p99_ms = models.FloatField(null=True, blank=True)
    emitted_at = models.DateTimeField()
    written_at = models.DateTimeField(auto_now=True)
    estimated = models.BooleanField(default=False, help_text=ESTIMATED_HELP)

    class Meta:
        ordering = ["service", "minute"]
        constraints = [
            models.UniqueConstraint(fields=["service", "minute"], name="serviceminute_unique_service_minute"),
        ]

    def __str__(self) -> str:
        return f"{self.service_id} @ {self.minute:%Y-%m-%d %H:%M}"


class LateSample(models.Model):
    """A pod sample Flink dropped as late. job/run/service are the pod's labels, kept as plain values."""

    ts = models.DateTimeField()
    pod = models.CharField(max_length=253)
    job_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    run_attempt = models.PositiveIntegerField(null=True, blank=True)
    service = models.CharField(max_length=64, blank=True)
    emitted_at = models.DateTimeField()
    first_seen = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-ts", "pod"]
        constraints = [models.UniqueConstraint(fields=["pod", "ts"], name="latesample_unique_pod_ts")]

    def __str__(self) -> str:
        return f"{self.pod} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class ForecastModel(models.Model):
    """One trained load forecaster (profiling/policy/forecast.py) for one target, with its held-out error and that
    of the naive baselines; the autoscaler uses the newest one of a target only if `usable`."""

    class Target(models.TextChoices):
        GPU = "gpu", "GPU utilization"
        CPU = "cpu", "CPU utilization"

    target = models.CharField(max_length=8, choices=Target.choices)
    version = models.PositiveIntegerField(help_text="Increasing per target.")
    created_at = models.DateTimeField(auto_now_add=True)
    trained_from = models.DateTimeField()
    trained_to = models.DateTimeField(help_text="Training used only minutes before this; scoring only after.")
    minutes = models.PositiveIntegerField(help_text="Training rows (service-minutes) of the 1-minute horizon.")
    services = models.JSONField(default=list)
    mae = models.JSONField(default=dict, help_text='{"xgboost"|"last_value"|"seasonal": [MAE at 1..5 minutes]}')
    evaluated_minutes = models.PositiveIntegerField(default=0)
    seasonal_lag_min = models.PositiveIntegerField(default=0)
    usable = models.BooleanField(default=False)
    note = models.TextField(blank=True, help_text="Why it is not used, when it is not.")
    blob = models.BinaryField()

    class Meta:
        ordering = ["target", "-version"]
        constraints = [models.UniqueConstraint(fields=["target", "version"], name="forecastmodel_unique_version")]

    def __str__(self) -> str:
        return f"{self.target} forecaster v{self.version}"


class Forecast(models.Model):
    """What a model forecast for one service `horizon` minutes after `made_at` (kept to show forecast vs actual)."""

    service = models.ForeignKey("colocation.InferenceService", on_delete=models.CASCADE, related_name="forecasts")
    model = models.ForeignKey(ForecastModel, on_delete=models.CASCADE, related_name="forecasts")
    target = models.CharField(max_length=8, choices=ForecastModel.Target.choices)
    made_at = models.DateTimeField(help_text="Start of the last measured minute the forecast was made from.")
    horizon = models.PositiveSmallIntegerField()
    minute = models.DateTimeField(help_text="The minute forecast.")
    value = models.FloatField(help_text="Utilization at `replicas`.")
    replicas = models.PositiveIntegerField()

    class Meta:
        ordering = ["service", "minute", "horizon"]
        constraints = [
            models.UniqueConstraint(fields=["service", "target", "made_at", "horizon"], name="forecast_unique"),
            models.CheckConstraint(condition=Q(horizon__gte=1) & Q(horizon__lte=5), name="forecast_horizon_1_5"),
        ]
        indexes = [models.Index(fields=["service", "minute"])]

    def __str__(self) -> str:
        return f"{self.service_id} {self.target} @ {self.minute:%H:%M} (+{self.horizon})"
