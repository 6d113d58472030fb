"""Writes for the colocation app."""
import logging
from datetime import datetime
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import transaction

from cluster.types import NodeState, Pool
from colocation.models import InferenceService, Node, NodeTransition, ResourceGroup, ScalingSchedule, ScalingThreshold
from colocation.policy.schedules import parse_weekdays
from colocation.policy.servicegroups import GroupSpec, RestartPolicy, fits_somewhere
from colocation.selectors import node_views
from colocation.policy.states import Direction as PolicyDirection, Event, transition
from core import selectors as core_selectors
from core.decisions import decision_record
from core.errors import ApplicationError, Conflict
from core.models import Decision, Department, GPUModel

log = logging.getLogger(__name__)
SERVICE_FIELDS = (
    "name", "gpu_model", "priority", "replicas", "min_replicas", "max_replicas", "gpus_per_replica",
    "cpu_milli_per_replica", "memory_mib_per_replica", "autoscaling", "offline", "manual_deploy", "peak_start",
    "peak_end", "scale_to_zero_idle_min", "busy_signal", "vertical", "group_size", "startup_s", "exclusive_topology",
    "max_surge", "max_unavailable", "group_restart_policy", "ttft_p99_target_s", "tpot_p99_target_s",
    "kv_cache_target", "queue_target", "slo_ttft_s", "slo_tpot_s", "slo_min_gain",
)


def _require_admin(*, actor, department: Department) -> None:
    if not core_selectors.can_administer(user=actor, department=department):
        raise PermissionDenied(f"only operators and admins of {department} manage its inference services")


def _bounds_errors(values: dict) -> dict:
    low, high, replicas = values["min_replicas"], values["max_replicas"], values["replicas"]
    errors = {}
    if low > high:
        errors["min_replicas"] = [f"min_replicas {low} is above max_replicas {high}"]
    elif replicas == 0 and values.get("scale_to_zero_idle_min"):
        pass  # scaled to zero: allowed only with an idle time
    elif not low <= replicas <= high:
        errors["replicas"] = [f"replicas {replicas} is outside [{low}, {high}]"
                              + (" (0 needs scale_to_zero_idle_min)" if replicas == 0 else "")]
    if (values.get("peak_start") is None) != (values.get("peak_end") is None):
        errors["peak_end" if values.get("peak_end") is None else "peak_start"] = [
            "give both ends of the peak window, or neither"]
    idle = values.get("scale_to_zero_idle_min")
    if idle is not None and idle <= 0:
        errors["scale_to_zero_idle_min"] = ["must be a positive number of minutes, or empty for never"]
    return errors


def _by_index(errors: list[dict]) -> dict[str, dict]:
    """Errors of list items as DRF (3.15+) reports them: {"<index>": {field: [messages]}}, bad items only."""
    return {str(i): e for i, e in enumerate(errors) if e}


def _threshold_errors(t: dict, seen: set) -> dict:
    """docs/concepts/autoscaling.md#the-policy: 0 < minRate < expectRate < maxRate ≤ 1, each resource once; errors by the field at
    fault."""
    low, expect, high = t["min_rate"], t["expect_rate"], t["max_rate"]
    mine = {}
    if low <= 0:
        mine["min_rate"] = [f"min_rate must be above 0, got {low}"]
    elif low >= expect:
        mine["min_rate"] = [f"need min_rate < expect_rate, got {low} ≥ {expect}"]
    if expect >= high:
        mine["expect_rate"] = [f"need expect_rate < max_rate, got {expect} ≥ {high}"]
    if high > 1:
        mine["max_rate"] = [f"max_rate must be at most 1, got {high}"]
    if t["metric"] in seen:
        mine["metric"] = [f"{t['metric']} appears twice: each metric at most once"]
    seen.add(t["metric"])
    return mine


def _thresholds_errors(thresholds: list[dict], busy_signal: bool) -> dict:
    """Per threshold, keyed by its index like DRF's nested list errors; the busy signal's need on its own field."""
    seen: set = set()
    per_item = _by_index([_threshold_errors(t, seen) for t in thresholds])
    errors = {"thresholds": per_item} if per_item else {}
    if busy_signal and ScalingThreshold.Metric.BUSY not in seen:
        errors["busy_signal"] = ["the busy signal needs a busy threshold (e.g. 0.6/0.7/0.8)"]
    return errors


def _schedules_errors(schedules: list[dict], max_replicas: int) -> dict:
    """Each schedule's weekdays parse as cron's day-of-week field and its minimum fits under max_replicas."""
    errors = []
    for s in schedules:
        mine = {}
        try:
            parse_weekdays(s.get("weekdays", "*"))
        except ValueError as error:
            mine["weekdays"] = [str(error)]
        if s["min_replicas"] > max_replicas:
            mine["min_replicas"] = [f"{s['min_replicas']} is above max_replicas {max_replicas}"]
        if s["start"] == s["end"]:
            mine["end"] = ["the window is empty: end equals start"]
        errors.append(mine)
    return {"schedules": _by_index(errors)} if any(errors) else {}


def _group_errors(values: dict) -> dict:
    """docs/concepts/service-groups.md#the-group: a group of several pods asks for whole GPUs per pod, can roll, and
    fits in one block (any node, without exclusive topology) of its GPU model's nodes, were they empty."""
    size, gpus, model = values["group_size"], Decimal(values["gpus_per_replica"]), values.get("gpu_model")
    errors = {}
    if values["max_surge"] == 0 and values["max_unavailable"] == 0:
        errors["max_unavailable"] = ["max_surge and max_unavailable cannot both be 0: a rollout could never progress"]
    policies = RestartPolicy.values()
    if values["group_restart_policy"] not in policies:
        errors["group_restart_policy"] = [f"{values['group_restart_policy']!r} is not one of {', '.join(policies)}"]
    if size <= 1:
        return errors
    if model is not None and gpus != gpus.to_integral_value():
        errors["gpus_per_replica"] = [f"a group of {size} pods asks for whole GPUs per pod, got {gpus}"]
        return errors
    spec = GroupSpec("probe", size, model.name if model else None, float(gpus) if model else 0.0,
                     values["cpu_milli_per_replica"], values["memory_mib_per_replica"], "", "",
                     values["exclusive_topology"])
    if not fits_somewhere(spec, node_views()):
        kind = model.name if model else "CPU"
        where = f"no topology block of {kind} nodes can ever" if values["exclusive_topology"] else \
            f"the {kind} nodes together can never"
        errors["group_size"] = [f"{where} hold a group of {size} pods of {float(gpus) if model else 0:g} GPUs, "
                                f"{values['cpu_milli_per_replica']} mCPU and {values['memory_mib_per_replica']} MiB"]
    return errors


def _serving_errors(values: dict, thresholds: list[dict]) -> dict:
    """docs/concepts/autoscaling.md#llm-serving-signals: times and the queue above 0, KV-cache use in (0, 1]; and
    #sizing-to-the-request-slo: min_gain in (0, 1], weighing requests within the SLO (so it needs both SLO times)
    by moving the GPU thresholds (so it needs them)."""
    errors = {}
    for name in ("ttft_p99_target_s", "tpot_p99_target_s", "queue_target", "slo_ttft_s", "slo_tpot_s"):
        if (v := values.get(name)) is not None and v <= 0:
            errors[name] = [f"must be above 0, got {v:g}"]
    if (kv := values.get("kv_cache_target")) is not None and not 0 < kv <= 1:
        errors["kv_cache_target"] = [f"must be in (0, 1], got {kv:g}"]
    gain = values.get("slo_min_gain")
    missing = [name for name in ("slo_ttft_s", "slo_tpot_s") if values.get(name) is None]
    if gain is not None and not 0 < gain <= 1:
        errors["slo_min_gain"] = [f"must be in (0, 1], got {gain:g}"]
    elif gain is not None and missing:
        errors["slo_min_gain"] = [f"sizing to the request SLO needs {' and '.join(missing)} too"]
    elif gain is not None and ScalingThreshold.Metric.GPU not in {t["metric"] for t in thresholds}:
        errors["slo_min_gain"] = ["sizing to the request SLO moves the GPU thresholds: give a gpu threshold"]
    return errors


def _check_policy(values: dict, thresholds: list[dict], schedules: list[dict], *, stored_thresholds: bool = False) -> None:
    """Every rule at once, so one 400 names every bad field (before anything is written). Stored thresholds
    (not being changed) are only checked for the busy signal's need."""
    threshold_errors = _thresholds_errors(thresholds, values["busy_signal"])
    if stored_thresholds:
        threshold_errors.pop("thresholds", None)
    errors = {**_bounds_errors(values), **threshold_errors, **_schedules_errors(schedules, values["max_replicas"]),
              **_group_errors(values), **_serving_errors(values, thresholds)}
    if errors:
        raise ApplicationError("the autoscaling policy is invalid", fields=errors)


def _set_schedules(service: InferenceService, schedules: list[dict]) -> None:
    service.schedules.all().delete()
    ScalingSchedule.objects.bulk_create(ScalingSchedule(service=service, **s) for s in schedules)


def _set_thresholds(service: InferenceService, thresholds: list[dict]) -> None:
    service.thresholds.all().delete()
    ScalingThreshold.objects.bulk_create(ScalingThreshold(service=service, **t) for t in thresholds)


@transaction.atomic
def service_create(*, actor, department: Department, thresholds: list[dict], schedules: list[dict] | None = None,
                   **fields) -> InferenceService:
    _require_admin(actor=actor, department=department)
    values = {**{f.name: f.get_default() for f in InferenceService._meta.fields if f.name in SERVICE_FIELDS}, **fields}
    _check_policy(values, thresholds, schedules or [])
    service = InferenceService.objects.create(department=department, **fields)
    _set_thresholds(service, thresholds)
    _set_schedules(service, schedules or [])
    _record_service(service, actor, "service-created")
    return service


def _record_service(service: InferenceService, actor, reason: str, changed: list[str] | None = None) -> None:
    """The decision a person's change makes, naming what they changed (the replica counts alone do not say)."""
    what = f"; changed: {', '.join(changed)}" if changed else ""
    decision_record(kind=Decision.Kind.SCALING, subject=f"service:{service.name}", department=service.department,
                    reason=reason, message=f"{service} {reason.split('-')[1]} by {actor}: {service.replicas} replicas "
                                           f"(min {service.min_replicas}, max {service.max_replicas}), "
                                           f"autoscaling {'on' if service.autoscaling else 'off'}{what}")


@transaction.atomic
def service_update(*, service: InferenceService, actor, thresholds: list[dict] | None = None,
                   schedules: list[dict] | None = None, **fields) -> InferenceService:
    """Change what is given; thresholds and schedules, when given, replace the service's."""
    _require_admin(actor=actor, department=service.department)
    if fields.pop("department", service.department) != service.department:
        raise Conflict.for_field("department", "a service cannot move to another department")
    values = {**{name: getattr(service, name) for name in SERVICE_FIELDS}, **fields}
    current_thresholds = list(service.thresholds.values("metric", "min_rate", "expect_rate", "max_rate"))
    current_schedules = list(service.schedules.values("weekdays", "start", "end", "min_replicas"))
    _check_policy(values, current_thresholds if thresholds is None else thresholds,
                  current_schedules if schedules is None else schedules, stored_thresholds=thresholds is None)
    changed = [name for name, value in fields.items() if getattr(service, name) != value]
    if thresholds is not None:
        changed += ["thresholds"] if _rows(thresholds) != _rows(current_thresholds) else []
        _set_thresholds(service, thresholds)
    if schedules is not None:
        changed += ["schedules"] if _rows(schedules) != _rows(current_schedules) else []
        _set_schedules(service, schedules)
    for name, value in fields.items():
        setattr(service, name, value)
    service.save()
    _record_service(service, actor, "service-changed", changed)
    return service


def _rows(rows: list[dict]) -> list[tuple]:
    """Threshold or schedule rows as comparable values, in any order."""
    return sorted(tuple(sorted((k, str(v)) for k, v in row.items())) for row in rows)


# --- nodes: lending transitions, pins, thresholds ------------------------------------------------

EVENTS = {PolicyDirection.LEND: Event.LEND, PolicyDirection.TAKE_BACK: Event.TAKE_BACK}


def _require_operator(actor) -> None:
    if actor is not None and not actor.is_staff:
        raise PermissionDenied("only platform operators move, pin or configure nodes")


def _transition_errors(node: Node, direction: PolicyDirection) -> list[str]:
    open_transition = node.transitions.filter(status=NodeTransition.Status.OPEN).first()
    if open_transition:
        return [f"{node} is already in a transition ({open_transition.direction}, step {open_transition.step})"]
    if node.pinned:
        return [f"{node} is pinned by an operator; unpin it first"]
    result = transition(NodeState(node.state), EVENTS[direction], Pool(node.pool))
    if not result.ok:
        return [result.reason]
    return []


@transaction.atomic
def transition_request(*, node: Node, direction: PolicyDirection, actor, reason: str, message: str) -> NodeTransition:
    """Open a lend or take-back of `node`; the controller then moves it step by step. `actor` None: automation."""
    _require_operator(actor)
    node = Node.objects.select_for_update().get(pk=node.pk)
    errors = _transition_errors(node, direction)
    if errors:
        raise Conflict(errors[0], fields={"node": errors})
    record = NodeTransition.objects.create(node=node, direction=direction.value, requested_by=actor, reason=reason,
                                           message=message)
    decision_record(kind=Decision.Kind.LENDING, subject=f"node:{node.name}", reason=reason, message=message,
                    data={"direction": direction.value, "transition": record.pk, "by": str(actor or "automation")})
    return record


def node_pin(*, node: Node, pinned: bool, actor) -> Node:
    _require_operator(actor)
    node.pinned = pinned
    node.save(update_fields=["pinned"])
    verb = "pinned" if pinned else "unpinned"
    decision_record(kind=Decision.Kind.LENDING, subject=f"node:{node.name}", reason=f"node-{verb}",
                    message=f"{node} {verb} by {actor}: automation {'leaves it' if pinned else 'may move it'}")
    return node


def group_settings_set(*, group: ResourceGroup, actor, **fields) -> ResourceGroup:
    """Operators edit a group's lending thresholds (fractions, min ≤ expect ≤ max) and switch lending."""
    _require_operator(actor)
    rates = {name: fields.get(name, getattr(group, name)) for name in ("min_rate", "expect_rate", "max_rate")}
    if not 0 <= rates["min_rate"] <= rates["expect_rate"] <= rates["max_rate"] <= 1:
        raise ApplicationError("invalid lending thresholds", fields={"min_rate": [
            "need 0 ≤ min_rate ≤ expect_rate ≤ max_rate ≤ 1, got {min_rate}/{expect_rate}/{max_rate}".format(**rates)]})
    for name, value in fields.items():
        setattr(group, name, value)
    group.save(update_fields=list(fields))
    decision_record(kind=Decision.Kind.LENDING, subject=f"group:{group.name}", reason="thresholds-changed",
                    message=f"{group} lending {'on' if group.lending else 'off'}, thresholds "
                            f"{group.min_rate}/{group.expect_rate}/{group.max_rate} set by {actor}")
    return group


# --- the autoscaler's writes ----------------------------------------------------------------------------


def service_scale(*, service: InferenceService, replicas: int, now: datetime) -> InferenceService:
    """The autoscaler applied a new replica count (the caller records the decision)."""
    service.replicas, service.replicas_changed_at = replicas, now
    service.save(update_fields=["replicas", "replicas_changed_at"])
    return service


def service_recommend(*, service: InferenceService, gpus: float | None, cpu_milli: int | None,
                      memory_mib: int | None) -> InferenceService:
    """Store the vertical recommendation; replica_template uses it for new pods when `service.vertical` is on."""
    service.recommended_gpus_per_replica = None if gpus is None else Decimal(str(gpus))
    service.recommended_cpu_milli, service.recommended_memory_mib = cpu_milli, memory_mib
    service.save(update_fields=["recommended_gpus_per_replica", "recommended_cpu_milli", "recommended_memory_mib"])
    return service


# --- inventory from the cluster ----------------------------------------------------------------------------


def inventory_sync(*, nodes) -> list[str]:
    """Nodes the cluster has (a Kubernetes backend's inventory) join Tidal's, and known ones follow its sizes and
    state. A node of a resource group or GPU model Tidal does not know is left out (and logged): an operator
    creates those first. Returns the names of the nodes added."""
    groups = {g.name: g for g in ResourceGroup.objects.all()}
    models = {m.name: m for m in GPUModel.objects.all()}
    known = {n.name: n for n in Node.objects.all()}
    added, changed = [], []
    for view in nodes:
        node = known.get(view.name)
        fields = {"gpu_count": view.gpu_count, "cpu_milli": view.cpu_milli, "memory_mib": view.memory_mib,
                  "pool": view.pool.value, "state": view.state.value}
        if node is not None:
            if any(getattr(node, k) != v for k, v in fields.items()):
                for k, v in fields.items():
                    setattr(node, k, v)
                changed.append(node)
            continue
        group, model = groups.get(view.resource_group), models.get(view.gpu_model) if view.gpu_model else None
        if group is None or (view.gpu_model and model is None):
            log.warning("node %s left out: unknown resource group %r or GPU model %r",
                                                view.name, view.resource_group, view.gpu_model)
            continue
        Node.objects.create(name=view.name, resource_group=group, gpu_model=model, **fields)
        added.append(view.name)
    Node.objects.bulk_update(changed, ["gpu_count", "cpu_milli", "memory_mib", "pool", "state"])
    return added
