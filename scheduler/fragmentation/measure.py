"""FGD's fragmentation measure (Weng et al., USENIX ATC'23), as the artifact computes it.

Target workload (artifact: pkg/utils/frag.go GetTypicalPods, with scripts/generate_config_and_run.py's settings
isInvolvedCpuPods=true, podPopularityThreshold=95, podIncreaseStep=1, gpuResWeight=0): the task shapes of the pod
list (CPU, milli-GPU per GPU, GPU count, allowed models) with their pod counts, most frequent first, kept until
they cover 95 % of the pods (CPU-only pods included), the frequencies renormalised over the kept shapes.

A node's fragmentation for one shape (frag.go NodeGpuShareFragAmount, GetNodePodFrag): all its idle milli-GPU when
the shape cannot run there — no GPU asked, a model it may not use, too little CPU, or fewer than `count` GPUs
with at least `milli` left — and otherwise the idle milli-GPU on GPUs with less than `milli` left. The node's
fragmentation is the frequency-weighted sum over the shapes.

Vectorised form. For the shapes that ask GPUs, with thresholds m (their distinct milli per GPU), per node
    cnt[m] = GPUs with >= m left,   sum[m] = milli-GPU left on those GPUs,   idle = all milli-GPU left,
and frag * W = W * idle - sum_m sum[m] * T[m, model, rank(cpu left), cnt[m]], where W is the kept shapes' pod
count and T[m, model, r, c] the pods of the shapes with threshold m, allowed on `model`, whose CPU is among the r
smallest CPU values and whose GPU count is <= c. Everything is an integer (frag in pod x milli-GPU units), so a
placement that leaves a node's fragmentation unchanged scores a change of exactly 0, as the artifact's float sums
do for identical terms.

A node's value is kept per node (FragState.update recomputes only the node that changed), and the change for
placing a pod on every candidate node (and every candidate GPU of a share) is computed for all of them at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.fragmentation.state import MILLI, ClusterState, PodRequest

COVER = 0.95


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """A task shape: what the artifact calls a typical pod (simontype.PodResource)."""

    cpu_milli: int  # the scoring request (a zero request counts as 100 m, as in the artifact)
    gpu_milli: int  # per GPU: 0, 1..999 (share) or 1000
    gpu_count: int
    models: tuple[str, ...] = ()

    @classmethod
    def of(cls, pod: PodRequest) -> Shape:
        return cls(pod.score_cpu, pod.gpu_milli, pod.gpu_count, pod.models)


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    shapes: tuple[Shape, ...]   # most frequent first
    counts: tuple[int, ...]     # pods of each shape in the pod list
    pods: int                   # pods in the pod list (the kept shapes cover `sum(counts)` of them)

    @property
    def weight(self) -> int:
        return sum(self.counts)

    @property
    def frequencies(self) -> tuple[float, ...]:
        w = self.weight
        return tuple(c / w for c in self.counts)

    @classmethod
    def from_pods(cls, pods: Iterable[PodRequest], cover: float = COVER) -> TargetWorkload:
        """The most frequent shapes covering `cover` of the pods. Equal counts: the artifact's order
        (sort.Reverse of TargetPodList.Less: larger CPU, then milli-GPU, GPU count, model string first)."""
        counts = Counter(Shape.of(p) for p in pods)
        total = sum(counts.values())
        if not total:
            raise ValueError("no pods")
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0].cpu_milli, kv[0].gpu_milli,
                                                        kv[0].gpu_count, "|".join(kv[0].models)), reverse=True)
        kept, covered = [], 0
        for shape, n in ranked:
            if covered >= cover * total:
                break
            kept.append((shape, n))
            covered += n
        return cls(tuple(s for s, _ in kept), tuple(n for _, n in kept), total)


# -- the definition, one node at a time (reference; the vectorised form below must agree) ---------------
def shape_frag(shape: Shape, cpu_left: int, gpu_left: Sequence[int], model: str | None) -> int:
    """Milli-GPU of the node that `shape` cannot use."""
    idle = int(sum(gpu_left))
    if shape.gpu_count == 0:
        return idle  # no GPU asked: every idle GPU is fragment (artifact: XL/XR)
    if shape.models and model not in shape.models:
        return idle  # wrong model (no_access)
    fitting = sum(1 for x in gpu_left if x >= shape.gpu_milli)
    if cpu_left < shape.cpu_milli or fitting < shape.gpu_count:
        return idle  # does not fit (Q1, Q2, Q4)
    return int(sum(x for x in gpu_left if x < shape.gpu_milli))  # fits: GPUs too small for it (Q3's Q2 part)


def node_frag(workload: TargetWorkload, cpu_left: int, gpu_left: Sequence[int], model: str | None) -> float:
    """The node's fragmentation in milli-GPU: frequency-weighted over the target workload."""
    return sum(n * shape_frag(s, cpu_left, gpu_left, model)
               for s, n in zip(workload.shapes, workload.counts)) / workload.weight


# -- vectorised over nodes -------------------------------------------------------------------------------
class FragMeasure:
    """The measure for one target workload on one cluster's GPU models (ClusterState.model_names)."""

    def __init__(self, workload: TargetWorkload, model_names: Sequence[str], max_gpus: int) -> None:
        self.workload = workload
        self.weight = workload.weight
        gpu_shapes = [(s, n) for s, n in zip(workload.shapes, workload.counts) if s.gpu_count]
        self.thresholds = np.array(sorted({s.gpu_milli for s, _ in gpu_shapes}) or [MILLI], dtype=np.int64)
        self.cpu_values = np.array(sorted({s.cpu_milli for s, _ in gpu_shapes}), dtype=np.int64)
        self.max_gpus = max_gpus
        n_models = len(model_names) + 1  # + "no GPU model"
        r, c = len(self.cpu_values) + 1, max_gpus + 1
        table = np.zeros((len(self.thresholds), n_models, r, c), dtype=np.int64)
        t_index = {m: i for i, m in enumerate(self.thresholds.tolist())}
        c_index = {v: i for i, v in enumerate(self.cpu_values.tolist())}
        for s, n in gpu_shapes:
            if s.gpu_count > max_gpus:
                continue  # fits no node
            for mo, name in enumerate(model_names):
                if not s.models or name in s.models:
                    table[t_index[s.gpu_milli], mo, c_index[s.cpu_milli] + 1:, s.gpu_count:] += n
        self.table = table.reshape(-1)
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
