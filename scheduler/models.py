"""Frameworks and their certifications, departments' quotas, training jobs with their runs, and what-if runs.

Units everywhere: GPUs as (fractional) GPU counts, CPU in millicores, memory in MiB.
Invariants live in database constraints so that no code path can break them.
"""
from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Floor

from cluster.types import JobStatus as JobStatusValue, QuotaKind as QuotaKindValue, Topology as TopologyValue
from core.models import CPU, MEMORY, RESERVED_RESOURCE_NAMES, Department, GPUModel
from core.querysets import DepartmentScopedQuerySet


class JobStatus(models.TextChoices):
    PENDING = JobStatusValue.PENDING.value, "Pending"
    ADMITTED = JobStatusValue.ADMITTED.value, "Admitted"
    RUNNING = JobStatusValue.RUNNING.value, "Running"
    SUCCEEDED = JobStatusValue.SUCCEEDED.value, "Succeeded"
    FAILED = JobStatusValue.FAILED.value, "Failed"
    PREEMPTED = JobStatusValue.PREEMPTED.value, "Preempted"
    CANCELLED = JobStatusValue.CANCELLED.value, "Cancelled"


FINISHED_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
HOLDING_STATUSES = (JobStatus.ADMITTED, JobStatus.RUNNING)  # statuses that hold quota


class QuotaKind(models.TextChoices):
    OWN = QuotaKindValue.OWN.value, "Own"
    BORROWED = QuotaKindValue.BORROWED.value, "Borrowed"


class Topology(models.TextChoices):
    PACK = TopologyValue.PACK.value, "Pack: fewest nodes"
    SPREAD = TopologyValue.SPREAD.value, "Spread: a node per worker"


class Framework(models.Model):
    """A framework version and the GPU models it is certified on."""

    name = models.CharField(max_length=32)
    version = models.CharField(max_length=32)
    certified_on = models.ManyToManyField(GPUModel, related_name="frameworks", blank=True)

    class Meta:
        ordering = ["name", "version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="framework_unique_name_version"),
        ]

    def __str__(self) -> str:
        return f"{self.name}-{self.version}"


class QuotaQuerySet(DepartmentScopedQuerySet):
    pass


class Quota(models.Model):
    """A department's own and borrowed amount of one resource: GPUs of one model, CPU or memory."""

    class Resource(models.TextChoices):
        GPU = "gpu", "GPUs of one model"
        CPU = CPU, "CPU millicores"
        MEMORY = MEMORY, "Memory MiB"

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    resource_kind = models.CharField(max_length=8, choices=Resource.choices)
    gpu_model = models.ForeignKey(GPUModel, on_delete=models.PROTECT, null=True, blank=True, related_name="quotas")
    own = models.DecimalField(max_digits=14, decimal_places=3)
    borrowed = models.DecimalField(max_digits=14, decimal_places=3, default=0)
    # what of its own it may lend to the rest of the tree (null: all of it); the rest is kept for its subtree
    lend_limit = models.DecimalField(max_digits=14, decimal_places=3, null=True, blank=True)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "resource_kind", "gpu_model__name"]
        constraints = [
            models.CheckConstraint(condition=Q(own__gte=0) & Q(borrowed__gte=0), name="quota_non_negative"),
            models.CheckConstraint(
                condition=(Q(resource_kind="gpu") & Q(gpu_model__isnull=False))
                | (Q(resource_kind__in=RESERVED_RESOURCE_NAMES) & Q(gpu_model__isnull=True)),
                name="quota_gpu_model_iff_gpu",
            ),
            models.UniqueConstraint(
                fields=["department", "gpu_model"], condition=Q(resource_kind="gpu"), name="quota_unique_gpu"
            ),
            models.UniqueConstraint(
                fields=["department", "resource_kind"],
                condition=~Q(resource_kind="gpu"),
                name="quota_unique_cpu_memory",
            ),
        ]

    @property
    def resource(self) -> str:
        """The resource key the policies use: a GPU model name, "cpu" or "memory"."""
        return self.gpu_model.name if self.gpu_model_id else self.resource_kind

    def __str__(self) -> str:
        return f"{self.department} {self.resource}: own {self.own}, borrowed {self.borrowed}"


class TrainingJobQuerySet(DepartmentScopedQuerySet):
    def holding_quota(self) -> "TrainingJobQuerySet":
        return self.filter(status__in=HOLDING_STATUSES)


class TrainingJob(models.Model):
    name = models.CharField(max_length=128)
    task_key = models.CharField(max_length=128, db_index=True, help_text="Groups the runs of the same job.")
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="jobs")
    submitter = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    image = models.CharField(max_length=256)
    command = models.TextField()
    framework = models.ForeignKey(Framework, on_delete=models.PROTECT, related_name="jobs")
    gpu_model = models.ForeignKey(
        GPUModel, on_delete=models.PROTECT, null=True, blank=True, related_name="preferred_by_jobs",
        help_text="Preferred GPU model; empty: any model its framework is certified on (placement chooses), or a CPU-only "
                  "job.",
    )
    gpus = models.DecimalField(max_digits=6, decimal_places=3, default=0)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()
    expected_duration_s = models.PositiveIntegerField(null=True, blank=True)
    workers = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1)],
        help_text="Identical workers (pods) started together or not at all; the GPUs, CPU and memory are per worker.")
    topology = models.CharField(max_length=8, choices=Topology.choices, default=Topology.PACK,
                                help_text="pack: the fewest nodes, of one block if possible; spread: a node per worker.")
    preemptible = models.BooleanField(
        default=True, help_text="false: never preempted, so admitted on own quota only, at every level of the quota "
                                "tree (docs/concepts/quotas-and-priority.md#quota-trees-and-fair-sharing).")
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING, db_index=True)
    quota_kind = models.CharField(max_length=8, choices=QuotaKind.choices, blank=True)
    node = models.ForeignKey(
        "colocation.Node", on_delete=models.SET_NULL, null=True, blank=True, related_name="training_jobs"
    )
    assigned_gpu_model = models.ForeignKey(
        GPUModel, on_delete=models.PROTECT, null=True, blank=True, related_name="assigned_jobs"
    )
    annotations = models.JSONField(
        default=dict, blank=True, help_text="Free-form key/values, like Kubernetes annotations (the demo keeps its "
        "simulated run time here).",
    )
    # What the scheduler bound and charged: the right-sized request; the request above is kept
    # (docs/concepts/quotas-and-priority.md#right-sizing).
    alloc_gpus = models.DecimalField(max_digits=6, decimal_places=3, null=True, blank=True)
    alloc_cpu_milli = models.PositiveIntegerField(null=True, blank=True)
    cpu_limit_milli = models.PositiveIntegerField(null=True, blank=True)
    alloc_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    # Where the job must go next: the fixed training pool after a take-back killed it on a lent node.
    keep_request = models.BooleanField(
        default=False, help_text="Set by a department admin or operator: bind the request as asked, no right-sizing.")
    pool_preference = models.CharField(max_length=16, blank=True, choices=[("fixed", "Fixed training pool")])
    # The latest scheduling cycle's view of a pending job: "why am I waiting".
    queue_position = models.PositiveIntegerField(null=True, blank=True, help_text="1-based, in score order.")
    score = models.JSONField(default=dict, blank=True, help_text="base, utilization, aging, total")
    pending_reason = models.CharField(max_length=64, blank=True)
    reservation = models.JSONField(
        default=dict, blank=True,
        help_text="A waiting gang's reservation from the latest cycle: {nodes: [...], start_at: epoch seconds}.")
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TrainingJobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=0), name="job_gpus_non_negative"),
            models.CheckConstraint(condition=Q(gpus__lte=1) | Q(gpus=Floor(F("gpus"))), name="job_gpus_whole_above_one"),
            models.CheckConstraint(condition=Q(cpu_milli__gt=0) & Q(memory_mib__gt=0), name="job_cpu_memory_positive"),
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_positive"),
            models.CheckConstraint(condition=Q(workers=1) | Q(gpus=Floor(F("gpus"))), name="job_gang_whole_gpus"),
        ]

    def __str__(self) -> str:
        return f"{self.name} (#{self.pk})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES


class JobRun(models.Model):
    """One attempt of a job on a node; a preempted job gets a new run when it is placed again."""

    class Outcome(models.TextChoices):
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        PREEMPTED = "preempted", "Preempted"
        KILLED = "killed", "Killed by a take-back"
        CANCELLED = "cancelled", "Cancelled"

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="runs")
    attempt = models.PositiveIntegerField()
    node = models.ForeignKey("colocation.Node", on_delete=models.SET_NULL, null=True, blank=True, related_name="runs")
    gpu_model = models.ForeignKey(GPUModel, on_delete=models.PROTECT, null=True, blank=True, related_name="runs")
    pod = models.CharField(max_length=160, blank=True)
    gpu_shares = models.JSONField(default=list, blank=True, help_text="[[gpu index, share], …] on the node")
    workers = models.JSONField(
        default=list, blank=True,
        help_text="A gang's workers: [{rank, node, pod, gpu_shares, state}, …], rank 0 first (node, pod and "
                  "gpu_shares above are rank 0's); empty for a one-worker job.")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.RUNNING)

    @property
    def pods(self) -> list[str]:
        """Every worker's pod, rank 0 first."""
        return [w["pod"] for w in self.workers] if self.workers else ([self.pod] if self.pod else [])

    class Meta:
        ordering = ["job", "attempt"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="jobrun_unique_attempt"),
            models.CheckConstraint(
                condition=Q(ended_at__isnull=True) | Q(ended_at__gte=F("started_at")), name="jobrun_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job} run {self.attempt}: {self.outcome}"


class ReplayRun(models.Model):
    """A what-if run an operator started from the console — a trace replay (trace, policies, knobs) or a
    co-location simulation (days) — run by a Celery task that reports its progress here; the report
    (figures and plots) is kept in `report_dir`."""

    class Kind(models.TextChoices):
        REPLAY = "replay", "Trace replay"
        COLOCATION = "colocation", "Co-location simulation"
        FRAGMENTATION = "fragmentation", "FGD experiment"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.REPLAY)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                     related_name="replays")
    trace = models.CharField(max_length=128, help_text="pod list name, or the uploaded file's name")
    pods_path = models.CharField(max_length=512, blank=True)
    days = models.PositiveSmallIntegerField(default=1, help_text="co-location: simulated days")
    small = models.BooleanField(default=False, help_text="co-location: a small cluster")
    policies = models.JSONField(default=list)
    load_factor = models.FloatField(default=1.0)
    inflate = models.BooleanField(default=False)
    tree = models.CharField(max_length=16, default="flat",
                            help_text="replay: the quota tree, flat departments or one of experiments.replay.tree.TREES")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    progress = models.JSONField(default=dict, blank=True, help_text="policy -> [done, total]")
    figures = models.JSONField(default=dict, blank=True, help_text="headline figures per policy")
    report_dir = models.CharField(max_length=512, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(load_factor__gt=0), name="replayrun_load_factor_positive"),
        ]

    def __str__(self) -> str:
        return f"replay {self.pk} of {self.trace}: {self.status}"


class LearnedWorkload(models.Model):
    """The cluster's typical training shapes, learned from its own recent submissions
    (docs/concepts/placement.md#the-clusters-typical-jobs):
    the target workload of the fragmentation measure. The newest row is the one in use."""

    learned_at = models.DateTimeField(db_index=True)
    window_days = models.PositiveSmallIntegerField()
    jobs = models.PositiveIntegerField(help_text="jobs submitted in the window")
    shapes = models.JSONField(default=list, help_text="[{cpu_milli, gpu_milli, gpu_count, models, count}], most "
                                                      "frequent first, covering 95 % of the jobs")

    class Meta:
        ordering = ["-learned_at", "-id"]

    def __str__(self) -> str:
        return f"workload of {self.jobs} jobs ({len(self.shapes)} shapes) learned {self.learned_at:%Y-%m-%d %H:%M}"
