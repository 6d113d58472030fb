"""The live scheduling loop: read the database and the cluster, run the pure cycle, act, record why.

Acting is ordered so that a crash at any point leaves a state the next tick repairs:
- admit: the job is marked `admitted` (with its run) in the database first, then its pod is bound, then it
  is marked `running`. An `admitted` job whose pod exists is marked running; one without a pod is requeued.
- preempt: the job is requeued in the database first, then its pod is evicted. A pod whose job is no longer
  admitted or running (preempted, cancelled, lost) is evicted as an orphan.
"""
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from cluster.clock import utc
from cluster.backend import (
    JOB_LABEL, RUN_LABEL, RUNTIME_LABEL, TASK_LABEL, BackendError, ClusterBackend, ClusterEvent, EventKind, PodSpec,
)
from cluster.types import Allocation, GpuShare, Pool, JobStatus as JS, JobView, QuotaKind as QK, QuotaView, Snapshot
from colocation.policy.pools import preferred_pool
from colocation.policy import LendingProfile
from colocation.backends import live_cluster
from colocation.selectors import lending_profile
from profiling.policy.aggregate import TaskHistory
from profiling.selectors import task_histories
from profiling.services import run_summary_compute
from scheduler.models import Decision, Framework, GPUModel, JobRun, JobStatus, Quota, TrainingJob
from scheduler.gcfreeze import frozen_heap
from scheduler.policy.cycle import schedule
from scheduler.policy.decisions import Admit, CycleResult, Preempt, StillPending
from scheduler.policy.profile import Profile
from scheduler.services import decision_record
from tidal import telemetry

log = logging.getLogger(__name__)
LIVE = (JobStatus.PENDING, JobStatus.ADMITTED, JobStatus.RUNNING)


@dataclass
class TickReport:
    admitted: int = 0
    preempted: int = 0
    pending: int = 0
    finished: int = 0
    repaired: list[str] = field(default_factory=list)


def pod_name(job_id: int, attempt: int) -> str:
    return f"job-{job_id}-{attempt}"


def _job_of_pod(name: str) -> int | None:
    parts = name.split("-")
    return int(parts[1]) if len(parts) == 3 and parts[0] == "job" and parts[1].isdigit() else None


def scheduler_tick(*, backend: ClusterBackend, now: float, profile: Profile) -> TickReport:
    """One tick of the live loop against `backend` at `now` with the policy `profile`."""
    report = TickReport()
    report.finished = _record_events(backend.drain_events(), now)
    _reconcile(backend, now, report)
    snapshot = snapshot_from_db(backend, now)
    with frozen_heap():
        result = schedule(snapshot, profile)
    _act(result, backend, now, report)
    return report


# --- events and repair -----------------------------------------------------------------------------


def _open_run(job: TrainingJob) -> JobRun | None:
    return job.runs.filter(ended_at__isnull=True).order_by("-attempt").first()


def _end_run(job: TrainingJob, outcome: str, now: float) -> None:
    for run in job.runs.filter(ended_at__isnull=True):
        run.ended_at, run.outcome = utc(now), outcome
        run.save(update_fields=["ended_at", "outcome"])
        run_summary_compute(run=run)  # its profile joins the task's history at once


def _requeue(job: TrainingJob, now: float, *, reason: str, message: str, outcome: str) -> None:
    """Back to the queue with its submit time and history; its open run ends with `outcome`.
    A job killed by a take-back goes to the fixed pool next (SPEC §4)."""
    _end_run(job, outcome, now)
    if outcome == JobRun.Outcome.KILLED:
        job.pool_preference = "fixed"
    job.status, job.node, job.assigned_gpu_model, job.quota_kind = JobStatus.PENDING, None, None, ""
    job.admitted_at = job.started_at = None
    job.alloc_gpus = job.alloc_cpu_milli = job.cpu_limit_milli = job.alloc_memory_mib = None
    job.save()
    decision_record(kind=Decision.Kind.PREEMPTION if outcome == JobRun.Outcome.PREEMPTED else Decision.Kind.PENDING,
                    subject=f"job:{job.pk}", department=job.department, reason=reason, message=message)


@transaction.atomic
def job_killed_by_take_back(*, job_id: int, node: str, now: float) -> bool:
    """The lending controller evicted this job's pod to give `node` back to inference: requeue it at once,
    for the fixed pool. False when the job was not running there (already requeued or finished)."""
    job = TrainingJob.objects.select_for_update().select_related("department").filter(
        pk=job_id, status__in=(JobStatus.ADMITTED, JobStatus.RUNNING), node__name=node).first()
    if job is None:
        return False
    _requeue(job, now, reason="taken-back", outcome=JobRun.Outcome.KILLED,
             message=f"requeued for the fixed pool: {node} was taken back for inference")
    return True


@transaction.atomic
def _record_events(events: list[ClusterEvent], now: float) -> int:
    """Finished pods end their job; pods evicted by someone else put their job back in the queue."""
    finished = 0
    for event in events:
        if event.job_id is None or event.kind not in (EventKind.POD_FINISHED, EventKind.POD_FAILED,
                                                      EventKind.POD_EVICTED):
            continue
        job = TrainingJob.objects.select_for_update().filter(pk=event.job_id, status=JobStatus.RUNNING).first()
        run = job and _open_run(job)
        if job is None or run is None or run.pod != event.pod:
            continue  # an eviction we made ourselves, or a pod of an earlier run
        if event.kind is EventKind.POD_FINISHED:
            _end_job(job, event.at, JobStatus.SUCCEEDED, f"succeeded on {event.node} after run {run.attempt}")
            finished += 1
        elif event.kind is EventKind.POD_FAILED:
            _end_job(job, event.at, JobStatus.FAILED, f"failed on {event.node} in run {run.attempt}: {event.detail}")
            finished += 1
        else:
            _requeue(job, now, reason="evicted", outcome=JobRun.Outcome.KILLED,
                     message=f"requeued: its pod on {event.node} was evicted ({event.detail or 'no reason given'})")
    return finished


def _end_job(job: TrainingJob, at: float, status: str, message: str) -> None:
    """Its pod ended on its own: the run and the job end with the same outcome (succeeded or failed)."""
    _end_run(job, JobRun.Outcome(status), at)
    job.status, job.finished_at = status, utc(at)
    job.save(update_fields=["status", "finished_at"])
    decision_record(kind=Decision.Kind.PLACEMENT, subject=f"job:{job.pk}", department=job.department,
                    reason="finished" if status == JobStatus.SUCCEEDED else "failed", message=message)


def _reconcile(backend: ClusterBackend, now: float, report: TickReport) -> None:
    """Make the database and the cluster agree after whatever happened since the last tick."""
    pods = {p.spec.name: p for p in backend.pods()}
    holding = TrainingJob.objects.filter(status__in=(JobStatus.ADMITTED, JobStatus.RUNNING)).select_related("department")
    expected = set()
    for job in holding:
        run = _open_run(job)
        pod = run.pod if run else None
        if pod in pods:
            expected.add(pod)
            if job.status == JobStatus.ADMITTED:  # bound, but the tick died before recording it
                job.status, job.started_at = JobStatus.RUNNING, utc(pods[pod].started_at)
                job.save(update_fields=["status", "started_at"])
                report.repaired.append(f"job {job.pk}: pod found, marked running")
            continue
        with transaction.atomic():
            _requeue(job, now, reason="pod-missing", outcome=JobRun.Outcome.FAILED,
                     message="requeued: it was admitted but its pod is not on the cluster")
        report.repaired.append(f"job {job.pk}: no pod, requeued")
    for name in pods.keys() - expected:
        if _job_of_pod(name) is not None and not pods[name].terminating:
            _evict(backend, name, "orphan: its job is no longer admitted or running")
            report.repaired.append(f"pod {name}: orphan evicted")


def _evict(backend: ClusterBackend, pod: str, reason: str) -> None:
    try:
        backend.evict(pod, reason)
    except BackendError as error:  # already gone: nothing to free
        log.info("evict %s: %s", pod, error)


# --- snapshot --------------------------------------------------------------------------------------


def _allocation(job: TrainingJob, run: JobRun | None) -> Allocation | None:
    if job.status not in (JobStatus.ADMITTED, JobStatus.RUNNING) or run is None:
        return None
    return Allocation(
        node=job.node.name if job.node else "",
        gpu_model=job.assigned_gpu_model.name if job.assigned_gpu_model else None,
        gpu_shares=tuple(GpuShare(int(i), float(s)) for i, s in run.gpu_shares),
        cpu_milli=job.alloc_cpu_milli or job.cpu_milli,
        memory_mib=job.alloc_memory_mib or job.memory_mib,
        quota_kind=QK(job.quota_kind) if job.quota_kind else None,
    )


def job_view(job: TrainingJob, run: JobRun | None, history: TaskHistory | None = None) -> JobView:
    return JobView(
        id=job.pk, name=job.name, task_key=job.task_key, department=job.department.name, framework=str(job.framework),
        gpu_model=job.gpu_model.name if job.gpu_model else None, gpus=float(job.gpus), cpu_milli=job.cpu_milli,
        memory_mib=job.memory_mib, status=JS(job.status), submitted_at=job.submitted_at.timestamp(),
        started_at=job.started_at.timestamp() if job.started_at else None, allocation=_allocation(job, run),
        expected_duration_s=job.expected_duration_s,
        preferred_pool=Pool(job.pool_preference) if job.pool_preference else None,
        history=history.runs if history else (), keep_request=job.keep_request,
    )


def with_pool(view: JobView, now: float, profile: LendingProfile, past_run_s: Sequence[float]) -> JobView:
    """A pending job's pool (SPEC §4): fixed when killed by a take-back or long, else co-location first."""
    if view.status is not JS.PENDING or view.preferred_pool is Pool.FIXED:
        return view
    choice = preferred_pool(view, now, profile, past_run_s=past_run_s)
    return replace(view, preferred_pool=choice.pools[0])


def snapshot_from_db(backend: ClusterBackend, now: float) -> Snapshot:
    jobs = list(
        TrainingJob.objects.filter(status__in=LIVE)
        .select_related("department", "framework", "gpu_model", "assigned_gpu_model", "node")
    )
    runs = {run.job_id: run for run in JobRun.objects.filter(job__in=jobs, ended_at__isnull=True)}
    # The tasks' past runs (profiles and run times) from the profiling app: one query for every job.
    histories, pools = task_histories(task_keys={j.task_key for j in jobs}), lending_profile()
    quotas = [
        QuotaView(q.department.name, q.resource, float(q.own), float(q.borrowed))
        for q in Quota.objects.select_related("department", "gpu_model")
    ]
    certified: dict[str, frozenset[str]] = {}
    for framework in Framework.objects.prefetch_related("certified_on"):
        certified[str(framework)] = frozenset(m.name for m in framework.certified_on.all())
    return Snapshot(
        now=now, nodes=backend.nodes(), quotas=tuple(quotas),
        jobs=tuple(with_pool(job_view(j, runs.get(j.pk), histories.get(j.task_key)), now, pools,
                             histories[j.task_key].run_s if j.task_key in histories else ()) for j in jobs),
        certified=certified, gpu_models=tuple(GPUModel.objects.values_list("name", flat=True)),
    )


# --- acting ----------------------------------------------------------------------------------------


def _act(result: CycleResult, backend: ClusterBackend, now: float, report: TickReport) -> None:
    pending = []
    stopping: set[int] = set()  # victims whose pods still hold their room (graceful termination)
    for decision in result.decisions:
        if isinstance(decision, Preempt):
            if _preempt(decision, backend, now):
                stopping.add(decision.job_id)
            report.preempted += 1
        elif isinstance(decision, Admit):
            if stopping.intersection(decision.preempting):
                _wait_for_victims(decision, stopping)
            else:
                report.admitted += _admit(decision, backend, now)
        elif isinstance(decision, StillPending):
            pending.append(decision)
    _record_pending(pending)
    report.pending = len(pending)


def _preempt(decision: Preempt, backend: ClusterBackend, now: float) -> bool:
    """Requeue the victim, then evict its pod; True when the pod is still shutting down (it keeps its room)."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().select_related("department").filter(
            pk=decision.job_id, status__in=(JobStatus.ADMITTED, JobStatus.RUNNING)).first()
        if job is None:  # ended or cancelled since the snapshot: nothing to preempt, nothing to bring back
            return False
        run = _open_run(job)
        _requeue(job, now, reason=decision.reason.value, message=decision.message, outcome=JobRun.Outcome.PREEMPTED)
    if not (run and run.pod):
        return False
    _evict(backend, run.pod, f"preempted for job {decision.for_job_id}")
    return any(p.spec.name == run.pod for p in backend.pods())


@transaction.atomic
def _wait_for_victims(decision: Admit, stopping: set[int]) -> None:
    """The preemptor stays pending until its victims' pods are gone (a cluster with graceful termination); the
    next cycle admits it into the room they leave."""
    job = TrainingJob.objects.select_related("department").get(pk=decision.job_id)
    victims = sorted(stopping.intersection(decision.preempting))
    reason = "waiting-for-preemption"
    if job.pending_reason != reason:
        decision_record(kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=job.department, reason=reason,
                        message=f"preempted {', '.join(f'job {v}' for v in victims)} on {decision.node}; admitted "
                                f"once their pods have stopped", data={"node": decision.node, "victims": victims})
    job.pending_reason = reason
    job.save(update_fields=["pending_reason"])


def _admit(decision: Admit, backend: ClusterBackend, now: float) -> bool:
    recorded = _record_admission(decision, now)
    if recorded is None:
        return False
    job, run = recorded
    labels = {JOB_LABEL: str(job.pk), RUN_LABEL: str(run.attempt), TASK_LABEL: job.task_key}
    if RUNTIME_LABEL in job.annotations:
        labels[RUNTIME_LABEL] = job.annotations[RUNTIME_LABEL]
    spec = PodSpec(name=run.pod, job_id=job.pk, gpu_model=decision.gpu_model, gpu_shares=decision.gpu_shares,
                   cpu_milli=decision.rightsized.cpu_request_milli, memory_mib=decision.rightsized.memory_mib,
                   labels=labels, image=job.image, command=job.command)
    try:
        backend.bind(spec, decision.node)
    except BackendError as error:
        with transaction.atomic():
            _requeue(job, now, reason="bind-failed", outcome=JobRun.Outcome.FAILED,
                     message=f"requeued: the cluster refused to start it on {decision.node} ({error})")
        return False
    job.status, job.started_at = JobStatus.RUNNING, utc(now)
    job.save(update_fields=["status", "started_at"])
    return True


@transaction.atomic
def _record_admission(decision: Admit, now: float) -> tuple[TrainingJob, JobRun] | None:
    """None when the job is no longer pending (cancelled since the snapshot, or admitted by a tick that should not
    have been acting): the decision is stale, and acting on it would undo what happened."""
    from colocation.models import Node  # inventory read; scheduler owns no nodes

    job = TrainingJob.objects.select_for_update().select_related("department").filter(
        pk=decision.job_id, status=JobStatus.PENDING).first()
    if job is None:
        log.info("job %s: no longer pending, not admitted", decision.job_id)
        return None
    models = {m.name: m for m in GPUModel.objects.all()}
    gpu_model = models.get(decision.gpu_model) if decision.gpu_model else None
    node = Node.objects.get(name=decision.node)
    r = decision.rightsized
    job.status, job.node, job.assigned_gpu_model = JobStatus.ADMITTED, node, gpu_model
    job.quota_kind = decision.quota_kind.value if decision.quota_kind else ""
    job.alloc_gpus, job.alloc_cpu_milli = Decimal(str(round(r.gpus, 3))), r.cpu_request_milli
    job.cpu_limit_milli, job.alloc_memory_mib = r.cpu_limit_milli, r.memory_mib
    job.admitted_at, job.queue_position, job.pending_reason = utc(now), None, ""
    job.score = _score_dict(decision.score)
    job.save()
    attempt = (job.runs.aggregate(n=Max("attempt"))["n"] or 0) + 1
    run = JobRun.objects.create(
        job=job, attempt=attempt, node=node, gpu_model=gpu_model, pod=pod_name(job.pk, attempt),
        gpu_shares=[[s.index, s.share] for s in decision.gpu_shares], started_at=utc(now),
    )
    decision_record(kind=Decision.Kind.ADMISSION, subject=f"job:{job.pk}", department=job.department,
                    reason=decision.reason.value, message=decision.message,
                    data={"node": decision.node, "gpu_model": decision.gpu_model, "attempt": attempt,
                          "requested": str(decision.requested), "rightsized": str(decision.rightsized),
                          "score": _score_dict(decision.score), "preempting": list(decision.preempting)})
    return job, run


def _score_dict(score) -> dict:
    return {"base": score.base, "utilization": score.utilization, "aging": score.aging, "total": score.total}


@transaction.atomic
def _record_pending(decisions: list[StillPending]) -> None:
    """Every pending job shows its place and score; a Decision only when its reason changes."""
    jobs = TrainingJob.objects.select_related("department").in_bulk([d.job_id for d in decisions])
    changed = []
    for d in decisions:
        job = jobs[d.job_id]
        if job.pending_reason != d.reason.value:
            changed.append(Decision(kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=job.department,
                                    reason=d.reason.value, message=d.message, data={"score": _score_dict(d.score)}))
        job.queue_position, job.score, job.pending_reason = d.position + 1, _score_dict(d.score), d.reason.value
    TrainingJob.objects.bulk_update(jobs.values(), ["queue_position", "score", "pending_reason"], batch_size=500)
    Decision.objects.bulk_create(changed, batch_size=500)


# --- the live loop's entry point -------------------------------------------------------------------


def run_live_tick(*, redis, namespace: str, profile: Profile) -> TickReport | None:
    """One tick on the configured cluster, unless this worker must not act now (then None; colocation/backends.py)."""
    with live_cluster(redis=redis, namespace=namespace, loop="scheduler",
                      interval_s=settings.TIDAL_SCHEDULER_INTERVAL_S) as cluster:
        if cluster is None:
            return None
        started = time.perf_counter()
        report = scheduler_tick(backend=cluster, now=time.time(), profile=profile)
        telemetry.observe(redis, namespace, "scheduler_cycle", time.perf_counter() - started)
        return report
