"""Writes for the scheduler app. Each service checks its business rules, writes in one transaction,
and records a Decision where people need to know why something happened."""
import logging
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, Max
from django.utils import timezone

from cluster.clock import utc
from colocation.models import Node
from core import selectors as core_selectors
from core.decisions import decision_record
from core.errors import ApplicationError, Conflict
from core.models import CPU, MEMORY, Decision, Department, GPUModel
from scheduler import selectors
from scheduler.models import Framework, JobRun, JobStatus, LearnedWorkload, Quota, Topology, TrainingJob
from scheduler.policy.decisions import Admit
from scheduler.policy.priority import ScoreBreakdown
from scheduler.policy.workload import Shape, TargetWorkload, job_shape
from scheduler.signals import runs_ended

log = logging.getLogger(__name__)


# --- quotas ------------------------------------------------------------------------------------


def _quota_key(resource_kind: str, gpu_model: GPUModel | None) -> dict:
    if resource_kind == Quota.Resource.GPU:
        if gpu_model is None:
            raise ApplicationError.for_field("gpu_model", "a GPU quota names its GPU model")
        return {"resource_kind": resource_kind, "gpu_model": gpu_model}
    if gpu_model is not None:
        raise ApplicationError.for_field("gpu_model", f"a {resource_kind} quota has no GPU model")
    return {"resource_kind": resource_kind, "gpu_model": None}


@transaction.atomic
def quota_set(
    *, department: Department, resource_kind: str, gpu_model: GPUModel | None, own: Decimal, borrowed: Decimal, actor
) -> Quota:
    """Create or change a quota; it may not drop below what the department's jobs already hold."""
    key = _quota_key(resource_kind, gpu_model)
    resource = gpu_model.name if gpu_model else resource_kind
    Department.objects.select_for_update().get(pk=department.pk)  # serialize with admissions
    used = selectors.quota_used(department=department, resource=resource)
    amounts = (("own", own), ("borrowed", borrowed))
    negative = {kind: [f"must be zero or more, got {amount}"] for kind, amount in amounts if amount < 0}
    if negative:
        raise ApplicationError("a quota is never negative", fields=negative)
    below = {kind: [f"{kind} {resource} quota {amount} is below the {used[kind]} already in use"]
             for kind, amount in amounts if amount < used[kind]}
    if below:
        raise Conflict("quota below what is in use", fields=below)
    quota, created = Quota.objects.update_or_create(department=department, **key, defaults={"own": own, "borrowed": borrowed})
    decision_record(
        kind=Decision.Kind.QUOTA,
        subject=f"department:{department.name}",
        department=department,
        reason="quota_created" if created else "quota_changed",
        message=f"{department} {resource} quota set to own {own}, borrowed {borrowed} by {actor}",
        data={"resource": resource, "own": str(own), "borrowed": str(borrowed)},
    )
    return quota


@transaction.atomic
def quota_delete(*, quota: Quota, actor) -> None:
    used = selectors.quota_used(department=quota.department, resource=quota.resource)
    if any(used.values()):
        raise Conflict(f"{quota.department} still holds {quota.resource}: {used}; cannot delete its quota")
    decision_record(
        kind=Decision.Kind.QUOTA,
        subject=f"department:{quota.department.name}",
        department=quota.department,
        reason="quota_deleted",
        message=f"{quota.department} {quota.resource} quota deleted by {actor}",
    )
    quota.delete()


# --- catalogue ---------------------------------------------------------------------------------


@transaction.atomic
def framework_create(*, name: str, version: str, certified_on: list[GPUModel]) -> Framework:
    framework = Framework.objects.create(name=name, version=version)
    framework.certified_on.set(certified_on)
    return framework


@transaction.atomic
def framework_update(*, framework: Framework, certified_on: list[GPUModel] | None = None) -> Framework:
    if certified_on is not None:
        framework.certified_on.set(certified_on)
    return framework


# --- training jobs -----------------------------------------------------------------------------


MAX_WORKERS = 1024  # a bound the API's schema states: far above any quota here, and within the column's range


def _job_errors(*, submitter, department, framework, gpu_model, gpus: Decimal, cpu_milli: int, memory_mib: int,
                workers: int = 1, topology: str = Topology.PACK) -> dict:
    """Every reason the request can never run here, by field. GPUs, CPU and memory are per worker."""
    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    if not submitter.is_staff and not core_selectors.is_member(user=submitter, department=department):
        add("department", f"you are not a member of department {department}")
    if gpus < 0:
        add("gpus", f"must be zero or more, got {gpus}")
    elif gpus > 1 and gpus != gpus.to_integral_value():
        add("gpus", f"fractions are only allowed below 1 GPU; {gpus} is neither below 1 nor whole")
    if gpus > 0 and gpu_model is None:
        add("gpu_model", "a job that asks for GPUs names its preferred GPU model")
    if workers < 1:
        add("workers", f"must be at least 1, got {workers}")
    elif workers > MAX_WORKERS:
        add("workers", f"at most {MAX_WORKERS} workers, got {workers}")
    elif workers > 1 and gpus != gpus.to_integral_value() and "gpus" not in errors:
        add("gpus", f"{amount_text(gpus)} GPUs is a fraction: each of a gang's {workers} workers asks for whole GPUs "
                    "(or none)")
    if topology not in Topology.values:
        add("topology", f"must be one of {', '.join(Topology.values)}, got {topology!r}")
    certified = {model.name for model in framework.certified_on.all()}  # the API's input prefetched them
    if gpu_model is not None and gpu_model.name not in certified:
        add("framework", f"{framework} is not certified on {gpu_model}; certified on: {', '.join(sorted(certified)) or 'none'}")
    limits = selectors.node_limits(gpu_models=sorted(certified))
    if gpus > limits.max_gpus and "gpus" not in errors:
        add("gpus", f"{gpus} GPUs is more than the largest node with a GPU model certified for {framework} ({limits.max_gpus})")
    if cpu_milli <= 0:
        add("cpu_milli", f"must be more than 0, got {cpu_milli}")
    elif cpu_milli > limits.max_cpu_milli:
        add("cpu_milli", f"{cpu_milli}m CPU is more than any node has ({limits.max_cpu_milli}m)")
    if memory_mib <= 0:
        add("memory_mib", f"must be more than 0, got {memory_mib}")
    elif memory_mib > limits.max_memory_mib:
        add("memory_mib", f"{memory_mib} MiB memory is more than any node has ({limits.max_memory_mib} MiB)")
    if not errors.keys() & {"gpus", "cpu_milli", "memory_mib"}:
        for field, message in _worker_fit_errors(certified=sorted(certified), gpus=gpus, cpu_milli=cpu_milli,
                                                 memory_mib=memory_mib):
            add(field, message)
    if workers > 1 and not errors.keys() & {"department", "workers", "gpus", "gpu_model", "framework"}:
        for field, message in _gang_quota_errors(department=department, certified=sorted(certified), gpus=gpus,
                                                 cpu_milli=cpu_milli, memory_mib=memory_mib, workers=workers):
            add(field, message)
    return errors


def _worker_fit_errors(*, certified: list[str], gpus: Decimal, cpu_milli: int,
                       memory_mib: int) -> list[tuple[str, str]]:
    """A worker runs on one node: its GPUs, CPU and memory must fit the same node (each fitting some node is not
    enough). GPU workers look at nodes of the certified models with as many GPUs, CPU-only ones at every node."""
    room = selectors.worker_room(gpu_models=certified, gpus=gpus, cpu_milli=cpu_milli, memory_mib=memory_mib)
    if room.fitting:
        return []
    plural = "s" if gpus > 1 else ""
    where = f"{' or '.join(certified)} node with {amount_text(gpus)} GPU{plural}" if gpus > 0 else "node"
    if cpu_milli > room.max_cpu_milli:
        return [("cpu_milli", f"{cpu_milli}m CPU is more than any {where} has ({room.max_cpu_milli}m)")]
    if memory_mib > room.max_memory_mib:
        return [("memory_mib", f"{memory_mib} MiB memory is more than any {where} has ({room.max_memory_mib} MiB)")]
    return [("memory_mib", f"no single {where} has both {cpu_milli}m CPU and {memory_mib} MiB memory")]


def _gang_quota_errors(*, department: Department, certified: list[str], gpus: Decimal, cpu_milli: int,
                       memory_mib: int, workers: int) -> list[tuple[str, str]]:
    """A gang is admitted whole, and takes all it asks from one kind of quota: own when every resource has room
    there, else borrowed (scheduler.policy.quota). So it can ever start only if, for own or for borrowed, workers x
    its GPUs fit that quota of one GPU model it may run on (a model without a quota gives nothing) and workers x its
    CPU and memory fit that kind's CPU and memory quotas (where the department has them)."""
    limits = selectors.quota_limits(department=department)
    total = {"gpus": workers * gpus, CPU: workers * cpu_milli, MEMORY: workers * memory_mib}
    short = []
    for slot, kind in enumerate(("own", "borrowed")):
        parts = []
        if gpus > 0 and not any(model in limits and total["gpus"] <= limits[model][slot] for model in certified):
            named = " and ".join(f"{model} {amount_text(limits[model][slot])}" if model in limits else f"{model} none"
                                 for model in certified)
            parts.append(f"{amount_text(total['gpus'])} GPUs above {named}")
        for resource, unit in ((CPU, "m CPU"), (MEMORY, " MiB memory")):
            if resource in limits and total[resource] > limits[resource][slot]:
                parts.append(f"{total[resource]}{unit} above {amount_text(limits[resource][slot])}{unit}")
        if not parts:
            return []
        short.append(f"{kind}: {', '.join(parts)}")
    asked = [f"{amount_text(total['gpus'])} GPUs"] * (gpus > 0) + [f"{total[CPU]}m CPU", f"{total[MEMORY]} MiB memory"]
    return [("workers", f"{workers} workers ask {', '.join(asked[:-1])} and {asked[-1]} at once, more than "
                        f"{department}'s own or borrowed quota could ever give (a gang takes all it asks from one of "
                        f"them): {'; '.join(short)}")]


def amount_text(value: Decimal) -> str:
    """An amount as sentences write it: 2.000 -> 2, 0.500 -> 0.5, 10 -> 10 (not 1E+1)."""
    return f"{Decimal(value).normalize():f}"


@transaction.atomic
def job_submit(
    *,
    submitter,
    department: Department,
    name: str,
    image: str,
    command: str,
    framework: Framework,
    gpu_model: GPUModel | None,
    gpus: Decimal,
    cpu_milli: int,
    memory_mib: int,
    task_key: str = "",
    expected_duration_s: int | None = None,
    annotations: dict[str, str] | None = None,
    workers: int = 1,
    topology: str = Topology.PACK,
) -> TrainingJob:
    """A job of `workers` identical workers (a gang when more than one), each asking `gpus`, `cpu_milli` and
    `memory_mib`; refused with every field's reason, nothing written, when it could never run."""
    errors = _job_errors(
        submitter=submitter, department=department, framework=framework, gpu_model=gpu_model,
        gpus=gpus, cpu_milli=cpu_milli, memory_mib=memory_mib, workers=workers, topology=topology,
    )
    if errors:
        raise ApplicationError("the job cannot be submitted", fields=errors)
    job = TrainingJob.objects.create(
        name=name, task_key=task_key or f"{department.name}/{name}", department=department, submitter=submitter,
        image=image, command=command, framework=framework, gpu_model=gpu_model, gpus=gpus,
        cpu_milli=cpu_milli, memory_mib=memory_mib, expected_duration_s=expected_duration_s,
        annotations=annotations or {}, workers=workers, topology=topology,
    )
    gang = f" as a gang of {workers} workers ({topology})" if workers > 1 else ""
    decision_record(
        kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=department, reason="submitted",
        message=f"pending: submitted by {submitter}{gang} and waiting for the next scheduling cycle",
    )
    return job


@transaction.atomic
def job_keep_request(*, job: TrainingJob, keep: bool, actor) -> TrainingJob:
    """Turn right-sizing off (keep the request as asked) or back on for one job: the admins' override
    (README: Training scheduler).
    It applies from the job's next admission."""
    job = TrainingJob.objects.select_for_update().select_related("department").get(pk=job.pk)
    if not core_selectors.can_administer(user=actor, department=job.department):
        raise PermissionDenied(f"only operators and admins of {job.department} override right-sizing")
    if job.is_finished:
        raise Conflict.for_field("keep_request", f"job {job.pk} is already {job.status}")
    if job.keep_request != keep:
        job.keep_request = keep
        job.save(update_fields=["keep_request"])
        decision_record(
            kind=Decision.Kind.RIGHTSIZING, subject=f"job:{job.pk}", department=job.department,
            reason="request-kept" if keep else "rightsizing-on",
            message=(f"right-sizing turned off by {actor}: the request is bound as asked" if keep
                     else f"right-sizing turned back on by {actor}: bound from the task's last runs"),
        )
    return job


def can_cancel(*, user, job: TrainingJob) -> bool:
    return job.submitter_id == user.pk or core_selectors.can_administer(user=user, department=job.department)


@transaction.atomic
def job_cancel(*, job: TrainingJob, actor) -> TrainingJob:
    job = TrainingJob.objects.select_for_update().get(pk=job.pk)
    if not can_cancel(user=actor, job=job):
        raise PermissionDenied("only the submitter, department admins and operators cancel a job")
    if job.is_finished:
        raise Conflict.for_field("status", f"job {job.pk} is already {job.status}; only unfinished jobs can be cancelled")
    now = timezone.now()
    ended = list(job.runs.filter(ended_at__isnull=True))
    for run in ended:
        run.ended_at, run.outcome = now, JobRun.Outcome.CANCELLED
        for worker in run.workers:  # a gang's workers end with it (the loop removes their pods)
            if worker["state"] == WORKER_RUNNING:
                worker["state"] = JobRun.Outcome.CANCELLED
    JobRun.objects.bulk_update(ended, ["ended_at", "outcome", "workers"])
    runs_ended.send(sender=JobRun, runs=ended, now=now)
    job.status, job.finished_at, job.reservation = JobStatus.CANCELLED, now, {}
    job.save(update_fields=["status", "finished_at", "reservation"])
    decision_record(
        kind=Decision.Kind.CANCELLATION, subject=f"job:{job.pk}", department=job.department, reason="cancelled_by_user",
        message=f"cancelled by {actor}",
    )
    return job


# --- a job's lifecycle: the only place its status changes (Kueue's pkg/workload) ------------------------------
# pending → admitted (job_admit: recorded with its run before the pod is bound) → running (job_start) → succeeded
# or failed (job_finish); admitted or running → pending again (job_requeue: preempted, evicted, its pod lost or
# refused; job_take_back: its node taken back for inference); any unfinished job → cancelled (job_cancel). The
# live loops, the lending controller and the API call these; the callers that hold a job's row lock pass the job.
# A gang (workers > 1) has one run for all its workers (JobRun.workers, rank 0 first): it starts whole and ends
# whole. It succeeds when every worker has succeeded (job_worker_succeeded); any other end of one worker ends the
# run for all (job_requeue with `ended`). A worker's state: running, then succeeded, or the run's outcome (failed,
# preempted, killed, ...) when its own end or the whole run's ended it, or "stopped" when another worker's end did.
WORKER_RUNNING, WORKER_SUCCEEDED, WORKER_STOPPED = "running", "succeeded", "stopped"


def run_pod_name(job_id: int, attempt: int, rank: int | None = None) -> str:
    """A run's pod: one per attempt, and for a gang one per worker rank, job-<id>-<attempt>-<rank> (the simulated
    cluster names one per job: simulated_training.simulated_pod_name)."""
    return f"job-{job_id}-{attempt}" if rank is None else f"job-{job_id}-{attempt}-{rank}"


def run_service_name(job_id: int, attempt: int) -> str:
    """A gang run's headless Service (a DNS label starting with a letter): its workers are <pod>.<service>."""
    return f"gang-{job_id}-{attempt}"


def run_service(run: JobRun) -> str | None:
    """The headless Service of a gang's run; None for a one-worker run (it has none)."""
    return run_service_name(run.job_id, run.attempt) if run.workers else None


def job_of_pod(name: str) -> int | None:
    """The job of a pod named by run_pod_name; None for any other pod."""
    parts = name.split("-")
    if len(parts) not in (3, 4) or parts[0] != "job" or not parts[1].isdigit():
        return None
    return int(parts[1]) if len(parts) == 3 or parts[3].isdigit() else None


def score_dict(score: ScoreBreakdown) -> dict:
    return {"base": score.base, "utilization": score.utilization, "aging": score.aging, "total": score.total}


def open_run(job: TrainingJob) -> JobRun | None:
    return job.runs.filter(ended_at__isnull=True).order_by("-attempt").first()


def run_live_pods(run: JobRun) -> list[str]:
    """The pods of a run that should be on the cluster: every worker still running (rank 0 first)."""
    if not run.workers:
        return [run.pod] if run.pod else []
    return [w["pod"] for w in run.workers if w["state"] == WORKER_RUNNING]


def run_worker(run: JobRun, pod: str) -> dict | None:
    """The worker of a gang's run that `pod` is; None for a one-worker run or another pod."""
    return next((w for w in run.workers if w["pod"] == pod), None)


def _end_run(job: TrainingJob, outcome: str, now: float, ended: tuple[str, ...] = ()) -> JobRun | None:
    """End the job's open run(s) with `outcome`; a gang's running workers take the outcome when `ended` (the pods whose
    own end ended the run) is empty or names them, else they were stopped for another's sake. The newest run ended."""
    last = None
    for run in job.runs.filter(ended_at__isnull=True).order_by("attempt"):
        for worker in run.workers:
            if worker["state"] == WORKER_RUNNING:
                worker["state"] = outcome if not ended or worker["pod"] in ended else WORKER_STOPPED
        run.ended_at, run.outcome = utc(now), outcome
        run.save(update_fields=["ended_at", "outcome", "workers"])
        runs_ended.send(sender=JobRun, runs=[run], now=None)
        last = run
    return last


def _workers(job: TrainingJob, admission: Admit, attempt: int) -> list[dict]:
    """A gang's workers as its run records them (empty for one worker: the run's node/pod/gpu_shares say it)."""
    if len(admission.workers) == 1:
        return []
    return [{"rank": rank, "node": worker.node, "pod": run_pod_name(job.pk, attempt, rank),
             "gpu_shares": [[s.index, s.share] for s in worker.gpu_shares], "state": WORKER_RUNNING}
            for rank, worker in enumerate(admission.workers)]


@transaction.atomic
def job_admit(*, admission: Admit, now: float) -> tuple[TrainingJob, JobRun] | None:
    """Record the cycle's admission and the job's new run (every worker of a gang), before its pods are bound. None
    when the job is no longer pending (cancelled since the snapshot, or admitted by a tick that should not have been
    acting): the decision is stale, and acting on it would undo what happened."""
    job = TrainingJob.objects.select_for_update().select_related("department").filter(
        pk=admission.job_id, status=JobStatus.PENDING).first()
    if job is None:
        log.info("job %s: no longer pending, not admitted", admission.job_id)
        return None
    models = {m.name: m for m in GPUModel.objects.all()}
    gpu_model = models.get(admission.gpu_model) if admission.gpu_model else None
    node = Node.objects.get(name=admission.node)
    r = admission.rightsized
    job.status, job.node, job.assigned_gpu_model = JobStatus.ADMITTED, node, gpu_model
    job.quota_kind = admission.quota_kind.value if admission.quota_kind else ""
    job.alloc_gpus, job.alloc_cpu_milli = Decimal(str(round(r.gpus, 3))), r.cpu_request_milli
    job.cpu_limit_milli, job.alloc_memory_mib = r.cpu_limit_milli, r.memory_mib
    job.admitted_at, job.queue_position, job.pending_reason = utc(now), None, ""
    job.score, job.reservation = score_dict(admission.score), {}  # a reserved gang that starts holds no more
    job.save()
    attempt = (job.runs.aggregate(n=Max("attempt"))["n"] or 0) + 1
    workers = _workers(job, admission, attempt)
    run = JobRun.objects.create(
        job=job, attempt=attempt, node=node, gpu_model=gpu_model,
        pod=workers[0]["pod"] if workers else run_pod_name(job.pk, attempt),
        gpu_shares=[[s.index, s.share] for s in admission.gpu_shares], workers=workers, started_at=utc(now),
    )
    decision_record(kind=Decision.Kind.ADMISSION, subject=f"job:{job.pk}", department=job.department,
                    reason=admission.reason.value, message=admission.message,
                    data={"node": admission.node, "nodes": [w.node for w in admission.workers],
                          "gpu_model": admission.gpu_model, "attempt": attempt,
                          "requested": str(admission.requested), "rightsized": str(admission.rightsized),
                          "score": score_dict(admission.score), "preempting": list(admission.preempting)})
    return job, run


def job_start(*, job: TrainingJob, started_at: float) -> None:
    """Its pods are on the cluster: admitted → running."""
    job.status, job.started_at = JobStatus.RUNNING, utc(started_at)
    job.save(update_fields=["status", "started_at"])


def job_finish(*, job: TrainingJob, at: float, status: str, message: str) -> None:
    """Its pod (every worker of a gang) ended on its own: the run and the job end with the same outcome."""
    _end_run(job, JobRun.Outcome(status), at)
    job.status, job.finished_at = status, utc(at)
    job.save(update_fields=["status", "finished_at"])
    decision_record(kind=Decision.Kind.PLACEMENT, subject=f"job:{job.pk}", department=job.department,
                    reason="finished" if status == JobStatus.SUCCEEDED else "failed", message=message)


def job_worker_succeeded(*, job: TrainingJob, run: JobRun, pod: str, at: float) -> bool:
    """One worker of a running gang ended with success; the job succeeds once every worker has. True then. The
    caller holds the job's row lock."""
    worker = run_worker(run, pod)
    if worker is None or worker["state"] != WORKER_RUNNING:
        return False  # reported again (a watch and a resync), or not this run's
    worker["state"] = WORKER_SUCCEEDED
    run.save(update_fields=["workers"])
    if any(w["state"] != WORKER_SUCCEEDED for w in run.workers):
        return False
    nodes = ", ".join(dict.fromkeys(w["node"] for w in run.workers))
    job_finish(job=job, at=at, status=JobStatus.SUCCEEDED,
               message=f"succeeded: all {len(run.workers)} workers ended on {nodes} after run {run.attempt}")
    return True


def job_requeue(*, job: TrainingJob, now: float, reason: str, message: str, outcome: str,
                ended: tuple[str, ...] = ()) -> JobRun | None:
    """Back to the queue with its submit time and history; its open run ends with `outcome` (for a gang, every
    worker: `ended` names the pods whose own end caused it). A job killed by a take-back goes to the fixed pool
    next (README: Co-location). The caller holds the job's row lock. Returns the run it ended (None: none open)."""
    run = _end_run(job, outcome, now, ended)
    if outcome == JobRun.Outcome.KILLED:
        job.pool_preference = "fixed"
    job.status, job.node, job.assigned_gpu_model, job.quota_kind = JobStatus.PENDING, None, None, ""
    job.admitted_at = job.started_at = None
    job.alloc_gpus = job.alloc_cpu_milli = job.cpu_limit_milli = job.alloc_memory_mib = None
    job.save()
    decision_record(kind=Decision.Kind.PREEMPTION if outcome == JobRun.Outcome.PREEMPTED else Decision.Kind.PENDING,
                    subject=f"job:{job.pk}", department=job.department, reason=reason, message=message)
    return run


def _on_node(run: JobRun, node: str) -> list[str]:
    """The run's pods on `node` (a gang may have several workers there)."""
    if not run.workers:
        return [run.pod] if run.node is not None and run.node.name == node else []
    return [w["pod"] for w in run.workers if w["node"] == node and w["state"] == WORKER_RUNNING]


@transaction.atomic
def job_take_back(*, job_id: int, node: str, now: float) -> JobRun | None:
    """The lending controller evicted this job's pod to give `node` back to inference: requeue it at once, for the
    fixed pool; a gang with a worker there is requeued whole (its other workers are the caller's to stop). Returns
    the ended run; None when the job was not running there (already requeued or finished)."""
    job = TrainingJob.objects.select_for_update().select_related("department").filter(
        pk=job_id, status__in=(JobStatus.ADMITTED, JobStatus.RUNNING)).first()
    run = open_run(job) if job is not None else None
    there = _on_node(run, node) if run is not None else []
    if not there:
        return None
    whom = "" if not run.workers else f" (worker {', '.join(str(run_worker(run, p)['rank']) for p in there)} of " \
                                      f"{len(run.workers)}: the whole gang stops)"
    return job_requeue(job=job, now=now, reason="taken-back", outcome=JobRun.Outcome.KILLED, ended=tuple(there),
                       message=f"requeued for the fixed pool: {node} was taken back for inference{whom}")


# --- the target workload of the fragmentation measure ------------------------------------------------------
WORKLOAD_DAYS = 7
WORKLOADS_KEPT = 24


def workload_learn(*, now: datetime, days: int = WORKLOAD_DAYS) -> LearnedWorkload:
    """The typical shapes of the jobs submitted in the last `days` (README: Training scheduler): CPU, GPUs and the
    GPU models each may run on (its framework's certified models, else its preferred one), the most frequent
    covering 95 % of the jobs, as FGD learns its target workload. Older rows beyond the newest 24 are dropped."""
    rows = list(TrainingJob.objects.filter(submitted_at__gt=now - timedelta(days=days), submitted_at__lte=now)
                .values("cpu_milli", "gpus", "framework_id", "gpu_model__name")
                .annotate(n=Count("id")).order_by())
    certified = {f.pk: tuple(sorted(m.name for m in f.certified_on.all()))
                 for f in Framework.objects.prefetch_related("certified_on")}
    shapes: Counter[Shape] = Counter()
    for row in rows:
        shapes[_shape_of(row, certified)] += row["n"]
    jobs = sum(shapes.values())
    workload = TargetWorkload.from_shapes(shapes) if jobs else None
    learned = LearnedWorkload.objects.create(learned_at=now, window_days=days, jobs=jobs, shapes=[
        {"cpu_milli": s.cpu_milli, "gpu_milli": s.gpu_milli, "gpu_count": s.gpu_count, "models": list(s.models),
         "count": n} for s, n in zip(workload.shapes, workload.counts)] if workload else [])
    LearnedWorkload.objects.filter(pk__in=list(LearnedWorkload.objects.values_list("pk", flat=True)
                                               [WORKLOADS_KEPT:])).delete()
    return learned


def _shape_of(row: dict, certified: dict[int, tuple[str, ...]]) -> Shape:
    """A job's shape, allowed on its framework's certified models, else its preferred one."""
    models = certified.get(row["framework_id"]) or ((row["gpu_model__name"],) if row["gpu_model__name"] else ())
    return job_shape(row["cpu_milli"], float(row["gpus"]), models)

