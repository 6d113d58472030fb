"""Inference services as ReplicaSets (or, for a replica of several pods, as groups: colocation/groups.py), for both live loops (the lending controller applies every service each tick;
the autoscaler gives a new service its ReplicaSet at once and applies the targets it decides): one replica's pod
template, the resource group a service runs in, and applying it there."""
import logging
from collections.abc import Iterable

from cluster.backend import INFERENCE, KIND_LABEL, RESOURCE_GROUP_LABEL, SERVICE_LABEL, BackendError, ClusterBackend, PodSpec
from cluster.types import GpuShare
from colocation import groups as service_groups
from colocation.models import InferenceService, ResourceGroup
from colocation.policy.group import in_group_unit

log = logging.getLogger(__name__)


def replica_template(service: InferenceService) -> PodSpec:
    """One replica of `service` as a pod template: a fraction of one GPU, or whole GPUs. With vertical scaling on,
    the autoscaler's per-replica recommendation replaces what is set (new pods only: the next rollout)."""
    v = service.vertical
    gpus = float(service.gpus_per_replica) if service.gpu_model_id else 0.0
    if v and service.gpu_model_id and service.recommended_gpus_per_replica is not None:
        gpus = float(service.recommended_gpus_per_replica)
    shares = (GpuShare(0, gpus),) if 0 < gpus <= 1 else tuple(GpuShare(i, 1.0) for i in range(int(gpus)))
    return PodSpec(name=service.name, job_id=None, gpu_model=service.gpu_model.name if shares else None,
                   gpu_shares=shares, cpu_milli=(v and service.recommended_cpu_milli) or service.cpu_milli_per_replica,
                   memory_mib=(v and service.recommended_memory_mib) or service.memory_mib_per_replica,
                   labels={KIND_LABEL: INFERENCE, SERVICE_LABEL: service.name})


def per_replica(service: InferenceService) -> float:
    """What one replica takes of its resource group, in the group's unit: GPUs, or CPU millicores for a CPU-only
    service. A replica of several pods counts whole (docs/concepts/service-groups.md#quotas-and-autoscaling), so
    priority-aware autoscaling gives or takes whole groups."""
    pod = in_group_unit(service.gpus_per_replica, service.cpu_milli_per_replica, gpu=bool(service.gpu_model_id))
    return pod * service.group_size


def groups_of(services: Iterable[InferenceService]) -> dict[str, str]:
    """{service: the resource group of its GPU model ("" when none has it)}."""
    group_of_model = {g.gpu_model_id: g.name for g in ResourceGroup.objects.all()}
    return {s.name: group_of_model.get(s.gpu_model_id, "") for s in services}


def apply(backend: ClusterBackend, service: InferenceService, replicas: int, group: str, now: float) -> None:
    """Run `replicas` of `service` on the online nodes of `group`; BackendError if the cluster refuses. A service
    whose replica is a group of pods has its groups placed and healed by colocation/groups.py instead of a
    ReplicaSet."""
    if service.group_size > 1:
        service_groups.reconcile(backend, service, replicas, group, now)
        return
    backend.apply_replicaset(service.name, replica_template(service), replicas,
                             node_selector={RESOURCE_GROUP_LABEL: group} if group else None)


def apply_services(backend: ClusterBackend, now: float) -> None:
    """Every inference service runs as a ReplicaSet (or as groups) on the online nodes of its GPU model's resource
    group."""
    services = list(InferenceService.objects.select_related("gpu_model", "department"))
    groups = groups_of(services)
    for service in services:
        apply(backend, service, service.replicas, groups[service.name], now)


def ensure_replicasets(backend: ClusterBackend, services: Iterable[InferenceService], groups: dict[str, str]) -> None:
    """A service new since the lending tick last ran gets its ReplicaSet now (with its configured replicas)."""
    existing = {rs.name for rs in backend.replicasets()}
    for service in services:
        if service.name not in existing and service.group_size == 1:
            try:
                backend.apply_replicaset(service.name, replica_template(service), service.replicas,
                                         node_selector={RESOURCE_GROUP_LABEL: groups[service.name]}
                                         if groups[service.name] else None)
            except BackendError as error:
                log.warning("no ReplicaSet for %s: %s", service.name, error)
