"""Resource groups and nodes (online/offline × normal/unnormal), inference services and their scaling thresholds."""
from django.conf import settings
from django.db import models
from django.db.models import F, Q

from cluster.types import NodeState, Pool
from colocation.policy.servicegroups import RestartPolicy
from colocation.policy.states import Direction as PolicyDirection
from core.querysets import DepartmentScopedQuerySet


NODE_STATE_CHOICES = [(NodeState.ONLINE_NORMAL.value, "Online, normal"),
                      (NodeState.ONLINE_UNNORMAL.value, "Online, unnormal"),
                      (NodeState.OFFLINE_NORMAL.value, "Offline, normal"),
                      (NodeState.OFFLINE_UNNORMAL.value, "Offline, unnormal")]


POOL_CHOICES = [(Pool.FIXED.value, "Fixed training pool"), (Pool.COLOCATION.value, "Co-location pool")]


class ResourceGroup(models.Model):
    """Nodes of one hardware class (CPU, T4, P40-vGPU, …); lending decisions are taken per group.

    Lending thresholds are fractions of the online side's quota usage
    (docs/concepts/lending.md#the-node-state-machine): lend below `min_rate`
    (when training waits) up to `expect_rate`; take back above `max_rate` down to `expect_rate`."""

    name = models.SlugField(max_length=64, unique=True)
    hardware_class = models.CharField(max_length=32)
    gpu_model = models.ForeignKey(
        "core.GPUModel", on_delete=models.PROTECT, null=True, blank=True, related_name="resource_groups"
    )
    min_rate = models.FloatField(default=0.4)
    expect_rate = models.FloatField(default=0.6)
    max_rate = models.FloatField(default=0.8)
    lending = models.BooleanField(default=True, help_text="Off: automation never moves this group's nodes.")
    lending_forecast = models.BooleanField(
        default=True, help_text="Forecast-driven lending (docs/concepts/lending.md#forecast-driven-lending): take back "
                                "ahead of the forecast rise, lend only what stays idle; off: the threshold rules alone.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(min_rate__gte=0) & Q(min_rate__lte=F("expect_rate")) & Q(expect_rate__lte=F("max_rate"))
                & Q(max_rate__lte=1),
                name="group_rates_ordered_within_0_1",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    name = models.CharField(max_length=128, unique=True)
    resource_group = models.ForeignKey(ResourceGroup, on_delete=models.PROTECT, related_name="nodes")
    gpu_model = models.ForeignKey(
        "core.GPUModel", on_delete=models.PROTECT, null=True, blank=True, related_name="nodes"
    )
    gpu_count = models.PositiveSmallIntegerField(default=0)
    cpu_milli = models.PositiveIntegerField()
    memory_mib = models.PositiveIntegerField()
    pool = models.CharField(max_length=16, choices=POOL_CHOICES, default=Pool.COLOCATION.value)
    state = models.CharField(max_length=24, choices=NODE_STATE_CHOICES, default=NodeState.OFFLINE_NORMAL.value)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    pinned = models.BooleanField(default=False, help_text="Pinned by an operator: automation never moves it.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(cpu_milli__gt=0) & Q(memory_mib__gt=0), name="node_cpu_memory_positive"),
            models.CheckConstraint(
                condition=(Q(gpu_count=0) & Q(gpu_model__isnull=True)) | (Q(gpu_count__gt=0) & Q(gpu_model__isnull=False)),
                name="node_gpu_model_iff_gpus",
            ),
            models.CheckConstraint(condition=Q(state__in=[s.value for s in NodeState]), name="node_state_valid"),
            models.CheckConstraint(condition=Q(pool__in=[p.value for p in Pool]), name="node_pool_valid"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_online(self) -> bool:
        return self.state.startswith("online")

    @property
    def is_normal(self) -> bool:
        return self.state.endswith("-normal")


class Direction(models.TextChoices):
    LEND = PolicyDirection.LEND.value, "Lend (online → offline)"
    TAKE_BACK = PolicyDirection.TAKE_BACK.value, "Take back (offline → online)"


class NodeTransition(models.Model):
    """One conversion of a node, moved step by step by the controller; each step is persisted so a crash
    at any point is resumed by the next tick. At most one open transition per node."""

    class Status(models.TextChoices):
        OPEN = "open", "In progress"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="transitions")
    direction = models.CharField(max_length=24, choices=Direction.choices)
    step = models.CharField(max_length=24, default="planned", help_text="The last step executed.")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN, db_index=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, help_text="Empty: the lending automation."
    )
    reason = models.CharField(max_length=64)
    message = models.TextField()
    waiting_for = models.TextField(blank=True, help_text="Why the last tick could not go further.")
    evict_at = models.DateTimeField(
        null=True, blank=True,
        help_text="Take-back: training pods still running are evicted from then on (the node is cordoned meanwhile); "
                  "empty: at once.")
    started_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["node"], condition=Q(status="open"), name="transition_one_open_per_node"),
            models.CheckConstraint(condition=Q(direction__in=Direction.values), name="transition_direction_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.direction} {self.node} ({self.status}, {self.step})"


class InferenceServiceQuerySet(DepartmentScopedQuerySet):
    pass


GROUP_RESTART_POLICY_CHOICES = [
    (RestartPolicy.RECREATE_GROUP.value, "RecreateGroupOnPodRestart: recreate the group whole"),
    (RestartPolicy.NONE.value, "None: restart the pod in place, keep the group"),
]


class InferenceService(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    department = models.ForeignKey("core.Department", on_delete=models.PROTECT, related_name="services")
    gpu_model = models.ForeignKey(
        "core.GPUModel", on_delete=models.PROTECT, null=True, blank=True, related_name="services"
    )
    priority = models.IntegerField(default=0, help_text="Higher wins when the cluster cannot serve every service.")
    replicas = models.PositiveIntegerField(default=2)
    min_replicas = models.PositiveIntegerField(default=2)
    max_replicas = models.PositiveIntegerField(default=10)
    gpus_per_replica = models.DecimalField(max_digits=6, decimal_places=3, default=1)
    cpu_milli_per_replica = models.PositiveIntegerField(default=4000)
    memory_mib_per_replica = models.PositiveIntegerField(default=16384)
    autoscaling = models.BooleanField(default=True)
    # docs/concepts/autoscaling.md#the-policy: filters and system rules; the policy is colocation/policy/autoscaling.py
    offline = models.BooleanField(default=False, help_text="Not serving: the autoscaler leaves it alone.")
    manual_deploy = models.BooleanField(default=False, help_text="Being deployed by hand: the autoscaler leaves it alone.")
    peak_start = models.TimeField(null=True, blank=True, help_text="Daytime peak window (local time): no scale-in inside it.")
    peak_end = models.TimeField(null=True, blank=True)
    scale_to_zero_idle_min = models.PositiveIntegerField(
        null=True, blank=True, help_text="Scale to zero after this many idle minutes (no requests); empty: never.")
    busy_signal = models.BooleanField(
        default=False, help_text="Scale on the workers' busy fraction (its 'busy' threshold) instead of utilization.")
    vertical = models.BooleanField(default=False, help_text="Apply the per-replica resource recommendation on the next rollout.")
    # docs/concepts/autoscaling.md#llm-serving-signals: an LLM service's serving targets (colocation/policy/serving.py)
    ttft_p99_target_s = models.FloatField(null=True, blank=True, help_text="SLO: time to first token, p99, seconds.")
    tpot_p99_target_s = models.FloatField(null=True, blank=True, help_text="SLO: time per output token, p99, seconds.")
    kv_cache_target = models.FloatField(null=True, blank=True, help_text="Scale out above this KV-cache use (0-1].")
    queue_target = models.FloatField(null=True, blank=True, help_text="Scale out above this many waiting requests "
                                                                      "per replica.")
    # docs/concepts/autoscaling.md#sizing-to-the-request-slo (colocation/policy/slo_sizing.py)
    slo_ttft_s = models.FloatField(null=True, blank=True, help_text="Request SLO: each request's time to first "
                                                                    "token within this, seconds.")
    slo_tpot_s = models.FloatField(null=True, blank=True, help_text="Request SLO: each request's time per output "
                                                                    "token within this, seconds.")
    slo_min_gain = models.FloatField(
        null=True, blank=True, help_text="Size to the request SLO: one more replica is worth its GPUs while it "
                                         "brings at least this share (0-1] of a fully used replica's requests within "
                                         "the SLO; needs both SLO times.")
    recommended_gpus_per_replica = models.DecimalField(max_digits=6, decimal_places=3, null=True, blank=True)
    recommended_cpu_milli = models.PositiveIntegerField(null=True, blank=True)
    recommended_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    replicas_changed_at = models.DateTimeField(null=True, blank=True, help_text="When the replica count last changed.")
    # docs/concepts/service-groups.md#the-group: a replica is a group of pods (LeaderWorkerSet's size); the
    # *_per_replica resources are each pod's, and `replicas` counts groups
    group_size = models.PositiveSmallIntegerField(
        default=1, help_text="Pods per replica: a leader and group_size - 1 workers, placed, ready, restarted and "
                             "scaled whole; 1: one pod per replica.")
    startup_s = models.PositiveIntegerField(default=60, help_text="Seconds a replica takes from placed to ready.")
    exclusive_topology = models.BooleanField(
        default=False, help_text="All pods of a group in one topology block (tidal.io/block), no other group's pods "
                                 "there.")
    max_surge = models.PositiveSmallIntegerField(
        default=0, help_text="Rolling update: groups created above the replica count before old ones go.")
    max_unavailable = models.PositiveSmallIntegerField(
        default=1, help_text="Rolling update: groups that may be unavailable at once.")
    group_restart_policy = models.CharField(
        max_length=32, choices=GROUP_RESTART_POLICY_CHOICES, default=RestartPolicy.RECREATE_GROUP.value,
        help_text="What a container restarted in place does to its group (LeaderWorkerSet's restartPolicy): "
                  "RecreateGroupOnPodRestart recreates the group whole; None restarts the pod in place and keeps the "
                  "group, not ready until that pod is ready again.")
    unready_gpu_seconds = models.FloatField(
        default=0, help_text="GPU-seconds held by pods of groups not fully ready (pods still starting), so far.")
    groups_observed_at = models.DateTimeField(null=True, blank=True, help_text="When the group tick last looked.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = InferenceServiceQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(min_replicas__lte=F("max_replicas")), name="service_min_le_max"),
            models.CheckConstraint(
                condition=(Q(replicas__gte=F("min_replicas")) | Q(replicas=0, scale_to_zero_idle_min__isnull=False))
                & Q(replicas__lte=F("max_replicas")),
                name="service_replicas_within_bounds",
            ),
            models.CheckConstraint(condition=Q(gpus_per_replica__gte=0), name="service_gpus_non_negative"),
            models.CheckConstraint(condition=(Q(peak_start__isnull=True) & Q(peak_end__isnull=True))
                                   | (Q(peak_start__isnull=False) & Q(peak_end__isnull=False)),
                                   name="service_peak_window_both_or_none"),
            models.CheckConstraint(condition=Q(scale_to_zero_idle_min__isnull=True) | Q(scale_to_zero_idle_min__gt=0),
                                   name="service_idle_minutes_positive"),
            models.CheckConstraint(condition=(Q(ttft_p99_target_s__isnull=True) | Q(ttft_p99_target_s__gt=0))
                                   & (Q(tpot_p99_target_s__isnull=True) | Q(tpot_p99_target_s__gt=0))
                                   & (Q(queue_target__isnull=True) | Q(queue_target__gt=0))
                                   & (Q(kv_cache_target__isnull=True) | (Q(kv_cache_target__gt=0)
                                                                         & Q(kv_cache_target__lte=1))),
                                   name="service_serving_targets_positive"),
            models.CheckConstraint(condition=(Q(slo_ttft_s__isnull=True) | Q(slo_ttft_s__gt=0))
                                   & (Q(slo_tpot_s__isnull=True) | Q(slo_tpot_s__gt=0))
                                   & (Q(slo_min_gain__isnull=True) | (Q(slo_min_gain__gt=0) & Q(slo_min_gain__lte=1)
                                                                      & Q(slo_ttft_s__isnull=False)
                                                                      & Q(slo_tpot_s__isnull=False))),
                                   name="service_slo_sizing_valid"),
            models.CheckConstraint(condition=Q(group_size__gte=1), name="service_group_size_positive"),
            models.CheckConstraint(condition=Q(max_surge__gt=0) | Q(max_unavailable__gt=0),
                                   name="service_rollout_can_progress"),
            models.CheckConstraint(condition=Q(group_restart_policy__in=RestartPolicy.values()),
                                   name="service_group_restart_policy_valid"),
        ]

    def __str__(self) -> str:
        return self.name


class ServiceGroup(models.Model):
    """One group (replica) of a multi-pod service as the group tick last saw it, with what outlives its pods: its
    restarts and back-off (colocation/policy/servicegroups.py)."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="groups")
    index = models.PositiveIntegerField()
    revision = models.CharField(max_length=16, blank=True)
    leader = models.CharField(max_length=128, blank=True)
    nodes = models.JSONField(default=list, blank=True, help_text="Each pod's node, the leader's first.")
    pods_ready = models.PositiveSmallIntegerField(default=0)
    ready = models.BooleanField(default=False)
    restarts = models.PositiveIntegerField(default=0)
    backoff_until = models.DateTimeField(null=True, blank=True)
    ready_since = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=32, blank=True, help_text="The reason last recorded for it.")
    pod_restarts = models.JSONField(
        default=dict, blank=True, help_text="Each pod's container restarts already acted on (recreated, or kept in "
                                            "place under restart policy None).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["service", "index"]
        constraints = [models.UniqueConstraint(fields=["service", "index"], name="service_group_unique_index")]

    def __str__(self) -> str:
        return f"{self.service} group {self.index}"


class ScalingThreshold(models.Model):
    """maxRate / minRate / expectRate of one utilization metric of a service (docs/concepts/autoscaling.md#the-policy)."""

    class Metric(models.TextChoices):
        GPU = "gpu", "GPU utilization"
        CPU = "cpu", "CPU utilization"
        MEMORY = "memory", "Memory utilization"
        GPU_MEMORY = "gpu_memory", "GPU-memory utilization"
        BUSY = "busy", "Busy fraction of the workers"

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="thresholds")
    metric = models.CharField(max_length=16, choices=Metric.choices)
    min_rate = models.FloatField()
    expect_rate = models.FloatField()
    max_rate = models.FloatField()

    class Meta:
        ordering = ["service", "metric"]
        constraints = [
            models.UniqueConstraint(fields=["service", "metric"], name="threshold_unique_metric"),
            models.CheckConstraint(
                condition=Q(min_rate__gte=0)
                & Q(min_rate__lte=F("expect_rate"))
                & Q(expect_rate__lte=F("max_rate"))
                & Q(max_rate__lte=1),
                name="threshold_ordered_within_0_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.service} {self.metric}: {self.min_rate}/{self.expect_rate}/{self.max_rate}"


class ScalingSchedule(models.Model):
    """Scheduled scaling: inside the window (cron day-of-week syntax, local times) the service keeps at least
    `min_replicas`."""

    service = models.ForeignKey(InferenceService, on_delete=models.CASCADE, related_name="schedules")
    weekdays = models.CharField(max_length=32, default="*", help_text='Cron day-of-week: "*", "1-5", "0,6" (0 = Sunday).')
    start = models.TimeField()
    end = models.TimeField(help_text="Exclusive; an end at or before the start runs past midnight.")
    min_replicas = models.PositiveIntegerField()

    class Meta:
        ordering = ["service", "start", "id"]

    def __str__(self) -> str:
        return f"{self.service} {self.weekdays} {self.start:%H:%M}-{self.end:%H:%M} >= {self.min_replicas}"
