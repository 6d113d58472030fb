"""How an Alibaba 2023 pod becomes a Tidal training job. Every rule here is stated in the report.

- Department: a hash of the pod name (SHA-256; with a seed, of `<seed>:<name>`) picks a department with
  probability equal to its quota share, so each department's work is shaped like its quota. Shares are
  the Helios Earth per-VC GPU quotas (`Earth_gpu_number.csv`, last day, VCs with a quota), or equal shares.
- Quotas (flat): own quota = share x cluster capacity, for every GPU model, CPU and memory (departments
  together own the cluster); borrowed quota = `borrow_ratio` x capacity (default 1: a department
  may borrow any idle capacity; whether it is idle is decided by placement). With a hierarchy
  (`--tree helios`), the quota tree of tree.py instead.
- QoS: LS and Guaranteed pods are the department's own-quota work (own quota first, then
  borrowed, may reclaim borrowed capacity). BE and Burstable pods are best-effort: they run under
  the department's best-effort account `<dept>/be`, which has no own quota, so they only ever run
  on borrowed quota (idle capacity, preemptible by own-quota work). A file without QoS: all LS.
- GPU-model constraints: each distinct `gpu_spec` is a pseudo-framework `spec:<models>` certified
  on exactly those models; the first model listed is the user's choice (JobView.gpu_model), the
  others are compatible fallbacks (a first model on which the pod fits no node is skipped) (used by profiles with model fallback). No spec: framework
  `any`, certified on every GPU model, no preferred model.
- Run time = deletion - scheduled. Never scheduled in the trace: deletion - creation (how long
  the pod was wanted). Never deleted: until the end of the trace. At least MIN_RUN_S.
- Arrival = creation / load_factor (inter-arrival times compressed, run times unchanged).
- Gangs (`--gangs`, the demo's rule: cluster.simulated.traces.gang_plan): pods of whole GPUs become gangs of 2-16
  workers of the pod's shape until gangs hold the share of GPU-time that jobs of >= 8 GPUs hold in Helios; the
  arrivals are then spread by the offered GPU-time's growth, so a load factor offers the same GPU load with or
  without gangs.
- Expected duration = the run time (users' estimates exact), what reservations and backfill read.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cluster.types import JobStatus, JobView, NodeView, QuotaNodeView, QuotaView, capacity_by_resource
from cluster.simulated.alibaba import PodRow
from experiments.replay.tree import BEST_EFFORT_SUFFIX, Hierarchy

ANY_FRAMEWORK = "any"
OWN_QOS = frozenset({"LS", "Guaranteed", ""})
MIN_RUN_S = 1.0


def equal_shares(count: int) -> dict[str, float]:
    return {f"dept-{i}": 1 / count for i in range(count)}


def unit_hash(text: str) -> float:
    """A stable number in [0, 1) from a string (not Python's salted hash())."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


@dataclass(frozen=True)
class Mapping:
    shares: dict[str, float]  # department -> quota share
    borrow_ratio: float = 1.0
    hierarchy: Hierarchy | None = None  # the departments' quota tree (tree.py); None: flat departments
    seed: int = 0  # salts the department draw (0: the pod name alone)

    def __post_init__(self) -> None:
        acc, self_cum = 0.0, []
        for share in self.shares.values():
            acc += share
            self_cum.append(acc)
        object.__setattr__(self, "_names", list(self.shares))
        object.__setattr__(self, "_cum", self_cum)

    def department(self, pod_name: str) -> str:
        i = bisect_right(self._cum, unit_hash(f"{self.seed}:{pod_name}" if self.seed else pod_name) * self._cum[-1])
        return self._names[min(i, len(self._names) - 1)]

    @staticmethod
    def own_eligible(pod: PodRow) -> bool:
        return pod.qos in OWN_QOS

    def account(self, pod: PodRow) -> str:
        """The quota account a pod runs under: its department, or the department's best-effort account."""
        dept = self.department(pod.name)
        return dept if self.own_eligible(pod) else dept + BEST_EFFORT_SUFFIX

    def quotas(self, nodes: Sequence[NodeView]) -> tuple[QuotaView, ...]:
        capacity = cluster_capacity(nodes)
        if self.hierarchy is not None:
            return self.hierarchy.quotas(capacity, self.borrow_ratio, machine_size(nodes))
        out: list[QuotaView] = []
        for dept, share in self.shares.items():
            for key, total in sorted(capacity.items()):
                borrowed = total * self.borrow_ratio
                out.append(QuotaView(dept, key, total * share, borrowed))
                out.append(QuotaView(dept + BEST_EFFORT_SUFFIX, key, 0.0, borrowed))
        return tuple(out)

    def tree(self) -> tuple[QuotaNodeView, ...]:
        """The quota tree's nodes for the snapshot (none: flat departments)."""
        return () if self.hierarchy is None else self.hierarchy.nodes()


def department_of(account: str) -> str:
    """The department a quota account belongs to (a best-effort account's department)."""
    return account.removesuffix(BEST_EFFORT_SUFFIX)


cluster_capacity = capacity_by_resource


def machine_size(nodes: Iterable[NodeView]) -> dict[str, float]:
    """Per quota resource key, the largest node's amount: GPUs of each model, "cpu" millicores, "memory" MiB."""
    size: dict[str, float] = {}
    for n in nodes:
        for key, amount in capacity_by_resource((n,)).items():
            size[key] = max(size.get(key, 0.0), float(amount))
    return size


def gpu_models(nodes: Iterable[NodeView]) -> tuple[str, ...]:
    return tuple(sorted({n.gpu_model for n in nodes if n.gpu_model}))


def framework(pod: PodRow) -> str:
    return f"spec:{'|'.join(pod.gpu_spec)}" if pod.gpu_spec else ANY_FRAMEWORK


def certified(pods: Iterable[PodRow], models: Sequence[str]) -> dict[str, frozenset[str]]:
    """framework -> GPU models: `any` on every model, each distinct gpu_spec on its own models."""
    out = {ANY_FRAMEWORK: frozenset(models)}
    for pod in pods:
        if pod.gpu_spec:
            out.setdefault(framework(pod), frozenset(pod.gpu_spec) & frozenset(models))
    return out


def run_time(pod: PodRow, trace_end: float) -> float:
    start = pod.scheduled if pod.scheduled is not None else pod.creation
    end = pod.deletion if pod.deletion is not None else trace_end
    if start is None:
        return float("inf")  # an untimed trace: runs until the end of the experiment
    return max(MIN_RUN_S, end - start)


def run_time_rule(pod: PodRow) -> str:
    if pod.creation is None:
        return "untimed"
    if pod.scheduled is None:
        return "never-scheduled"
    if pod.deletion is None:
        return "never-ended"
    return "deletion-scheduled"


def job(job_id: int, pod: PodRow, mapping: Mapping, submitted_at: float, preferred: str | None,
        name: str | None = None, workers: int = 1, expected_s: float | None = None) -> JobView:
    """`preferred`: the user's GPU model (trace.Shapes.preferred), None when any model will do; `workers`: a gang's
    workers, each of the pod's shape; `expected_s`: the expected duration (None: unknown, e.g. infinite)."""
    return JobView(
        id=job_id, name=name or pod.name, task_key=pod.name, department=mapping.account(pod),
        framework=framework(pod), gpu_model=preferred, gpus=pod.gpus,
        cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, status=JobStatus.PENDING, submitted_at=submitted_at,
        expected_duration_s=expected_s if expected_s is not None and math.isfinite(expected_s) else None,
        workers=workers,
    )
