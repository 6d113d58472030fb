"""Placement scorers: given the cluster (ClusterState) and a pod, the node and GPUs it goes to, or None.

One interface for every policy — `Scorer.choose(cluster, pod) -> Placement | None` — and a registry by name, so a
new scorer is one class with `@register`:

    @register
    class TidalScorer(Scorer):
        name = "tidal"
        def pick(self, cluster, pod, nodes):   # nodes: the feasible node indices, ascending
            ...
            return Placement(node, gpus)

`make(name, context)` builds one for a run; `Context` carries what a scorer may need (a random generator, the
target workload's fragmentation measure). Scorers keep no state of the cluster between calls except through
`ClusterState.extension` (FGD's per-node fragmentation, kept in step with `place`), so the same object could
score a live snapshot turned into a ClusterState.

Every policy filters alike (ClusterState.feasible) and breaks ties by the lowest node index. Scores are the
artifact's (hkust-adsl/kubernetes-scheduler-simulator pkg/simulator/plugin/*_score.go), integers 0..100 as the
Kubernetes framework keeps them: nodes whose scores round to the same integer tie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from scheduler.fragmentation.measure import FragMeasure, FragState, TargetWorkload
from scheduler.fragmentation.state import MILLI, ClusterState, Placement, PodRequest

MAX_SPEC_CPU = 128_000  # millicores of the largest node (artifact: gpushareutils.MaxSpecCpu)
MAX_SPEC_GPU = 8_000    # milli-GPU of the largest node (MaxSpecGpu)
MAX_SCORE = 100


@dataclass
class Context:
    rng: np.random.Generator
    measure: FragMeasure | None = None  # the target workload's measure, for scorers that need one


class Scorer:
    name: ClassVar[str]
    needs_measure: ClassVar[bool] = False

    def __init__(self, context: Context) -> None:
        self.context = context

    def choose(self, cluster: ClusterState, pod: PodRequest) -> Placement | None:
        nodes = np.flatnonzero(cluster.feasible(pod))
        if not len(nodes):
            return None
        return self.pick(cluster, pod, nodes)

    def pick(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> Placement:
        raise NotImplementedError


SCORERS: dict[str, type[Scorer]] = {}


def register(cls: type[Scorer]) -> type[Scorer]:
    if cls.name in SCORERS:
        raise ValueError(f"scorer {cls.name!r} registered twice")
    SCORERS[cls.name] = cls
    return cls


def make(name: str, context: Context) -> Scorer:
    try:
        cls = SCORERS[name]
    except KeyError:
        raise ValueError(f"unknown scorer {name!r}; known: {', '.join(SCORERS)}") from None
    if cls.needs_measure and context.measure is None:
        raise ValueError(f"scorer {name!r} needs the target workload's measure")
    return cls(context)


def best_of(scores: np.ndarray, nodes: np.ndarray) -> int:
    """The node with the highest score, the lowest index among equals (nodes ascending)."""
    return int(nodes[int(np.argmax(scores))])


class _BestFitGpus(Scorer):
    """A node scorer whose GPUs inside the node are chosen best-fit (the artifact's gpuSelMethod "best")."""

    def pick(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> Placement:
        node = best_of(self.scores(cluster, pod, nodes), nodes)
        return Placement(node, cluster.gpus_for(node, pod))

    def scores(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register
class RandomScorer(Scorer):
    """Any feasible node, uniformly; a share on a uniformly random GPU it fits on, whole GPUs lowest-index free
    (random_score.go PreScore; open_gpu_share.go allocateGpuIdBasedOnRandomFit)."""

    name = "random"

    def pick(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> Placement:
        rng = self.context.rng
        node = int(nodes[rng.integers(len(nodes))])
        if pod.share:
            fitting = np.flatnonzero(cluster.gpu_left[node] >= pod.gpu_milli)
            return Placement(node, (int(fitting[rng.integers(len(fitting))]),))
        return Placement(node, cluster.first_free_gpus(node, pod.gpu_count))


@register
class DotProductScorer(_BestFitGpus):
    """Smallest dot product of the node's free (CPU, GPU) and the pod's request, both over the largest node
    (Tetris; dot_product_score.go with dimExtMethod merge, normMethod max): 100 x (1 - dot / 2)."""

    name = "dotprod"

    def scores(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
        dot = (cluster.cpu_left[nodes] / MAX_SPEC_CPU * (pod.score_cpu / MAX_SPEC_CPU)
               + cluster.idle[nodes] / MAX_SPEC_GPU * (pod.total_milli / MAX_SPEC_GPU))
        return np.trunc(MAX_SCORE * (1 - dot / 2))


@register
class ClusteringScorer(_BestFitGpus):
    """Nodes already holding only GPU pods of the pod's shape (share, 1-GPU, 2-GPU, ...) first, then nodes
    holding that shape among others, then nodes without GPU pods, then nodes of other shapes; inside a bucket
    the less free GPU the better (gpu_clustering_score.go: 25 x (8000 - idle) // 8000 + 75 / 50 / 25 / 0).
    CPU-only pods score 0 everywhere: the first feasible node."""

    name = "clustering"

    def scores(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
        if not pod.gpu_count:
            return np.zeros(len(nodes))
        held = cluster.klass_pods[nodes] > 0
        same = held[:, pod.klass]
        kinds = held.sum(axis=1)
        bucket = np.where(same, np.where(kinds == 1, 75, 50), np.where(kinds == 0, 25, 0))
        return MAX_SCORE // 4 * (MAX_SPEC_GPU - cluster.idle[nodes]) // MAX_SPEC_GPU + bucket


@register
class PackingScorer(_BestFitGpus):
    """Already-shared GPUs first, then free GPUs on used nodes, then empty nodes (gpu_packing_score.go):
    a share on a used GPU 100 - (left% of that GPU) // 10 (>= 50); free GPUs on a node with GPUs in use
    50 - free GPUs taken (>= 33); a node with all GPUs free max(33 - its GPUs, its GPUs). CPU-only pods: 0."""

    name = "packing"

    def scores(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
        if not pod.gpu_count:
            return np.zeros(len(nodes))
        free, count = cluster.free[nodes], cluster.gpu_count[nodes]
        empty = np.maximum(MAX_SCORE // 3 - count, count)
        if pod.share:
            left = cluster.gpu_left[nodes]
            tightest = np.where(left >= pod.gpu_milli, left, MILLI + 1).min(axis=1)
            used_gpu = np.maximum(MAX_SCORE - (tightest * 100 // MILLI) // 10, MAX_SCORE // 2)
            used_node = np.where(tightest < MILLI, used_gpu, np.maximum(MAX_SCORE // 2 - 1, MAX_SCORE // 3))
        else:
            used_node = np.full(len(nodes), max(MAX_SCORE // 2 - pod.gpu_count, MAX_SCORE // 3))
        return np.where(free == count, empty, used_node)


@register
class BestFitScorer(_BestFitGpus):
    """Least CPU and GPU left after placing, each over the largest node, equal weights (best_fit_score.go):
    100 x (1 - (cpu left - cpu) / 128 cores / 2 - (GPU left - GPU) / 8 GPUs / 2)."""

    name = "bestfit"

    def scores(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> np.ndarray:
        rest = ((cluster.cpu_left[nodes] - pod.score_cpu) / MAX_SPEC_CPU * 0.5
                + (cluster.idle[nodes] - pod.total_milli) / MAX_SPEC_GPU * 0.5)
        return np.trunc((1.0 - rest) * MAX_SCORE)


@register
class FgdScorer(Scorer):
    """Fragmentation Gradient Descent (fgd_score.go): the node — and for a share the GPU — whose
    fragmentation grows least, scored 100 x sigmoid(-growth / 1000) (growth in milli-GPU) truncated to an
    integer; among GPUs of one node the lowest index with the best score."""

    name = "fgd"
    needs_measure = True

    def state(self, cluster: ClusterState) -> FragState:
        return FragState.attach(cluster, self.context.measure)

    def quantize(self, delta_w: np.ndarray) -> np.ndarray:
        x = -delta_w / (self.context.measure.weight * 1000.0)
        return np.trunc((1.0 / (1.0 + np.exp(-x))) * MAX_SCORE)

    def pick(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> Placement:
        frag = self.state(cluster)
        if not pod.share:
            node = best_of(self.quantize(frag.delta_whole(nodes, pod)), nodes)
            return Placement(node, cluster.first_free_gpus(node, pod.gpu_count))
        cand_node, cand_gpu = share_candidates(cluster, nodes, pod.gpu_milli)
        scores = self.quantize(frag.delta_share(cand_node, cluster.gpu_left[cand_node, cand_gpu], pod))
        best = int(np.argmax(scores))  # candidates are (node, GPU) ascending: the lowest node, then GPU
        return Placement(int(cand_node[best]), (int(cand_gpu[best]),))


def share_candidates(cluster: ClusterState, nodes: np.ndarray, milli: int) -> tuple[np.ndarray, np.ndarray]:
    """(node, GPU) pairs, ascending, where a share of `milli` fits: every partly used GPU it fits on, and of the
    fully free GPUs of a node only the first (the others would change the node alike and come later)."""
    left = cluster.gpu_left[nodes]
    free = left == MILLI
    first_free = free & (np.cumsum(free, axis=1) == 1)
    rows, gpus = np.nonzero(((left >= milli) & ~free) | first_free)
    return nodes[rows], gpus



# -- tidal ------------------------------------------------------------------------------------------------------
def cpu_per_gpu(workload: TargetWorkload) -> float:
    """Millicores the target workload's GPU shapes ask per milli-GPU (pod-count weighted): the CPU a node must
    keep for each idle milli-GPU if typical GPU tasks are to use it."""
    gpu_shapes = [(s, n) for s, n in zip(workload.shapes, workload.counts) if s.gpu_count]
    milli = sum(n * s.gpu_count * s.gpu_milli for s, n in gpu_shapes)
    return sum(n * s.cpu_milli for s, n in gpu_shapes) / milli if milli else 0.0


def pressure(workload: TargetWorkload, cluster: ClusterState) -> np.ndarray:
    """Per node: the expected milli-GPU of other pods displaced per milli-GPU a pod takes there. For each GPU shape
    of the target workload, the nodes it could run on when empty (GPU model allowed, enough GPUs, enough CPU) and
    its pressure on them = its share of the workload's GPU demand / those nodes' share of the GPU capacity, at most
    1 (a GPU is displaced at most once); a node's pressure is the sum over the shapes that could use it. A shape
    that fits every node adds the same to every node and changes no choice; a shape that only a few nodes can take
    (a gpu_spec, 8 GPUs with 120 cores) makes those nodes dear for every other pod."""
    gpus = cluster.gpu_count.astype(float)
    capacity = gpus.sum()
    demand = [(s, n * s.gpu_count * s.gpu_milli) for s, n in zip(workload.shapes, workload.counts) if s.gpu_count]
    total = sum(d for _, d in demand)
    out = np.zeros(len(cluster))
    if not total or not capacity:
        return out
    for s, d in demand:
        ok = (cluster.gpu_count >= s.gpu_count) & (cluster.cpu_capacity >= s.cpu_milli)
        if s.models:
            ok &= cluster.access(s.models)
        room = gpus[ok].sum()
        if room:
            out[ok] += min(1.0, (d / total) / (room / capacity))
    return out


@dataclass
class TidalModel:
    """What tidal keeps per cluster: FGD's per-node fragmentation, the CPU per GPU of the target workload and
    every node's pressure (static: the node list and the workload)."""

    frag: FragState
    cpu_per_milli: float
    pressure: np.ndarray


@register
class TidalScorer(Scorer):
    """Least growth of the GPU the target workload could not use, counting three ways a placement loses GPU
    (each in milli-GPU, summed):
      - fragmentation (FGD's measure, its change per candidate node and GPU): idle GPU too small or on a node a
        typical task does not fit;
      - stranding: idle GPU a node's CPU cannot feed, max(0, idle - CPU left / c), c the CPU typical GPU tasks
        ask per GPU (`cpu_per_gpu`): a CPU-hungry pod on a node whose CPU its GPUs need strands them;
      - displacement: the pod's GPU x the node's `pressure` above the least pressed candidate's: the GPU that
        tasks only such nodes can take would lose there (the part every candidate shares changes no choice and
        would only push the score into the sigmoid's flat end).
    Scored as FGD: 100 x sigmoid(-growth / 1000) truncated to an integer, the first node (then GPU) among equal
    scores — near-equal nodes tie and go to the per-seed node order, which packs (a strict minimum scatters)."""

    name = "tidal"
    needs_measure = True

    def model(self, cluster: ClusterState) -> TidalModel:
        measure = self.context.measure
        return cluster.extension(("tidal", id(measure)), lambda c: TidalModel(
            FragState.attach(c, measure), cpu_per_gpu(measure.workload), pressure(measure.workload, c)))

    def growth(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray, gpu_left: np.ndarray | None
               ) -> np.ndarray:
        """Milli-GPU lost (float) if `pod` went to each of `nodes` (for a share: on a GPU with `gpu_left`)."""
        m = self.model(cluster)
        frag = m.frag.delta_whole(nodes, pod) if gpu_left is None else m.frag.delta_share(nodes, gpu_left, pod)
        growth = frag / m.frag.measure.weight
        if m.cpu_per_milli:
            idle, cpu = cluster.idle[nodes], cluster.cpu_left[nodes]
            c = m.cpu_per_milli
            growth += (np.maximum(0.0, idle - pod.total_milli - (cpu - pod.cpu_milli) / c)
                       - np.maximum(0.0, idle - cpu / c))
        pressure = m.pressure[nodes]
        return growth + pod.total_milli * (pressure - pressure.min())

    @staticmethod
    def quantize(growth: np.ndarray) -> np.ndarray:
        return np.trunc(MAX_SCORE / (1.0 + np.exp(growth / 1000.0)))

    def pick(self, cluster: ClusterState, pod: PodRequest, nodes: np.ndarray) -> Placement:
        if not pod.share:
            node = best_of(self.quantize(self.growth(cluster, pod, nodes, None)), nodes)
            return Placement(node, cluster.first_free_gpus(node, pod.gpu_count))
        cand_node, cand_gpu = share_candidates(cluster, nodes, pod.gpu_milli)
        scores = self.quantize(self.growth(cluster, pod, cand_node, cluster.gpu_left[cand_node, cand_gpu]))
        best = int(np.argmax(scores))
        return Placement(int(cand_node[best]), (int(cand_gpu[best]),))
