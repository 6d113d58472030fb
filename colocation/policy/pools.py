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

Both bars (long and take-back) read the conservative estimate: the expected run × its source's calibrated factor
(`profile.runtime`, colocation/policy/calibration.py), which the decision's sentence names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from cluster.types import JobStatus, JobView, Pool
from colocation.policy.calibration import IDENTITY, EstimateSource, RuntimeCalibration
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
    estimate = estimate_of(job.past_run_s, job.expected_duration_s)
    return None if estimate is None else estimate[0]


def estimate_of(past_run_s: Sequence[float], stated_s: float | None) -> tuple[float, EstimateSource] | None:
    """The expected run time and where it comes from: the mean of the past runs, else the stated duration."""
    if past_run_s:
        return sum(past_run_s) / len(past_run_s), EstimateSource.PAST_RUNS
    return None if stated_s is None else (stated_s, EstimateSource.STATED)


def conservative_run_of(past_run_s: Sequence[float], stated_s: float | None,
                        runtime: RuntimeCalibration) -> float | None:
    """The expected run time × its source's calibrated factor: what lending reads as a job's run (None: unknown)."""
    estimate = estimate_of(past_run_s, stated_s)
    return None if estimate is None else runtime.scale(*estimate)


def stated_lend_bar_s(now: float, profile: LendingProfile, gpu_model: str | None) -> float:
    """The longest stated duration (no past runs) that may go to lent nodes: `lend_bar_s` over the stated
    durations' calibrated factor (a queue kept by stated duration counts the jobs that may use lent nodes with it)."""
    return lend_bar_s(now, profile, gpu_model) / profile.runtime.factor(EstimateSource.STATED).value


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def preferred_pool(job: JobView, now: float, profile: LendingProfile = DEFAULT) -> PoolChoice:
    """Where a pending training job should go; pure, the scheduling cycle asks it for every pending job."""
    if job.preferred_pool is Pool.FIXED:
        return PoolChoice((Pool.FIXED,), PoolReason.PINNED,
                          f"{job.name} is pinned to the fixed pool (its submitter's choice, or a take-back killed it)")
    estimate = estimate_of(job.past_run_s, job.expected_duration_s)
    short = (Pool.COLOCATION, Pool.FIXED)
    if estimate is None:
        pools = (Pool.FIXED,) if profile.unknown_is_long else short
        return PoolChoice(pools, PoolReason.UNKNOWN,
                          f"{job.name}: no history and no stated duration: {pools[0].value} pool")
    run_s, source = estimate
    expected = profile.runtime.scale(run_s, source)
    said = _expected(run_s, expected, profile.runtime, source, len(job.past_run_s))
    bar = long_bar_s(now, profile)
    if expected > bar:
        return PoolChoice((Pool.FIXED,), PoolReason.LONG, f"{job.name}: {said} > {_h(bar)}: long, fixed pool")
    bound = _job_take_back(job, profile)
    if bound is not None and expected > (lend := _lend_bar(now, profile, bound[1])):
        model, at = bound
        return PoolChoice((Pool.FIXED,), PoolReason.TAKE_BACK_SOON,
                          f"{job.name}: {said} > {_h(lend)} until {model}'s predicted take-back at "
                          f"{local(at, profile.tz):%H:%M} - {profile.deadline_margin_s / 60:.0f} min margin: "
                          f"fixed pool")
    return PoolChoice(short, PoolReason.SHORT, f"{job.name}: {said} <= {_h(bar)}: short, co-location pool first")


def _expected(run_s: float, expected: float, runtime: RuntimeCalibration, source: EstimateSource, runs: int) -> str:
    """"expected 2.1 h (stated duration) × 1.6 (90th percentile over the last 200 finished jobs) = 3.4 h"."""
    said = f"expected {_h(run_s)} ({f'mean of {runs} past runs' if runs else 'stated duration'})"
    factor = runtime.factor(source)
    return said if factor is IDENTITY else f"{said} × {factor.value:.2f} ({factor.explain()}) = {_h(expected)}"


def requeue_after_take_back(job: JobView) -> JobView:
    """The job as it goes back to the queue at once: pending, same submit time, fixed pool only."""
    return replace(job, status=JobStatus.PENDING, allocation=None, peers=(), started_at=None,
                   preferred_pool=Pool.FIXED)
