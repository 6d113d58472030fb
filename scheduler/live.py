"""The live scheduling loop: read the database and the cluster, run the pure cycle, act, record why.

Acting is ordered so that a crash at any point leaves a state the next tick repairs:
- admit: the job is marked `admitted` (with its run) in the database first, then its pod is bound, then it
  is marked `running`. An `admitted` job whose pod exists is marked running; one without a pod is requeued.
- preempt: the job is requeued in the database first, then its pod is evicted. A pod whose job is no longer
  admitted or running (preempted, cancelled, lost) is evicted as an orphan.
"""
import logging
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from cluster.backend import (
    JOB_LABEL, RUN_LABEL, RUNTIME_LABEL, TASK_LABEL, BackendError, ClusterBackend, ClusterEvent, EventKind, PodSpec,
)
from colocation.live_backend import live_cluster
from colocation.selectors import lending_profile
from core import telemetry
from core.decisions import decision_record
from core.models import Decision
from scheduler import services
from scheduler.gcfreeze import frozen_heap
from scheduler.models import JobRun, JobStatus, TrainingJob
from scheduler.observe import snapshot_from_db
from scheduler.policy.cycle import schedule
from scheduler.policy.decisions import Admit, CycleResult, Preempt, StillPending
from scheduler.policy.profile import Profile
from scheduler.selectors import learned_workload

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    admitted: int = 0
    preempted: int = 0
    pending: int = 0
    finished: int = 0
    repaired: list[str] = field(default_factory=list)


def scheduler_tick(*, backend: ClusterBackend, now: float, profile: Profile) -> TickReport:
    """One tick of the live loop against `backend` at `now` with the policy `profile`."""
    report = TickReport()
    report.finished = _record_events(backend.drain_events(), now)
    _reconcile(backend, now, report)
    snapshot = snapshot_from_db(backend, now)
    workload = learned_workload()
    with frozen_heap():
        result = schedule(snapshot, profile, lending_profile(), workload)
    _act(result, backend, now, report)
    return report


# --- events and repair -----------------------------------------------------------------------------


@transaction.atomic
def _record_events(events: list[ClusterEvent], now: float) -> int:
    """Finished pods end their job; pods evicted by someone else put their job back in the queue."""
    finished = 0
    for event in events:
        if event.job_id is None or event.kind not in (EventKind.POD_FINISHED, EventKind.POD_FAILED,
                                                      EventKind.POD_EVICTED):
            continue
        job = TrainingJob.objects.select_for_update().filter(pk=event.job_id, status=JobStatus.RUNNING).first()
        run = job and services.open_run(job)
        if job is None or run is None or run.pod != event.pod:
            continue  # an eviction we made ourselves, or a pod of an earlier run
        if event.kind is EventKind.POD_FINISHED:
            services.job_finish(job=job, at=event.at, status=JobStatus.SUCCEEDED,
                                message=f"succeeded on {event.node} after run {run.attempt}")
            finished += 1
        elif event.kind is EventKind.POD_FAILED:
            services.job_finish(job=job, at=event.at, status=JobStatus.FAILED,
                                message=f"failed on {event.node} in run {run.attempt}: {event.detail}")
            finished += 1
        else:
            services.job_requeue(job=job, now=now, reason="evicted", outcome=JobRun.Outcome.KILLED,
                                 message=f"requeued: its pod on {event.node} was evicted ({event.detail or 'no reason given'})")
    return finished


def _reconcile(backend: ClusterBackend, now: float, report: TickReport) -> None:
    """Make the database and the cluster agree after whatever happened since the last tick."""
    pods = {p.spec.name: p for p in backend.pods()}
    holding = TrainingJob.objects.filter(status__in=(JobStatus.ADMITTED, JobStatus.RUNNING)).select_related("department")
    expected = set()
    for job in holding:
        run = services.open_run(job)
        pod = run.pod if run else None
        if pod in pods:
            expected.add(pod)
            if job.status == JobStatus.ADMITTED:  # bound, but the tick died before recording it
                services.job_start(job=job, started_at=pods[pod].started_at)
                report.repaired.append(f"job {job.pk}: pod found, marked running")
            continue
        with transaction.atomic():
            services.job_requeue(job=job, now=now, reason="pod-missing", outcome=JobRun.Outcome.FAILED,
                                 message="requeued: it was admitted but its pod is not on the cluster")
        report.repaired.append(f"job {job.pk}: no pod, requeued")
    for name in pods.keys() - expected:
        if services.job_of_pod(name) is not None and not pods[name].terminating:
            _evict(backend, name, "orphan: its job is no longer admitted or running")
            report.repaired.append(f"pod {name}: orphan evicted")


def _evict(backend: ClusterBackend, pod: str, reason: str) -> None:
    try:
        backend.evict(pod, reason)
    except BackendError as error:  # already gone: nothing to free
        log.info("evict %s: %s", pod, error)


# --- snapshot --------------------------------------------------------------------------------------


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
        run = services.open_run(job)
        services.job_requeue(job=job, now=now, reason=decision.reason.value, message=decision.message,
                             outcome=JobRun.Outcome.PREEMPTED)
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
    recorded = services.job_admit(admission=decision, now=now)
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
            services.job_requeue(job=job, now=now, reason="bind-failed", outcome=JobRun.Outcome.FAILED,
                                 message=f"requeued: the cluster refused to start it on {decision.node} ({error})")
        return False
    services.job_start(job=job, started_at=now)
    return True


@transaction.atomic
def _record_pending(decisions: list[StillPending]) -> None:
    """Every pending job shows its place and score; a Decision only when its reason changes."""
    jobs = TrainingJob.objects.select_related("department").in_bulk([d.job_id for d in decisions])
    changed = []
    for d in decisions:
        job = jobs[d.job_id]
        if job.pending_reason != d.reason.value:
            changed.append(Decision(kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=job.department,
                                    reason=d.reason.value, message=d.message, data={"score": services.score_dict(d.score)}))
        job.queue_position, job.score, job.pending_reason = d.position + 1, services.score_dict(d.score), d.reason.value
    TrainingJob.objects.bulk_update(jobs.values(), ["queue_position", "score", "pending_reason"], batch_size=500)
    Decision.objects.bulk_create(changed, batch_size=500)


# --- the live loop's entry point -------------------------------------------------------------------


def run_live_tick(*, redis, namespace: str, profile: Profile) -> TickReport | None:
    """One tick on the configured cluster, unless this worker must not act now (then None; see
    colocation/live_backend.py)."""
    with live_cluster(redis=redis, namespace=namespace, loop="scheduler",
                      interval_s=settings.TIDAL_SCHEDULER_INTERVAL_S) as cluster:
        if cluster is None:
            return None
        started = time.perf_counter()
        report = scheduler_tick(backend=cluster, now=time.time(), profile=profile)
        telemetry.observe(redis, namespace, "scheduler_cycle", time.perf_counter() - started)
        return report
