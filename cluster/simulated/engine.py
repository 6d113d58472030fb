"""In-process simulated cluster: the ClusterBackend used by the demo, tests and trace replay.

Deterministic: pods finish in (end time, bind order); nothing depends on wall time.
GPUs are shared by fractional pods, never beyond 1.0 per GPU.

Inference runs as ReplicaSets, shaped after Kubernetes: `apply_replicaset` creates or scales one;
its pods are placed first fit (node insertion order, lowest GPU index) on online-normal nodes
matching the node selector, or stay pending and are retried on `advance()` (and when a node turns
online-normal). A new pod is ready `startup_s` after it is bound. Scaling down deletes pending pods
first, then not-ready ones, then the newest. `detach_pod` relabels a pod out of its ReplicaSet,
which creates a replacement at once; the old pod runs until `evict`ed.

Training pods keep what they were bound with (a gang worker's rendezvous environment and Service subdomain, in
`PodView.spec`), and gangs' headless Services are kept by name with their selectors.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cluster.backend import (DETACHED_FROM_LABEL, INFERENCE, KIND_LABEL, REPLACED_BY_LABEL, REPLACES_LABEL,
                             REPLICASET_LABEL, RESOURCE_GROUP_LABEL, STARTUP_LABEL, TRAINING, BackendError, ClusterEvent, EventKind,
                             PendingPodView, PodSpec, PodView, ReplicaSetView, bind_in_order)
from cluster.clock import Clock
from cluster.fit import misfit, place
from cluster.simulated.podlog import EVICTED, SUCCEEDED, PodLogSource, pod_log_count, pod_log_lines, pod_log_text, \
    source_of
from cluster.types import GpuShare, NodeState, NodeView

DEFAULT_STARTUP_S = 30.0
# An ended training pod's log stays readable (as a kubelet keeps a terminated container's) for ENDED_KEEP_S of the
# cluster's clock, for at most ENDED_KEPT pods: long enough for the loop to record its end and archive its log, and
# small in the pickle the demo saves every tick.
ENDED_KEPT = 200
ENDED_KEEP_S = 600.0

Duration = Callable[[PodSpec], "float | None"]


def run_forever(pod: PodSpec) -> float | None:
    return None


@dataclass(slots=True)
class _Node:
    view: NodeView  # static part; usage fields are filled in by snapshot()
    gpu_used: list[float]
    cpu_used: int = 0
    memory_used: int = 0
    pods: dict[str, None] = field(default_factory=dict)  # insertion-ordered set
    cached: NodeView | None = None

    def snapshot(self) -> NodeView:
        if self.cached is None:
            self.cached = replace(self.view, gpu_used=tuple(self.gpu_used), cpu_used=self.cpu_used,
                                  memory_used=self.memory_used, pods=tuple(self.pods))
        return self.cached

    # What cluster.fit reads (fit.NodeUse), straight from the record: no snapshot per bind.
    name = property(lambda self: self.view.name)
    state = property(lambda self: self.view.state)
    gpu_model = property(lambda self: self.view.gpu_model)
    gpu_count = property(lambda self: self.view.gpu_count)
    cpu_milli = property(lambda self: self.view.cpu_milli)
    memory_mib = property(lambda self: self.view.memory_mib)

    def used_shares(self) -> list[float]:
        return self.gpu_used


@dataclass(frozen=True, slots=True)
class _Pod:
    view: PodView
    seq: int  # identifies this binding in the finish heap (a name may be bound again)


@dataclass(frozen=True, slots=True)
class _Ended:
    """A training pod that ended: its log stays readable, with its last lines, for a while (ENDED_KEEP_S)."""

    view: PodView
    at: float
    end: str  # podlog.SUCCEEDED | EVICTED
    reason: str = ""


@dataclass(slots=True)
class _ReplicaSet:
    name: str
    template: PodSpec
    replicas: int
    node_selector: dict[str, str]
    startup_s: float
    created: int = 0  # pods created so far (names are <rs>-<n>)
    pods: dict[str, None] = field(default_factory=dict)  # bound pods it owns, in creation order
    pending: dict[str, PendingPodView] = field(default_factory=dict)


class SimulatedCluster:
    """ClusterBackend over in-memory nodes; `advance()` completes pods whose run time elapsed."""

    def __init__(self, nodes: Iterable[NodeView], clock: Clock, duration: Duration = run_forever,
                 startup_s: float = DEFAULT_STARTUP_S) -> None:
        self._clock = clock
        self._duration = duration
        self._nodes = {n.name: _Node(n, [0.0] * n.gpu_count) for n in nodes}
        self._pods: dict[str, _Pod] = {}
        self._finish: list[tuple[float, int, str]] = []
        self._events: list[ClusterEvent] = []
        self._seq = 0
        self.startup_s = startup_s
        self._replicasets: dict[str, _ReplicaSet] = {}
        self._ready_heap: list[tuple[float, int, str]] = []
        self._services: dict[str, dict[str, str]] = {}  # gangs' headless Services: name -> pod selector

    # -- ClusterBackend ------------------------------------------------------------
    def nodes(self) -> tuple[NodeView, ...]:
        # Kept incrementally: a replay asks for all nodes every cycle and changes only a few between.
        views = self.__dict__.get("_views")
        if views is None or len(views) != len(self._nodes):  # first call (or an older pickle)
            views = self._views = [n.snapshot() for n in self._nodes.values()]
            self._index = {name: i for i, name in enumerate(self._nodes)}
            self._dirty = set()
        for name in self._dirty:
            views[self._index[name]] = self._nodes[name].snapshot()
        self._dirty.clear()
        return tuple(views)

    def pods(self) -> tuple[PodView, ...]:
        self._promote_ready()
        return tuple(p.view for p in self._pods.values())

    def pod(self, name: str) -> PodView | None:
        """One bound pod, or None."""
        self._promote_ready()
        record = self._pods.get(name)
        return record.view if record else None

    def bind(self, pod: PodSpec, node: str) -> None:
        """Bind a training pod (labelled `tidal.io/kind=training` unless it says otherwise): ready at once; an
        inference pod (a service group's) is ready after its STARTUP_LABEL seconds (the cluster's start-up time
        without one)."""
        if KIND_LABEL not in pod.labels:
            pod = replace(pod, labels={**pod.labels, KIND_LABEL: TRAINING})
        target = self._node(node)
        if pod.name in self._pods:
            raise BackendError(f"pod {pod.name} is already bound")
        why = misfit(pod, target)
        if why:
            raise BackendError(why)
        ready_at = None
        if pod.labels.get(KIND_LABEL) == INFERENCE:
            ready_at = self._clock.now() + float(pod.labels.get(STARTUP_LABEL, self.startup_s))
        self._bind(pod, target, ready_at=ready_at)
        self._emit(EventKind.POD_STARTED, self._clock.now(), node, pod)

    def bind_many(self, pods: Sequence[tuple[PodSpec, str]]) -> dict[str, BackendError]:
        return bind_in_order(self.bind, pods)

    def evict(self, pod: str, reason: str) -> None:
        record = self._pods.get(pod)
        if record is None:
            raise BackendError(f"pod {pod} is not bound")
        self._release(record.view)
        self._ended_pod(record.view, self._clock.now(), EVICTED, reason)
        self._emit(EventKind.POD_EVICTED, self._clock.now(), record.view.node, record.view.spec, reason)
        rs = self._replicasets.get(record.view.replicaset or "")
        if rs is not None:  # still owned: its ReplicaSet recreates it, as in Kubernetes
            rs.pods.pop(pod, None)
            self._reconcile(rs)

    def set_node_state(self, node: str, state: NodeState,
                       labels: Mapping[str, str] | None = None) -> None:
        target = self._node(node)
        old = target.view.state
        target.view = replace(target.view, state=state, labels={**target.view.labels, **(labels or {})})
        self._changed(target)
        if old is not state:
            self._events.append(ClusterEvent(EventKind.NODE_STATE_CHANGED, self._clock.now(), node,
                                             detail=f"{old.value}->{state.value}"))
            if state is NodeState.ONLINE_NORMAL:
                self._place_pending()  # the scheduler binds waiting pods as soon as a node opens

    # -- inference: ReplicaSets ------------------------------------------------------
    def apply_replicaset(self, name: str, template: PodSpec, replicas: int, *,
                         node_selector: Mapping[str, str] | None = None, startup_s: float | None = None) -> None:
        if replicas < 0:
            raise BackendError(f"replicaset {name}: replicas must be >= 0, got {replicas}")
        for s in template.gpu_shares:
            if not 0 < s.share <= 1:
                raise BackendError(f"replicaset {name}: bad GPU share {s}")
        rs = self._replicasets.get(name)
        if rs is None:
            rs = self._replicasets[name] = _ReplicaSet(
                name, template, replicas, dict(node_selector or {}),
                self.startup_s if startup_s is None else startup_s)
        else:
            rs.template, rs.replicas = template, replicas
            if node_selector is not None:
                rs.node_selector = dict(node_selector)
            if startup_s is not None:
                rs.startup_s = startup_s
        self._reconcile(rs)

    def replicasets(self) -> tuple[ReplicaSetView, ...]:
        self._promote_ready()
        return tuple(self._rs_view(rs) for rs in self._replicasets.values())

    def replicaset(self, name: str) -> ReplicaSetView:
        self._promote_ready()
        try:
            return self._rs_view(self._replicasets[name])
        except KeyError:
            raise BackendError(f"unknown replicaset {name}") from None

    def pending_pods(self) -> tuple[PendingPodView, ...]:
        out = [p for rs in self._replicasets.values() for p in rs.pending.values()]
        return tuple(sorted(out, key=lambda p: p.since))  # stable: creation order within a time

    def detach_pod(self, pod: str) -> str:
        record = self._pods.get(pod)
        if record is None:
            raise BackendError(f"pod {pod} is not bound")
        rs = self._replicasets.get(record.view.replicaset or "")
        if rs is None:
            raise BackendError(f"pod {pod} belongs to no replicaset (already detached?)")
        rs.pods.pop(pod, None)
        replacement = self._create(rs, replaces=pod)
        labels = {k: v for k, v in record.view.spec.labels.items() if k != REPLICASET_LABEL}
        labels.update({DETACHED_FROM_LABEL: rs.name, REPLACED_BY_LABEL: replacement})
        view = replace(record.view, spec=replace(record.view.spec, labels=labels))
        self._pods[pod] = _Pod(view, record.seq)
        self._reconcile(rs)  # normally a no-op: the replacement restored the count
        return replacement

    def _rs_view(self, rs: _ReplicaSet) -> ReplicaSetView:
        ready = sum(1 for name in rs.pods if self._pods[name].view.ready)
        return ReplicaSetView(rs.name, rs.template, rs.replicas, tuple(rs.pods), ready, len(rs.pending),
                              dict(rs.node_selector))

    def _reconcile(self, rs: _ReplicaSet) -> None:
        have = len(rs.pods) + len(rs.pending)
        for _ in range(rs.replicas - have):
            self._create(rs)
        excess = have - rs.replicas
        while excess > 0 and rs.pending:
            rs.pending.popitem()  # newest pending first
            excess -= 1
        if excess > 0:
            # not ready before ready, newer before older (the ReplicaSet controller's ranking)
            order = sorted(enumerate(rs.pods), key=lambda ip: (self._pods[ip[1]].view.ready, -ip[0]))
            for _, name in order[:excess]:
                view = self._pods[name].view
                del rs.pods[name]
                self._release(view)
                self._emit(EventKind.POD_DELETED, self._clock.now(), view.node, view.spec, "scaled-down")

    def _create(self, rs: _ReplicaSet, replaces: str | None = None) -> str:
        name = f"{rs.name}-{rs.created}"
        rs.created += 1
        labels = {**rs.template.labels, KIND_LABEL: INFERENCE, REPLICASET_LABEL: rs.name}
        if replaces:
            labels[REPLACES_LABEL] = replaces
        spec = replace(rs.template, name=name, job_id=None, labels=labels)
        if not self._try_place(rs, spec):
            rs.pending[name] = PendingPodView(spec, rs.name, self._clock.now())
        return name

    def _try_place(self, rs: _ReplicaSet, spec: PodSpec) -> bool:
        for node in self._nodes.values():
            shares = self._fit_inference(rs, spec, node)
            if shares is not None:
                placed = replace(spec, gpu_shares=shares)
                self._bind(placed, node, ready_at=self._clock.now() + rs.startup_s)
                rs.pods[spec.name] = None
                self._emit(EventKind.POD_CREATED, self._clock.now(), node.view.name, placed)
                return True
        return False

    @staticmethod
    def _fit_inference(rs: _ReplicaSet, spec: PodSpec, node: _Node) -> tuple[GpuShare, ...] | None:
        """GPU shares for `spec` on `node` (first fit, lowest index), or None when it does not go there."""
        view = node.view
        if view.state is not NodeState.ONLINE_NORMAL:
            return None
        for key, value in rs.node_selector.items():
            have = view.resource_group if key == RESOURCE_GROUP_LABEL else view.labels.get(key)
            if have != value:
                return None
        return place(spec, node)

    def _place_pending(self) -> None:
        for rs in self._replicasets.values():
            for name, pending in list(rs.pending.items()):
                if not self._try_place(rs, pending.spec):
                    break  # the rest of this ReplicaSet has the same shape: no room either
                del rs.pending[name]

    def restart_container(self, name: str) -> None:
        """A bound pod's container restarts in place (it crashed, the kubelet started it again): not ready until its
        start-up has passed again, its restart count one higher."""
        record = self._pods.get(name)
        if record is None:
            raise BackendError(f"pod {name} is not bound")
        spec = record.view.spec
        ready_at = self._clock.now() + float(spec.labels.get(STARTUP_LABEL, self.startup_s))
        self._pods[name] = _Pod(replace(record.view, ready=False, restarts=record.view.restarts + 1), record.seq)
        heapq.heappush(self._ready_heap, (ready_at, record.seq, name))

    def _promote_ready(self) -> None:
        now = self._clock.now()
        heap = self._ready_heap
        while heap and heap[0][0] <= now:
            at, seq, name = heapq.heappop(heap)
            record = self._pods.get(name)
            if record is None or record.seq != seq or record.view.ready:
                continue  # deleted before it became ready
            self._pods[name] = _Pod(replace(record.view, ready=True), seq)
            self._emit(EventKind.POD_READY, at, record.view.node, record.view.spec)

    def drain_events(self) -> list[ClusterEvent]:
        events, self._events = self._events, []
        return events

    # -- gangs' headless Services ------------------------------------------------------
    # Nothing resolves names in the simulation: the Services are kept so that a test (and a replay) sees which
    # gangs have one, as `kubectl get services` would.
    def apply_headless_service(self, name: str, selector: Mapping[str, str]) -> None:
        self._gang_services()[name] = dict(selector)

    def delete_service(self, name: str) -> None:
        self._gang_services().pop(name, None)

    def services(self) -> dict[str, dict[str, str]]:
        """Every headless Service: name -> pod selector."""
        return {name: dict(selector) for name, selector in self._gang_services().items()}

    def _gang_services(self) -> dict[str, dict[str, str]]:
        return self.__dict__.setdefault("_services", {})  # a cluster pickled before gangs has none yet

    # -- logs ------------------------------------------------------------------------
    # No containers run here: a training pod's log is made up by podlog, a pure function of the pod and the time.
    def log_source(self, pod: str) -> PodLogSource:
        """What `pod`'s log is made from: a bound pod (ended at its run time if that has passed), or one that ended
        lately. BackendError when neither."""
        record = self._pods.get(pod)
        if record is not None:
            view = record.view
            run_time = self._duration(view.spec)
            if run_time is not None and view.started_at + run_time <= self._clock.now():  # done; advance() records it
                return source_of(view.spec, view.started_at, ended_at=view.started_at + run_time, end=SUCCEEDED)
            return source_of(view.spec, view.started_at)
        ended = self._ended_pods().get(pod)
        if ended is None:
            raise BackendError(f"pod {pod} not found")
        return source_of(ended.view.spec, ended.view.started_at, ended_at=ended.at, end=ended.end,
                         reason=ended.reason)

    def pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None) -> str:
        now = self._clock.now()
        return pod_log_text(self.log_source(pod), now, since=None if since is None else now - since, tail=tail)

    def follow_pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None,
                        poll_s: float = 1.0) -> Iterator[str]:
        return follow_logs(lambda: self, pod, since=since, tail=tail, poll_s=poll_s)

    def _ended_pods(self) -> dict[str, _Ended]:
        return self.__dict__.setdefault("_ended", {})  # a cluster pickled before logs has none yet

    def _ended_pod(self, view: PodView, at: float, end: str, reason: str = "") -> None:
        if view.kind != TRAINING:
            return
        ended = self._ended_pods()
        ended.pop(view.spec.name, None)
        ended[view.spec.name] = _Ended(view, at, end, reason)
        while len(ended) > ENDED_KEPT or ended[next(iter(ended))].at < at - ENDED_KEEP_S:
            del ended[next(iter(ended))]

    # -- simulation ----------------------------------------------------------------
    def add_node(self, node: NodeView) -> None:
        """A node joins the cluster (the inventory grew); an existing name is left as it is."""
        if node.name not in self._nodes:
            self._nodes[node.name] = _Node(node, [0.0] * node.gpu_count)

    def remove_node(self, name: str, reason: str) -> None:
        """A node leaves the cluster (the inventory lost it): its pods are evicted with `reason` (their ReplicaSets
        replace them on the nodes left), as when a Kubernetes node is deleted; an unknown name is left alone."""
        node = self._nodes.get(name)
        if node is None:
            return
        now = self._clock.now()
        gone = [self._pods[pod].view for pod in list(node.pods)]
        for view in gone:
            self._release(view)
            self._ended_pod(view, now, EVICTED, reason)
            self._emit(EventKind.POD_EVICTED, now, name, view.spec, reason)
        del self._nodes[name]
        self.__dict__.pop("_views", None)  # nodes() rebuilds its views and index without it
        for view in gone:  # once the node is gone, so that no replacement lands on it
            rs = self._replicasets.get(view.replicaset or "")
            if rs is not None:
                rs.pods.pop(view.spec.name, None)
                self._reconcile(rs)

    def advance(self) -> list[ClusterEvent]:
        """Finish every pod whose run time elapsed by the clock's now (returns those events), mark
        inference pods whose start-up elapsed ready, and retry pending ReplicaSet pods."""
        now = self._clock.now()
        finished: list[ClusterEvent] = []
        while self._finish and self._finish[0][0] <= now:
            end, seq, name = heapq.heappop(self._finish)
            record = self._pods.get(name)
            if record is None or record.seq != seq:
                continue  # evicted (and maybe bound again) before finishing
            self._release(record.view)
            self._ended_pod(record.view, end, SUCCEEDED)
            finished.append(self._emit(EventKind.POD_FINISHED, end, record.view.node, record.view.spec))
        self._promote_ready()
        self._place_pending()
        return finished

    def next_finish_at(self) -> float | None:
        """When the next bound pod finishes (None: no pod will), for event-driven clocks."""
        while self._finish:
            end, seq, name = self._finish[0]
            record = self._pods.get(name)
            if record is not None and record.seq == seq:
                return end
            heapq.heappop(self._finish)  # evicted before finishing
        return None

    # -- helpers -------------------------------------------------------------------
    def _node(self, name: str) -> _Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise BackendError(f"unknown node {name}") from None

    def _bind(self, pod: PodSpec, target: _Node, ready_at: float | None) -> None:
        """Take the resources and record the pod; `ready_at` None: ready at once."""
        for s in pod.gpu_shares:
            target.gpu_used[s.index] += s.share
        target.cpu_used += pod.cpu_milli
        target.memory_used += pod.memory_mib
        target.pods[pod.name] = None
        self._changed(target)
        now = self._clock.now()
        self._seq += 1
        ready = ready_at is None or ready_at <= now
        self._pods[pod.name] = _Pod(PodView(pod, target.view.name, now, ready), self._seq)
        if not ready:
            heapq.heappush(self._ready_heap, (ready_at, self._seq, pod.name))
        run_time = self._duration(pod)
        if run_time is not None:
            heapq.heappush(self._finish, (now + run_time, self._seq, pod.name))

    def _changed(self, node: _Node) -> None:
        node.cached = None
        dirty = self.__dict__.get("_dirty")
        if dirty is not None:
            dirty.add(node.view.name)

    def _release(self, pod: PodView) -> None:
        node = self._nodes[pod.node]
        for s in pod.spec.gpu_shares:
            node.gpu_used[s.index] = max(0.0, node.gpu_used[s.index] - s.share)
        node.cpu_used -= pod.spec.cpu_milli
        node.memory_used -= pod.spec.memory_mib
        del node.pods[pod.spec.name]
        self._changed(node)
        del self._pods[pod.spec.name]

    def _emit(self, kind: EventKind, at: float, node: str, pod: PodSpec, detail: str = "") -> ClusterEvent:
        event = ClusterEvent(kind, at, node, pod.name, pod.job_id, detail)
        self._events.append(event)
        return event


def follow_logs(current: Callable[[], SimulatedCluster], pod: str, *, since: float | None = None,
                tail: int | None = None, poll_s: float = 1.0) -> Iterator[str]:
    """Follow `pod`'s log on the cluster `current()` returns, asked afresh every `poll_s` seconds (the demo's cluster
    lives in Redis and changes in another process): the lines so far, then each new one, until the pod has ended or
    is gone. The log is a pure function of the pod and the time, so a line count is the cursor."""
    cluster = current()
    source, now = cluster.log_source(pod), cluster._clock.now()
    yield from pod_log_lines(source, now, since=None if since is None else now - since, tail=tail)
    written = pod_log_count(source, now)
    while source.ended_at is None:
        time.sleep(poll_s)
        try:
            cluster = current()
            source = cluster.log_source(pod)
        except BackendError:
            return  # cleaned up meanwhile
        now = cluster._clock.now()
        count = pod_log_count(source, now)
        if count > written:
            yield from pod_log_lines(source, now, tail=count - written)
        written = max(written, count)
