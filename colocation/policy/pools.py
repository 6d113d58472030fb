"""Training pools (docs/concepts/lending.md#pools): long jobs on the fixed pool, short ones on the co-location pool first.

"Long" = expected run time > 12 h; for a job scheduled in the night window (18:00-08:00 local)
the bar is (time until the next 08:00) + 1 h instead, i.e. a night job is short when it ends
(with an hour of slack) before the morning take-back starts. At 18:00 the bar is 15 h, at 03:00 6 h,
at 07:59 1 h 1 min; at 08:00 it is 12 h again.

Expected run time: the mean of the job's past run durations (its profile) when there are any,
else the duration the user stated, else unknown (`LendingProfile.unknown_is_long` decides).
A job pinned to the fixed pool stays there: its submitter chose it, or a take-back killed it on the co-location
pool and it went back to the queue at once (`requeue_after_take_back`).

Deadline-aware placement (forecast-driven lending): when the profile carries a predicted take-back time for the
job's GPU model (`take_back_by`, set each cycle from `forecast.take_back_at`), a job may go to lent nodes only if
its expected run ends before that time minus `deadline_margin_s` (`lend_bar_s`); otherwise the fixed pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from cluster.types import JobStatus, JobView, Pool
from colocation.policy.profile import DEFAULT, LendingProfile
from colocation.policy.windows import in_window, local, seconds_until


class PoolReason(str, Enum):
    LONG = "long-job"
    SHORT = "short-job"
    UNKNOWN = "unknown-run-time"
    PINNED = "pinned-to-fixed"
    TAKE_BACK_SOON = "ends-after-take-back"  # would outlive its lent node's predicted take-back


@dataclass(frozen=True, slots=True)
class PoolChoice:
    pools: tuple[Pool, ...]  # in order of preference; a long job has no fallback
    reason: PoolReason
    message: str

    @property
    def preferred(self) -> Pool:
        return self.pools[0]


def long_bar_s(now: float, profile: LendingProfile = DEFAULT) -> float:
    """Run time above which a job scheduled at `now` is long."""
    t = local(now, profile.tz).time()
    if in_window(t, profile.night_start, profile.night_end):
        return seconds_until(now, profile.night_end, profile.tz) + profile.night_slack_s
    return profile.long_job_s


def take_back_by(profile: LendingProfile, gpu_model: str | None) -> float | None:
    """The predicted take-back time of this GPU model's lent nodes ("" / None: CPU-only), if any."""
    key = gpu_model or ""
    return next((t for model, t in profile.take_back_by if model == key), None)


def lend_bar_s(now: float, profile: LendingProfile, gpu_model: str | None) -> float:
    """Run time above which a job of this GPU model (None or "": CPU-only) may not go to lent nodes: `long_bar_s`,
    lowered to the time left until the model's predicted take-back minus `deadline_margin_s` (>= 0) when the
    profile has one."""
    return _lend_bar(now, profile, take_back_by(profile, gpu_model))


def _lend_bar(now: float, profile: LendingProfile, at: float | None) -> float:
    bar = long_bar_s(now, profile)
    return bar if at is None else min(bar, max(0.0, at - now - profile.deadline_margin_s))


def _job_take_back(job: JobView, profile: LendingProfile) -> tuple[str, float] | None:
    """(model, time) of the take-back that bounds this job: its model's; a GPU job of any model: the earliest."""
    if job.gpu_model or not job.gpus:
        at = take_back_by(profile, job.gpu_model)
        return None if at is None else (job.gpu_model or "CPU", at)
    gpu = [(model, t) for model, t in profile.take_back_by if model]
    return min(gpu, key=lambda e: e[1]) if gpu else None


def is_long(expected_run_s: float, now: float, profile: LendingProfile = DEFAULT) -> bool:
    return expected_run_s > long_bar_s(now, profile)


def expected_run_s(job: JobView) -> float | None:
    """Mean past run duration (profile) if any, else the stated duration, else None."""
    return expected_run_of(job.past_run_s, job.expected_duration_s)


def expected_run_of(past_run_s: Sequence[float], stated_s: float | None) -> float | None:
    """The rule of `expected_run_s` on its two inputs (the live lending loop has no JobView)."""
    if past_run_s:
        return sum(past_run_s) / len(past_run_s)
    return stated_s


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def preferred_pool(job: JobView, now: float, profile: LendingProfile = DEFAULT) -> PoolChoice:
    """Where a pending training job should go; pure, the scheduling cycle asks it for every pending job."""
    if job.preferred_pool is Pool.FIXED:
        return PoolChoice((Pool.FIXED,), PoolReason.PINNED,
                          f"{job.name} is pinned to the fixed pool (its submitter's choice, or a take-back killed it)")
    expected = expected_run_s(job)
    short = (Pool.COLOCATION, Pool.FIXED)
    if expected is None:
        pools = (Pool.FIXED,) if profile.unknown_is_long else short
        return PoolChoice(pools, PoolReason.UNKNOWN,
                          f"{job.name}: no history and no stated duration: {pools[0].value} pool")
    bar = long_bar_s(now, profile)
    source = f"mean of {len(job.past_run_s)} past runs" if job.past_run_s else "stated duration"
    if expected > bar:
        return PoolChoice((Pool.FIXED,), PoolReason.LONG,
                          f"{job.name}: expected {_h(expected)} ({source}) > {_h(bar)}: long, fixed pool")
    bound = _job_take_back(job, profile)
    if bound is not None and expected > (lend := _lend_bar(now, profile, bound[1])):
        model, at = bound
        return PoolChoice((Pool.FIXED,), PoolReason.TAKE_BACK_SOON,
                          f"{job.name}: expected {_h(expected)} ({source}) > {_h(lend)} until "
                          f"{model}'s predicted take-back at {local(at, profile.tz):%H:%M} - "
                          f"{profile.deadline_margin_s / 60:.0f} min margin: fixed pool")
    return PoolChoice(short, PoolReason.SHORT,
                      f"{job.name}: expected {_h(expected)} ({source}) <= {_h(bar)}: short, "
                      f"co-location pool first")


def requeue_after_take_back(job: JobView) -> JobView:
    """The job as it goes back to the queue at once: pending, same submit time, fixed pool only."""
    return replace(job, status=JobStatus.PENDING, allocation=None, peers=(), started_at=None,
                   preferred_pool=Pool.FIXED)
