"""Run one cycle and look decisions up by job."""

from __future__ import annotations

from cluster.types import Snapshot
from scheduler.policy import Admit, CycleResult, Preempt, StillPending, get_profile, schedule


def cycle(snapshot: Snapshot, profile: str = "tidal", **overrides: object) -> CycleResult:
    return schedule(snapshot, get_profile(profile, **overrides))


def admit(result: CycleResult, job_id: int) -> Admit:
    found = [d for d in result.admitted if d.job_id == job_id]
    assert found, f"job {job_id} not admitted: {[d.message for d in result.decisions]}"
    return found[0]


def pending(result: CycleResult, job_id: int) -> StillPending:
    found = [d for d in result.pending if d.job_id == job_id]
    assert found, f"job {job_id} not pending: {[d.message for d in result.decisions]}"
    return found[0]


def victims(result: CycleResult) -> set[int]:
    return {d.job_id for d in result.decisions if isinstance(d, Preempt)}
