"""What a scheduling cycle decides. Each decision carries a reason code and a sentence."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from cluster.types import GpuShare, QuotaKind
from scheduler.policy.priority import ScoreBreakdown
from scheduler.policy.rightsizing import Request


class Reason(str, Enum):
    ADMITTED_OWN = "admitted-own-quota"
    ADMITTED_BORROWED = "admitted-borrowed-quota"
    ADMITTED = "admitted"  # profile without quotas
    PREEMPTED_RECLAIM = "preempted-reclaim"  # own-quota work takes back borrowed capacity
    PREEMPTED_PRIORITY = "preempted-priority"  # a higher priority (base + utilization) needed the room
    PREEMPTED_FAIR_SHARE = "preempted-fair-share"  # borrowed work of a subtree below its fair share needed the room
    QUOTA_EXHAUSTED = "quota-exhausted"
    NO_IDLE_CAPACITY = "no-idle-capacity"  # borrowed quota has room, the cluster has no idle fit
    NO_CAPACITY = "no-capacity"  # quota has room, no node fits even with preemption
    NO_COMPATIBLE_MODEL = "no-compatible-model"
    BLOCKED = "blocked-by-queue-head"  # strict FCFS
    RESERVED = "reserved"  # a gang that cannot start now holds the nodes that free soonest


@dataclass(frozen=True, slots=True)
class Worker:
    """Where one worker of an admitted job goes."""

    node: str
    gpu_shares: tuple[GpuShare, ...]


@dataclass(frozen=True, slots=True)
class Admit:
    job_id: int
    job_name: str
    node: str
    gpu_model: str | None  # the model actually used (and charged)
    gpu_shares: tuple[GpuShare, ...]
    quota_kind: QuotaKind | None
    requested: Request
    rightsized: Request  # what is bound and charged
    score: ScoreBreakdown
    preempting: tuple[int, ...]  # victims to evict before binding (their Preempt decisions come first)
    reason: Reason
    message: str
    peers: tuple[Worker, ...] = ()  # a gang's workers 1.. (worker 0 is node, gpu_shares)

    @property
    def workers(self) -> tuple[Worker, ...]:
        """Every worker, rank 0 first: bind all of them or none."""
        return (Worker(self.node, self.gpu_shares), *self.peers)


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: int  # the victim
    job_name: str
    node: str
    for_job_id: int
    run_time_s: float
    requeue: bool  # always True: back to pending with its submit time and history
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class StillPending:
    job_id: int
    job_name: str
    position: int  # 0-based place in this cycle's queue order
    score: ScoreBreakdown
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Reserve:
    """A gang that cannot start now holds `nodes` from `start_at` (when their jobs are expected to end); until then
    only jobs expected to end before `start_at` may use their room (backfill), and, when the gang reclaims (own quota),
    borrowed jobs."""

    job_id: int
    job_name: str
    nodes: tuple[str, ...]
    start_at: float
    reason: Reason
    message: str


CycleDecision = Admit | Preempt | StillPending | Reserve  # (core.models.Decision is the stored record)


@dataclass(frozen=True, slots=True)
class CycleResult:
    now: float
    decisions: tuple[CycleDecision, ...]  # in order of application

    @property
    def admitted(self) -> tuple[Admit, ...]:
        return tuple(d for d in self.decisions if isinstance(d, Admit))

    @property
    def preempted(self) -> tuple[Preempt, ...]:
        return tuple(d for d in self.decisions if isinstance(d, Preempt))

    @property
    def pending(self) -> tuple[StillPending, ...]:
        return tuple(d for d in self.decisions if isinstance(d, StillPending))

    @property
    def reserved(self) -> tuple[Reserve, ...]:
        return tuple(d for d in self.decisions if isinstance(d, Reserve))
