"""Calibrated runtime estimates for lent-node placement (docs/concepts/lending.md#calibrated-run-time-estimates).

A job's expected run time (`pools.estimate_of`: the mean of its past runs, else its stated duration) is a guess;
a job that outruns it on a lent node is killed by the take-back it was placed to beat. So wherever lending reads a
job's expected end, it reads a conservative one: the estimate × a high quantile of real / estimated run time over
the recently finished jobs, per source of the estimate (a task's mean of past runs and a submitter's stated duration
may err very differently).

Why the 90th percentile: a job placed at its bar outlives its calibrated estimate one time in ten, and it is killed
only if a take-back also comes before its real end. On LLM co-location with estimates off by a lognormal σ 0.5 (the
factor is then ~1.8-2) it killed 0 and 1 jobs on two seeds (0.00 %, 0.17 % of the starts on lent nodes) where the
80th percentile killed 4 and 3 (0.62 %, 0.50 %); with exact estimates every ratio is 1 and nothing changes
(docs/results/2026-11-29-llm-autoscaling.md#calibrated-runtime-estimates).

Prior: with fewer than `MIN_FINISHED` finished jobs of a source, the quantile of all sources together; with fewer
than that in all, `PRIOR_FACTOR` (1.5: the 90th percentile of a lognormal error of σ 0.32, i.e. estimates typically
within ×/÷ 1.4: cautious until the cluster's own jobs say otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

WINDOW = 200  # finished jobs kept: recent enough to follow a change in how users state durations
QUANTILE = 0.9
MIN_FINISHED = 20
PRIOR_FACTOR = 1.5
# A job estimated shorter than this says little about the ones lent-node placement turns on (hours, against a 30 min
# margin): its ratio is mostly its start-up and the loop's tick.
MIN_ESTIMATE_S = 600.0


class EstimateSource(str, Enum):
    PAST_RUNS = "past-runs"  # the mean of the task's past run durations
    STATED = "stated"  # the duration its submitter stated


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """A training job that finished: the run time it was placed with (its estimate) and the one it really took."""

    estimate_s: float
    real_s: float
    source: EstimateSource


@dataclass(frozen=True, slots=True)
class Factor:
    """What a source's estimates are multiplied by, and why."""

    value: float
    quantile: float
    finished: int  # finished jobs it was read from (0: the prior)

    def explain(self) -> str:
        if self.finished == 0:
            return (f"prior: fewer than {MIN_FINISHED} finished jobs estimated at {MIN_ESTIMATE_S / 60:.0f} min "
                    "or more")
        return f"{self.quantile * 100:.0f}th percentile over the last {self.finished} finished jobs"


IDENTITY = Factor(1.0, 1.0, -1)  # uncalibrated: the estimate as it is


@dataclass(frozen=True, slots=True)
class RuntimeCalibration:
    """Per estimate source, the factor conservative estimates use; no source: the identity (no calibration)."""

    factors: tuple[tuple[EstimateSource, Factor], ...] = ()

    def factor(self, source: EstimateSource) -> Factor:
        return next((f for s, f in self.factors if s is source), IDENTITY)

    def scale(self, estimate_s: float, source: EstimateSource) -> float:
        """The conservative estimate: the estimate × its source's factor."""
        return estimate_s * self.factor(source).value


UNCALIBRATED = RuntimeCalibration()


def calibrate(finished: Iterable[FinishedRun], quantile: float = QUANTILE, min_finished: int = MIN_FINISHED,
              prior: float = PRIOR_FACTOR) -> RuntimeCalibration:
    """The factors from a snapshot of recently finished jobs (the caller keeps the last `WINDOW`): per source, the
    `quantile` of real / estimate over its jobs; a source with fewer than `min_finished` jobs: every source's
    together; fewer than that in all: `prior`. Runs estimated shorter than `MIN_ESTIMATE_S` are skipped."""
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    ratios: dict[EstimateSource, list[float]] = {s: [] for s in EstimateSource}
    for run in finished:
        if run.estimate_s >= MIN_ESTIMATE_S:
            ratios[run.source].append(run.real_s / run.estimate_s)
    pooled = [r for rs in ratios.values() for r in rs]
    fallback = (Factor(nearest_rank(pooled, quantile), quantile, len(pooled)) if len(pooled) >= min_finished
                else Factor(prior, quantile, 0))
    return RuntimeCalibration(tuple(
        (s, Factor(nearest_rank(rs, quantile), quantile, len(rs)) if len(rs) >= min_finished else fallback)
        for s, rs in ratios.items()))


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-quantile by the nearest-rank method: the smallest value with at least q of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
