"""The cluster as the acting layer sees it: a protocol every backend implements.

Shaped after Kubernetes so its backend maps one-to-one:
- bind: create the Pod with `spec.nodeName` set (GPU indices/shares go in an annotation
  read by the device plugin);
- evict: the Eviction API (graceful, respects the pod's termination period);
- set_node_state: node labels (`tidal.io/state`, `tidal.io/pool`) + `spec.unschedulable`
  for the *-unnormal states;
- drain_events: what a watch on pods and nodes delivered since the last call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from cluster.types import GpuShare, NodeState, NodeView

class BackendError(Exception):
    """The backend refused an action (unknown pod/node, no room, ...)."""


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    job_id: int | None
    gpu_model: str | None
    gpu_shares: tuple[GpuShare, ...]
    cpu_milli: int
    memory_mib: int
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodView:
    spec: PodSpec
    node: str
    started_at: float


class EventKind(str, Enum):
    POD_STARTED = "pod-started"
    POD_FINISHED = "pod-finished"
    POD_EVICTED = "pod-evicted"
    NODE_STATE_CHANGED = "node-state-changed"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    kind: EventKind
    at: float
    node: str
    pod: str | None = None
    job_id: int | None = None
    detail: str = ""  # eviction reason, or "old->new" for a node state change


class ClusterBackend(Protocol):
    def nodes(self) -> tuple[NodeView, ...]:
        """All nodes with their current usage and pods."""
        ...

    def pods(self) -> tuple[PodView, ...]:
        """All bound pods."""
        ...

    def bind(self, pod: PodSpec, node: str) -> None:
        """Start `pod` on `node` using exactly pod.gpu_shares; BackendError if it does not fit."""
        ...

    def evict(self, pod: str, reason: str) -> None:
        """Evict a bound pod; its resources are freed."""
        ...

    def set_node_state(self, node: str, state: NodeState,
                       labels: Mapping[str, str] | None = None) -> None:
        """Change a node's state and merge `labels` into its labels."""
        ...

    def drain_events(self) -> list[ClusterEvent]:
        """Events since the last call, oldest first."""
        ...
