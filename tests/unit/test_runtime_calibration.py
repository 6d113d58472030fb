"""Calibrated runtime estimates: the factor is a quantile of real / estimated run time over the finished jobs, per
source, with a prior while few finished; lent-node placement and lending's expected ends read estimate × factor."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from cluster.types import Pool
from colocation.policy import DEFAULT, PoolReason, preferred_pool
from colocation.policy.calibration import (MIN_ESTIMATE_S, MIN_FINISHED, PRIOR_FACTOR, UNCALIBRATED, EstimateSource,
                                           FinishedRun, calibrate, nearest_rank)
from colocation.policy.pools import conservative_run_of, stated_lend_bar_s
from experiments.builders import scheduling as b
from experiments.builders.colocation import at
from scheduler.policy import schedule
from scheduler.policy.decisions import Admit
from scheduler.policy.profile import TIDAL

H = 3600.0
STATED, PAST = EstimateSource.STATED, EstimateSource.PAST_RUNS
ON = DEFAULT.with_(forecast=True)


def runs(ratios, source=STATED, estimate_s=H):
    return [FinishedRun(estimate_s, estimate_s * r, source) for r in ratios]


def test_the_factor_is_the_90th_percentile_of_real_over_estimate():
    ratios = [i / 100 for i in range(1, 101)]  # 0.01 .. 1.00: the 90th percentile is 0.90
    random.Random(0).shuffle(ratios)
    factor = calibrate(runs(ratios)).factor(STATED)
    assert factor.value == pytest.approx(0.90)
    assert factor.finished == 100


def test_a_lognormal_error_gives_its_known_quantile():
    rng = random.Random(1)
    sigma = 0.5  # estimate = real × lognormal(σ): real / estimate is lognormal(σ) too; its 90th pct is e^(1.2816 σ)
    finished = [FinishedRun(real * rng.lognormvariate(0.0, sigma), real, STATED)
                for real in (rng.uniform(2 * H, 20 * H) for _ in range(20_000))]
    assert calibrate(finished).factor(STATED).value == pytest.approx(1.898, rel=0.03)


def test_exact_estimates_change_nothing():
    assert calibrate(runs([1.0] * 200)).scale(2 * H, STATED) == pytest.approx(2 * H)


def test_few_finished_jobs_use_the_prior():
    few = calibrate(runs([3.0] * (MIN_FINISHED - 1)))
    assert few.factor(STATED).value == PRIOR_FACTOR
    assert few.factor(STATED).explain() == (f"prior: fewer than {MIN_FINISHED} finished jobs estimated at 10 min "
                                            "or more")
    assert calibrate(runs([3.0] * MIN_FINISHED)).factor(STATED).value == 3.0


def test_sources_are_kept_apart_and_a_thin_one_borrows_from_all():
    finished = runs([2.0] * 100, STATED) + runs([1.1] * 100, PAST)
    both = calibrate(finished)
    assert (both.factor(STATED).value, both.factor(PAST).value) == (2.0, 1.1)
    thin = calibrate(runs([2.0] * 100, STATED) + runs([1.1] * 5, PAST))
    assert thin.factor(PAST).value == 2.0  # 5 past-run jobs: every source's 90th percentile (105 jobs)
    assert thin.factor(PAST).finished == 105


def test_runs_of_a_few_minutes_are_skipped_and_bad_quantiles_refused():
    assert calibrate(runs([3.0] * 50, estimate_s=MIN_ESTIMATE_S - 1)).factor(STATED).value == PRIOR_FACTOR
    assert calibrate(runs([3.0] * 50, estimate_s=MIN_ESTIMATE_S)).factor(STATED).value == 3.0
    with pytest.raises(ValueError):
        calibrate([], quantile=0.0)


@pytest.mark.parametrize("values,q,expected", [([5, 1, 3], 0.5, 3), ([1, 2, 3, 4], 0.9, 4), ([7], 0.1, 7)])
def test_nearest_rank(values, q, expected):
    assert nearest_rank(values, q) == expected


def test_uncalibrated_is_the_estimate():
    assert conservative_run_of((), 2 * H, UNCALIBRATED) == 2 * H
    assert conservative_run_of((H, 3 * H), None, UNCALIBRATED) == 2 * H
    assert conservative_run_of((), None, calibrate(runs([2.0] * 50))) is None


# ---- placement reads the conservative estimate and says so ---------------------------------------------

SLOW = calibrate(runs([1.6] * 200))  # every job ran 1.6 × its stated duration


def test_a_job_that_fits_by_its_estimate_but_not_by_the_calibrated_one_goes_to_the_fixed_pool():
    job = b.JobBuilder(7).duration(2.1 * H).build()
    take_back = (("T4", at("15:30")),)  # 3.5 h away: bar 3.0 h with the 30 min margin
    assert preferred_pool(job, at("12:00"), ON.with_(take_back_by=take_back)).pools[0] is Pool.COLOCATION
    choice = preferred_pool(job, at("12:00"), ON.with_(take_back_by=take_back, runtime=SLOW))
    assert (choice.pools, choice.reason) == ((Pool.FIXED,), PoolReason.TAKE_BACK_SOON)
    assert choice.message == ("job-7: expected 2.1 h (stated duration) × 1.60 (90th percentile over the last 200 "
                              "finished jobs) = 3.4 h > 3.0 h until T4's predicted take-back at 15:30 - 30 min margin: "
                              "fixed pool")


def test_the_long_job_bar_reads_the_calibrated_estimate_per_source():
    job = b.JobBuilder(3).duration(8 * H).build()  # 8 h × 1.6 = 12.8 h > 12 h
    assert preferred_pool(job, at("12:00"), DEFAULT.with_(runtime=SLOW)).reason is PoolReason.LONG
    # its task's past runs are a different source: with no past-run jobs finished, every source's factor applies
    profiled = replace(b.JobBuilder(4).duration(1 * H).build(), past_run_s=(8 * H,))
    assert preferred_pool(profiled, at("12:00"), DEFAULT.with_(runtime=SLOW)).reason is PoolReason.LONG
    exact_past = calibrate(runs([1.6] * 200) + runs([1.0] * 50, PAST))
    assert preferred_pool(profiled, at("12:00"), DEFAULT.with_(runtime=exact_past)).reason is PoolReason.SHORT


def test_the_queue_bar_for_stated_durations_is_the_lend_bar_over_the_factor():
    profile = ON.with_(take_back_by=(("T4", at("15:30")),), runtime=SLOW)
    assert stated_lend_bar_s(at("12:00"), profile, "T4") == pytest.approx(3.0 * H / 1.6)


def test_the_admission_says_why_its_pool_with_the_calibrated_factor():
    now = at("12:00")
    profile = ON.with_(take_back_by=(("T4", at("15:30")),), runtime=SLOW)
    snap = b.SnapshotBuilder(now).node(b.NodeBuilder("lent-1"), b.NodeBuilder("fixed-1").pool(Pool.FIXED)).quota(
        "a", "T4", 1000).certify("pytorch", "T4")
    short = b.JobBuilder(1).duration(1.5 * H).submitted(now - 60)
    long = b.JobBuilder(2).duration(2.1 * H).submitted(now)
    admits = {d.job_id: d for d in schedule(snap.job(short, long).build(), TIDAL, profile).decisions
              if isinstance(d, Admit)}
    assert admits[1].node == "lent-1" and admits[1].message.endswith(
        "job-1: expected 1.5 h (stated duration) × 1.60 (90th percentile over the last 200 finished jobs) = 2.4 h "
        "<= 12.0 h: short, co-location pool first")
    assert admits[2].node == "fixed-1"
    assert "= 3.4 h > 3.0 h until T4's predicted take-back at 15:30" in admits[2].message
