"""A job's lifecycle: the only place its status changes (Kueue's pkg/workload).

pending → admitted (job_admit: recorded with its run before the pod is bound) → running (job_start) → succeeded
or failed (job_finish); admitted or running → pending again (job_requeue: preempted, evicted, its pod lost or
refused; job_take_back: its node taken back for inference); any unfinished job → cancelled (job_cancel). The
live loops, the lending controller and the API call these; the callers that hold a job's row lock pass the job.
A gang (workers > 1) has one run for all its workers (JobRun.workers, rank 0 first): it starts whole and ends
whole. It succeeds when every worker has succeeded (job_worker_succeeded); any other end of one worker ends the
run for all (job_requeue with `ended`). A worker's state: running, then succeeded, or the run's outcome (failed,
preempted, killed, ...) when its own end or the whole run's ended it, or "stopped" when another worker's end did."""
import logging
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from cluster.clock import utc
from colocation.models import Node
from core import selectors as core_selectors
from core.decisions import decision_record
from core.errors import Conflict
from core.models import Decision, GPUModel
from scheduler.models import JobRun, JobStatus, TrainingJob
from scheduler.policy import sentences
from scheduler.policy.decisions import Admit
from scheduler.policy.priority import ScoreBreakdown
from scheduler.runs import (WORKER_RUNNING, WORKER_STOPPED, WORKER_SUCCEEDED, open_run, run_pod_name,
                            run_worker)
from scheduler.signals import runs_ended

log = logging.getLogger(__name__)


def score_dict(score: ScoreBreakdown) -> dict:
    return {"base": score.base, "utilization": score.utilization, "aging": score.aging, "total": score.total}


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
                          "score": score_dict(admission.score), "preempting": list(admission.preempting),
                          "summary": sentences.summary(admission)})
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
                ended: tuple[str, ...] = (), summary: str = "") -> JobRun | None:
    """Back to the queue with its submit time and history; its open run ends with `outcome` (for a gang, every
    worker: `ended` names the pods whose own end caused it). A job killed by a take-back goes to the fixed pool
    next (docs/concepts/lending.md#pools). The caller holds the job's row lock. Returns the run it ended (None: none
    open). `summary`: the message in a few words, for lists (the policy's; default: lists show the message)."""
    run = _end_run(job, outcome, now, ended)
    if outcome == JobRun.Outcome.KILLED:
        job.pool_preference = "fixed"
    job.status, job.node, job.assigned_gpu_model, job.quota_kind = JobStatus.PENDING, None, None, ""
    job.admitted_at = job.started_at = None
    job.alloc_gpus = job.alloc_cpu_milli = job.cpu_limit_milli = job.alloc_memory_mib = None
    job.save()
    decision_record(kind=Decision.Kind.PREEMPTION if outcome == JobRun.Outcome.PREEMPTED else Decision.Kind.PENDING,
                    subject=f"job:{job.pk}", department=job.department, reason=reason, message=message,
                    data={"summary": summary} if summary else None)
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
