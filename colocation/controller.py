"""The live lending loop: observe the cluster, decide (pure policy), open transitions, move each one a step at
a time. Every executed step is persisted before the next, and the next action is derived from what is
observed on the node, so a crash at any point is resumed by the next tick without repeating a destructive
step (colocation/policy/steps.py).

Forecast-driven lending (on per resource group, `ResourceGroup.lending_forecast`): each tick records every group's
online demand per minute in Redis (colocation/demand_history.py, whether or not forecasting is on, so the history is
there when it is switched on), forecasts each group with it on (the seasonal profile of that history, read through the
caller's per-minute cache, its first minutes from the services' XGBoost forecasts where a usable model exists),
decides with the forecasts, and stores the predicted take-back time per GPU model, which the scheduler loop reads back
through `colocation.selectors.lending_profile`.
"""
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from cluster.backend import (INFERENCE, REPLACED_BY_LABEL, SERVICE_LABEL, BackendBusy, ClusterBackend,
                             PodView)
from cluster.clock import utc
from cluster.types import NodeState, NodeView, Pool
from colocation import demand_history, observe, replicas, services
from colocation.live_backend import live_cluster
from colocation.models import InferenceService, Node, NodeTransition, ResourceGroup, ScalingThreshold, ServiceGroup
from colocation.policy import (
    Conflict, Converting, DeletePod, DetachPod, Done, EvictTraining, GroupNode, GroupView, Lend, LendingProfile,
    DemandForecast, PendingPod, SetState, Step, TakeBack, Thresholds, TransitionRecord, Wait, decide_lending, drive,
    is_final,
)
from colocation.policy import servicegroups as sg
from colocation.policy.calibration import UNCALIBRATED, RuntimeCalibration
from colocation.policy.forecast import (ServiceAhead, demand_forecast, horizon_min, near_term_demand,
                                        take_back_times, with_near_term)
from colocation.policy.group import in_group_unit, unit_name
from colocation.policy.lending import expedite
from colocation.policy.pools import conservative_run_of
from colocation.policy.states import Direction, Event, transition
from core import telemetry
from core.decisions import decision_record
from core.errors import ApplicationError
from core.models import Decision
from profiling.selectors import newest_service_forecasts, task_histories
from scheduler.lifecycle import job_take_back
from scheduler.logs import pod_evict
from scheduler.models import JobStatus, TrainingJob
from scheduler.runs import run_service
from scheduler.selectors import learned_workload
from scheduler.teardown import Stop, run_stop

log = logging.getLogger(__name__)
MAX_STEPS_PER_TICK = 16  # a conversion's actions that need no waiting, in one tick (which holds the cluster lock)


@dataclass
class LendingReport:
    opened: list[str] = field(default_factory=list)
    steps: int = 0
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)


def lending_tick(*, backend: ClusterBackend, now: float, profile: LendingProfile, redis=None,
                 namespace: str = "", history: demand_history.HistoryCache | None = None) -> LendingReport:
    """One tick. With `redis`, the groups' demand is recorded and, with `profile.forecast`, the groups with
    forecast-driven lending on are forecast from it (`history`: the caller's per-minute cache of it)."""
    report = LendingReport()
    replicas.apply_services(backend, now)
    views = group_views(backend, profile.runtime)
    forecasts: dict[str, DemandForecast] = {}
    if redis is not None:
        demand_history.record(redis, namespace, {g.name: g.demand for g in views}, now)
        if profile.forecast:
            forecasts = group_forecasts(history or demand_history.HistoryCache(), redis, namespace, views, now,
                                        profile)
            model_of = dict(ResourceGroup.objects.values_list("name", "gpu_model__name"))
            demand_history.put_take_back_by(redis, namespace,
                                            take_back_times(views, forecasts, now, profile, model_of),
                                            max(300.0, 5 * settings.TIDAL_LENDING_INTERVAL_S))
    decisions = decide_lending(views, now, profile, forecasts)
    _expedite(expedite(views), now)
    for decision in decisions:
        if isinstance(decision, (Lend, TakeBack)):
            _open(decision, report, now)
    pods = observe.PodIndex.of(backend)
    nodes = {n.name: n for n in backend.nodes()}
    for record in NodeTransition.objects.filter(status=NodeTransition.Status.OPEN).select_related("node"):
        pods = _advance(record, backend, nodes, pods, now, report)
    return report


# --- forecasting -----------------------------------------------------------------------------------


def group_forecasts(history: demand_history.HistoryCache, redis, namespace: str, views: list[GroupView],
                    now: float, profile: LendingProfile) -> dict[str, DemandForecast]:
    """The forecast of every group with forecast-driven lending on: the seasonal profile of its recorded demand (a
    day of it at least; before, the high of its recent demand: `demand_forecast`), its first minutes
    from its services' XGBoost forecasts where a usable model made them."""
    minute = now - now % 60
    on = set(ResourceGroup.objects.filter(lending_forecast=True).values_list("name", flat=True))
    near = near_term(views, now)
    out = {}
    for g in views:
        if g.name not in on:
            continue
        fc = demand_forecast(g.name, history.history(redis, namespace, g.name, now), minute,
                             horizon_min(now, profile, g.startup_s))
        fc = with_near_term(fc, g.name, minute, near.get(g.name, ()))
        if fc is not None:
            out[g.name] = fc
    return out


NEAR_TERM_FRESH_S = 180  # a service's forecast older than this is not used (the autoscaler has stopped making them)


def near_term(views: list[GroupView], now: float) -> dict[str, tuple[float, ...]]:
    """Per group, its online demand over the next minutes from the newest XGBoost forecasts of its services."""
    made = newest_service_forecasts(since=utc(now - NEAR_TERM_FRESH_S))
    if not made:
        return {}
    group_of_model = {m: g for g, m in ResourceGroup.objects.values_list("name", "gpu_model__name")}
    demand = {g.name: g.demand for g in views}
    expect = dict(ScalingThreshold.objects.filter(metric="gpu").values_list("service_id", "expect_rate"))
    ahead: dict[str, list[ServiceAhead]] = defaultdict(list)
    for s in InferenceService.objects.filter(pk__in=made).select_related("gpu_model"):
        group = group_of_model.get(s.gpu_model.name if s.gpu_model else None)
        if group in demand:
            replicas, values = made[s.pk]
            per = float(s.gpus_per_replica) if s.gpu_model_id else float(s.cpu_milli_per_replica)
            ahead[group].append(ServiceAhead(replicas, values, expect.get(s.pk, 0.6), per))
    return {g: near_term_demand(demand[g], services) for g, services in ahead.items()}


# --- observing -------------------------------------------------------------------------------------


def group_views(backend: ClusterBackend, runtime: RuntimeCalibration = UNCALIBRATED) -> list[GroupView]:
    """The lending policy's view of every group with lending on. Pinned nodes appear as fixed-pool nodes:
    they keep counting for capacity and usage, but the policy never picks them. A training pod's expected end reads
    its job's run time estimate × `runtime`'s factor (the profile's calibration)."""
    groups = {g.name: g for g in ResourceGroup.objects.select_related("gpu_model")}
    group_of_model = {g.gpu_model.name if g.gpu_model else None: g.name for g in groups.values()}
    pinned = set(Node.objects.filter(pinned=True).values_list("name", flat=True))
    pending_online = observe.pending_online(backend, group_of_model)
    for group, pods in pending_groups(group_of_model).items():
        pending_online[group] += pods
    pending_training: Counter[str] = Counter()
    waiting = TrainingJob.objects.filter(status=JobStatus.PENDING).exclude(pool_preference=Pool.FIXED.value)
    for model in waiting.values_list("gpu_model__name", flat=True):
        pending_training[group_of_model.get(model, "")] += 1
    converting: dict[str, list[Converting]] = defaultdict(list)
    for node, group, direction in NodeTransition.objects.filter(status=NodeTransition.Status.OPEN).values_list(
            "node__name", "node__resource_group__name", "direction"):
        converting[group].append(Converting(node, Direction(direction)))
    largest, startup = largest_replicas(group_of_model)
    last_take_back = {group: at.timestamp() for group, at in NodeTransition.objects.filter(  # lending's hysteresis
        direction=Direction.TAKE_BACK.value).order_by().values_list("node__resource_group__name").annotate(
        at=Max("started_at"))}
    views = []
    for name, members in sorted(observe.group_nodes(backend, expected_run(backend, runtime)).items()):
        group = groups.get(name)
        if group is None or not group.lending:
            continue
        views.append(GroupView(
            name, tuple(_pin(n) if n.name in pinned else n for n in members),
            Thresholds(group.min_rate, group.expect_rate, group.max_rate), pending_training[name],
            tuple(pending_online[name]), tuple(converting[name]), unit_name(gpu=bool(group.gpu_model_id)),
            largest_replica=largest.get(name, 0.0), startup_s=startup.get(name, 0.0),
            last_take_back=last_take_back.get(name),
        ))
    return views


def pending_groups(group_of_model: dict[str | None, str]) -> dict[str, list[PendingPod]]:
    """The pods of the service groups that found no room (`group-pending`, nothing placed), by resource group: they
    pend as one group, so a take-back frees the machines for all of them at once."""
    out: dict[str, list[PendingPod]] = defaultdict(list)
    for row in ServiceGroup.objects.filter(note=sg.Reason.NO_ROOM.value, nodes=[]).select_related("service__gpu_model"):
        s = row.service
        group = group_of_model.get(s.gpu_model.name if s.gpu_model_id else None)
        if group is not None:
            request = in_group_unit(float(s.gpus_per_replica), s.cpu_milli_per_replica, gpu=bool(s.gpu_model_id))
            out[group] += [PendingPod(sg.pod_name(s.name, row.index, w), request, group=f"group {row.index} of {s.name}")
                           for w in range(s.group_size)]
    return out


def largest_replicas(group_of_model: dict[str | None, str]) -> tuple[dict[str, float], dict[str, float]]:
    """Per resource group, what the largest replica (a whole group of pods) of its services takes, in the group's unit
    (GPUs; CPU millicores for a CPU group): lending leaves room for one more of it; and the longest start-up of a
    replica there, which a take-back must start ahead of the forecast rise."""
    largest: dict[str, float] = {}
    startup: dict[str, float] = {}
    for model, gpus, cpu, size, startup_s in InferenceService.objects.values_list(
            "gpu_model__name", "gpus_per_replica", "cpu_milli_per_replica", "group_size", "startup_s"):
        group = group_of_model.get(model)
        if group is not None:
            largest[group] = max(largest.get(group, 0.0), (float(gpus) if model else float(cpu)) * size)
            startup[group] = max(startup.get(group, 0.0), float(startup_s or 0))
    return largest, startup


def expected_run(backend: ClusterBackend, runtime: RuntimeCalibration = UNCALIBRATED) -> dict[int, float]:
    """Expected run seconds of the jobs whose training pods are bound (profile mean, else stated duration, × its
    source's calibrated factor; a job with neither is absent: its end is unknown): one query for the jobs, one for
    their tasks' histories."""
    ids = {p.spec.job_id for p in backend.pods() if p.kind != INFERENCE and p.spec.job_id is not None}
    if not ids:
        return {}
    jobs = list(TrainingJob.objects.filter(pk__in=ids).only("pk", "task_key", "expected_duration_s"))
    histories = task_histories(task_keys={j.task_key for j in jobs})
    out = {}
    for job in jobs:
        history = histories.get(job.task_key)
        run = conservative_run_of(history.run_s if history else (), job.expected_duration_s, runtime)
        if run is not None:
            out[job.pk] = float(run)
    return out


def _pin(node: GroupNode) -> GroupNode:
    return replace(node, pool=Pool.FIXED)


def _open(decision: Lend | TakeBack, report: LendingReport, now: float) -> None:
    # a graceful take-back's deadline (evict what still runs then); none: at once
    evict_at = utc(decision.evict_at) if isinstance(decision, TakeBack) and decision.evict_at > now else None
    for name in decision.nodes:
        try:
            with transaction.atomic():
                record = services.transition_request(node=Node.objects.get(name=name), direction=decision.direction,
                                                     actor=None, reason=decision.reason.value,
                                                     message=decision.message)
                if evict_at is not None:
                    NodeTransition.objects.filter(pk=record.pk).update(evict_at=evict_at)
            report.opened.append(name)
        except ApplicationError as refused:  # e.g. an operator pinned it since we looked
            log.info("not moving %s: %s", name, refused.message)


def _expedite(groups: frozenset[str], now: float) -> None:
    """Online pods pending in these groups: their cordoned take-backs evict now (online service wins)."""
    if not groups:
        return
    expedited = NodeTransition.objects.filter(
        status=NodeTransition.Status.OPEN, direction=Direction.TAKE_BACK.value, evict_at__gt=utc(now),
        node__resource_group__name__in=groups)
    for record in expedited.select_related("node__resource_group"):
        decision_record(kind=Decision.Kind.LENDING, subject=f"node:{record.node.name}", reason="take-back-expedited",
                        message=f"take-back of {record.node.name} evicts now, not at {record.evict_at:%H:%M} UTC: "
                                f"online pods are pending in {record.node.resource_group.name}")
    expedited.update(evict_at=utc(now))


# --- acting ----------------------------------------------------------------------------------------


def _advance(record: NodeTransition, backend: ClusterBackend, nodes: dict, pods: observe.PodIndex, now: float,
             report: LendingReport) -> observe.PodIndex:
    """Run the record's next actions until one must wait; persist each step as it is done."""
    name = record.node.name
    _catch_up(record, nodes[name], pods, now)
    state = TransitionRecord(name, Direction(record.direction), Step(record.step), record.started_at.timestamp(),
                             record.evict_at.timestamp() if record.evict_at else 0.0)
    node = nodes[name]
    # drive() plans each action on the node as it is then: node and pods are read again after every action
    for action in drive(state, lambda: observe.node_now(node, pods), now, MAX_STEPS_PER_TICK):
        try:
            _execute(action, record, backend, pods, now)
        except BackendBusy as busy:  # e.g. a disruption budget: the same step is tried again next tick
            report.waiting[name] = record.waiting_for = f"the cluster refused it for now: {busy}"
            record.save(update_fields=["waiting_for"])
            break
        report.steps += 1
        step_persist(record, action, now, report)
        if not is_final(action):
            node = next(n for n in backend.nodes() if n.name == name)
            pods = observe.PodIndex.of(backend)
    return observe.PodIndex.of(backend)


def _execute(action, record: NodeTransition, backend: ClusterBackend, pods: observe.PodIndex, now: float) -> None:
    node = record.node.name
    if isinstance(action, SetState):
        backend.set_node_state(node, action.state)
        _record_state(record, action.event, action.state, action.step, now)
    elif isinstance(action, DetachPod):
        _record_migrating(record, pods.bound[action.pod], backend.detach_pod(action.pod))
    elif isinstance(action, DeletePod):
        backend.evict(action.pod, f"migrated off {node}: its replacement is ready")
    elif isinstance(action, EvictTraining):
        pod = pods.bound.get(action.pod)
        pod_evict(backend=backend, pod=action.pod, reason=f"{node} taken back for inference")  # its log archived
        if pod is not None and pod.spec.job_id is not None:
            run = job_take_back(job_id=pod.spec.job_id, node=node, now=now)
            if run is not None:
                others = tuple(p for p in run.pods if p != action.pod)  # a gang runs whole: the others go now
                run_stop(backend=backend, stop=Stop(others, run_service(run),
                                                    f"its gang lost a worker: {node} taken back for inference"))


@transaction.atomic
def _record_state(record: NodeTransition, event: Event, state: NodeState, step: Step, now: float) -> None:
    """The node's new state and its decision commit together: the catch-up below sees both or neither."""
    node = record.node.name
    Node.objects.filter(pk=record.node_id).update(state=state.value, state_changed_at=utc(now))
    decision_record(kind=Decision.Kind.LENDING, subject=f"node:{node}", reason=f"node-{event.value}",
                    message=f"{node} is now {state.value} ({record.direction} step {step.value})")


def _record_migrating(record: NodeTransition, pod: PodView, replacement: str | None) -> None:
    """Recorded for the service's department (and operators): the pod's name is the service's."""
    node, name = record.node.name, pod.spec.name
    service = InferenceService.objects.filter(name=pod.spec.labels.get(SERVICE_LABEL)).select_related("department").first()
    decision_record(kind=Decision.Kind.LENDING, subject=f"node:{node}", reason="pod-migrating",
                    message=f"inference pod {name} leaves {node}: replacement {replacement or '(being created)'} "
                            f"starts elsewhere first; the old pod keeps serving until it is ready",
                    department=service.department if service else None, data={"pod": name, "transition": record.pk})


_PATH = {Direction.LEND: ((Event.LEND, Step.MARK_UNNORMAL), (Event.LEND_DONE, Step.MARK_NORMAL)),
         Direction.TAKE_BACK: ((Event.TAKE_BACK, Step.MARK_UNNORMAL), (Event.TAKE_BACK_DONE, Step.MARK_NORMAL))}


def _catch_up(record: NodeTransition, observed: NodeView, pods: observe.PodIndex, now: float) -> None:
    """Record what the cluster did but a crash kept from being recorded (the database went away between the action
    and its record): the node marked, a pod detached. Derived from what is observed, like the steps, and from this
    transition's decisions so far, so each is recorded exactly once whichever backend keeps the node's state."""
    direction = Direction(record.direction)
    done = set(Decision.objects.filter(kind=Decision.Kind.LENDING, subject=f"node:{observed.name}",
                                       created_at__gte=record.started_at).values_list("reason", "data__pod"))
    state = NodeState.ONLINE_NORMAL if direction is Direction.LEND else NodeState.OFFLINE_NORMAL
    path = []
    for event, step in _PATH[direction]:
        result = transition(state, event, observed.pool)
        if state is observed.state or not result.ok:
            break
        path.append((event, result.new_state, step))
        state = result.new_state
    if state is observed.state:  # otherwise not on this conversion's way (by hand?): the step machine says Conflict
        for event, new_state, step in path:
            if (f"node-{event.value}", None) not in done:
                log.warning("%s: recording that it became %s before a crash", observed.name, new_state.value)
                _record_state(record, event, new_state, step, now)
    for name in observed.pods:
        pod = pods.bound.get(name)
        if pod is not None and pod.detached_from is not None and ("pod-migrating", name) not in done:
            _record_migrating(record, pod, pod.spec.labels.get(REPLACED_BY_LABEL))


@transaction.atomic
def step_persist(record: NodeTransition, action, now: float, report: LendingReport) -> None:
    """Record that the transition's step is done (after its action ran): the seam a crash between the two hits."""
    record.step = action.step.value
    record.waiting_for = action.reason if isinstance(action, Wait) else ""
    node = record.node.name
    # `now` is when the tick began; a transition opened and finished within it was stamped later (auto_now_add)
    ended = max(utc(now), record.started_at)
    if isinstance(action, Done):
        record.status, record.finished_at = NodeTransition.Status.DONE, ended
        report.done.append(node)
        decision_record(kind=Decision.Kind.LENDING, subject=f"node:{node}", reason="transition-done",
                        message=f"{record.direction} of {node} done: it is "
                                f"{Node.objects.get(pk=record.node_id).state}")
    elif isinstance(action, Conflict):
        record.status, record.finished_at = NodeTransition.Status.FAILED, ended
        report.failed.append(node)
        decision_record(kind=Decision.Kind.LENDING, subject=f"node:{node}", reason="transition-failed",
                        message=f"{record.direction} of {node} stopped: {action.reason}; an operator must look")
    elif isinstance(action, Wait):
        report.waiting[node] = action.reason
    record.save()


# --- the loop's entry point ------------------------------------------------------------------------


def run_lending_tick(*, redis, namespace: str, profile: LendingProfile,
                     history: demand_history.HistoryCache | None = None) -> LendingReport | None:
    """One lending tick on the configured cluster, unless this worker must not act now (then None); `history`: the
    caller's cache of the recorded demand, kept from tick to tick."""
    with live_cluster(redis=redis, namespace=namespace, loop="lending",
                      interval_s=settings.TIDAL_LENDING_INTERVAL_S) as cluster:
        if cluster is None:
            return None
        started = time.perf_counter()
        report = lending_tick(backend=cluster, now=time.time(), profile=profile, redis=redis, namespace=namespace,
                              history=history)
        telemetry.observe(redis, namespace, "lending_tick", time.perf_counter() - started)
        telemetry.put_groups(redis, namespace, observe.group_allocation(cluster.nodes(), learned_workload()),
                             time.time())
        return report
