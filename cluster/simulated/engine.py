"""In-process simulated cluster: the ClusterBackend used by the demo, tests and trace replay.

Deterministic: pods finish in (end time, bind order); nothing depends on wall time.
GPUs are shared by fractional pods, never beyond 1.0 per GPU.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from cluster.backend import BackendError, ClusterEvent, EventKind, PodSpec, PodView
from cluster.clock import Clock
from cluster.types import GPU_EPS, NodeState, NodeView

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


@dataclass(frozen=True, slots=True)
class _Pod:
    view: PodView
    seq: int  # identifies this binding in the finish heap (a name may be bound again)


class SimulatedCluster:
    """ClusterBackend over in-memory nodes; `advance()` completes pods whose run time elapsed."""

    def __init__(self, nodes: Iterable[NodeView], clock: Clock, duration: Duration = run_forever) -> None:
        self._clock = clock
        self._duration = duration
        self._nodes = {n.name: _Node(n, [0.0] * n.gpu_count) for n in nodes}
        self._pods: dict[str, _Pod] = {}
        self._finish: list[tuple[float, int, str]] = []
        self._events: list[ClusterEvent] = []
        self._seq = 0

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
        return tuple(p.view for p in self._pods.values())

    def bind(self, pod: PodSpec, node: str) -> None:
        target = self._node(node)
        if pod.name in self._pods:
            raise BackendError(f"pod {pod.name} is already bound")
        self._check_fits(pod, target)
        for s in pod.gpu_shares:
            target.gpu_used[s.index] += s.share
        target.cpu_used += pod.cpu_milli
        target.memory_used += pod.memory_mib
        target.pods[pod.name] = None
        self._changed(target)
        now = self._clock.now()
        self._seq += 1
        self._pods[pod.name] = _Pod(PodView(pod, node, now), self._seq)
        run_time = self._duration(pod)
        if run_time is not None:
            heapq.heappush(self._finish, (now + run_time, self._seq, pod.name))
        self._emit(EventKind.POD_STARTED, now, node, pod)

    def evict(self, pod: str, reason: str) -> None:
        record = self._pods.get(pod)
        if record is None:
            raise BackendError(f"pod {pod} is not bound")
        self._release(record.view)
        self._emit(EventKind.POD_EVICTED, self._clock.now(), record.view.node, record.view.spec, reason)

    def set_node_state(self, node: str, state: NodeState,
                       labels: Mapping[str, str] | None = None) -> None:
        target = self._node(node)
        old = target.view.state
        target.view = replace(target.view, state=state, labels={**target.view.labels, **(labels or {})})
        self._changed(target)
        if old is not state:
            self._events.append(ClusterEvent(EventKind.NODE_STATE_CHANGED, self._clock.now(), node,
                                             detail=f"{old.value}->{state.value}"))

    def drain_events(self) -> list[ClusterEvent]:
        events, self._events = self._events, []
        return events

    # -- simulation ----------------------------------------------------------------
    def add_node(self, node: NodeView) -> None:
        """A node joins the cluster (the inventory grew); an existing name is left as it is."""
        if node.name not in self._nodes:
            self._nodes[node.name] = _Node(node, [0.0] * node.gpu_count)

    def advance(self) -> list[ClusterEvent]:
        """Finish every pod whose run time elapsed by the clock's now; returns those events."""
        now = self._clock.now()
        finished: list[ClusterEvent] = []
        while self._finish and self._finish[0][0] <= now:
            end, seq, name = heapq.heappop(self._finish)
            record = self._pods.get(name)
            if record is None or record.seq != seq:
                continue  # evicted (and maybe bound again) before finishing
            self._release(record.view)
            finished.append(self._emit(EventKind.POD_FINISHED, end, record.view.node, record.view.spec))
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

    @staticmethod
    def _check_fits(pod: PodSpec, node: _Node) -> None:
        view = node.view
        if not view.state.normal:
            raise BackendError(f"node {view.name} is {view.state.value}")
        if pod.gpu_shares and pod.gpu_model != view.gpu_model:
            raise BackendError(f"pod {pod.name} wants {pod.gpu_model}, node {view.name} has {view.gpu_model}")
        for s in pod.gpu_shares:
            if not 0 <= s.index < view.gpu_count or not 0 < s.share <= 1:
                raise BackendError(f"pod {pod.name}: bad GPU share {s}")
            if node.gpu_used[s.index] + s.share > 1.0 + GPU_EPS:
                raise BackendError(f"pod {pod.name}: GPU {s.index} on {view.name} has "
                                   f"{1 - node.gpu_used[s.index]:.2f} free, needs {s.share}")
        if node.cpu_used + pod.cpu_milli > view.cpu_milli or node.memory_used + pod.memory_mib > view.memory_mib:
            raise BackendError(f"pod {pod.name} does not fit CPU/memory on {view.name}")

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
