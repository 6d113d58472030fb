"""The live scheduling loop: read the database and the cluster, run the pure cycle, act, record why.

Acting is ordered so that a crash at any point leaves a state the next tick repairs:
- admit: the job is marked `admitted` (with its run) in the database first, then its pod is bound, then it
  is marked `running`. An `admitted` job whose pod exists is marked running; one without a pod is requeued. A
  cycle's admissions are recorded first and their pods bound in one batch, which the backend creates concurrently
  (KubernetesCluster.bind_many): one request after another would cap a tick at one pod per round trip.
- preempt: the job is requeued in the database first, then its pod is evicted. A pod whose job is no longer
  admitted or running (preempted, cancelled, lost) is evicted as an orphan.
A gang (a job of several workers) is bound whole or not at all: its headless Service first (the workers' stable DNS
names), then each worker's pod with its rank and rendezvous environment (scheduler/rendezvous.py). If the cluster
refuses one, the job is requeued once and the workers bound are evicted and the Service deleted. Whatever
ends one worker other than success (it failed, someone evicted it, its pod is missing) ends the gang's run the same
way; the job succeeds when every worker has. A job's Service is deleted when its run ends, whatever the outcome.
"""
import logging
import time
from pathlib import Path
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from cluster.backend import (
    FRAMEWORK_LABEL, JOB_LABEL, RUN_LABEL, RUNTIME_LABEL, TASK_LABEL, WORKER_LABEL, ClusterBackend,
    ClusterEvent, EventKind, PodSpec, label_value,
)
from cluster.types import GpuShare
from cluster.wholebind import PodSet, Refused, bind_whole
from colocation.live_backend import live_cluster
from colocation.selectors import lending_profile
from core import telemetry
from core.decisions import decision_record
from core.expiring import Expiring
from core.models import Decision
from scheduler import interference_tables, lifecycle, runs
from scheduler.gcfreeze import frozen_heap
from scheduler.logs import pod_logs_archive
from scheduler.models import JobRun, JobStatus, TrainingJob
from scheduler.observe import snapshot_from_db
from scheduler.policy.cache import CycleCache
from scheduler.policy.cycle import schedule
from scheduler.policy.decisions import Admit, CycleResult, Preempt, Reason, Reserve, StillPending
from scheduler.policy.dispatch import dispatch
from scheduler.policy.profile import Profile
from scheduler.policy.sentences import summary
from scheduler.rendezvous import Gang, worker_env
from scheduler.selectors import learned_workload
from scheduler.teardown import Stop, run_stop

log = logging.getLogger(__name__)
# A reservation whose expected start moved by less than this is the same one (no new Decision): the estimate of
# when its nodes free drifts a little every tick while their jobs overrun.
RESERVATION_START_SLACK_S = 60.0


@dataclass
class TickReport:
    admitted: int = 0
    preempted: int = 0
    pending: int = 0
    finished: int = 0
    repaired: list[str] = field(default_factory=list)


@dataclass
class Recorded:
    """What the events did: jobs that ended, and the runs whose remains the cluster must drop."""

    finished: int = 0
    stops: list[Stop] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # pods whose own end was recorded: their log is archived


def scheduler_tick(*, backend: ClusterBackend, now: float, profile: Profile, cache: CycleCache | None = None,
                   calibration: Expiring | None = None) -> TickReport:
    """One tick of the live loop against `backend` at `now` with the policy `profile`; `cache`: the loop's, kept from
    one tick to the next (saves work only); `calibration`: the loop's cache of the lending profile's run time
    calibration (read once a minute)."""
    report = TickReport()
    recorded = record_events(backend.drain_events(), now)
    report.finished = recorded.finished
    pod_logs_archive(backend=backend, pods=recorded.ended)  # still readable: a pod that ended stays until cleaned up
    for stop in recorded.stops:
        run_stop(backend=backend, stop=stop)
    _reconcile(backend, now, report)
    snapshot = snapshot_from_db(backend, now)
    workload = learned_workload()
    interference = interference_tables.cached(str(Path(settings.TRACES_DIR) / interference_tables.TRACE))
    with frozen_heap():
        result = schedule(snapshot, profile, lending_profile(now=now, calibration=calibration), workload, cache,
                          interference)
    act(result, backend, now, report)
    return report


# --- events and repair -----------------------------------------------------------------------------


@transaction.atomic
def record_events(events: list[ClusterEvent], now: float) -> Recorded:
    """Finished pods end their job; pods evicted by someone else put their job back in the queue. For a gang, a
    finished worker is marked and the job ends when all have; a worker failed or evicted requeues the whole gang."""
    recorded = Recorded()
    for event in events:
        if event.job_id is None or event.kind not in (EventKind.POD_FINISHED, EventKind.POD_FAILED,
                                                      EventKind.POD_EVICTED):
            continue
        job = TrainingJob.objects.select_for_update().filter(pk=event.job_id, status=JobStatus.RUNNING).first()
        run = job and runs.open_run(job)
        if job is None or run is None or event.pod not in runs.run_live_pods(run):
            continue  # an eviction we made ourselves, a worker already counted, or a pod of an earlier run
        if run.workers:
            _gang_event(event, job, run, now, recorded)
        else:
            _one_worker_event(event, job, run, now, recorded)
        recorded.ended.append(event.pod)
    return recorded


def _one_worker_event(event: ClusterEvent, job: TrainingJob, run: JobRun, now: float, recorded: Recorded) -> None:
    if event.kind is EventKind.POD_FINISHED:
        lifecycle.job_finish(job=job, at=event.at, status=JobStatus.SUCCEEDED,
                            message=f"succeeded on {event.node} after run {run.attempt}")
        recorded.finished += 1
    elif event.kind is EventKind.POD_FAILED:
        lifecycle.job_finish(job=job, at=event.at, status=JobStatus.FAILED,
                            message=f"failed on {event.node} in run {run.attempt}: {event.detail}")
        recorded.finished += 1
    else:
        lifecycle.job_requeue(job=job, now=now, reason="evicted", outcome=JobRun.Outcome.KILLED,
                             message=f"requeued: its pod on {event.node} was evicted ({event.detail or 'no reason given'})")


def _gang_event(event: ClusterEvent, job: TrainingJob, run: JobRun, now: float, recorded: Recorded) -> None:
    """A gang runs whole or not at all: only success waits for the other workers."""
    rank, size, service = runs.run_worker(run, event.pod)["rank"], len(run.workers), runs.run_service(run)
    if event.kind is EventKind.POD_FINISHED:
        if lifecycle.job_worker_succeeded(job=job, run=run, pod=event.pod, at=event.at):
            recorded.finished += 1
            recorded.stops.append(Stop((), service, "its gang succeeded"))
        return
    others = tuple(p for p in runs.run_live_pods(run) if p != event.pod)
    if event.kind is EventKind.POD_FAILED:
        reason, outcome, what = "worker-failed", JobRun.Outcome.FAILED, f"failed ({event.detail or 'no reason given'})"
    else:
        reason, outcome, what = "evicted", JobRun.Outcome.KILLED, \
            f"was evicted ({event.detail or 'no reason given'})"
    lifecycle.job_requeue(job=job, now=now, reason=reason, outcome=outcome, ended=(event.pod,),
                         message=f"requeued: worker {rank} of {size} (pod {event.pod} on {event.node}) {what}; "
                                 f"a gang runs whole, so its {len(others)} other workers were stopped")
    recorded.stops.append(Stop(others, service, f"gang job {job.pk} ended: worker {rank} {what}"))


def _reconcile(backend: ClusterBackend, now: float, report: TickReport) -> None:
    """Make the database and the cluster agree after whatever happened since the last tick."""
    pods = {p.spec.name: p for p in backend.pods()}
    holding = TrainingJob.objects.filter(status__in=(JobStatus.ADMITTED, JobStatus.RUNNING)).select_related("department")
    expected: set[str] = set()
    for job in holding:
        run = runs.open_run(job)
        wanted = runs.run_live_pods(run) if run else []
        present = [p for p in wanted if p in pods]
        expected.update(present)
        if wanted and len(present) == len(wanted):
            if job.status == JobStatus.ADMITTED:  # bound, but the tick died before recording it
                lifecycle.job_start(job=job, started_at=min(pods[p].started_at for p in present))
                report.repaired.append(f"job {job.pk}: {_pods_found(present)}, marked running")
            continue
        stop = _requeue_missing(job, run, [p for p in wanted if p not in pods], present, now)
        run_stop(backend=backend, stop=stop)
        report.repaired.append(f"job {job.pk}: no pod, requeued" if not run or not run.workers else
                               f"job {job.pk}: {len(wanted) - len(present)} of {len(wanted)} worker pods missing, "
                               f"requeued")
    orphaned_services = set()
    for name in sorted(pods.keys() - expected):
        pod = pods[name]
        if runs.job_of_pod(name) is not None and not pod.terminating:
            run_stop(backend=backend, stop=Stop((name,), None, "orphan: its job is no longer admitted or running"))
            report.repaired.append(f"pod {name}: orphan evicted")
            if pod.spec.subdomain:  # a gang's: its Service goes with it (a cancelled gang's, say)
                orphaned_services.add(pod.spec.subdomain)
    for service in sorted(orphaned_services):
        run_stop(backend=backend, stop=Stop((), service, "orphan: its gang is no longer admitted or running"))


def _pods_found(present: list[str]) -> str:
    return "pod found" if len(present) == 1 else f"all {len(present)} worker pods found"


def _requeue_missing(job: TrainingJob, run: JobRun | None, missing: list[str], present: list[str],
                     now: float) -> Stop:
    """An admitted or running job whose pod (one of whose workers' pods) is not on the cluster: requeued once; a
    gang's other workers are stopped."""
    if run is None or not run.workers:
        message = "requeued: it was admitted but its pod is not on the cluster"
    else:
        ranks = ", ".join(f"{w['rank']} ({w['pod']} on {w['node']})"
                          for w in (runs.run_worker(run, p) for p in missing))
        which = f"worker {ranks} of {len(run.workers)} is" if len(missing) == 1 else \
            f"workers {ranks} of {len(run.workers)} are"
        message = (f"requeued: {which} not on the cluster; a gang runs whole, so its {len(present)} other workers "
                   f"were stopped")
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().select_related("department").get(pk=job.pk)
        lifecycle.job_requeue(job=locked, now=now, reason="pod-missing", outcome=JobRun.Outcome.FAILED,
                             message=message, ended=tuple(missing))
    return Stop(tuple(present), runs.run_service(run) if run else None, f"job {job.pk}: a worker pod is missing")


# --- acting ----------------------------------------------------------------------------------------


class _LiveEffects:
    """A tick's effects (scheduler.policy.dispatch.Effects) on the database and the cluster. Admissions are recorded
    as they come and their pods bound together once every decision was acted on (the backend creates them
    concurrently; victims only free room, so binding after them changes no outcome); reservations and pending jobs
    are recorded together then too (act)."""

    def __init__(self, backend: ClusterBackend, now: float) -> None:
        self.backend, self.now = backend, now
        self.admitted: list[_Admitted] = []
        self.reserved: list[Reserve] = []
        self.waiting: list[StillPending] = []

    def preempt(self, decision: Preempt) -> bool:
        return preempt(decision, self.backend, self.now)

    def admit(self, decision: Admit) -> bool:
        recorded = _record_admission(decision, self.now)
        if recorded is not None:
            self.admitted.append(recorded)
        return recorded is not None

    def wait_for_victims(self, decision: Admit, victims: tuple[int, ...]) -> None:
        _wait_for_victims(decision, victims)

    def reserve(self, decision: Reserve) -> None:
        self.reserved.append(decision)

    def pending(self, decision: StillPending) -> None:
        self.waiting.append(decision)


def act(result: CycleResult, backend: ClusterBackend, now: float, report: TickReport) -> None:
    """Carry out a cycle's decisions on the cluster, victims first (the tick's acting step; tests drive it too)."""
    effects = _LiveEffects(backend, now)
    acted = dispatch(result, effects)
    started = bind_admitted(effects.admitted, backend, now)
    _record_pending(effects.waiting, _record_reservations(tuple(effects.reserved)))
    report.admitted += started
    report.preempted += acted.preempted
    report.pending = acted.pending


def preempt(decision: Preempt, backend: ClusterBackend, now: float) -> bool:
    """Requeue the victim, then evict its pod (every worker's, for a gang); True when a pod is still shutting down
    (it keeps its room)."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().select_related("department").filter(
            pk=decision.job_id, status__in=(JobStatus.ADMITTED, JobStatus.RUNNING)).first()
        if job is None:  # ended or cancelled since the snapshot: nothing to preempt, nothing to bring back
            return False
        run = runs.open_run(job)
        live_pods = runs.run_live_pods(run) if run is not None else []
        lifecycle.job_requeue(job=job, now=now, reason=decision.reason.value, message=decision.message,
                             outcome=JobRun.Outcome.PREEMPTED, summary=summary(decision))
    if run is None or not live_pods:
        return False
    run_stop(backend=backend,
             stop=Stop(tuple(live_pods), runs.run_service(run), f"preempted for job {decision.for_job_id}"))
    return any(p.spec.name in live_pods for p in backend.pods())


@transaction.atomic
def _wait_for_victims(decision: Admit, victims: tuple[int, ...]) -> None:
    """The preemptor stays pending until its victims' pods are gone (a cluster with graceful termination); the
    next cycle admits it into the room they leave."""
    job = TrainingJob.objects.select_related("department").get(pk=decision.job_id)
    nodes = list(dict.fromkeys(w.node for w in decision.workers))
    reason = "waiting-for-preemption"
    if job.pending_reason != reason:
        decision_record(kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=job.department, reason=reason,
                        message=f"preempted {', '.join(f'job {v}' for v in victims)} on {', '.join(nodes)}; admitted "
                                f"once their pods have stopped", data={"node": decision.node, "nodes": nodes,
                                                                       "victims": list(victims)})
    job.pending_reason = reason
    job.save(update_fields=["pending_reason"])


def _pod_specs(decision: Admit, job: TrainingJob, run: JobRun) -> list[tuple[PodSpec, str]]:
    """Every worker's pod and node, rank 0 first; a gang's carry their rank, rendezvous environment and Service."""
    labels = {JOB_LABEL: str(job.pk), RUN_LABEL: str(run.attempt), TASK_LABEL: job.task_key,
              FRAMEWORK_LABEL: label_value(str(job.framework))}
    if RUNTIME_LABEL in job.annotations:
        labels[RUNTIME_LABEL] = job.annotations[RUNTIME_LABEL]
    r = decision.rightsized

    def spec(name: str, shares: tuple[GpuShare, ...], rank: int | None = None, env: dict[str, str] | None = None,
             subdomain: str = "") -> PodSpec:
        pod_labels = labels if rank is None else {**labels, WORKER_LABEL: str(rank)}
        return PodSpec(name=name, job_id=job.pk, gpu_model=decision.gpu_model, gpu_shares=shares,
                       cpu_milli=r.cpu_request_milli, memory_mib=r.memory_mib, labels=pod_labels, image=job.image,
                       command=job.command, env=env or {}, subdomain=subdomain)

    if not run.workers:
        return [(spec(run.pod, decision.gpu_shares), decision.node)]
    service = runs.run_service(run)
    gang = Gang(framework=str(job.framework), pods=tuple(run.pods), service=service, gpus_per_worker=r.gpus)
    return [(spec(w["pod"], worker.gpu_shares, w["rank"], worker_env(gang, w["rank"]), service), worker.node)
            for w, worker in zip(run.workers, decision.workers, strict=True)]


@dataclass(frozen=True)
class _Admitted:
    """An admission recorded in the database (job `admitted`, its run open) whose pods are not bound yet."""

    job: TrainingJob
    run: JobRun
    pods: list[tuple[PodSpec, str]]  # every worker's pod and node, rank 0 first


def _record_admission(decision: Admit, now: float) -> _Admitted | None:
    recorded = lifecycle.job_admit(admission=decision, now=now)
    if recorded is None:
        return None
    job, run = recorded
    return _Admitted(job, run, _pod_specs(decision, job, run))


def admit(decision: Admit, backend: ClusterBackend, now: float) -> bool:
    """Record one admission, then bind every worker or none (what act does for a whole cycle's admissions)."""
    recorded = _record_admission(decision, now)
    return recorded is not None and bind_admitted([recorded], backend, now) == 1


def bind_admitted(admitted: list[_Admitted], backend: ClusterBackend, now: float) -> int:
    """Bind the pods of every admission in one batch (the backend creates them concurrently), gangs' headless
    Services first; each job is marked running once all its pods are bound. A job whose Service or any pod the
    cluster refused is requeued once and its pods that were bound are removed: a gang starts whole. How many jobs
    started. BackendUnavailable stops the tick with the jobs still `admitted`: the next tick's reconcile marks those
    whose pods are all there running and requeues the others."""
    sets = [_pod_set(a) for a in admitted]
    started = 0
    for a, podset, refused in zip(admitted, sets, bind_whole(backend, sets), strict=True):
        if refused is not None:
            _bind_failed(a, podset, refused, now, backend)
        else:
            lifecycle.job_start(job=a.job, started_at=now)
            started += 1
    return started


def _pod_set(a: _Admitted) -> PodSet:
    """The admission's pods, with its gang's headless Service (a single pod has none)."""
    service = runs.run_service(a.run)
    return PodSet(tuple(a.pods), service, {JOB_LABEL: str(a.job.pk), RUN_LABEL: str(a.run.attempt)} if service else {})


def _bind_failed(admitted: _Admitted, podset: PodSet, refused: Refused, now: float, backend: ClusterBackend) -> None:
    """The cluster refused pods (or the gang's Service): requeue once, then remove the pods that were bound."""
    job, run, pods = admitted.job, admitted.run, admitted.pods
    first = refused.first(podset)
    if first is None:
        message = f"requeued: the cluster refused the gang's Service ({refused.service_error})"
    elif not run.workers:
        message = f"requeued: the cluster refused to start it on {pods[0][1]} ({refused.pods[run.pod]})"
    else:
        rank, spec, node, error = first
        also = f" and {len(refused.pods) - 1} more" if len(refused.pods) > 1 else ""
        message = (f"requeued: the cluster refused worker {rank} of {len(pods)} (pod {spec.name}) on {node} "
                   f"({error}){also}; a gang starts whole, so the {len(refused.bound)} workers bound were "
                   f"removed")
    with transaction.atomic():
        locked = TrainingJob.objects.select_for_update().select_related("department").get(pk=job.pk)
        lifecycle.job_requeue(job=locked, now=now, reason="bind-failed", outcome=JobRun.Outcome.FAILED,
                             message=message, ended=tuple(refused.pods))
    run_stop(backend=backend, stop=Stop(refused.bound, runs.run_service(run), f"gang job {job.pk} could not start "
                                                                              f"whole"))


@transaction.atomic
def _record_reservations(reserved: tuple[Reserve, ...]) -> set[int]:
    """A waiting gang's reservation is kept on the job and explained once per change of its nodes or start; a job
    no longer reserved (admitted, or behind another gang now) loses it. The jobs reserved now."""
    by_job = {d.job_id: d for d in reserved}
    TrainingJob.objects.filter(~Q(reservation={}), status=JobStatus.PENDING).exclude(pk__in=list(by_job)).update(
        reservation={})
    for job in TrainingJob.objects.select_related("department").filter(pk__in=by_job):
        d = by_job[job.pk]
        if _same_reservation(job.reservation, d):
            continue
        job.reservation = {"nodes": list(d.nodes), "start_at": d.start_at}
        job.save(update_fields=["reservation"])
        decision_record(kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=job.department,
                        reason=Reason.RESERVED.value, message=d.message, data={**job.reservation, "summary": summary(d)})
    return set(by_job)


def _same_reservation(stored: dict, decision: Reserve) -> bool:
    return (bool(stored) and stored.get("nodes") == list(decision.nodes)
            and abs(float(stored.get("start_at", 0)) - decision.start_at) < RESERVATION_START_SLACK_S)


@transaction.atomic
def _record_pending(decisions: list[StillPending], reserved: set[int]) -> None:
    """Every pending job shows its place and score; a Decision only when its reason changes (a reserved gang's
    reservation Decision says why it waits: _record_reservations)."""
    jobs = TrainingJob.objects.select_related("department").in_bulk([d.job_id for d in decisions])
    changed = []
    for d in decisions:
        job = jobs[d.job_id]
        if job.pending_reason != d.reason.value and not (d.job_id in reserved and d.reason is Reason.RESERVED):
            changed.append(Decision(kind=Decision.Kind.PENDING, subject=f"job:{job.pk}", department=job.department,
                                    reason=d.reason.value, message=d.message,
                                    data={"score": lifecycle.score_dict(d.score), "summary": summary(d)}))
        job.queue_position, job.score, job.pending_reason = d.position + 1, lifecycle.score_dict(d.score), d.reason.value
    TrainingJob.objects.bulk_update(jobs.values(), ["queue_position", "score", "pending_reason"], batch_size=500)
    Decision.objects.bulk_create(changed, batch_size=500)


# --- the live loop's entry point -------------------------------------------------------------------


def run_live_tick(*, redis, namespace: str, profile: Profile, cache: CycleCache | None = None,
                  calibration: Expiring | None = None) -> TickReport | None:
    """One tick on the configured cluster, unless this worker must not act now (then None; see
    colocation/live_backend.py); `cache` and `calibration`: the loop's, kept from tick to tick (scheduler_tick)."""
    with live_cluster(redis=redis, namespace=namespace, loop="scheduler",
                      interval_s=settings.TIDAL_SCHEDULER_INTERVAL_S) as cluster:
        if cluster is None:
            return None
        started = time.perf_counter()
        report = scheduler_tick(backend=cluster, now=time.time(), profile=profile, cache=cache,
                                calibration=calibration)
        telemetry.observe(redis, namespace, "scheduler_cycle", time.perf_counter() - started)
        return report
