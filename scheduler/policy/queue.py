"""The cycle's queue: every pending job right-sized, scored and ordered (score, then submit time; or submit time
for FCFS), with the GPU models it may use, preferred first."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.types import JobStatus, JobView, Pool, QuotaKind
from colocation.policy.pools import preferred_pool
from colocation.policy.profile import LendingProfile
from scheduler.policy.cache import PerJob
from scheduler.policy.priority import ScoreBreakdown, aging_points, base_points, waited_s
from scheduler.policy.profile import QueueOrder
from scheduler.policy.quota import Demand, gpu_demand
from scheduler.policy.rightsizing import Request
from scheduler.policy.state import CycleState


# Scratch types of the cycle are plain (not frozen) slotted dataclasses: several are built for every
# waiting job of every cycle, and a frozen dataclass takes about 4x as long to construct.
@dataclass(slots=True)
class Queued:
    job: JobView
    request: Request  # right-sized
    score: ScoreBreakdown  # with the quota kind the job would get at the start of the cycle
    models: tuple[str | None, ...]  # certified models, preferred first; (None,) for CPU-only
    host: Demand  # the CPU and memory part of the quota demand (the same on every model; a gang's whole)
    pool: Pool | None  # the pool it asks for; None: any
    total: int  # score.total
    shape: tuple  # its department, framework, preferred model, GPUs and memory (right-sized), workers, topology
    pool_why: str = ""  # why the pool rule chose its pool (`preferred_pool`), for its admission's sentence


class QueueBuilder:
    def __init__(self, state: CycleState, lending: LendingProfile | None) -> None:
        self.state, self.snap, self.profile, self.lending = state, state.snap, state.profile, lending
        self._certified: dict[tuple[str, str | None], tuple[str | None, ...]] = {}
        self._breakdowns: dict[tuple[int, int, int], ScoreBreakdown] = {}
        self._own_room: dict[tuple, bool] = {}  # the ledger does not change while the queue is built

    def build(self, per_job: PerJob) -> list[Queued]:
        per_job.start(self.profile)
        pending = JobStatus.PENDING
        items = [self._queued(j, per_job) for j in self.snap.jobs if j.status is pending]
        per_job.finish()
        if self.profile.order is QueueOrder.FIFO:
            items.sort(key=lambda q: (q.job.submitted_at, q.job.id))
        else:
            items.sort(key=lambda q: (-q.total, q.job.submitted_at, q.job.id))
        return items

    def _queued(self, job: JobView, per_job: PerJob) -> Queued:
        profile = self.profile
        _, request, utilization, host, shape = per_job.get(job, profile)
        models = self._models(job)
        kind = None
        if profile.quotas:
            first = models[0] if models else job.gpu_model
            key = (job.department, first, request.gpus * job.workers, host)
            own = self._own_room.get(key)
            if own is None:
                own = self._own_room[key] = self.state.ledger.has_own_room(job.department, gpu_demand(*key[1:3]), host)
            kind = QuotaKind.OWN if own else QuotaKind.BORROWED
        # = score(job, kind, now, profile), with the utilization term from the memo
        breakdown = self._breakdown(base_points(kind, profile), utilization,
                                    aging_points(waited_s(job, self.snap.now), profile))
        if self.lending is None:
            return Queued(job, request, breakdown, models, host, job.preferred_pool, breakdown.total, shape)
        choice = preferred_pool(job, self.snap.now, self.lending)
        return Queued(job, request, breakdown, models, host, choice.preferred, breakdown.total, shape, choice.message)

    def _breakdown(self, base: int, utilization: int, aging: int) -> ScoreBreakdown:
        """ScoreBreakdown(...), one shared (frozen) object per distinct score: a handful of values
        per cycle, and building a frozen dataclass costs more than looking one up."""
        key = (base, utilization, aging)
        breakdown = self._breakdowns.get(key)
        if breakdown is None:
            breakdown = self._breakdowns[key] = ScoreBreakdown(base, utilization, aging)
        return breakdown

    def _models(self, job: JobView) -> tuple[str | None, ...]:
        if job.gpus == 0:
            return (None,)
        key = (job.framework, job.gpu_model)
        if key not in self._certified:
            self._certified[key] = self._certified_models(*key)
        return self._certified[key]

    def _certified_models(self, framework: str, preferred: str | None) -> tuple[str | None, ...]:
        compatible = self.snap.compatible_models(framework, preferred)
        if preferred in compatible:
            rest = tuple(m for m in compatible if m != preferred) if self.profile.model_fallback else ()
            return (preferred, *rest)
        return compatible if self.profile.model_fallback or preferred is None else ()
