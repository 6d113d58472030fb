"""The one fit rule of the backends: whether a pod goes on a node as it is used, and which GPUs it gets there.

Both backends refuse a bind with `misfit` (the kubelet would only refuse it after the fact); the simulated cluster's
stand-in for kube-scheduler picks GPUs with `first_fit`. Pure: no framework imports.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

from cluster.backend import PodSpec
from cluster.types import GPU_EPS, GpuShare, NodeState


class NodeUse(Protocol):
    """What the rule reads of a node and its use: a NodeView, or the simulated cluster's live node record (which
    would otherwise build a NodeView for every bind)."""

    name: str
    state: NodeState
    gpu_model: str | None
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    cpu_used: int
    memory_used: int

    def used_shares(self) -> Sequence[float]: ...


def gpu_fits(used: float, share: float) -> bool:
    """A GPU already `used` (0..1) has room for `share` more; never beyond one whole GPU."""
    return used + share <= 1.0 + GPU_EPS


def free_gpus(used: Sequence[float]) -> list[int]:
    """The GPUs nothing uses, lowest index first."""
    return [i for i, u in enumerate(used) if gpu_fits(u, 1.0)]


def first_fit(shares: Iterable[float], used: Sequence[float]) -> tuple[GpuShare, ...] | None:
    """GPUs for these shares on GPUs used as `used`: biggest share first, each on the lowest-index GPU with room that
    no other share of the pod took; None when one has no room."""
    taken: set[int] = set()
    out = []
    for want in sorted(shares, reverse=True):
        i = next((i for i, u in enumerate(used) if i not in taken and gpu_fits(u, want)), None)
        if i is None:
            return None
        taken.add(i)
        out.append(GpuShare(i, want))
    return tuple(sorted(out, key=lambda s: s.index))


def room_for(pod: PodSpec, node: NodeUse) -> bool:
    """The node has the pod's CPU and memory free."""
    return node.cpu_used + pod.cpu_milli <= node.cpu_milli and node.memory_used + pod.memory_mib <= node.memory_mib


def place(pod: PodSpec, node: NodeUse) -> tuple[GpuShare, ...] | None:
    """The GPUs the pod's shares get on `node` by first fit, or None when its CPU, memory or GPUs do not fit."""
    if not room_for(pod, node):
        return None
    if not pod.gpu_shares:
        return ()
    if pod.gpu_model != node.gpu_model:
        return None
    return first_fit((s.share for s in pod.gpu_shares), node.used_shares())


def misfit(pod: PodSpec, node: NodeUse) -> str | None:
    """Why the pod, on exactly the GPUs its shares name, cannot start on `node`; None when it can."""
    if not node.state.normal:
        return f"node {node.name} is {node.state.value}"
    if pod.gpu_shares and pod.gpu_model != node.gpu_model:
        return f"pod {pod.name} wants {pod.gpu_model}, node {node.name} has {node.gpu_model}"
    used = node.used_shares()
    for s in pod.gpu_shares:
        if not 0 <= s.index < node.gpu_count or not 0 < s.share <= 1:
            return f"pod {pod.name}: bad GPU share {s}"
        if not gpu_fits(used[s.index], s.share):
            return f"pod {pod.name}: GPU {s.index} on {node.name} has {1 - used[s.index]:.2f} free, needs {s.share}"
    if not room_for(pod, node):
        return f"pod {pod.name} does not fit CPU/memory on {node.name}"
    return None


def workers_on(gpus: float, cpu_milli: int, memory_mib: int, whole_free: int, cpu_free: int, memory_free: int) -> int:
    """How many workers of a gang's shape (whole GPUs each) one node with this much free room takes; the policy's
    vectorised twin is scheduler.policy.gang.room."""
    need = math.ceil(gpus)
    k = whole_free // need if need else 1 << 30
    if cpu_milli:
        k = min(k, cpu_free // cpu_milli)
    if memory_mib:
        k = min(k, memory_free // memory_mib)
    return max(k, 0)
