"""The cluster as the acting layer sees it: a protocol every backend implements.

Shaped after Kubernetes so its backend maps one-to-one:
- bind: create the Pod with `spec.nodeName` set (GPU indices/shares go in an annotation
  read by the device plugin);
- evict: the Eviction API (graceful, respects the pod's termination period);
- set_node_state: node labels (`tidal.io/state`, `tidal.io/pool`) + `spec.unschedulable`
  for the *-unnormal states;
- drain_events: what a watch on pods and nodes delivered since the last call;
- apply_replicaset: create or scale an apps/v1 ReplicaSet of inference pods (`spec.replicas`,
  pod template, `nodeSelector`); the backend (the ReplicaSet controller and kube-scheduler in
  Kubernetes) creates, places and deletes its pods; pods it cannot place stay Pending;
- pod_logs / follow_pod_logs: the pod's log (`GET .../pods/{name}/log` with tailLines, sinceSeconds, follow); a
  pod that ended stays readable until it is cleaned up (the kubelet keeps a terminated container's log);
- detach_pod: relabel a pod so its ReplicaSet's selector no longer matches it: the ReplicaSet
  creates a replacement elsewhere while the old pod keeps serving (create-before-delete, part 1;
  part 2 is `evict` once the replacement is ready).

Pod labels: `tidal.io/kind` = inference|training; an inference pod owned by a ReplicaSet carries
`tidal.io/replicaset`; a detached one carries `tidal.io/detached-from` and `tidal.io/replaced-by`
(the replacement's name, which carries `tidal.io/replaces`) instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from cluster.types import GpuShare, NodeState, NodeView

KIND_LABEL = "tidal.io/kind"
INFERENCE = "inference"
TRAINING = "training"
REPLICASET_LABEL = "tidal.io/replicaset"
DETACHED_FROM_LABEL = "tidal.io/detached-from"
REPLACED_BY_LABEL = "tidal.io/replaced-by"
REPLACES_LABEL = "tidal.io/replaces"
RESOURCE_GROUP_LABEL = "tidal.io/resource-group"  # every node matches it in a node selector
# Who a pod works for; the metrics exporter turns them into kube_pod_labels, the profile pipeline keys by them.
JOB_LABEL = "tidal.io/job"  # TrainingJob id
RUN_LABEL = "tidal.io/run"  # JobRun attempt
TASK_LABEL = "tidal.io/task"  # TrainingJob task_key (all runs of the same job)
SERVICE_LABEL = "tidal.io/service"  # InferenceService name
# How long the demo's emulated workload runs (the simulated cluster, and kwok's stage on the control plane of
# platform/stack.sh, end the pod after it); a real cluster's containers ignore it.
RUNTIME_LABEL = "tidal.io/sim-runtime-s"
WORKER_LABEL = "tidal.io/worker"  # a gang worker's rank (0 ..); its pods also share JOB_LABEL and RUN_LABEL
# A service group's pod (docs/concepts/service-groups.md): its group's index (LeaderWorkerSet's group-index; the worker
# index is WORKER_LABEL, 0 the leader), the revision of the template it was made from, and, for the demo's emulated
# start-up (the simulated cluster makes it ready after this many seconds), its start-up time.
GROUP_LABEL = "tidal.io/group"
REVISION_LABEL = "tidal.io/revision"
STARTUP_LABEL = "tidal.io/sim-startup-s"
FRAMEWORK_LABEL = "tidal.io/framework"  # a training pod's framework ("pytorch-2.1"): the simulated log's banner


def kube_state_label(name: str) -> str:
    """kube-state-metrics' name for a pod label in `kube_pod_labels`: tidal.io/task -> label_tidal_io_task."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


def label_value(text: str) -> str:
    """`text` as a valid label value: at most 63 of [A-Za-z0-9_.-], beginning and ending with an alphanumeric."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:63].strip("-_.")


class BackendError(Exception):
    """The backend refused an action (unknown pod/node, no room, ...)."""


class BackendBusy(BackendError):
    """Not now: e.g. an eviction a PodDisruptionBudget refuses (HTTP 429). Retry on a later tick."""


class BackendUnavailable(Exception):
    """The cluster could not be asked (unreachable, 5xx, timeout): nothing is known to have happened. Not a
    BackendError, so no caller mistakes an outage for a refusal; the tick stops and is retried with backoff."""


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    job_id: int | None
    gpu_model: str | None
    gpu_shares: tuple[GpuShare, ...]
    cpu_milli: int
    memory_mib: int
    labels: Mapping[str, str] = field(default_factory=dict)
    image: str = ""  # container image and shell command (a backend that runs containers needs them)
    command: str = ""
    env: Mapping[str, str] = field(default_factory=dict)  # a gang worker's rendezvous environment
    subdomain: str = ""  # a gang's headless Service: the pod is reachable as <name>.<subdomain>

    @property
    def gpus(self) -> float:
        return sum(s.share for s in self.gpu_shares)


@dataclass(frozen=True, slots=True)
class PodView:
    spec: PodSpec
    node: str
    started_at: float  # when it was bound
    ready: bool = True  # an inference pod is ready `startup_s` after it is bound; training at once
    terminating: bool = False  # deletion requested, still on its node (Kubernetes' graceful termination)
    restarts: int = 0  # its containers restarted in place (the kubelet's restartCount, summed)

    @property
    def kind(self) -> str | None:
        return self.spec.labels.get(KIND_LABEL)

    @property
    def replicaset(self) -> str | None:
        """Owning ReplicaSet; None once detached (see `detached_from`)."""
        return self.spec.labels.get(REPLICASET_LABEL)

    @property
    def detached_from(self) -> str | None:
        return self.spec.labels.get(DETACHED_FROM_LABEL)


def serving_pods(pods: Iterable[PodView]) -> dict[str, list[PodView]]:
    """The pods serving each ReplicaSet's traffic: its ready pods, plus detached ones still standing in for a
    replacement that is not ready yet (create-before-delete during a lend). The autoscaler counts them as the
    service's replicas; the simulated cluster's exporter shares the service's requests among them."""
    pods = list(pods)
    ready = {p.spec.name for p in pods if p.ready}
    out: dict[str, list[PodView]] = {}
    for pod in pods:
        owner = pod.replicaset or pod.detached_from
        if owner is None or not pod.ready or pod.terminating:  # a terminating pod no longer serves (a scale-in)
            continue
        if pod.replicaset is None and pod.spec.labels.get(REPLACED_BY_LABEL, "") in ready:
            continue  # its replacement serves now
        out.setdefault(owner, []).append(pod)
    return out


@dataclass(frozen=True, slots=True)
class PendingPodView:
    """A ReplicaSet pod no node could take yet (its requests are in `spec`; GPU indices are a shape)."""

    spec: PodSpec
    replicaset: str
    since: float

    @property
    def replaces(self) -> str | None:
        """Set when the pod was created to replace a detached one (create-before-delete)."""
        return self.spec.labels.get(REPLACES_LABEL)


@dataclass(frozen=True, slots=True)
class ReplicaSetView:
    name: str
    template: PodSpec  # gpu_shares give the shape (shares per GPU); indices are chosen at placement
    replicas: int  # desired
    pods: tuple[str, ...]  # bound pods it owns, oldest first
    ready: int  # of those, ready
    pending: int  # pods it could not place yet
    node_selector: Mapping[str, str] = field(default_factory=dict)


class EventKind(str, Enum):
    POD_STARTED = "pod-started"
    POD_FINISHED = "pod-finished"
    POD_FAILED = "pod-failed"  # its container failed (not an eviction)
    POD_EVICTED = "pod-evicted"
    POD_CREATED = "pod-created"  # a ReplicaSet pod was bound to a node
    POD_READY = "pod-ready"
    POD_DELETED = "pod-deleted"  # a ReplicaSet scaled down
    NODE_STATE_CHANGED = "node-state-changed"


@dataclass(frozen=True, slots=True)
class ClusterEvent:
    kind: EventKind
    at: float
    node: str
    pod: str | None = None
    job_id: int | None = None
    detail: str = ""  # eviction reason, or "old->new" for a node state change


def bind_in_order(bind: Callable[[PodSpec, str], None], pods: Sequence[tuple[PodSpec, str]]) -> dict[str, BackendError]:
    """`bind_many` for a backend whose binds are cheap: `bind` each pod in order, the refusals by pod name."""
    refused = {}
    for pod, node in pods:
        try:
            bind(pod, node)
        except BackendError as error:
            refused[pod.name] = error
    return refused


class ClusterBackend(Protocol):
    def nodes(self) -> tuple[NodeView, ...]:
        """All nodes with their current usage and pods."""
        ...

    def pods(self) -> tuple[PodView, ...]:
        """All bound pods (with `ready` and labels)."""
        ...

    def pending_pods(self) -> tuple[PendingPodView, ...]:
        """ReplicaSet pods waiting for a node, oldest first."""
        ...

    def apply_replicaset(self, name: str, template: PodSpec, replicas: int, *,
                         node_selector: Mapping[str, str] | None = None) -> None:
        """Create the ReplicaSet or set its replica count (a changed template applies to new pods)."""
        ...

    def replicasets(self) -> tuple[ReplicaSetView, ...]:
        ...

    def replicaset(self, name: str) -> ReplicaSetView:
        """One ReplicaSet; BackendError when it does not exist."""
        ...

    def detach_pod(self, pod: str) -> str:
        """Take a bound pod out of its ReplicaSet; returns the name of the replacement it gets
        (bound or pending). The old pod keeps running until evicted."""
        ...

    def bind(self, pod: PodSpec, node: str) -> None:
        """Start `pod` on `node` using exactly pod.gpu_shares; BackendError if it does not fit."""
        ...

    def bind_many(self, pods: Sequence[tuple[PodSpec, str]]) -> dict[str, BackendError]:
        """Bind each pod as `bind` does, in order (a pod sees the room the ones before it took): the refusals by pod
        name; every other pod is bound. BackendUnavailable when one could not be asked for (the others answered)."""
        ...

    def evict(self, pod: str, reason: str) -> None:
        """Evict a bound pod; its resources are freed once it is gone (at once, or after graceful termination, when
        it shows as `terminating` meanwhile). A pod still owned by a ReplicaSet is recreated by it; a detached one is
        simply gone (create-before-delete, part 2). BackendBusy when a disruption budget refuses it for now."""
        ...

    def set_node_state(self, node: str, state: NodeState,
                       labels: Mapping[str, str] | None = None) -> None:
        """Change a node's state and merge `labels` into its labels."""
        ...

    def drain_events(self) -> list[ClusterEvent]:
        """Events since the last call, oldest first."""
        ...

    def apply_headless_service(self, name: str, selector: Mapping[str, str]) -> None:
        """Create (or keep) a headless Service selecting a gang's pods, so each worker has a stable DNS name
        `<pod>.<name>`; pods bound with `subdomain=name` get it."""
        ...

    def delete_service(self, name: str) -> None:
        """Remove a gang's headless Service; nothing when it does not exist."""
        ...

    def pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None) -> str:
        """The pod's log as text (newline-terminated lines): the lines of the last `since` seconds, the last `tail`
        of those; a pod that ended is readable until it is cleaned up. BackendError when the pod is unknown (or
        gone), BackendUnavailable when the cluster cannot be asked."""
        ...

    def follow_pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None,
                        poll_s: float = 1.0) -> Iterator[str]:
        """The same lines, then each new line as it is written (without its newline), until the pod ends; close
        the iterator to stop early. Errors as pod_logs (raised by the first next())."""
        ...
