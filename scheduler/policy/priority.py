"""Priority score: base (own/borrowed quota) + utilization term + aging."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.types import JobView, QuotaKind, mean_gpu_activity
from scheduler.policy.profile import Profile


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    base: int
    utilization: int
    aging: int

    @property
    def total(self) -> int:
        return self.base + self.utilization + self.aging

    def __str__(self) -> str:
        return f"{self.total} (base {self.base}, utilization {self.utilization:+d}, aging +{self.aging})"

    def preemption(self, profile: Profile) -> int:
        """What preemption compares: the total, or without aging unless the profile lets aging preempt."""
        return self.total if profile.aging_preempts else self.base + self.utilization


def aging_points(waited_s: float, profile: Profile) -> int:
    """After `aging_after_s`, the n-th further step adds min(n, cap): 1, 2, 3, 4, 5, 5, ..."""
    if not profile.aging or waited_s <= profile.aging_after_s:
        return 0
    n = int((waited_s - profile.aging_after_s) // profile.aging_step_s)
    cap = profile.aging_cap
    if n <= cap:
        return n * (n + 1) // 2
    return cap * (cap + 1) // 2 + cap * (n - cap)


@dataclass(frozen=True, slots=True)
class AgingStep:
    in_s: float  # seconds until the next increment
    points: int  # what it adds


def next_aging_step(waited_s: float, profile: Profile) -> AgingStep | None:
    """When a job that has waited `waited_s` gains its next aging points, and how many (None: no aging)."""
    if not profile.aging:
        return None
    n = max(0, int((waited_s - profile.aging_after_s) // profile.aging_step_s)) if waited_s > profile.aging_after_s else 0
    at = profile.aging_after_s + (n + 1) * profile.aging_step_s
    return AgingStep(in_s=at - waited_s, points=min(n + 1, profile.aging_cap))


def mean_utilization(job: JobView, runs: int) -> float | None:
    """Mean utilization over the last runs: for GPU jobs SM active where measured, else GPU util
    (cluster.types.RunProfile.gpu_activity); CPU used/requested otherwise."""
    recent = job.history[-runs:]
    if not recent:
        return None
    if job.gpus > 0:
        return mean_gpu_activity(recent).value
    return sum(r.mean_cpu_milli for r in recent) / len(recent) / max(job.cpu_milli, 1)


def utilization_points(job: JobView, profile: Profile) -> int:
    if not profile.utilization_term:
        return 0
    util = mean_utilization(job, profile.rightsizing_runs)
    if util is None:
        return 0
    return profile.utilization_points if util >= profile.utilization_target else -profile.utilization_points


def waited_s(job: JobView, now: float) -> float:
    """Queue wait: until now while pending, frozen at start once running."""
    return (job.started_at if job.started_at is not None else now) - job.submitted_at


def base_points(kind: QuotaKind | None, profile: Profile) -> int:
    """kind None (profile without quotas) scores like own quota."""
    return profile.borrowed_base if kind is QuotaKind.BORROWED else profile.own_base


def score(job: JobView, kind: QuotaKind | None, now: float, profile: Profile) -> ScoreBreakdown:
    return ScoreBreakdown(base_points(kind, profile), utilization_points(job, profile),
                          aging_points(waited_s(job, now), profile))


def rebased(breakdown: ScoreBreakdown, kind: QuotaKind | None, profile: Profile) -> ScoreBreakdown:
    """The same job's score under another quota kind (only the base depends on it), without
    recomputing its history and wait."""
    base = base_points(kind, profile)
    return breakdown if base == breakdown.base else ScoreBreakdown(base, breakdown.utilization, breakdown.aging)
