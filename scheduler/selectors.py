"""Reads for the scheduler app: quota usage, inventory limits, restricted querysets for users."""
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone as dt_timezone
from decimal import Decimal
from functools import cache

from django.contrib.auth import get_user_model
from django.db.models import (CharField, Count, DecimalField, DurationField, ExpressionWrapper, F, IntegerField, Max,
                              OuterRef, Q, QuerySet, Subquery, Sum, TextField, Value)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Concat, NullIf

from cluster.types import QuotaNodeView, QuotaView
from colocation.models import Node
from core import selectors as core_selectors
from core.models import CPU, MEMORY, Decision, Department, GPUModel, Membership
from scheduler.policy.workload import Shape, TargetWorkload
from scheduler.quotafigures import TreeFigures, tree_figures
from scheduler.models import (Framework, JobRun, JobStatus, LearnedWorkload, Quota, QuotaKind, ReplayRun,
                              TrainingJob)


@dataclass(frozen=True)
class QuotaUsage:
    resource: str
    own: Decimal
    own_used: Decimal
    borrowed: Decimal
    borrowed_used: Decimal


def _used_by_kind(jobs: QuerySet, resource: str) -> dict[str, Decimal]:
    """Amount of `resource` held by admitted/running jobs, per quota kind."""
    if resource == CPU:
        field = "cpu_milli"
    elif resource == MEMORY:
        field = "memory_mib"
    else:
        field, jobs = "gpus", jobs.filter(assigned_gpu_model__name=resource)
    # Jobs are charged what was bound (the right-sized request) once the scheduler admitted them, for every worker.
    charged = Coalesce(f"alloc_{field}", field) * F("workers")
    rows = jobs.values("quota_kind").annotate(total=Coalesce(Sum(charged), 0, output_field=DecimalField()))
    return {row["quota_kind"]: Decimal(row["total"]) for row in rows}


def quota_usage(*, department: Department) -> list[QuotaUsage]:
    """Own and borrowed amounts of each quota of `department`, with what its jobs hold of them."""
    return quota_usages(departments=Department.objects.filter(pk=department.pk)).get(department.name, [])


def quota_usages(*, departments: QuerySet) -> dict[str, list[QuotaUsage]]:
    """Every quota of `departments` with what their jobs hold of it, in two queries (the operators' quota page)."""
    held: dict[tuple[str, str, str], Decimal] = {}
    jobs = TrainingJob.objects.filter(department__in=departments).holding_quota().order_by()
    for row in jobs.values("department__name", "quota_kind", "assigned_gpu_model__name").annotate(
            gpus=Sum(Coalesce("alloc_gpus", "gpus") * F("workers")),  # a gang holds each worker's share
            cpu=Sum(Coalesce("alloc_cpu_milli", "cpu_milli") * F("workers")),
            memory=Sum(Coalesce("alloc_memory_mib", "memory_mib") * F("workers"))):
        for resource, amount in ((row["assigned_gpu_model__name"], row["gpus"]), (CPU, row["cpu"]),
                                 (MEMORY, row["memory"])):
            key = (row["department__name"], resource, row["quota_kind"])
            held[key] = held.get(key, Decimal(0)) + Decimal(amount or 0)
    usages: dict[str, list[QuotaUsage]] = {}
    for quota in Quota.objects.filter(department__in=departments).select_related("department", "gpu_model"):
        name = quota.department.name
        usages.setdefault(name, []).append(QuotaUsage(
            resource=quota.resource, own=quota.own, own_used=held.get((name, quota.resource, QuotaKind.OWN), Decimal(0)),
            borrowed=quota.borrowed, borrowed_used=held.get((name, quota.resource, QuotaKind.BORROWED), Decimal(0))))
    return usages


def quota_used(*, department: Department, resource: str) -> dict[str, Decimal]:
    """What `department` holds of one resource, per quota kind ("own", "borrowed")."""
    holding = TrainingJob.objects.filter(department=department).holding_quota()
    used = _used_by_kind(holding, resource)
    return {kind: used.get(kind, Decimal(0)) for kind in QuotaKind.values}


@dataclass(frozen=True)
class NodeLimits:
    """The largest node in each dimension: a request above these can never run."""

    max_gpus: int
    max_cpu_milli: int
    max_memory_mib: int


def node_limits(*, gpu_models: list[str] | None = None) -> NodeLimits:
    """Largest node overall; `max_gpus` only over nodes of the given GPU models."""
    nodes = Node.objects.all()
    sizes = nodes.aggregate(cpu=Max("cpu_milli"), memory=Max("memory_mib"))
    gpu_nodes = nodes.filter(gpu_model__name__in=gpu_models) if gpu_models is not None else nodes
    max_gpus = gpu_nodes.aggregate(gpus=Max("gpu_count"))["gpus"]
    return NodeLimits(max_gpus=max_gpus or 0, max_cpu_milli=sizes["cpu"] or 0, max_memory_mib=sizes["memory"] or 0)


@dataclass(frozen=True)
class WorkerRoom:
    """The nodes that could hold one worker's GPUs (any node for a CPU-only worker): the most CPU and memory among
    them, and how many hold the whole worker."""

    max_cpu_milli: int
    max_memory_mib: int
    fitting: int


def worker_room(*, gpu_models: list[str], gpus: Decimal, cpu_milli: int, memory_mib: int) -> WorkerRoom:
    """One query: a worker runs on one node, so its GPUs, CPU and memory must all fit the same node."""
    nodes = Node.objects.all()
    if gpus > 0:
        nodes = nodes.filter(gpu_model__name__in=gpu_models, gpu_count__gte=gpus)
    row = nodes.aggregate(cpu=Max("cpu_milli"), memory=Max("memory_mib"),
                          fitting=Count("id", filter=Q(cpu_milli__gte=cpu_milli, memory_mib__gte=memory_mib)))
    return WorkerRoom(row["cpu"] or 0, row["memory"] or 0, row["fitting"])


def quota_limits(*, department: Department) -> dict[str, tuple[Decimal, Decimal]]:
    """The department's (own, borrowed) quota per resource (GPU model name, "cpu", "memory")."""
    return {q.resource: (q.own, q.borrowed) for q in Quota.objects.filter(department=department).select_related(
        "gpu_model")}


def latest_decision(*, job: TrainingJob) -> Decision | None:
    return Decision.objects.filter(subject=f"job:{job.pk}").order_by("-created_at", "-id").first()


def short_sentence(decision: Decision | None) -> str | None:
    """What a list shows of a decision: the short sentence the scheduler wrote beside the complete one (its `data`'s
    `summary`), else its message."""
    return None if decision is None else (decision.data or {}).get("summary") or decision.message


def _latest_short_sentence() -> Subquery:
    """short_sentence() of a job's latest decision, as a subquery of the job's row."""
    subject = Concat(Value("job:"), Cast(OuterRef("pk"), CharField()))
    return Subquery(Decision.objects.filter(subject=subject).order_by("-created_at", "-id").annotate(
        short=Coalesce(NullIf(KT("data__summary"), Value("")), "message", output_field=TextField())).values("short")[:1])


# --- what the console lists and shows (list pages restrict(user) what they get) ----------------------------


def jobs(*, details: bool = False) -> QuerySet[TrainingJob]:
    """Jobs with the names every page about them shows (department, GPU model asked and assigned); `details`: also
    the framework, submitter and node a job's own page shows."""
    rows = TrainingJob.objects.select_related("department", "gpu_model", "assigned_gpu_model")
    return rows.select_related("framework", "submitter", "node") if details else rows


def listed_jobs(*, submitter=None, department: str = "") -> QuerySet[TrainingJob]:
    """The job list's rows, each with its latest decision's sentence; only `submitter`'s, `department`'s if given."""
    rows = jobs()
    if submitter is not None:
        rows = rows.filter(submitter=submitter)
    if department:
        rows = rows.filter(department__name=department)
    return with_latest_message(rows)


def own_pending_jobs(*, user, ids: list[int]) -> QuerySet[TrainingJob]:
    """The jobs among `ids` that `user` submitted and that still wait (the ones they may cancel in bulk)."""
    return jobs().restrict(user).filter(pk__in=ids, submitter=user, status=JobStatus.PENDING)


def framework(*, pk: int) -> Framework | None:
    return Framework.objects.filter(pk=pk).first()


def listed_departments() -> QuerySet[Department]:
    """Departments with their members, pending and running jobs counted, and the GPUs their pending jobs ask for
    (workers x GPUs). Each figure is a scalar subquery per department row, never a join: joining memberships and jobs
    and grouping made PostgreSQL evaluate the GPU sum once per joined row, and the paginator's count repeated it
    (2 s for 200 departments and 10,000 jobs, `bench console`)."""
    pending = TrainingJob.objects.filter(department=OuterRef("pk"), status=JobStatus.PENDING)
    return Department.objects.annotate(
        members=_count(Membership.objects.filter(department=OuterRef("pk"))),
        pending=_count(pending),
        running=_count(TrainingJob.objects.filter(department=OuterRef("pk"), status=JobStatus.RUNNING)),
        pending_gpus=Coalesce(_sum(pending, F("workers") * F("gpus")), Decimal(0), output_field=DecimalField()),
    )


def _count(rows: QuerySet) -> Coalesce:
    """How many of `rows` (correlated to the outer row) there are, as a scalar subquery."""
    counted = rows.order_by().values("department").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def _sum(rows: QuerySet, amount) -> Subquery:
    return Subquery(rows.order_by().values("department").annotate(total=Sum(amount)).values("total"),
                    output_field=DecimalField())


def quotas() -> QuerySet[Quota]:
    """Quotas with the department and GPU model they are of."""
    return Quota.objects.select_related("department", "gpu_model")


def quota_ids(*, departments: list[str]) -> dict[tuple[str, str], int]:
    """(department, resource) → the quota's id, for the named departments."""
    return {(q.department.name, q.resource): q.pk for q in quotas().filter(department__name__in=departments)}


def replay_runs() -> QuerySet[ReplayRun]:
    """What-if runs with who asked for them, newest first."""
    return ReplayRun.objects.select_related("requested_by")


def with_latest_message(jobs: QuerySet) -> QuerySet:
    """Jobs annotated with the short sentence of their latest decision (`latest_message`: what a list shows; the
    job's page shows the complete one), in the same query."""
    return jobs.annotate(latest_message=_latest_short_sentence())


@dataclass(frozen=True)
class WorkerRow:
    """One worker of a job's run: where it runs, on which GPUs of its node, and in what state."""

    rank: int
    node: str | None
    pod: str
    gpu_shares: tuple[tuple[int, float], ...]  # (GPU index on the node, share of it)
    state: str

    @property
    def gpus(self) -> Decimal:
        return sum((Decimal(str(share)) for _, share in self.gpu_shares), Decimal(0))


def placement_run(runs: list[JobRun]) -> JobRun | None:
    """The run whose workers a job's page shows: the open one, else the latest (`runs`: the job's, any order)."""
    open_runs = [run for run in runs if run.ended_at is None]
    return max(open_runs or runs, key=lambda run: run.attempt, default=None)


def run_workers(*, run: JobRun, job_status: str) -> list[WorkerRow]:
    """Every worker of `run`, rank 0 first: a gang's from JobRun.workers, a one-worker job's from the run itself.
    A worker without a recorded state has its run's: the job's status while the run is open, else its outcome."""
    state = job_status if run.ended_at is None else run.outcome
    if not run.workers:
        node = run.node.name if run.node_id else None
        return [WorkerRow(0, node, run.pod, _shares(run.gpu_shares), state)]
    return [WorkerRow(int(w.get("rank", i)), w.get("node"), w.get("pod", ""), _shares(w.get("gpu_shares") or []),
                      w.get("state") or state)
            for i, w in enumerate(sorted(run.workers, key=lambda w: w.get("rank", 0)))]


def _shares(pairs: list) -> tuple[tuple[int, float], ...]:
    return tuple((int(index), float(share)) for index, share in pairs)


@dataclass(frozen=True)
class Reservation:
    """A waiting gang's hold on the nodes that free soonest, from the latest cycle."""

    nodes: tuple[str, ...]
    start_at: datetime  # when their jobs are expected to end


def reservation_of(*, job: TrainingJob) -> Reservation | None:
    """The job's reservation while it waits; an admitted gang's last one is history (its decisions keep it)."""
    held = job.reservation or {}
    if job.status != JobStatus.PENDING or not held.get("nodes") or held.get("start_at") is None:
        return None
    return Reservation(tuple(held["nodes"]), datetime.fromtimestamp(float(held["start_at"]), tz=dt_timezone.utc))


def job_workers(*, job: TrainingJob) -> tuple[JobRun | None, list[WorkerRow]]:
    """The run a job's page shows (open, else latest) and its workers; one query."""
    run = placement_run(list(JobRun.objects.filter(job=job).select_related("node")))
    return run, run_workers(run=run, job_status=job.status) if run else []


def job_decisions(*, job: TrainingJob) -> QuerySet:
    """Every decision about `job`, oldest first."""
    return Decision.objects.filter(subject=f"job:{job.pk}").order_by("created_at", "id")


def pending_gpus(*, department: Department) -> dict[str, Decimal]:
    """GPUs the department's pending jobs ask for, per GPU model asked: each job counts workers x GPUs (a gang of
    4 x 8 waits for 32, not for one job's worth)."""
    rows = (TrainingJob.objects.filter(department=department, status=JobStatus.PENDING, gpus__gt=0)
            .order_by().values("gpu_model__name").annotate(total=Sum(F("workers") * F("gpus"))))
    return {row["gpu_model__name"]: Decimal(row["total"]) for row in sorted(rows, key=lambda r: r["gpu_model__name"])}


def department_queue(*, department: Department) -> QuerySet:
    """The department's pending jobs in the order the last cycle ranked them (unranked ones last)."""
    return (TrainingJob.objects.filter(department=department, status=JobStatus.PENDING)
            .select_related("submitter", "gpu_model")
            .order_by(F("queue_position").asc(nulls_last=True), "submitted_at", "id"))


def job_counts(*, department: Department) -> dict[str, int]:
    rows = TrainingJob.objects.filter(department=department).values("status").annotate(n=Count("id")).order_by()
    return {row["status"]: row["n"] for row in rows}


def recent_preemptions(*, department: Department, limit: int = 10) -> QuerySet:
    return Decision.objects.filter(department=department, kind=Decision.Kind.PREEMPTION).order_by("-created_at", "-id")[:limit]


# --- counts for /metrics ---------------------------------------------------------------------------


def pending_counts() -> list[tuple[str, str, int]]:
    """(department, pending reason, jobs) of every pending job."""
    return list(TrainingJob.objects.filter(status=JobStatus.PENDING).order_by()
                .values_list("department__name", "pending_reason").annotate(n=Count("id")))


def decision_counts() -> list[tuple[str, str, int]]:
    """(kind, reason, decisions) over all time: counters for Prometheus (rates come from its `rate()`)."""
    return list(Decision.objects.order_by().values_list("kind", "reason").annotate(n=Count("id")))


def run_outcome_counts() -> list[tuple[str, int]]:
    """(outcome, runs) of every ended run: preempted and killed runs among them."""
    return list(JobRun.objects.exclude(outcome=JobRun.Outcome.RUNNING).order_by()
                .values_list("outcome").annotate(n=Count("id")))


def first_wait_histogram(bounds: tuple[float, ...]) -> tuple[list[int], float, int]:
    """Queue wait of every job's first run (start minus submit): cumulative counts per bound, sum, count."""
    wait = ExpressionWrapper(F("started_at") - F("job__submitted_at"), output_field=DurationField())
    runs = JobRun.objects.filter(attempt=1).order_by().annotate(wait=wait)
    figures = runs.aggregate(total=Sum("wait"), count=Count("id"),
                             **{f"le{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=b)))
                                for i, b in enumerate(bounds)})
    total = figures["total"].total_seconds() if figures["total"] else 0.0
    return [figures[f"le{i}"] for i in range(len(bounds))], total, figures["count"]


JOB_ROW_COLUMNS = ("id", "name", "task_key", "image", "command", "gpus", "cpu_milli", "memory_mib", "expected_duration_s",
                   "workers", "topology", "preemptible", "keep_request", "status", "quota_kind", "submitted_at",
                   "admitted_at", "started_at", "finished_at")


def job_rows(jobs: QuerySet) -> QuerySet:
    """The job list's rows as plain dicts: the job's columns and the names of what it refers to, each a scalar
    subquery. No model objects: a page of 50 built 250 of them, a quarter of a list's CPU under load (`bench
    api`). No joins: PostgreSQL looks the names up for the page's rows only, after sorting and limiting, and neither
    the page nor its count pays for joins (planning the list's five-table join took 2.6 ms, this 0.4 ms)."""
    return jobs.values(*JOB_ROW_COLUMNS, **_row_names())


@cache
def _row_names() -> dict[str, Subquery]:
    """Built once per process (half of `job_rows`' 0.9 ms a request when built each time); each query resolves its
    own copies, so they are shared safely."""
    framework = Framework.objects.annotate(label=Concat("name", Value("-"), "version"))
    return {"department_name": _name_of(Department.objects, "department_id"),
            "submitter_name": _name_of(get_user_model().objects, "submitter_id", "username"),
            "framework_label": _name_of(framework, "framework_id", "label"),
            "gpu_model_name": _name_of(GPUModel.objects, "gpu_model_id"),
            "node_name": _name_of(Node.objects, "node_id"),
            "assigned_gpu_model_name": _name_of(GPUModel.objects, "assigned_gpu_model_id"),
            "why": _latest_short_sentence()}


def _name_of(rows: QuerySet, key: str, field: str = "name") -> Subquery:
    return Subquery(rows.filter(pk=OuterRef(key)).order_by().values(field))


def learned_workload() -> TargetWorkload | None:
    """The newest learned target workload of the fragmentation measure; None before any job was submitted."""
    row = LearnedWorkload.objects.first()
    if row is None or not row.shapes:
        return None
    shapes = [Shape(s["cpu_milli"], s["gpu_milli"], s["gpu_count"], tuple(s["models"])) for s in row.shapes]
    return TargetWorkload(tuple(shapes), tuple(s["count"] for s in row.shapes), row.jobs)



# --- the department tree (docs/concepts/quotas-and-priority.md#quota-trees-and-fair-sharing) ---------------------


def department_tree(*, user) -> TreeFigures:
    """Every department's GPU quota figures per model (used, lent, borrowed, fair share: scheduler/quotafigures.py),
    computed over the whole tree in at most seven queries; `user` sees the departments they belong to with the ones above and
    below them (operators: all)."""
    departments = list(Department.objects.values_list("pk", "name", "parent__name", "weight", "reclaim_min_runtime_s",
                                                      "fence"))
    nodes = tuple(QuotaNodeView(name, parent, float(weight), runtime, fence)
                  for _, name, parent, weight, runtime, fence in departments)
    quotas = tuple(QuotaView(q.department.name, q.gpu_model.name, float(q.own), float(q.borrowed),
                             None if q.lend_limit is None else float(q.lend_limit))
                   for q in Quota.objects.filter(resource_kind="gpu").select_related("department", "gpu_model"))
    capacity = {name: float(total) for name, total in Node.objects.filter(gpu_model__isnull=False).order_by()
                .values_list("gpu_model__name").annotate(total=Sum("gpu_count"))}
    held = (TrainingJob.objects.holding_quota().filter(gpus__gt=0, assigned_gpu_model__isnull=False).order_by()
            .values_list("department__name", "assigned_gpu_model__name")
            .annotate(total=Sum(Coalesce("alloc_gpus", "gpus") * F("workers"))))
    asked = (TrainingJob.objects.filter(status=JobStatus.PENDING, gpus__gt=0, gpu_model__isnull=False).order_by()
             .values_list("department__name", "gpu_model__name").annotate(total=Sum(F("gpus") * F("workers"))))
    figures = tree_figures(quotas, nodes, capacity, {(d, m): float(x) for d, m, x in held},
                           {(d, m): float(x) for d, m, x in asked}, _open_pending())
    if user.is_staff:
        return figures
    visible = _visible_in_tree(user, {pk: name for pk, name, *_ in departments})
    return replace(figures, nodes=tuple(n for n in figures.nodes if n.name in visible))


def _open_pending() -> dict[tuple[str, tuple[str, ...]], float]:
    """GPUs that waiting jobs with an open GPU model ask for, per (department, models their framework is certified
    on); two queries."""
    open_jobs = (TrainingJob.objects.filter(status=JobStatus.PENDING, gpus__gt=0, gpu_model__isnull=True).order_by()
                 .values_list("department__name", "framework_id").annotate(total=Sum(F("gpus") * F("workers"))))
    rows = list(open_jobs)
    if not rows:
        return {}
    certified: dict[int, list[str]] = {}
    for framework, model in (Framework.certified_on.through.objects.filter(framework_id__in={f for _, f, _ in rows})
                             .values_list("framework_id", "gpumodel__name")):
        certified.setdefault(framework, []).append(model)
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for department, framework, total in rows:
        key = (department, tuple(sorted(certified.get(framework, ()))))
        out[key] = out.get(key, 0.0) + float(total)
    return out


def _visible_in_tree(user, names: dict[int, str]) -> set[str]:
    """The names of the user's departments, of those above them and of those below them."""
    links = core_selectors.tree_links()
    mine = set(Membership.objects.filter(user=user).values_list("department_id", flat=True))
    above = set()
    for pk in mine:
        while (pk := links.get(pk)) is not None and pk not in above:
            above.add(pk)
    return {names[pk] for pk in core_selectors.subtrees(links, mine) | above}
