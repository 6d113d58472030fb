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
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from experiments.fragmentation.goodput import Predictor
from experiments.fragmentation.measure import FragMeasure, FragState
from experiments.fragmentation.state import MILLI, ClusterState, Placement, PodRequest
from scheduler.policy.interference import Sharing, choose
from scheduler.policy.workload import pressure

if TYPE_CHECKING:
    from scheduler.policy.gpuloss import Loss

MAX_SPEC_CPU = 128_000  # millicores of the largest node (artifact: gpushareutils.MaxSpecCpu)
MAX_SPEC_GPU = 8_000    # milli-GPU of the largest node (MaxSpecGpu)
MAX_SCORE = 100


@dataclass
class Context:
    rng: np.random.Generator
    measure: FragMeasure | None = None  # the target workload's measure, for scorers that need one
    interference: Predictor | None = None  # the interference model's answers, for scorers that need them


class Scorer:
    name: ClassVar[str]
    needs_measure: ClassVar[bool] = False
    needs_interference: ClassVar[bool] = False
    overruled = 0  # shares the interference model kept off the GPU the least GPU loss alone would take

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
    if cls.needs_interference and context.interference is None:
        raise ValueError(f"scorer {name!r} needs the interference model")
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
@register
class TidalScorer(Scorer):
    """Tidal's placement, the live scheduler's (scheduler/policy/gpuloss.py): least growth of the GPU the target
    workload could not use — fragmentation, CPU stranding and displacement — in the one compiled kernel the live
    NodeTable uses, here over the ClusterState's arrays (kept in step by `place`)."""

    name = "tidal"
    needs_measure = True

    def loss(self, cluster: ClusterState) -> Loss:
        from scheduler.policy.gpuloss import Loss  # numba takes 0.5 s to import: only where tidal runs

        measure = self.context.measure
        return cluster.extension(("tidal", id(measure)), lambda c: _attach(c, Loss(
            measure.tables, c.gpu_left, c.cpu_left, c.memory_left, c.gpu_count, c.model,
            pressure(measure.workload, c.node_models(), c.gpu_count, c.cpu_capacity))))

    def choose(self, cluster: ClusterState, pod: PodRequest) -> Placement | None:
        ok = cluster.access(pod.models) if pod.gpu_count else cluster.everywhere
        row, gpu, _ = self.loss(cluster).best(ok, pod.gpu_count, pod.gpu_milli, pod.cpu_milli, pod.memory_mib)
        if row < 0:
            return None
        return Placement(row, (gpu,) if gpu >= 0 else cluster.first_free_gpus(row, pod.gpu_count))


def _attach(cluster: ClusterState, loss: Loss) -> Loss:
    cluster.listeners.append(loss.update)
    return loss


@register
class InterferenceAwareScorer(TidalScorer):
    """tidal, with a share kept off GPUs the interference model refuses and, among the GPUs of the least GPU loss,
    sent to the one of the highest predicted combined throughput (scheduler/policy/interference.py `choose`). Every
    candidate GPU of a share is scored as the kernel scores it, listed in the kernel's tie-break order (fuller node,
    first node, fuller GPU, first GPU), so with no pairing to tell apart it takes the GPU tidal takes."""

    name = "tidal-interference"
    needs_interference = True

    def choose(self, cluster: ClusterState, pod: PodRequest) -> Placement | None:
        if not pod.share:
            return super().choose(cluster, pod)
        nodes = np.flatnonzero(cluster.feasible(pod))
        if not len(nodes):
            return None
        node, gpu = share_candidates(cluster, nodes, pod.gpu_milli)
        scores, _ = self.loss(cluster).share_scores(node, gpu, pod.gpu_milli, pod.cpu_milli)
        allocated = 1.0 - cluster.idle[node] / (cluster.gpu_count[node] * MILLI)
        order = np.lexsort((gpu, cluster.gpu_left[node, gpu], node, -allocated, -scores))
        node, gpu, scores = node[order], gpu[order], scores[order]
        predictor = self.context.interference

        def sharing(i: int) -> Sharing | None:
            residents = cluster.shares.get((int(node[i]), int(gpu[i])))
            return predictor.sharing(pod.kind, [p.kind for p in residents])[0] if residents else None

        choice = choose(scores, sharing, predictor.rule)
        if choice is None:
            return None
        self.overruled += choice.overruled is not None
        return Placement(int(node[choice.index]), (int(gpu[choice.index]),))
