"""What the lending policy and the step machine look at, read off any ClusterBackend.

Shared by the live controller (colocation/controller.py) and the co-location simulation (experiments/colocation_sim/), so
both observe the cluster the same way. Pure: no Django; the caller adds what only it knows (pending training
jobs, open transition records, thresholds).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from cluster.backend import (GROUP_LABEL, INFERENCE, REPLACED_BY_LABEL, RESOURCE_GROUP_LABEL, TRAINING, ClusterBackend,
                             PodView)
from cluster.types import NodeView
from colocation.policy import GroupNode, InferencePod, NodeNow, NodePod, PendingPod, PodKind, TrainingPod
from colocation.policy.group import in_group_unit
from scheduler.policy.workload import MILLI, TargetWorkload, node_frag


def group_nodes(backend: ClusterBackend,
                run_s: Mapping[int, float] | None = None) -> dict[str, list[GroupNode]]:
    """Every node as the lending policy sees it, by resource group, with its inference and training pods.
    `run_s`: expected run seconds by job id (a pod's expected end = its start + that; absent: unknown)."""
    pods = {p.spec.name: p for p in backend.pods()}
    # a gang's pods share its job id: taking back one worker's node ends every worker
    gang_size = Counter(p.spec.job_id for p in pods.values() if p.spec.job_id is not None and p.kind != INFERENCE)
    groups: dict[str, list[GroupNode]] = defaultdict(list)
    for node in backend.nodes():
        gpu_unit = node.gpu_model is not None
        inference, training = [], []
        for name in node.pods:
            pod = pods[name]
            if pod.kind == INFERENCE:
                request = in_group_unit(pod.spec.gpus, pod.spec.cpu_milli, gpu=gpu_unit)
                inference.append(InferencePod(name, request, pod.detached_from is not None))
            elif pod.kind == TRAINING or pod.kind is None:
                job = pod.spec.job_id
                run = run_s.get(job) if run_s is not None and job is not None else None
                training.append(TrainingPod(name, job, pod.started_at, gang_size[job] if job is not None else 1,
                                            None if run is None else pod.started_at + run))
        groups[node.resource_group].append(GroupNode.of(node, inference, training))
    return groups


def pending_online(backend: ClusterBackend, group_of_model: dict[str | None, str]) -> dict[str, list[PendingPod]]:
    """Inference pods no node could take, by the resource group they asked for (node selector, else GPU model)."""
    pending: dict[str, list[PendingPod]] = defaultdict(list)
    for pod in backend.pending_pods():
        spec = pod.spec
        group = spec.labels.get(RESOURCE_GROUP_LABEL) or group_of_model.get(spec.gpu_model)
        if group is not None:
            request = in_group_unit(spec.gpus, spec.cpu_milli, gpu=bool(spec.gpu_model))
            pending[group].append(PendingPod(spec.name, request, pod.replaces is not None))
    return pending


@dataclass(frozen=True)
class PodIndex:
    """One tick's pods, looked up by name (bound and pending)."""

    bound: dict[str, PodView]
    pending: frozenset[str]

    @classmethod
    def of(cls, backend: ClusterBackend) -> PodIndex:
        return cls({p.spec.name: p for p in backend.pods()}, frozenset(p.spec.name for p in backend.pending_pods()))


def node_now(node: NodeView, pods: PodIndex) -> NodeNow:
    """The node and its pods as the step machine needs them: which inference pods are detached, and whether
    each detached pod's replacement is ready (a replacement that is gone and not pending counts as ready:
    nothing is left to wait for). A service group's pod counts as detached with its replacement not ready: its group
    moves whole, create-before-delete (colocation/policy/servicegroups.py), and the conversion waits until it is gone."""
    seen = []
    for name in node.pods:
        pod = pods.bound.get(name)
        if pod is None:
            continue
        if pod.kind != INFERENCE:
            seen.append(NodePod(name, PodKind.TRAINING, terminating=pod.terminating))
            continue
        if GROUP_LABEL in pod.spec.labels:
            seen.append(NodePod(name, PodKind.INFERENCE, detached=True, terminating=pod.terminating))
            continue
        replacement = pod.spec.labels.get(REPLACED_BY_LABEL)
        ready = False
        if replacement is not None:
            other = pods.bound.get(replacement)
            ready = other.ready if other is not None else replacement not in pods.pending
        seen.append(NodePod(name, PodKind.INFERENCE, detached=pod.detached_from is not None, replacement_ready=ready,
                            terminating=pod.terminating))
    return NodeNow(node.name, node.state, node.pool, tuple(seen))


def group_allocation(nodes: tuple[NodeView, ...],
                     workload: TargetWorkload | None = None) -> dict[str, dict[str, float]]:
    """Capacity and what is bound, per resource group: GPUs, CPU cores and memory bytes (for /metrics); with the
    learned target workload, also the idle GPUs it could not use (FGD's fragmentation,
    docs/concepts/placement.md#the-clusters-typical-jobs)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for node in nodes:
        group = out[node.resource_group]
        group["gpu_capacity"] += node.gpu_count
        group["gpu_allocated"] += sum(node.gpu_used)
        if workload is not None and node.gpu_count:
            left = [round((1.0 - used) * MILLI) for used in node.used_shares()]
            group["gpu_fragmented"] += node_frag(workload, node.cpu_milli - node.cpu_used, left,
                                                 node.gpu_model) / MILLI
        group["cpu_capacity"] += node.cpu_milli / 1000
        group["cpu_allocated"] += node.cpu_used / 1000
        group["memory_capacity"] += node.memory_mib * 2**20
        group["memory_allocated"] += node.memory_used * 2**20
    return {name: dict(figures) for name, figures in out.items()}
