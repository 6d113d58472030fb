"""The cluster as the placement scorers see it: numpy arrays per node and per node x GPU, changed in place.

Node indices are the tie-break order: every scorer that finds several equally good nodes takes the one with the
lowest index (the experiment builds the cluster in a per-seed random node order, as the FGD artifact's forked
kube-scheduler does: it prefixes node names with a random permutation and takes the smallest name among equal
scores, vendor/k8s.io/kubernetes/pkg/scheduler/core/generic_scheduler.go selectHost).

Units: CPU in millicores, memory in MiB, GPU in milli-GPU (1,000 = one GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.policy.workload import DEFAULT_CPU_REQUEST, MILLI, gpu_shape



@dataclass(frozen=True, slots=True)
class PodRequest:
    """One pod's request. gpu_milli is per GPU: 0 for a CPU-only pod, 1..999 for a share of one GPU, 1,000 for
    whole GPUs (gpu_count of them). models: the GPU models it may run on, () = any. kind: the measured workload it
    behaves like on a shared GPU (the interference model's name; "" unknown), see goodput.py."""

    cpu_milli: int
    memory_mib: int
    gpu_count: int = 0
    gpu_milli: int = 0
    models: tuple[str, ...] = ()
    kind: str = ""

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory_mib < 0 or self.gpu_count < 0:
            raise ValueError(f"negative request: {self}")
        if self.gpu_count == 0 and self.gpu_milli:
            raise ValueError(f"gpu_milli without GPUs: {self}")
        if self.gpu_count == 1 and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"one GPU needs 1..1000 milli: {self}")
        if self.gpu_count > 1 and self.gpu_milli != MILLI:
            raise ValueError(f"several GPUs must be whole (1000 milli each): {self}")

    @property
    def share(self) -> bool:
        return self.gpu_count == 1 and self.gpu_milli < MILLI

    @property
    def total_milli(self) -> int:
        return self.gpu_count * self.gpu_milli

    @property
    def score_cpu(self) -> int:
        """The CPU request scores use (Kubernetes counts a zero request as 100 m there, not in the fit)."""
        return self.cpu_milli or DEFAULT_CPU_REQUEST

    @property
    def klass(self) -> int:
        """The clustering "shape": -1 CPU-only, 0 a share of one GPU, k >= 1 k whole GPUs."""
        return -1 if not self.gpu_count else 0 if self.share else self.gpu_count

    @classmethod
    def from_gpus(cls, cpu_milli: int, memory_mib: int, gpus: float, models: Sequence[str] = ()) -> PodRequest:
        """From the trace reader's form (cluster/simulated/alibaba.py PodRow.gpus: a share as a fraction of one
        GPU, whole GPUs as a count, 0 for none)."""
        count, milli = gpu_shape(gpus)
        return cls(cpu_milli, memory_mib, count, milli, tuple(models))


@dataclass(frozen=True, slots=True)
class Placement:
    node: int
    gpus: tuple[int, ...]  # GPU indices on the node; () for a CPU-only pod


class ClusterState:
    """Per node: CPU and memory left, GPU model, GPUs; per node x GPU: milli-GPU left (GPUs a node lacks are
    columns at 0, which nothing fits on); per shared GPU, the share pods on it (`shares[(node, GPU)]`, in arrival
    order). `place` is the only writer; listeners hear which node changed."""

    def __init__(self, names: Sequence[str], models: Sequence[str | None], gpu_counts: Sequence[int],
                 cpu_milli: Sequence[int], memory_mib: Sequence[int]) -> None:
        n = len(names)
        if not (n == len(models) == len(gpu_counts) == len(cpu_milli) == len(memory_mib)):
            raise ValueError("node columns of different lengths")
        self.names = tuple(names)
        self.model_names: tuple[str, ...] = tuple(sorted({m for m in models if m}))
        index = {m: i for i, m in enumerate(self.model_names)}
        self.no_model = len(self.model_names)  # the model index of a node without GPUs
        self.model = np.array([index[m] if m else self.no_model for m in models], dtype=np.int64)
        self.gpu_count = np.asarray(gpu_counts, dtype=np.int64)
        self.max_gpus = int(self.gpu_count.max(initial=0)) or 1
        self.cpu_capacity = np.asarray(cpu_milli, dtype=np.int64)
        self.memory_capacity = np.asarray(memory_mib, dtype=np.int64)
        self.cpu_left = self.cpu_capacity.copy()
        self.memory_left = self.memory_capacity.copy()
        self.gpu_left = np.where(np.arange(self.max_gpus)[None, :] < self.gpu_count[:, None], MILLI, 0
                                 ).astype(np.int64)
        self.idle = self.gpu_left.sum(axis=1)          # milli-GPU left per node
        self.free = self.gpu_count.copy()              # fully free GPUs per node
        self.max_left = self.gpu_left.max(axis=1)      # the most milli-GPU left on one GPU of the node
        self.klass_pods = np.zeros((n, self.max_gpus + 1), dtype=np.int64)  # GPU pods per clustering shape
        self.capacity_milli = int(self.idle.sum())
        self.allocated_milli = 0
        self.listeners: list[Callable[[int], None]] = []
        self._access: dict[tuple[str, ...], np.ndarray] = {}
        self.everywhere = np.ones(n, dtype=bool)  # no model constraint
        self.shares: dict[tuple[int, int], tuple[PodRequest, ...]] = {}
        self._extensions: dict[object, object] = {}

    @classmethod
    def from_nodes(cls, nodes: Sequence, order: Sequence[int] | None = None) -> ClusterState:
        """From NodeView-like objects (name, gpu_model, gpu_count, cpu_milli, memory_mib), in `order`."""
        picked = [nodes[i] for i in order] if order is not None else list(nodes)
        return cls([x.name for x in picked], [x.gpu_model for x in picked], [x.gpu_count for x in picked],
                   [x.cpu_milli for x in picked], [x.memory_mib for x in picked])

    def __len__(self) -> int:
        return len(self.names)

    def node_models(self) -> list[str | None]:
        """Each node's GPU model name (None: no GPUs), in node order."""
        return [self.model_names[m] if m < self.no_model else None for m in self.model.tolist()]

    # -- what fits where ------------------------------------------------------------------------------
    def access(self, models: tuple[str, ...]) -> np.ndarray:
        """Nodes whose GPU model a pod allowing `models` may use (all nodes for ())."""
        mask = self._access.get(models)
        if mask is None:
            allowed = np.zeros(self.no_model + 1, dtype=bool)
            for m in models:
                if m in self.model_names:
                    allowed[self.model_names.index(m)] = True
            mask = self._access[models] = np.ones(len(self), dtype=bool) if not models else allowed[self.model]
        return mask

    def feasible(self, pod: PodRequest) -> np.ndarray:
        """The filter every policy shares: GPU model allowed, CPU and memory fit, whole-GPU pods need that many
        fully free GPUs, a share one GPU with enough left (artifact: Open-Gpu-Share Filter + NodeResourcesFit)."""
        ok = (self.cpu_left >= pod.cpu_milli) & (self.memory_left >= pod.memory_mib)
        if pod.gpu_count:
            ok &= self.access(pod.models)
            ok &= (self.max_left >= pod.gpu_milli) if pod.share else (self.free >= pod.gpu_count)
        return ok

    def feasible_one(self, node: int, pod: PodRequest) -> bool:
        if self.cpu_left[node] < pod.cpu_milli or self.memory_left[node] < pod.memory_mib:
            return False
        if not pod.gpu_count:
            return True
        if not self.access(pod.models)[node]:
            return False
        return bool(self.max_left[node] >= pod.gpu_milli if pod.share else self.free[node] >= pod.gpu_count)

    # -- GPUs inside a node ---------------------------------------------------------------------------
    def first_free_gpus(self, node: int, count: int) -> tuple[int, ...]:
        """The lowest-index fully free GPUs (artifact: simontype.AllocateExclusiveGpuId)."""
        return tuple(int(g) for g in np.flatnonzero(self.gpu_left[node] == MILLI)[:count])

    def best_fit_gpu(self, node: int, milli: int) -> int:
        """The fullest GPU a share still fits on, lowest index among equals (artifact:
        allocateGpuIdBasedOnBestFit)."""
        left = self.gpu_left[node]
        return int(np.argmin(np.where(left >= milli, left, MILLI + 1)))

    def gpus_for(self, node: int, pod: PodRequest) -> tuple[int, ...]:
        """Best-fit GPUs for `pod` on `node`: the fullest GPU a share fits on, else lowest-index free GPUs."""
        if not pod.gpu_count:
            return ()
        if pod.share:
            return (self.best_fit_gpu(node, pod.gpu_milli),)
        return self.first_free_gpus(node, pod.gpu_count)

    # -- the one writer -------------------------------------------------------------------------------
    def place(self, placement: Placement, pod: PodRequest) -> None:
        n, gpus = placement.node, placement.gpus
        if not self.feasible_one(n, pod):
            raise ValueError(f"pod {pod} does not fit node {self.names[n]}")
        if len(gpus) != pod.gpu_count or len(set(gpus)) != len(gpus):
            raise ValueError(f"pod {pod} needs {pod.gpu_count} distinct GPUs, got {gpus}")
        left = self.gpu_left[n]
        for g in gpus:
            if not 0 <= g < self.gpu_count[n] or left[g] < pod.gpu_milli:
                raise ValueError(f"GPU {g} of node {self.names[n]} has {left[g] if 0 <= g < len(left) else 0} "
                                 f"milli left, pod needs {pod.gpu_milli}")
        self.cpu_left[n] -= pod.cpu_milli
        self.memory_left[n] -= pod.memory_mib
        if gpus:
            left[list(gpus)] -= pod.gpu_milli
            self.idle[n] -= pod.total_milli
            self.free[n] = int(np.count_nonzero(left == MILLI))
            self.max_left[n] = int(left.max())
            self.klass_pods[n, pod.klass] += 1
            self.allocated_milli += pod.total_milli
            if pod.share:
                self.shares[(n, gpus[0])] = self.shares.get((n, gpus[0]), ()) + (pod,)
        for listener in self.listeners:
            listener(n)

    def extension(self, key: object, make: Callable[[ClusterState], object]) -> object:
        """Per-cluster state a scorer keeps in step with `place` (e.g. the fragmentation of every node), made
        once per key and cluster."""
        ext = self._extensions.get(key)
        if ext is None:
            ext = self._extensions[key] = make(self)
        return ext
