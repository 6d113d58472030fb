"""The target workload and FGD's fragmentation measure (Weng et al., USENIX ATC'23), as the artifact defines them.

Target workload (artifact: pkg/utils/frag.go GetTypicalPods, with scripts/generate_config_and_run.py's settings
isInvolvedCpuPods=true, podPopularityThreshold=95): the task shapes of a pod list (CPU, milli-GPU per GPU, GPU
count, allowed models) with their pod counts, most frequent first, kept until they cover 95 % of the pods (CPU-only
pods included). The live scheduler learns it from the cluster's recent submissions, replay and the FGD experiment
from the trace.

A node's fragmentation for one shape (frag.go NodeGpuShareFragAmount, GetNodePodFrag): all its idle milli-GPU when
the shape cannot run there — no GPU asked, a model it may not use, too little CPU, or fewer than `count` GPUs
with at least `milli` left — and otherwise the idle milli-GPU on GPUs with less than `milli` left. The node's
fragmentation is the frequency-weighted sum over the shapes.

`FragTables` is the same measure in integer form for the vectorised and compiled code: with thresholds m (the
shapes' distinct milli per GPU), per node cnt[m] = GPUs with >= m left and sum[m] = milli-GPU left on them,
    frag x W = W x idle - sum_m sum[m] x T[m, model, rank(CPU left), min(cnt[m], C - 1)],
W the kept shapes' pod count, T[m, model, r, c] the pods of the shapes with threshold m allowed on `model` whose
CPU is among the r smallest CPU values and whose GPU count is <= c. All integers, so a placement that leaves a
node's fragmentation unchanged changes it by exactly 0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

COVER = 0.95
MILLI = 1000
DEFAULT_CPU_REQUEST = 100  # millicores: Kubernetes' non-zero CPU request for scoring (a zero request counts as this)


class Sized(Protocol):
    """What a shape is read from (the FGD harness's PodRequest, a live job's request)."""

    score_cpu: int
    gpu_milli: int
    gpu_count: int
    models: tuple[str, ...]


@dataclass(frozen=True, slots=True, order=True)
class Shape:
    """A task shape: what the artifact calls a typical pod (simontype.PodResource)."""

    cpu_milli: int  # the scoring request (a zero request counts as 100 m, as in the artifact)
    gpu_milli: int  # per GPU: 0, 1..999 (share) or 1000
    gpu_count: int
    models: tuple[str, ...] = ()

    @classmethod
    def of(cls, pod: Sized) -> Shape:
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
    def from_pods(cls, pods: Iterable[Sized], cover: float = COVER) -> TargetWorkload:
        return cls.from_shapes(Counter(Shape.of(p) for p in pods), cover)

    @classmethod
    def from_shapes(cls, counts: Counter[Shape], cover: float = COVER) -> TargetWorkload:
        """The most frequent shapes covering `cover` of the pods. Equal counts: the artifact's order
        (sort.Reverse of TargetPodList.Less: larger CPU, then milli-GPU, GPU count, model string first)."""
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

    def gpu_shapes(self) -> list[tuple[Shape, int]]:
        return [(s, n) for s, n in zip(self.shapes, self.counts) if s.gpu_count]


# -- the definition, one node at a time (reference; FragTables must agree) ---------------------------------------
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


class FragTables:
    """The measure's integer tables for one target workload on GPU models `model_names` (index len: no model)."""

    def __init__(self, workload: TargetWorkload, model_names: Sequence[str], max_gpus: int) -> None:
        self.workload = workload
        self.weight = workload.weight
        gpu_shapes = workload.gpu_shapes()
        self.thresholds = np.array(sorted({s.gpu_milli for s, _ in gpu_shapes}) or [MILLI], dtype=np.int64)
        self.cpu_values = np.array(sorted({s.cpu_milli for s, _ in gpu_shapes}), dtype=np.int64)
        self.max_gpus = max_gpus
        table = np.zeros((len(self.thresholds), len(model_names) + 1, len(self.cpu_values) + 1, max_gpus + 1),
                         dtype=np.int64)
        t_index = {m: i for i, m in enumerate(self.thresholds.tolist())}
        c_index = {v: i for i, v in enumerate(self.cpu_values.tolist())}
        for s, n in gpu_shapes:
            if s.gpu_count > max_gpus:
                continue  # fits no node
            for mo, name in enumerate(model_names):
                if not s.models or name in s.models:
                    table[t_index[s.gpu_milli], mo, c_index[s.cpu_milli] + 1:, s.gpu_count:] += n
        self.table = table  # [threshold, model, CPU rank, GPU count]


def cpu_per_gpu(workload: TargetWorkload) -> float:
    """Millicores the target workload's GPU shapes ask per milli-GPU (pod-count weighted): the CPU a node must
    keep for each idle milli-GPU if typical GPU tasks are to use it."""
    gpu_shapes = workload.gpu_shapes()
    milli = sum(n * s.gpu_count * s.gpu_milli for s, n in gpu_shapes)
    return sum(n * s.cpu_milli for s, n in gpu_shapes) / milli if milli else 0.0


def pressure(workload: TargetWorkload, models: Sequence[str | None], gpu_count: np.ndarray,
             cpu_capacity: np.ndarray) -> np.ndarray:
    """Per node (its GPU model, GPUs and CPU): the expected milli-GPU of other pods displaced per milli-GPU a pod
    takes there. For each GPU shape of the target workload, the nodes it could run on when empty (GPU model
    allowed, enough GPUs, enough CPU) and its pressure on them = its share of the workload's GPU demand / those
    nodes' share of the GPU capacity, at most 1 (a GPU is displaced at most once); a node's pressure is the sum
    over the shapes that could use it. A shape that fits every node adds the same to every node and changes no
    choice; a shape that only a few nodes can take (a gpu_spec, 8 GPUs with 120 cores) makes those nodes dear for
    every other pod."""
    gpus = np.asarray(gpu_count, dtype=float)
    capacity = gpus.sum()
    demand = [(s, n * s.gpu_count * s.gpu_milli) for s, n in workload.gpu_shapes()]
    total = sum(d for _, d in demand)
    out = np.zeros(len(gpus))
    if not total or not capacity:
        return out
    names = np.array([m or "" for m in models], dtype=object)
    for s, d in demand:
        ok = (gpu_count >= s.gpu_count) & (cpu_capacity >= s.cpu_milli)
        if s.models:
            ok &= np.isin(names, s.models)
        room = gpus[ok].sum()
        if room:
            out[ok] += min(1.0, (d / total) / (room / capacity))
    return out


def gpu_shape(gpus: float) -> tuple[int, int]:
    """(GPU count, milli-GPU per GPU) of a request in GPUs: a share of one GPU, or whole GPUs."""
    if gpus <= 0:
        return 0, 0
    if gpus < 1:
        return 1, round(gpus * MILLI)
    count = math.ceil(gpus)
    if count != gpus:
        raise ValueError(f"{gpus} GPUs: more than one GPU must be whole")
    return count, MILLI


def job_shape(cpu_milli: int, gpus: float, models: tuple[str, ...]) -> Shape:
    """A job's shape: its CPU (a zero request scores as 100 m), GPUs, and the GPU models it may run on."""
    count, milli = gpu_shape(gpus)
    return Shape(cpu_milli or DEFAULT_CPU_REQUEST, milli, count, tuple(sorted(models)) if count else ())


def jobs_workload(jobs: Iterable, models_of: Callable[[str, str | None], tuple[str, ...]]) -> TargetWorkload | None:
    """The target workload of a list of jobs (JobView-like: cpu_milli, gpus, framework, gpu_model), each allowed on
    `models_of(framework, preferred model)`; None for no jobs."""
    models: dict[tuple[str, str | None], tuple[str, ...]] = {}
    shapes: Counter[Shape] = Counter()
    for job in jobs:
        key = (job.framework, job.gpu_model)
        if key not in models:
            models[key] = models_of(*key)
        shapes[job_shape(job.cpu_milli, job.gpus, models[key])] += 1
    return TargetWorkload.from_shapes(shapes) if shapes else None
