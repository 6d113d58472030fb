"""Acting for services whose replica is a group of pods (docs/concepts/service-groups.md): one tick of one service
observes its groups on the cluster, asks the pure plan (colocation/policy/servicegroups.py), binds each new group
whole (its headless Service first, every pod or none), removes broken, extra and rolled groups, and records what it
did and why. The same code on both backends: it binds and evicts pods like the scheduler does a gang."""
from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from datetime import timedelta

from django.db import transaction
from django.db.models import F

from cluster.backend import (
    GROUP_LABEL, INFERENCE, KIND_LABEL, REVISION_LABEL, SERVICE_LABEL, STARTUP_LABEL, WORKER_LABEL, BackendError,
    ClusterBackend, PodSpec, PodView,
)
from cluster.clock import utc
from cluster.wholebind import PodSet, bind_whole, unbind
from colocation.models import InferenceService, ServiceGroup
from colocation.policy import servicegroups as sg
from core.decisions import decision_record
from core.models import Decision

log = logging.getLogger(__name__)
MAX_ACCOUNTED_S = 120.0  # a longer gap between ticks (the loop was down) is not charged as not-ready time


def spec_of(service: InferenceService, resource_group: str) -> sg.GroupSpec:
    gpus = float(service.gpus_per_replica) if service.gpu_model_id else 0.0
    if service.vertical and service.gpu_model_id and service.recommended_gpus_per_replica is not None:
        gpus = float(service.recommended_gpus_per_replica)
    cpu = (service.vertical and service.recommended_cpu_milli) or service.cpu_milli_per_replica
    memory = (service.vertical and service.recommended_memory_mib) or service.memory_mib_per_replica
    model = service.gpu_model.name if service.gpu_model_id else None
    revision = hashlib.sha256(repr((model, gpus, cpu, memory, service.group_size)).encode()).hexdigest()[:10]
    return sg.GroupSpec(service.name, service.group_size, model, gpus, cpu, memory, resource_group, revision,
                        service.exclusive_topology, service.max_surge, service.max_unavailable,
                        sg.RestartPolicy(service.group_restart_policy))


def group_pods(pods: tuple[PodView, ...], service: str) -> list[tuple[int, str, sg.GroupPod]]:
    out = []
    for p in pods:
        labels = p.spec.labels
        if labels.get(SERVICE_LABEL) == service and GROUP_LABEL in labels:
            out.append((int(labels[GROUP_LABEL]), labels.get(REVISION_LABEL, ""),
                        sg.GroupPod(p.spec.name, int(labels.get(WORKER_LABEL, "0")), p.node, p.ready, p.terminating,
                                    p.restarts)))
    return out


def groups_on_nodes(pods: tuple[PodView, ...], but: str) -> dict[str, set[tuple[str, int]]]:
    """node -> the groups of services other than `but` with a pod there."""
    out: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for p in pods:
        labels = p.spec.labels
        if GROUP_LABEL in labels and labels.get(SERVICE_LABEL) != but:
            out[p.node].add((labels.get(SERVICE_LABEL, ""), int(labels[GROUP_LABEL])))
    return out


def ready_groups(pods: tuple[PodView, ...], service: InferenceService) -> int:
    """Groups of `service` with every pod ready: its serving replicas."""
    return sum(1 for g in sg.observe(group_pods(pods, service.name)).values() if g.ready(service.group_size))


def reconcile(backend: ClusterBackend, service: InferenceService, desired: int, resource_group: str,
              now: float) -> list[sg.Action]:
    """One tick of `service`'s groups: `desired` of them, on the online nodes of `resource_group`."""
    spec = spec_of(service, resource_group)
    pods = backend.pods()
    observed = sg.observe(group_pods(pods, service.name))
    stored = {g.index: g for g in ServiceGroup.objects.filter(service=service)}
    _account(service, spec, stored.values(), now)
    memory = {i: sg.GroupMemory(g.restarts, g.backoff_until.timestamp() if g.backoff_until else 0.0, g.pod_restarts)
              for i, g in stored.items()}
    actions = sg.plan(spec, desired, observed, backend.nodes(), memory, now, groups_on_nodes(pods, service.name))
    for action in actions:
        if isinstance(action, sg.Place):
            _bind_group(backend, service, spec, action)
        elif isinstance(action, sg.Remove):
            _remove_group(backend, service, action, now)
        elif isinstance(action, sg.KeptInPlace):
            _kept_in_place(service, action)
        else:
            _note(service, spec, action)
    _store(service, spec, sg.observe(group_pods(backend.pods(), service.name)), desired, now)
    return actions


def _pod_specs(service: InferenceService, spec: sg.GroupSpec, place: sg.Place) -> list[tuple[PodSpec, str]]:
    out = []
    for worker, (node, shares) in enumerate(zip(place.nodes, place.shares, strict=True)):
        labels = {KIND_LABEL: INFERENCE, SERVICE_LABEL: service.name, GROUP_LABEL: str(place.index),
                  WORKER_LABEL: str(worker), REVISION_LABEL: spec.revision, STARTUP_LABEL: str(service.startup_s)}
        out.append((PodSpec(name=sg.pod_name(service.name, place.index, worker), job_id=None,
                            gpu_model=spec.gpu_model if shares else None, gpu_shares=shares, cpu_milli=spec.cpu_milli,
                            memory_mib=spec.memory_mib, labels=labels,
                            env=sg.lws_env(service.name, place.index, worker, spec.size),
                            subdomain=sg.group_service(service.name, place.index)), node))
    return out


def _bind_group(backend: ClusterBackend, service: InferenceService, spec: sg.GroupSpec, place: sg.Place) -> bool:
    """Every pod of the group or none (cluster/wholebind.py): the headless Service first, then the pods in one batch;
    a refusal removes what was bound (the next tick places the group again)."""
    podset = PodSet(tuple(_pod_specs(service, spec, place)), sg.group_service(service.name, place.index),
                    {SERVICE_LABEL: service.name, GROUP_LABEL: str(place.index)})
    (refused,) = bind_whole(backend, [podset])
    if refused is not None:
        unbind(backend, podset, refused, f"group {place.index} of {service.name} could not start whole")
        first = refused.first(podset)
        what = "its headless Service" if first is None else f"pod {first[1].name} (worker {first[0]} of {spec.size}) " \
                                                             f"on {first[2]}"
        error = refused.service_error if first is None else first[3]
        also = f" and {len(refused.pods) - 1} more" if len(refused.pods) > 1 else ""
        _record(service, place.index, sg.Reason.BIND_REFUSED.value,
                f"group {place.index} of {service.name}: the cluster refused {what} ({error}){also}; a group starts "
                f"whole, so the {len(refused.bound)} pods already bound were removed; it is placed again on the next "
                f"tick", {"nodes": list(place.nodes), "removed": list(refused.bound)})
        return False
    _record(service, place.index, place.reason.value, place.message, {"nodes": list(place.nodes)})
    _acted(service, place.index)
    return True


def _evict(backend: ClusterBackend, pod: str, reason: str) -> None:
    try:
        backend.evict(pod, reason)
    except BackendError as error:  # gone already
        log.info("%s: %s", pod, error)


def _remove_group(backend: ClusterBackend, service: InferenceService, remove: sg.Remove, now: float) -> None:
    for name in remove.pods:
        _evict(backend, name, remove.message)
    backend.delete_service(sg.group_service(service.name, remove.index))
    ServiceGroup.objects.filter(service=service, index=remove.index).update(pod_restarts={})  # its new pods start at 0
    data: dict = {"pods": list(remove.pods)}
    if remove.failed:
        with transaction.atomic():
            row, _ = ServiceGroup.objects.select_for_update().get_or_create(service=service, index=remove.index)
            row.restarts += 1
            wait = sg.backoff_after(row.restarts)
            row.backoff_until, row.ready, row.ready_since = utc(now + wait), False, None
            row.save()
        data |= {"restarts": row.restarts, "backoff_s": wait}
        message = f"{remove.message}; back-off {wait:.0f} s before it starts again"
    else:
        message = remove.message
    _record(service, remove.index, remove.reason.value, message, data)
    _acted(service, remove.index)


def _kept_in_place(service: InferenceService, kept: sg.KeptInPlace) -> None:
    """Restart policy None: the restart is recorded and remembered, so the next tick does not see it anew."""
    with transaction.atomic():
        row, _ = ServiceGroup.objects.select_for_update().get_or_create(service=service, index=kept.index)
        row.pod_restarts = {**row.pod_restarts, kept.pod: kept.restarts}
        row.save(update_fields=["pod_restarts", "updated_at"])
    _record(service, kept.index, kept.reason.value, kept.message, {"pod": kept.pod, "restarts": kept.restarts})


def _note(service: InferenceService, spec: sg.GroupSpec, note: sg.Note) -> None:
    """A reason to wait, recorded when it is new for the group (or, for a rollout, once per revision)."""
    if note.index is None:
        if not Decision.objects.filter(kind=Decision.Kind.SCALING, subject=f"service:{service.name}",
                                       reason=note.reason.value, data__revision=spec.revision).exists():
            _record(service, None, note.reason.value, note.message, {"revision": spec.revision})
        return
    row, _ = ServiceGroup.objects.get_or_create(service=service, index=note.index)
    if row.note != note.reason.value:
        ServiceGroup.objects.filter(pk=row.pk).update(note=note.reason.value)
        _record(service, note.index, note.reason.value, note.message, {})


def _record(service: InferenceService, index: int | None, reason: str, message: str, data: dict) -> None:
    decision_record(kind=Decision.Kind.SCALING, subject=f"service:{service.name}", reason=reason, message=message,
                    department=service.department, data={**data, "group": index})


def _acted(service: InferenceService, index: int) -> None:
    """The group moved on: the next reason to wait is news again."""
    ServiceGroup.objects.filter(service=service, index=index).update(note="")


def _account(service: InferenceService, spec: sg.GroupSpec, stored, now: float) -> None:
    """GPU-seconds held by groups not fully ready, since the last tick, as that tick left them (placed, some pod still
    starting): an upper bound by at most one tick."""
    row = InferenceService.objects.filter(pk=service.pk)
    observed_at = row.values_list("groups_observed_at", flat=True).first()  # the row's: `service` may be stale
    last = observed_at.timestamp() if observed_at else now
    starting = sum(len(g.nodes) for g in stored if g.nodes and not g.ready) * spec.gpus
    held = starting * min(max(now - last, 0.0), MAX_ACCOUNTED_S)
    row.update(unready_gpu_seconds=F("unready_gpu_seconds") + held, groups_observed_at=utc(now))


def _store(service: InferenceService, spec: sg.GroupSpec, observed: dict[int, sg.ObservedGroup], desired: int,
           now: float) -> None:
    """Each group as seen now, for the service page and /metrics; a group that is gone and not wanted is forgotten."""
    rows = {g.index: g for g in ServiceGroup.objects.filter(service=service)}
    for index, g in observed.items():
        row = rows.pop(index, None) or ServiceGroup(service=service, index=index)
        ready = g.ready(spec.size)
        row.revision, row.nodes, row.leader = g.revision, list(g.nodes), sg.leader_name(service.name, index)
        row.pods_ready = sum(1 for p in g.pods if p.ready and not p.terminating)
        if ready and not row.ready:
            row.ready_since = utc(now)
        row.ready = ready
        if ready and row.ready_since and now - row.ready_since.timestamp() >= sg.BACKOFF_RESET_S:
            row.restarts, row.backoff_until = 0, None
        row.save()
    standing_in = sum(1 for g in observed.values() if not g.going) >= desired  # a hole filled by a spare group
    for index, row in rows.items():  # no pods now
        if index >= desired or standing_in:
            row.delete()
        elif row.nodes or row.ready:
            row.nodes, row.ready, row.pods_ready, row.leader = [], False, 0, ""
            row.save()
