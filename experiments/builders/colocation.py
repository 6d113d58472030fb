"""Fluent builders of the co-location policies' inputs (groups, nodes, pods, thresholds)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from cluster.types import NodeState, Pool
from colocation.policy import (Converting, Direction, GroupNode, GroupView, InferencePod, PendingPod, Thresholds,
                               TrainingPod)

ON_N, ON_U = NodeState.ONLINE_NORMAL, NodeState.ONLINE_UNNORMAL
OFF_N, OFF_U = NodeState.OFFLINE_NORMAL, NodeState.OFFLINE_UNNORMAL
DAY = "2024-03-05"  # a Tuesday, no DST change anywhere near


def at(hhmm: str, day: str = DAY, tz: str = "UTC") -> float:
    """Epoch seconds of a local wall-clock time."""
    return datetime.fromisoformat(f"{day}T{hhmm}").replace(tzinfo=ZoneInfo(tz)).timestamp()


NOW = at("14:00")  # outside every busy window


class N:
    """A node: N("t4-1").online(3, 1) = online-normal, 4 GPUs, inference pods of 3 and 1 GPUs."""

    def __init__(self, name: str, capacity: float = 4.0) -> None:
        self._n = GroupNode(name, OFF_N, Pool.COLOCATION, capacity)

    def online(self, *requests: float) -> N:
        return self.state(ON_N).inference(*requests)

    def offline(self, *ran_s: float) -> N:
        """Offline-normal with one training pod per entry, each started `ran_s` seconds before NOW."""
        return self.state(OFF_N).training(*ran_s)

    def state(self, state: NodeState) -> N:
        return self._set(state=state)

    def fixed(self) -> N:
        return self._set(pool=Pool.FIXED)

    def inference(self, *requests: float, detached: bool = False) -> N:
        start = len(self._n.inference)
        pods = tuple(InferencePod(f"{self._n.name}-inf{start + i}", r, detached) for i, r in enumerate(requests))
        return self._set(inference=self._n.inference + pods)

    def training(self, *ran_s: float, now: float = NOW) -> N:
        start = len(self._n.training)
        pods = tuple(TrainingPod(f"{self._n.name}-job{start + i}", start + i, now - r) for i, r in enumerate(ran_s))
        return self._set(training=self._n.training + pods)

    def _set(self, **fields: object) -> N:
        """Builders are values: every call returns a new one, so shared fixtures stay untouched."""
        out = N.__new__(N)
        out._n = replace(self._n, **fields)
        return out

    def build(self) -> GroupNode:
        return self._n


class G:
    def __init__(self, name: str = "t4", unit: str = "GPU") -> None:
        self._g = GroupView(name, (), unit=unit)

    def nodes(self, *nodes: N | GroupNode) -> G:
        built = tuple(n.build() if isinstance(n, N) else n for n in nodes)
        return self._set(nodes=self._g.nodes + built)

    def rates(self, min_rate: float, expect_rate: float, max_rate: float) -> G:
        return self._set(thresholds=Thresholds(min_rate, expect_rate, max_rate))

    def training_pending(self, n: int) -> G:
        return self._set(pending_training=n)

    def pending(self, *requests: float, replacement: bool = False, group: str = "") -> G:
        start = len(self._g.pending_online)
        pods = tuple(PendingPod(f"pending{start + i}", r, replacement, group) for i, r in enumerate(requests))
        return self._set(pending_online=self._g.pending_online + pods)

    def converting(self, node: str, direction: Direction) -> G:
        return self._set(converting=self._g.converting + (Converting(node, direction),))

    def replica(self, largest: float, startup_s: float = 0.0) -> G:
        """Its services' largest replica (a group of pods: all of them) and its start-up."""
        return self._set(largest_replica=largest, startup_s=startup_s)

    def took_back(self, at: float) -> G:
        """Its latest take-back was decided at `at`."""
        return self._set(last_take_back=at)

    def _set(self, **fields: object) -> G:
        out = G.__new__(G)
        out._g = replace(self._g, **fields)
        return out

    def build(self) -> GroupView:
        return self._g


def online_fleet(*loads: tuple[float, ...], prefix: str = "t4", capacity: float = 4.0) -> list[N]:
    """Online-normal nodes prefix-1.. with the given inference pod requests each."""
    return [N(f"{prefix}-{i}", capacity).online(*pods) for i, pods in enumerate(loads, start=1)]
