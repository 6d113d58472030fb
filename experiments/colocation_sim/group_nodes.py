"""The lending policy's view of the nodes, observed by `colocation.observe.group_nodes` as the live controller
does, but kept from one simulated minute to the next: a node is observed again only when it changed.

The simulated backend keeps a node's NodeView object until something on it changes (a pod bound or gone, its
state), so an unchanged object means an unchanged node; the one change a node does not see is a pod on it being
detached from its ReplicaSet (a label), which the simulation reports with `detached`.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.backend import PodView
from cluster.simulated.engine import SimulatedCluster
from cluster.types import NodeView
from colocation import observe
from colocation.policy import GroupNode


class _Some:
    """The part of a backend `observe.group_nodes` reads, narrowed to some of its nodes and their pods."""

    def __init__(self, backend: SimulatedCluster, nodes: list[NodeView]) -> None:
        self._backend, self._nodes = backend, tuple(nodes)

    def nodes(self) -> tuple[NodeView, ...]:
        return self._nodes

    def pods(self) -> tuple[PodView, ...]:
        return tuple(pod for node in self._nodes for name in node.pods
                     if (pod := self._backend.pod(name)) is not None)


class GroupNodes:
    def __init__(self, backend: SimulatedCluster, run_s: Mapping[int, float] | None = None) -> None:
        self._backend, self._run_s = backend, run_s  # run_s: expected run seconds by job (observe.group_nodes)
        self._seen: dict[str, tuple[NodeView, str, GroupNode]] = {}  # node -> (its view, its group, what was seen)

    def recalibrated(self) -> None:
        """The expected run times changed (a new calibrated factor): observe every node again."""
        self._seen.clear()

    def detached(self, node: str) -> None:
        """A pod on `node` was detached: observe it again."""
        self._seen.pop(node, None)

    def __call__(self) -> dict[str, list[GroupNode]]:
        """= observe.group_nodes(backend): every node by resource group, in the backend's order."""
        nodes = self._backend.nodes()
        changed = [n for n in nodes if (seen := self._seen.get(n.name)) is None or seen[0] is not n]
        if changed:
            views = {n.name: n for n in changed}
            for group, members in observe.group_nodes(_Some(self._backend, changed), self._run_s).items():
                for member in members:
                    self._seen[member.name] = (views[member.name], group, member)
        out: dict[str, list[GroupNode]] = {}
        for n in nodes:
            _, group, member = self._seen[n.name]
            out.setdefault(group, []).append(member)
        return out
