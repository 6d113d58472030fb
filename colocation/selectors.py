"""Reads for the colocation app."""
from collections import defaultdict
from dataclasses import dataclass
from collections.abc import Iterable
from datetime import datetime, timezone
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Concat
from redis import Redis
from redis.exceptions import RedisError

from cluster import types as ct
from cluster.simulated.traces import with_blocks
from colocation import demand_history
from colocation.models import InferenceService, Node, NodeState, NodeTransition, ResourceGroup, ServiceGroup
from colocation.policy import LendingProfile
from colocation.policy.calibration import WINDOW, FinishedRun, RuntimeCalibration, calibrate
from colocation.policy.pools import estimate_of
from colocation.policy.servicegroups import pod_name
from core import telemetry
from core.expiring import Expiring
from core.models import Decision
from profiling import selectors as profiling
from profiling.models import RunSummary, ServiceMinute
from scheduler.models import HOLDING_STATUSES, JobRun, TrainingJob


def node_views() -> list[ct.NodeView]:
    """The inventory as the cluster backends and policies see it (static part: sizes, pool, state), in topology
    blocks of consecutive nodes of one model (the simulated cluster's racks: cluster.simulated.traces.with_blocks)."""
    return with_blocks([
        ct.NodeView(
            name=n.name, resource_group=n.resource_group.name, gpu_model=n.gpu_model.name if n.gpu_model else None,
            gpu_count=n.gpu_count, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, pool=ct.Pool(n.pool),
            state=ct.NodeState(n.state),
        )
        for n in Node.objects.select_related("resource_group", "gpu_model").order_by("name")
    ])


def lending_profile(*, now: float | None = None,
                    calibration: Expiring[RuntimeCalibration] | None = None) -> LendingProfile:
    """The one lending profile of the live loops (busy windows and the night rule in the site's time zone),
    forecast-driven (for the resource groups with `lending_forecast` on: the lending tick forecasts only those),
    carrying the predicted take-back times the lending tick stored last (the scheduling cycle keeps jobs off lent
    nodes they would outlive); a stale or unreadable store: none. Run time estimates are calibrated on the last
    finished jobs (`finished_runs`), through the calling loop's `calibration` cache at `now` where it has one: 200
    finished jobs change little in a minute, and reading them costs more than a tick should pay each time."""
    profile = LendingProfile(tz=settings.TIME_ZONE)
    try:
        by = demand_history.take_back_by(Redis.from_url(settings.REDIS_URL), settings.TIDAL_REDIS_NAMESPACE)
    except RedisError:  # placement then falls back to the long-job bar alone, as without forecasts
        by = ()
    runtime = _calibrated() if calibration is None or now is None else calibration.get(now, _calibrated)
    return profile.with_(forecast=True, take_back_by=by, runtime=runtime)


def _calibrated() -> RuntimeCalibration:
    return calibrate(finished_runs())


def finished_runs(limit: int = WINDOW) -> list[FinishedRun]:
    """The newest `limit` succeeded training runs, each with its real run time and the estimate it was placed with:
    the mean of its task's succeeded runs that ended before it started (at most `HISTORY_RUNS`, as the pool rule reads
    them), else its job's stated duration; a run with neither is left out. Two queries."""
    succeeded = RunSummary.objects.filter(outcome=JobRun.Outcome.SUCCEEDED)
    rows = list(succeeded.order_by("-run__ended_at", "-run_id").values_list(
        "run__job__task_key", "run__started_at", "run_s", "run__job__expected_duration_s")[:limit])
    earlier: dict[str, list[tuple[datetime, float]]] = defaultdict(list)  # task -> (end, run s), oldest first
    for key, ended, run_s in succeeded.filter(run__job__task_key__in={r[0] for r in rows}).order_by(
            "run__ended_at", "run_id").values_list("run__job__task_key", "run__ended_at", "run_s"):
        earlier[key].append((ended, run_s))
    out = []
    for key, started, real_s, stated_s in rows:
        past = [run_s for ended, run_s in earlier[key] if ended <= started][-profiling.HISTORY_RUNS:]
        estimate = estimate_of(past, stated_s)
        if estimate is not None:
            out.append(FinishedRun(estimate[0], real_s, estimate[1]))
    return out


@dataclass(frozen=True)
class Room:
    """The most a single schedulable training node of one GPU model (or any node, for CPU jobs) has free."""

    nodes: int  # schedulable training nodes considered
    node: str | None  # the one with the most free
    gpus: Decimal
    cpu_milli: int
    memory_mib: int


def most_free(*, gpu_model: str | None) -> Room:
    """Free = capacity minus what admitted and running training jobs were charged, every worker of a gang on its
    own node; GPU jobs look at nodes of their model, CPU jobs at every node. Only offline-normal nodes take
    training work."""
    nodes = Node.objects.filter(state=NodeState.OFFLINE_NORMAL)
    if gpu_model:
        nodes = nodes.filter(gpu_model__name=gpu_model)
    free = {n: [Decimal(g), c, m] for n, g, c, m in nodes.values_list("name", "gpu_count", "cpu_milli", "memory_mib")}
    if not free:
        return Room(0, None, Decimal(0), 0, 0)
    gangs = dict(JobRun.objects.filter(ended_at__isnull=True, job__status__in=HOLDING_STATUSES, job__workers__gt=1)
                 .values_list("job_id", "workers"))
    for job_id, node, gpus, cpu, memory in TrainingJob.objects.filter(status__in=HOLDING_STATUSES).values_list(
            "pk", "node__name", Coalesce("alloc_gpus", "gpus"), Coalesce("alloc_cpu_milli", "cpu_milli"),
            Coalesce("alloc_memory_mib", "memory_mib")):
        for where in [w["node"] for w in gangs.get(job_id) or ()] or [node]:
            if where in free:
                room = free[where]
                room[0], room[1], room[2] = room[0] - gpus, room[1] - cpu, room[2] - memory
    name, (gpus, cpu, memory) = max(free.items(), key=lambda kv: (kv[1][0], kv[1][1]) if gpu_model
                                    else (kv[1][1], kv[1][2]))
    return Room(len(free), name, gpus, cpu, memory)


# --- counts for /metrics ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupAllocation:
    """What a resource group's nodes hold, every pod counted (training and inference), as the lending tick last saw
    it on the cluster; `gpus_fragmented`: idle GPUs the typical jobs cannot use (None before a workload is learned)."""

    resource_group: str
    observed_at: datetime
    gpus: float
    gpus_allocated: float
    gpus_fragmented: float | None
    cpu_milli: int
    cpu_milli_allocated: int
    memory_mib: int
    memory_mib_allocated: int
    gpus_used: float | None = None  # really busy in `used_minute` (utilization x GPUs); None: no fresh profile
    used_minute: datetime | None = None


def group_allocation() -> list[GroupAllocation]:
    """Each group's capacity and allocation from the lending tick's last look (core.telemetry: the figures /metrics
    serves), in the API's units, with the GPUs really busy in the newest profiled minute; empty before the first
    tick."""
    at, groups = telemetry.groups(Redis.from_url(settings.REDIS_URL), settings.TIDAL_REDIS_NAMESPACE)
    if at is None:
        return []
    observed = datetime.fromtimestamp(at, timezone.utc)
    minute, busy = profiling.gpus_in_use_now(now=datetime.now(timezone.utc))
    return [GroupAllocation(name, observed, f["gpu_capacity"], round(f["gpu_allocated"], 3),
                            None if "gpu_fragmented" not in f else round(f["gpu_fragmented"], 3),
                            round(f["cpu_capacity"] * 1000), round(f["cpu_allocated"] * 1000),
                            round(f["memory_capacity"] / 2**20), round(f["memory_allocated"] / 2**20),
                            None if minute is None else round(busy.get(name, 0.0), 3), minute)
            for name, f in sorted(groups.items())]


def node_counts() -> list[tuple[str, str, str, bool, int]]:
    """(resource group, state, pool, pinned, nodes)."""
    return list(Node.objects.order_by().values_list("resource_group__name", "state", "pool", "pinned")
                .annotate(n=Count("id")))


def transition_counts() -> list[tuple[str, str, int]]:
    """(direction, status, transitions) over all time."""
    return list(NodeTransition.objects.order_by().values_list("direction", "status").annotate(n=Count("id")))


# --- what the console lists and shows (list pages restrict(user) what they get) ----------------------------


def services(*, prefetch: tuple[str, ...] = ()) -> QuerySet[InferenceService]:
    """Inference services with their department and GPU model, and the related rows named in `prefetch`."""
    return InferenceService.objects.select_related("department", "gpu_model").prefetch_related(*prefetch)


def listed_services(*, department: str = "") -> QuerySet[InferenceService]:
    """The service list's rows, with the QPS, GPU utilization and SM active of each one's newest load minute
    (`load_minute`, `load_qps`, `load_gpu`, `load_sm_active`, `load_estimated`); only `department`'s if given."""
    latest = ServiceMinute.objects.filter(service=OuterRef("pk")).order_by("-minute")
    rows = services().annotate(load_minute=Subquery(latest.values("minute")[:1]),
                               load_qps=Subquery(latest.values("qps")[:1]),
                               load_gpu=Subquery(latest.values("gpu_util_mean")[:1]),
                               load_sm_active=Subquery(latest.values("sm_active_mean")[:1]),
                               load_estimated=Subquery(latest.values("estimated")[:1]))
    return rows.filter(department__name=department) if department else rows


@dataclass(frozen=True)
class GroupRow:
    """A group of a service as the console lists it: its leader, workers and nodes (leader first)."""

    index: int
    leader: str
    workers: list[str]
    nodes: list[str]
    pods_ready: int
    ready: bool
    restarts: int  # the group recreated whole
    backoff_until: datetime | None
    restarts_in_place: int = 0  # its pods' containers restarted in place, the group kept (restart policy None)


def service_groups(*, service: InferenceService) -> list[GroupRow]:
    return [GroupRow(g.index, g.leader, [pod_name(service.name, g.index, w) for w in range(1, len(g.nodes))],
                     g.nodes, g.pods_ready, g.ready, g.restarts, g.backoff_until, sum(g.pod_restarts.values()))
            for g in service.groups.all()]


def group_states() -> list[tuple[str, str, int]]:
    """(service, state, groups) of every service whose replica is a group: ready, starting (placed, some pod not
    ready) or waiting (no pods: no room yet, or backing off)."""
    rows = ServiceGroup.objects.filter(service__group_size__gt=1).values_list("service__name", "ready", "nodes")
    counts: dict[tuple[str, str], int] = {}
    for service, ready, nodes in rows:
        state = "ready" if ready else "starting" if nodes else "waiting"
        counts[service, state] = counts.get((service, state), 0) + 1
    return [(service, state, n) for (service, state), n in sorted(counts.items())]


def unready_gpu_seconds() -> list[tuple[str, float]]:
    """(service, GPU-seconds held by its groups while not fully ready) of every service whose replica is a group."""
    return list(InferenceService.objects.filter(group_size__gt=1).order_by("name")
                .values_list("name", "unready_gpu_seconds"))


def node(*, name: str) -> Node | None:
    return Node.objects.select_related("resource_group", "gpu_model").filter(name=name).first()


def node_cells() -> QuerySet[dict]:
    """Every node's id, name, group, state, pool and pin, by group and name (the nodes page's grid)."""
    return Node.objects.order_by("resource_group__name", "name").values(
        "id", "name", "resource_group__name", "state", "pool", "pinned")


def open_transitions() -> dict[int, NodeTransition]:
    """The transitions in progress, by node id."""
    return {t.node_id: t for t in NodeTransition.objects.filter(status=NodeTransition.Status.OPEN)}


def is_moving(*, node: Node) -> bool:
    return node.transitions.filter(status=NodeTransition.Status.OPEN).exists()


def transitions_since(since: datetime, *, limit: int = 200) -> list[NodeTransition]:
    """Transitions started since `since` or still open, newest first, with their node and who asked."""
    return list(NodeTransition.objects.filter(Q(started_at__gte=since) | Q(status=NodeTransition.Status.OPEN))
                .select_related("node", "requested_by").order_by("-started_at")[:limit])


def node_decisions(*, node: Node, limit: int = 10) -> QuerySet[Decision]:
    """The newest decisions about `node`."""
    return Decision.objects.filter(subject=f"node:{node.name}")[:limit]


def services_decisions(*, names: Iterable[str], kind: str, reason: str = "", limit: int) -> QuerySet[Decision]:
    """The newest decisions of `kind` (and `reason`, if given) about the named services."""
    rows = Decision.objects.filter(subject__in=[f"service:{name}" for name in names]).order_by("-created_at", "-id")
    rows = rows.filter(kind=kind)
    return (rows.filter(reason=reason) if reason else rows)[:limit]


def scaling_reasons() -> list[str]:
    """Every reason the autoscaler has given for a scaling decision, once each, in order."""
    return list(Decision.objects.filter(kind=Decision.Kind.SCALING, subject__startswith="service:").order_by("reason")
                .values_list("reason", flat=True).distinct())


def resource_group_names() -> QuerySet[str]:
    return ResourceGroup.objects.order_by("name").values_list("name", flat=True)


def scaling_history(*, service: InferenceService, since: datetime | None = None, until: datetime | None = None,
                    kind: str | None = None) -> QuerySet[Decision]:
    """The autoscaler's decisions and alerts about `service` (and the changes people made to it), newest first."""
    rows = Decision.objects.filter(subject=f"service:{service.name}",
                                   kind__in=[kind] if kind else [Decision.Kind.SCALING, Decision.Kind.ALERT])
    if since:
        rows = rows.filter(created_at__gte=since)
    if until:
        rows = rows.filter(created_at__lt=until)
    return rows.select_related("department").order_by("-created_at", "-id")


def autoscaling_overview(*, group: str = "", department: str = "", reason: str = "",
                         alerts_since: datetime) -> QuerySet[InferenceService]:
    """Every service with its resource group, its last autoscaling decision, its alerts since `alerts_since`
    and the pods its latest load minute saw; filtered by group, department and last decision's reason."""
    about = Decision.objects.filter(subject=Concat(Value("service:"), OuterRef("name")))
    last = about.filter(kind=Decision.Kind.SCALING).order_by("-created_at", "-id")
    alerts = (about.filter(kind=Decision.Kind.ALERT, created_at__gte=alerts_since).order_by()
              .values("subject").annotate(n=Count("id")).values("n"))
    by_model = ResourceGroup.objects.filter(gpu_model=OuterRef("gpu_model")).values("name")[:1]
    cpu_group = ResourceGroup.objects.filter(gpu_model__isnull=True).values("name")[:1]
    seen = ServiceMinute.objects.filter(service=OuterRef("pk")).order_by("-minute").values("replicas")[:1]
    rows = InferenceService.objects.select_related("department", "gpu_model").annotate(
        group=Coalesce(Subquery(by_model), Subquery(cpu_group)),
        last_reason=Subquery(last.values("reason")[:1]), last_message=Subquery(last.values("message")[:1]),
        last_at=Subquery(last.values("created_at")[:1]),
        open_alerts=Coalesce(Subquery(alerts, output_field=IntegerField()), 0),
        last_alert=Subquery(about.filter(kind=Decision.Kind.ALERT).order_by("-created_at", "-id").values("message")[:1]),
        pods_seen=Subquery(seen),
    )
    if group:
        rows = rows.filter(group=group)
    if department:
        rows = rows.filter(department__name=department)
    if reason:
        rows = rows.filter(last_reason=reason)
    return rows.order_by("-priority", "name")
