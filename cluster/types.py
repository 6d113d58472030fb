"""Shared vocabulary of the cluster: plain frozen values, no framework imports.

Times are float epoch seconds everywhere (the live loop passes time.time(),
replay passes a virtual clock). GPUs are counted in (fractional) GPUs, CPU in
millicores, memory in MiB. The string values of the enums are the ones stored
by the Django models.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum

# Fractional shares are floats: tolerate rounding when summing shares on a GPU.
GPU_EPS = 1e-6
CPU_KEY = "cpu"
MEMORY_KEY = "memory"
# A node's topology domain (a rack, a switch block): `pack` gangs prefer nodes of one block. The simulated cluster
# assigns blocks; on Kubernetes an operator labels the nodes.
BLOCK_LABEL = "tidal.io/block"


class NodeState(StrEnum):
    """A node's state (docs/concepts/lending.md#the-node-state-machine); the node model's choices too (str() is the
    value)."""

    ONLINE_NORMAL = "online-normal"
    ONLINE_UNNORMAL = "online-unnormal"
    OFFLINE_NORMAL = "offline-normal"
    OFFLINE_UNNORMAL = "offline-unnormal"

    @property
    def normal(self) -> bool:
        """Only normal nodes receive new work."""
        return self in (NodeState.ONLINE_NORMAL, NodeState.OFFLINE_NORMAL)

    @property
    def offline(self) -> bool:
        """Offline nodes run training; online nodes run inference."""
        return self in (NodeState.OFFLINE_NORMAL, NodeState.OFFLINE_UNNORMAL)


class Pool(StrEnum):
    """A node's pool (a job's, the one it prefers); the node model's choices too (str() is the value)."""

    FIXED = "fixed"
    COLOCATION = "colocation"


class JobStatus(str, Enum):
    PENDING = "pending"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"

    @property
    def holds_resources(self) -> bool:
        return self in (JobStatus.ADMITTED, JobStatus.RUNNING)


class Topology(str, Enum):
    """Where a gang's workers go: the fewest nodes (of one block if it can), or one worker per node."""

    PACK = "pack"
    SPREAD = "spread"


class QuotaKind(str, Enum):
    OWN = "own"
    BORROWED = "borrowed"


def check_gpu_request(gpus: float, workers: int = 1) -> None:
    """A job asks for a fraction of one GPU or for whole GPUs; a gang's workers for whole GPUs (or none)."""
    if gpus < 0 or (gpus > 1 and not float(gpus).is_integer()):
        raise ValueError(f"gpus must be a fraction <= 1 or a whole number, got {gpus}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers > 1 and not float(gpus).is_integer():
        raise ValueError(f"a job of {workers} workers asks for whole GPUs per worker, got {gpus}")


@dataclass(frozen=True, slots=True)
class Resources:
    """A resource vector: GPUs by model, CPU millicores, memory MiB."""

    gpus: tuple[tuple[str, float], ...] = ()  # sorted (model, amount), no zeros
    cpu_milli: int = 0
    memory_mib: int = 0

    @classmethod
    def of(cls, gpu_model: str | None, gpus: float, cpu_milli: int, memory_mib: int) -> Resources:
        by_model = ((gpu_model, float(gpus)),) if gpu_model and gpus > 0 else ()
        return cls(by_model, cpu_milli, memory_mib)

    def gpu(self, model: str) -> float:
        return dict(self.gpus).get(model, 0.0)

    def amounts(self) -> dict[str, float]:
        """Amounts keyed by quota resource key (GPU model, "cpu", "memory"), zeros dropped."""
        out: dict[str, float] = dict(self.gpus)
        if self.cpu_milli:
            out[CPU_KEY] = self.cpu_milli
        if self.memory_mib:
            out[MEMORY_KEY] = self.memory_mib
        return out

    def __add__(self, other: Resources) -> Resources:
        return self._combine(other, 1)

    def __sub__(self, other: Resources) -> Resources:
        return self._combine(other, -1)

    def _combine(self, other: Resources, sign: int) -> Resources:
        merged = dict(self.gpus)
        for model, amount in other.gpus:
            merged[model] = merged.get(model, 0.0) + sign * amount
        gpus = tuple(sorted((m, a) for m, a in merged.items() if abs(a) > GPU_EPS))
        return Resources(gpus, self.cpu_milli + sign * other.cpu_milli,
                         self.memory_mib + sign * other.memory_mib)

    def fits(self, capacity: Resources) -> bool:
        """True when every component of self is within capacity."""
        cap = dict(capacity.gpus)
        return (all(a <= cap.get(m, 0.0) + GPU_EPS for m, a in self.gpus)
                and self.cpu_milli <= capacity.cpu_milli
                and self.memory_mib <= capacity.memory_mib)


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A share (0 < share <= 1) of GPU number `index` on a node."""

    index: int
    share: float


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    resource_group: str
    gpu_model: str | None  # None: CPU-only node
    gpu_count: int
    cpu_milli: int
    memory_mib: int
    pool: Pool
    state: NodeState
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_used: tuple[float, ...] = ()  # per GPU, each <= 1.0; empty means all free
    cpu_used: int = 0
    memory_used: int = 0
    pods: tuple[str, ...] = ()

    def used_shares(self) -> tuple[float, ...]:
        return self.gpu_used or (0.0,) * self.gpu_count

    @property
    def accepts_training(self) -> bool:
        return self.state is NodeState.OFFLINE_NORMAL


@dataclass(frozen=True, slots=True)
class RunProfile:
    """Profile of one past run of a task (from the streaming pipeline)."""

    mean_gpu_util: float  # 0..1 over the GPUs it held
    peak_gpu_mem_util: float  # 0..1
    mean_cpu_milli: float
    peak_cpu_milli: float
    mean_sm_active: float | None = None  # DCGM_FI_PROF_SM_ACTIVE 0..1; None where the exporter lacks it
    mean_tensor_active: float | None = None  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE 0..1 (the interference signature)
    mean_dram_active: float | None = None  # DCGM_FI_PROF_DRAM_ACTIVE 0..1

    @property
    def gpu_activity(self) -> GpuActivity:
        """How busy its GPUs were: SM active where measured (GPU util counts time slices in which any kernel ran,
        so a launch-bound job reads far busier than its SMs are), else GPU util."""
        if self.mean_sm_active is not None:
            return GpuActivity(self.mean_sm_active, SM_ACTIVE)
        return GpuActivity(self.mean_gpu_util, GPU_UTIL)


SM_ACTIVE, GPU_UTIL = "SM active", "GPU util"


@dataclass(frozen=True, slots=True)
class GpuActivity:
    """A GPU busy figure (0..1) and the metric it came from (SM_ACTIVE or GPU_UTIL), for decisions' reasons."""

    value: float
    source: str


def mean_gpu_activity(runs: Iterable[RunProfile]) -> GpuActivity | None:
    """The mean of the runs' GPU activity, each run on its own best metric; the source names every metric used."""
    activities = [run.gpu_activity for run in runs]
    if not activities:
        return None
    sources = sorted({a.source for a in activities}, key=(SM_ACTIVE, GPU_UTIL).index)
    return GpuActivity(sum(a.value for a in activities) / len(activities), " and ".join(sources))


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where an admitted/running job sits and what it holds (right-sized)."""

    node: str
    gpu_model: str | None
    gpu_shares: tuple[GpuShare, ...]
    cpu_milli: int
    memory_mib: int
    quota_kind: QuotaKind | None  # None: scheduled by a profile without quotas

    @property
    def gpus(self) -> float:
        return sum(s.share for s in self.gpu_shares)

    @property
    def resources(self) -> Resources:
        return Resources.of(self.gpu_model, self.gpus, self.cpu_milli, self.memory_mib)


@dataclass(frozen=True, slots=True)
class JobView:
    """A training job: `workers` identical pods (a gang: all start together or none, and end together), each
    asking for `gpus`, `cpu_milli` and `memory_mib`. `allocation` is worker 0's, `peers` the others'."""

    id: int
    name: str
    task_key: str
    department: str
    framework: str
    gpu_model: str | None  # preferred model; None: any certified model
    gpus: float
    cpu_milli: int
    memory_mib: int
    status: JobStatus
    submitted_at: float
    started_at: float | None = None
    allocation: Allocation | None = None  # set while admitted/running
    expected_duration_s: float | None = None
    history: tuple[RunProfile, ...] = ()  # past runs, oldest first; empty: no history
    preferred_pool: Pool | None = None  # FIXED: pinned there; else the pool rule chooses (colocation.policy.pools)
    keep_request: bool = False  # an admin turned right-sizing off: bind the request as asked
    past_run_s: tuple[float, ...] = ()  # durations of the task's past succeeded runs, oldest first (the pool rule)
    workers: int = 1
    topology: Topology = Topology.PACK
    peers: tuple[Allocation, ...] = ()  # workers 1.. of an admitted/running gang
    preemptible: bool = True  # False: admitted on own quota only (at every level of its quota tree), never borrowed

    def __post_init__(self) -> None:
        check_gpu_request(self.gpus, self.workers)
        if self.status.holds_resources and self.allocation is None:
            raise ValueError(f"job {self.id} is {self.status.value} without an allocation")
        if self.allocation is not None and len(self.peers) != self.workers - 1:
            raise ValueError(f"job {self.id} has {self.workers} workers but {1 + len(self.peers)} allocations")

    @property
    def gang(self) -> bool:
        return self.workers > 1

    @property
    def allocations(self) -> tuple[Allocation, ...]:
        """Every worker's allocation, worker 0 first; empty while pending."""
        return (self.allocation, *self.peers) if self.allocation is not None else ()

    @property
    def total_gpus(self) -> float:
        return self.gpus * self.workers

    @property
    def node(self) -> str | None:
        return self.allocation.node if self.allocation else None

    @property
    def assigned_gpu_model(self) -> str | None:
        return self.allocation.gpu_model if self.allocation else None

    @property
    def quota_kind(self) -> QuotaKind | None:
        return self.allocation.quota_kind if self.allocation else None

    def run_time_s(self, now: float) -> float:
        return max(0.0, now - self.started_at) if self.started_at is not None else 0.0


@dataclass(frozen=True, slots=True)
class QuotaView:
    """A department's (a quota-tree node's) quota of one resource. `borrowed` is the borrowing limit (inf: none); a
    `lend_limit` (None: all of its own may be lent) keeps the rest of its own for its subtree."""

    department: str
    resource: str  # GPU model name, "cpu" (millicores) or "memory" (MiB)
    own: float
    borrowed: float
    lend_limit: float | None = None


@dataclass(frozen=True, slots=True)
class QuotaNodeView:
    """A node of the quota tree (organisation -> division -> team); only leaves admit jobs. A department not named in
    the snapshot's tree is a leaf under the root."""

    name: str
    parent: str | None  # None: under the root
    weight: float = 1.0  # fair-share weight (0: leftovers only)
    reclaim_min_runtime_s: float = 0.0  # its borrowed work younger than this is reclaimed last
    fence: bool = False  # its subtree's work preempts only inside the subtree (YuniKorn's fence)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything a scheduling cycle may look at, frozen at `now`."""

    now: float
    nodes: tuple[NodeView, ...]
    jobs: tuple[JobView, ...]  # pending + admitted + running
    quotas: tuple[QuotaView, ...]
    certified: Mapping[str, frozenset[str]]  # framework -> GPU models it is certified on
    gpu_models: tuple[str, ...]
    tree: tuple[QuotaNodeView, ...] = ()  # the quota tree's inner nodes and any leaf with a weight; (): flat

    def compatible_models(self, framework: str, preferred: str | None) -> tuple[str, ...]:
        """GPU models a framework may run on; an uncertified framework only gets its preferred model."""
        models = self.certified.get(framework)
        if models is None:
            return (preferred,) if preferred else ()
        return tuple(m for m in (self.gpu_models or sorted(models)) if m in models)


def capacity_by_resource(nodes: Iterable[NodeView]) -> Counter[str]:
    """Total capacity per quota resource key: GPUs of each model, "cpu" millicores, "memory" MiB."""
    capacity: Counter[str] = Counter()
    for n in nodes:
        if n.gpu_model:
            capacity[n.gpu_model] += n.gpu_count
        capacity[CPU_KEY] += n.cpu_milli
        capacity[MEMORY_KEY] += n.memory_mib
    return capacity
