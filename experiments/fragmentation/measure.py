"""FGD's fragmentation measure (scheduler/policy/workload.py) over a ClusterState, vectorised with NumPy for the
`fgd` scorer and the experiment's fragmentation figures.

A node's value is kept per node (FragState.update recomputes only the node that changed), and the change for
placing a pod on every candidate node (and every candidate GPU of a share) is computed for all of them at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from experiments.fragmentation.state import MILLI, ClusterState, PodRequest
from scheduler.policy.workload import FragTables, TargetWorkload


# -- vectorised over nodes -------------------------------------------------------------------------------
class FragMeasure:
    """The measure for one target workload on one cluster's GPU models (ClusterState.model_names)."""

    def __init__(self, workload: TargetWorkload, model_names: Sequence[str], max_gpus: int) -> None:
        tables = FragTables(workload, model_names, max_gpus)
        self.workload, self.weight, self.max_gpus = workload, tables.weight, max_gpus
        self.thresholds, self.cpu_values = tables.thresholds, tables.cpu_values
        _, n_models, r, c = tables.table.shape
        self.tables = tables
        self.table = tables.table.reshape(-1)
        self.stride_model, self.stride_rank = r * c, c
        self.threshold_offset = np.arange(len(self.thresholds), dtype=np.int64) * (n_models * r * c)

    def terms(self, gpu_left: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cnt[m] and sum[m] for rows of per-GPU milli left ([k, G] -> two [k, M])."""
        ge = gpu_left[:, :, None] >= self.thresholds[None, None, :]
        return ge.sum(axis=1), (gpu_left[:, :, None] * ge).sum(axis=1)

    def weighted(self, model: np.ndarray, cpu_left: np.ndarray, idle: np.ndarray, cnt: np.ndarray,
                 sums: np.ndarray) -> np.ndarray:
        """frag x W (integers) of nodes in the given states."""
        rank = np.searchsorted(self.cpu_values, cpu_left, side="right")
        base = model * self.stride_model + rank * self.stride_rank
        usable = self.table[self.threshold_offset[None, :] + base[:, None] + np.minimum(cnt, self.max_gpus)]
        return self.weight * idle - (sums * usable).sum(axis=1)

    def of_nodes(self, cluster: ClusterState, nodes: np.ndarray | slice = slice(None)) -> np.ndarray:
        """frag x W of the nodes as they are now."""
        cnt, sums = self.terms(cluster.gpu_left[nodes])
        return self.weighted(cluster.model[nodes], cluster.cpu_left[nodes], cluster.idle[nodes], cnt, sums)


class FragState:
    """Every node's fragmentation (x W), kept in step with the cluster: `update(node)` after a change
    recomputes that node only (ClusterState.place calls it)."""

    def __init__(self, measure: FragMeasure, cluster: ClusterState) -> None:
        self.measure, self.cluster = measure, cluster
        self.cnt, self.sums = measure.terms(cluster.gpu_left)
        self.frag = measure.weighted(cluster.model, cluster.cpu_left, cluster.idle, self.cnt, self.sums)
        self.total = int(self.frag.sum())
        cluster.listeners.append(self.update)

    @classmethod
    def attach(cls, cluster: ClusterState, measure: FragMeasure) -> FragState:
        """The cluster's state for this measure (made and subscribed on first use)."""
        return cluster.extension(("frag", id(measure)), lambda c: cls(measure, c))

    def update(self, node: int) -> None:
        c, m = self.cluster, self.measure
        cnt, sums = m.terms(c.gpu_left[node:node + 1])
        self.cnt[node], self.sums[node] = cnt[0], sums[0]
        new = int(m.weighted(c.model[node:node + 1], c.cpu_left[node:node + 1], c.idle[node:node + 1], cnt,
                             sums)[0])
        self.total += new - int(self.frag[node])
        self.frag[node] = new

    # -- the change a placement would make --------------------------------------------------------------
    def delta_whole(self, nodes: np.ndarray, pod: PodRequest) -> np.ndarray:
        """Change of frag x W if a CPU-only or whole-GPU pod went to each of `nodes` (feasible ones): its free
        GPUs (>= every threshold) drop to 0 and its CPU leaves the node."""
        c, k = self.cluster, pod.gpu_count
        new = self.measure.weighted(c.model[nodes], c.cpu_left[nodes] - pod.score_cpu,
                                    c.idle[nodes] - k * MILLI, self.cnt[nodes] - k, self.sums[nodes] - k * MILLI)
        return new - self.frag[nodes]

    def delta_share(self, nodes: np.ndarray, left: np.ndarray, pod: PodRequest) -> np.ndarray:
        """Change of frag x W if a share went to a GPU with `left` milli-GPU on each of `nodes` (pairwise)."""
        c, t, milli = self.cluster, self.measure.thresholds, pod.gpu_milli
        after = left - milli
        was, now = left[:, None] >= t[None, :], after[:, None] >= t[None, :]
        cnt = self.cnt[nodes] - was + now
        sums = self.sums[nodes] - left[:, None] * was + after[:, None] * now
        new = self.measure.weighted(c.model[nodes], c.cpu_left[nodes] - pod.score_cpu, c.idle[nodes] - milli,
                                    cnt, sums)
        return new - self.frag[nodes]

    def ratio(self) -> float:
        """Fragmented share of the idle milli-GPU (the artifact's "frag ratio"), 0..1; NaN when none is idle."""
        idle = self.cluster.capacity_milli - self.cluster.allocated_milli
        return self.total / self.measure.weight / idle if idle else float("nan")
