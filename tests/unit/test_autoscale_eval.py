"""The offline autoscaling evaluation (experiments/autoscale_eval/) on a small synthetic diurnal trace: the service
model, the replay loop, the four policies (reactive and tidal through the real decide_service), the figures."""

import json
import math

import numpy as np
import pytest

from cluster.simulated.traffic import Traffic
from colocation.policy.autoscaling import ScaleReason
from experiments.autoscale_eval import report
from experiments.autoscale_eval.compare import replay
from experiments.autoscale_eval.forecasting import Forecast
from experiments.autoscale_eval.policies import Measured, Step
from experiments.autoscale_eval.run import run
from experiments.autoscale_eval.service import Replicas, ServiceModel
from experiments.autoscale_eval.sweep import (Front, Point, covering, dominates, grid, longest_idle, settings, sweep,
                                            tidal_rates)
from experiments.autoscale_eval.trace import TraceError, span

DAY = 1440
START = 1_700_006_400.0  # a midnight
MODEL = ServiceModel(capacity=100.0, startup_min=3)


def diurnal(days: int = 2) -> np.ndarray:
    """Requests/min: a night trough of 200 and a day peak of 1400 (static: ceil(1400/60) = 24 replicas)."""
    t = np.arange(days * DAY)
    return 800.0 - 600.0 * np.cos(2 * math.pi * t / DAY)


def oracle(demand: np.ndarray, notional: int) -> Forecast:
    """A perfect forecast of the work: what tidal would do if the model were exact."""
    ext = np.concatenate([demand, np.repeat(demand[-1], 5)])
    values = np.stack([ext[1 + h:len(demand) + 1 + h] for h in range(5)], axis=1) / (notional * MODEL.capacity)
    mae = {"xgboost": [0.0] * 5, "last_value": [0.1] * 5, "seasonal": [0.1] * 5}
    return Forecast(values, mae, len(demand), DAY, True, notional, 0)


@pytest.fixture(scope="module")
def runs():
    demand = diurnal()
    runs, static, top = replay(demand, START, MODEL, oracle(demand, 24))
    return demand, runs, static, top


class Fixed:
    """A stand-in policy: asks for `target` replicas at `minute`."""

    name = "fixed"

    def __init__(self, minute: int, target: int) -> None:
        self.minute, self.target, self.seen = minute, target, []

    def step(self, minute: int, now: float, seen: Measured, size: int, ready: int) -> Step:
        self.seen.append(seen)
        return Step(self.target if minute == self.minute else size, "test", "")

    def changed(self, now: float) -> None:
        pass


def test_static_is_sized_for_the_peak_and_never_overloads(runs):
    demand, r, static, _ = runs
    assert static == math.ceil(1400 / 60)
    assert set(r["static"].replicas) == {static}
    f = r["static"].figures(MODEL, demand)
    assert f["overloaded_min"] == 0 and f["over_max_rate_min"] == 0 and f["scale_events"] == 0


def test_replica_hours_count_every_provisioned_replica_minute(runs):
    demand, r, static, _ = runs
    assert r["static"].figures(MODEL, demand)["replica_hours"] == pytest.approx(static * len(demand) / 60)
    for name in ("hpa", "reactive", "tidal"):
        assert r[name].figures(MODEL, demand)["replica_hours"] == pytest.approx(r[name].replicas.sum() / 60, abs=0.01)
        assert r[name].figures(MODEL, demand)["replica_hours"] < 0.8 * static * len(demand) / 60


def test_startup_delay_then_serving_and_scale_in_at_once():
    demand = np.full(12, 300.0)
    grow = run(Fixed(0, 6), demand, START, MODEL, initial=3)
    assert list(grow.replicas[:3]) == [3, 6, 6]
    assert list(grow.ready[:6]) == [3, 3, 3, 3, 6, 6]  # asked at the end of minute 0, serving from minute 1 + 3
    assert grow.utilization[3] == pytest.approx(1.0) and grow.utilization[4] == pytest.approx(0.5)
    shrink = run(Fixed(0, 2), demand, START, MODEL, initial=3)
    assert list(shrink.ready[:3]) == [3, 2, 2]
    assert shrink.utilization[1] == pytest.approx(1.5) and shrink.figures(MODEL, demand)["overloaded_min"] == 11


def test_measured_utilization_is_capped_like_a_duty_cycle():
    demand = np.array([500.0, 500.0])
    policy = Fixed(-1, 0)
    r = run(policy, demand, START, MODEL, initial=2)
    assert r.utilization[0] == pytest.approx(2.5) and policy.seen[0].gpu == 1.0 and policy.seen[0].qps == 500 / 60


def test_pool_removes_starting_replicas_first():
    pool = Replicas(2)
    pool.scale(4, minute=10, startup_min=3)
    assert pool.ready(12) == 2 and pool.ready(13) == 4
    pool.scale(3, minute=11, startup_min=3)
    assert pool.size == 3 and pool.ready(13) == 3


def test_reactive_and_tidal_decide_through_the_spec_policy(runs):
    _, r, _, top = runs
    reactive = {e.reason for e in r["reactive"].events}
    assert {ScaleReason.SCALE_OUT, ScaleReason.SCALE_IN} <= reactive and reactive <= {x.value for x in ScaleReason}
    assert ScaleReason.PREDICTIVE_OUT not in reactive
    tidal = {e.reason for e in r["tidal"].events}
    assert ScaleReason.PREDICTIVE_OUT in tidal and tidal & {ScaleReason.SCALE_IN, ScaleReason.PREDICTIVE_LIMIT}
    assert any(e.after < e.before for e in r["tidal"].events)  # the forecast limits scale-ins, never stops them
    out = next(e for e in r["reactive"].events if e.reason == ScaleReason.SCALE_OUT)
    assert "over maxRate 80% for 2 minutes" in out.message and out.after > out.before
    ahead = next(e for e in r["tidal"].events if e.reason == ScaleReason.PREDICTIVE_OUT)
    assert "ahead of the peak" in ahead.message
    assert all(2 <= e.after <= top for name in ("reactive", "tidal") for e in r[name].events)


def test_hpa_scales_with_its_own_reasons(runs):
    demand, r, _, _ = runs
    reasons = {e.reason for e in r["hpa"].events}
    assert reasons == {"hpa-scale-out", "hpa-scale-in"}
    assert "target 60%" in r["hpa"].events[0].message


def test_a_perfect_forecast_overloads_less_than_the_reactive_rule():
    demand = diurnal()
    demand[2000:2030] *= 1.6  # a sharp half-hour surge at midday
    runs, _, _ = replay(demand, START, MODEL, oracle(demand, 24))
    f = {n: runs[n].figures(MODEL, demand) for n in runs}
    assert f["tidal"]["over_max_rate_min"] < f["reactive"]["over_max_rate_min"]


def test_tidal_without_a_usable_forecast_says_so():
    demand = diurnal(1)[:600]
    bad = oracle(demand, 24)
    bad = Forecast(bad.values, bad.mae, bad.minutes, bad.seasonal_lag, False, 24, 0)
    runs, _, _ = replay(demand, START, MODEL, bad)
    assert ScaleReason.PREDICTIVE_OUT not in {e.reason for e in runs["tidal"].events}
    assert [e.reason for e in runs["tidal"].events] == [e.reason for e in runs["reactive"].events]


def test_figures_and_json_shape(runs, tmp_path):
    demand, r, _, _ = runs
    policies = {n: r[n].figures(MODEL, demand) for n in ("static", "hpa", "reactive", "tidal")}
    mae = {"xgboost": [0.01] * 5, "last_value": [0.02] * 5, "seasonal": [0.03] * 5}
    path = tmp_path / "ae.json"
    report.write_json({"policies": policies, "forecast": {"mae": mae}}, path)
    data = json.loads(path.read_text())
    assert set(data["policies"]) == {"static", "hpa", "reactive", "tidal"}
    for fig in data["policies"].values():
        assert isinstance(fig["overloaded_min"], int) and isinstance(fig["replica_hours"], float)
        assert isinstance(fig["scale_events"], int)
    assert set(data["forecast"]["mae"]) == {"xgboost", "last_value", "seasonal"}
    acc = report.acceptance(policies, mae)
    assert acc["hours_vs_static"] and acc["forecast_h5"]


@pytest.mark.parametrize("tidal, other, met", [(0, 0, True), (5, 10, True), (6, 10, False), (1, 0, False)])
def test_overload_acceptance_is_half_or_better(tidal, other, met):
    def figs(n):
        return {"overloaded_min": n, "replica_hours": 1.0}
    policies = {"tidal": figs(tidal), "reactive": figs(other), "hpa": figs(other), "static": figs(0)}
    mae = {"xgboost": [1.0] * 5, "last_value": [1.0] * 5, "seasonal": [1.0] * 5}
    acc = report.acceptance(policies, mae)
    assert acc["overload_vs_reactive"] is met and acc["overload_vs_hpa"] is met and not acc["forecast_h5"]


@pytest.mark.parametrize("days, start_day, first", [(3, None, 7), (9, None, 1), (2, 1, 1), (4, 6, 6)])
def test_span_keeps_earlier_days_for_training(days, start_day, first):
    sp = span(Traffic("synthetic", START, diurnal(10), "requests/min"), days, start_day)
    assert (sp.first_day, sp.at, sp.end) == (first, first * DAY, (first + days) * DAY)


@pytest.mark.parametrize("days, start_day, words", [
    (0, None, "--days must be at least 1"), (10, None, "leaves 0 of its 10 days for training"),
    (3, 0, "leaves 0 of its 10 days"), (3, 8, "run past its end")])
def test_span_refuses_what_the_trace_does_not_offer(days, start_day, words):
    with pytest.raises(TraceError, match=words):
        span(Traffic("synthetic", START, diurnal(10), "requests/min"), days, start_day)


def pts(policy: str, *pairs: tuple[int, float]) -> tuple[Point, ...]:
    return tuple(Point(policy, 0.5 + 0.1 * i, o, h) for i, (o, h) in enumerate(pairs))


@pytest.mark.parametrize("tidal, hpa, result", [
    (pts("tidal", (10, 100.0)), pts("hpa", (10, 100.0)), True),  # a tie covers
    (pts("tidal", (5, 90.0)), pts("hpa", (10, 100.0), (20, 95.0)), True),  # one point covers both
    (pts("tidal", (5, 120.0), (30, 80.0)), pts("hpa", (10, 100.0)), False),  # each better in one dimension only
    (pts("tidal", (11, 90.0)), pts("hpa", (10, 100.0)), False),  # one more overloaded minute
    (pts("tidal", (9, 100.01)), pts("hpa", (10, 100.0)), False),  # a little more replica-hours
    (pts("tidal", (3, 200.0), (40, 50.0)), pts("hpa", (2, 300.0), (50, 60.0)), False),  # low end uncovered
    (pts("tidal", (1, 250.0), (40, 50.0)), pts("hpa", (2, 300.0), (50, 60.0)), True),
    ((), pts("hpa", (0, 1.0)), False),
    (pts("tidal", (0, 1.0)), (), True),
])
def test_dominance_needs_a_covering_tidal_point_for_every_hpa_point(tidal, hpa, result):
    assert dominates(tidal, hpa) is result
    assert Front(3, hpa, tidal).dominates is result
    assert Front(3, hpa, tidal).figures()["dominates"] is result


def test_covering_picks_the_cheapest_point_and_lines_say_which():
    tidal = pts("tidal", (3, 95.0), (8, 90.0), (12, 80.0))
    assert covering(Point("hpa", 0.6, 10, 100.0), tidal).replica_hours == 90.0
    front = Front(1, pts("hpa", (10, 100.0), (2, 300.0)), tidal)
    lines = front.lines()
    assert "covered by tidal expectRate 0.60 band ±10% headroom 0 (8 min, 90.00 replica-h)" in lines[0]
    assert "no tidal point covers it" in lines[1]
    f = front.figures()
    assert f["hpa"] == [[10, 100.0], [2, 300.0]] and f["tidal"][0] == [3, 95.0]
    assert f["uncovered_hpa"] == [0.6] and f["startup_min"] == 1 and f["dominates"] is False


@pytest.mark.parametrize("expect, rates", [(0.6, (0.54, 0.6, 0.66)), (0.5, (0.45, 0.5, 0.55)),
                                           (0.95, (0.855, 0.95, 1.0)), (0.03, (0.027, 0.03, 0.033))])
def test_tidal_rates_keep_a_relative_band_around_expect_within_0_and_1(expect, rates):
    """HPA's tolerance is relative (±10 % of its target): tidal's band in the sweep is too."""
    r = tidal_rates(expect)
    assert (r.min_rate, r.expect_rate, r.max_rate) == pytest.approx(rates)


def test_sweep_runs_every_setting_on_the_same_minutes_with_one_forecast():
    demand = diurnal(1)
    ticks = []
    front = sweep(demand, START, MODEL, oracle(demand, 24), 48, ticks.append, hpa_targets=(0.5, 0.9),
                  tidal=settings((0.5, 0.9), (0.0,), (0.1,), (None,)))
    assert [p.knob for p in front.hpa] == [0.5, 0.9] and [p.knob for p in front.tidal] == [0.5, 0.9]
    assert sum(ticks) == 4 * len(demand) and front.figures()["tidal_settings"] == [[0.5, 0.0, 0.1, None],
                                                                             [0.9, 0.0, 0.1, None]]
    for points in (front.hpa, front.tidal):  # a higher target runs fewer replicas
        assert points[0].replica_hours > points[1].replica_hours
        assert all(p.overloaded_min >= 0 for p in points)


def test_more_headroom_costs_replica_hours_and_saves_overload():
    """Square-root headroom on the same forecast: more of it never runs fewer replicas on a noisy curve."""
    rng = np.random.default_rng(1)
    demand = diurnal(1) * (1 + 0.1 * rng.standard_normal(DAY))
    front = sweep(demand, START, MODEL, oracle(demand, 24), 48, hpa_targets=(), tidal=settings((0.8,), (0.0, 1.0), (0.1,), (None,)))
    plain, roomy = front.tidal
    assert roomy.replica_hours > plain.replica_hours and roomy.overloaded_min <= plain.overloaded_min
    assert report.pareto(front.tidal)[0] in front.tidal


def test_busiest_day_is_the_zoom():
    demand = diurnal(3)
    demand[DAY + 700] = 5000.0
    assert report.busiest_day(demand) == 1


def test_the_grid_tries_every_band_and_the_band_sets_the_triggers():
    """Tidal's grid crosses expectRate, headroom and the relative band; a point's band gives its minRate/maxRate."""
    grid = settings((0.6, 0.9), (0.0,), (0.05, 0.1), (None,))
    assert grid == ((0.6, 0.0, 0.05, None), (0.6, 0.0, 0.1, None), (0.9, 0.0, 0.05, None), (0.9, 0.0, 0.1, None))
    demand = diurnal(1)
    front = sweep(demand, START, MODEL, oracle(demand, 24), 48, hpa_targets=(), tidal=grid[:2])
    assert [p.band for p in front.tidal] == [0.05, 0.1] and "band ±5%" in front.tidal[0].label
    assert tidal_rates(0.6, 0.05).max_rate == pytest.approx(0.63)


def office_hours(days: int = 1) -> np.ndarray:
    """Requests/min: 1,200 from 08:00 to 18:00 and nothing else -- a service idle 14 hours a day."""
    minute = np.arange(days * DAY) % DAY
    return np.where((minute >= 480) & (minute < 1080), 1200.0, 0.0)


@pytest.mark.parametrize("demand, longest", [
    (np.array([0.0, 0.0, 5.0, 0.0, 0.0, 0.0]), 3), (np.array([1.0, 2.0]), 0), (np.zeros(4), 4),
    (office_hours(2), 14 * 60),  # the night between the two days
])
def test_longest_idle_is_the_longest_run_without_work(demand, longest):
    assert longest_idle(demand) == longest


def test_the_grid_leaves_out_idle_times_the_traffic_never_reaches():
    """A setting whose idle time is longer than any idle run can never fire: it would repeat the run without it."""
    tidal = settings((0.8,), (0.0,), (0.1,), (None, 30, 60))
    assert grid(diurnal(1), tidal) == ((0.8, 0.0, 0.1, None),)  # always busy
    demand = np.concatenate([diurnal(1), np.zeros(45)])
    assert grid(demand, tidal) == ((0.8, 0.0, 0.1, None), (0.8, 0.0, 0.1, 30))


def test_scale_to_zero_saves_the_idle_hours_and_pays_the_wake_up_in_overloaded_minutes():
    """Idle 14 hours a day: tidal with scale to zero drops the night's 2 replicas; the morning's first requests meet
    zero ready replicas until the start-up is over, and those minutes count as overloaded."""
    demand = office_hours(2)
    front = sweep(demand, START, MODEL, oracle(demand, 24), 48, hpa_targets=(0.8,),
                  tidal=settings((0.8,), (0.0,), (0.1,), (None, 30)))
    (hpa,), (always_on, to_zero) = front.hpa, front.tidal
    idle_beyond_30 = (480 - 30) + (840 - 30) + (360 - 30)  # the first morning, the night, the last evening
    assert always_on.replica_hours - to_zero.replica_hours >= 2 * idle_beyond_30 / 60  # the 2-replica floor, off
    assert to_zero.overloaded_min >= always_on.overloaded_min + MODEL.startup_min  # the second morning's wake-up
    f = front.figures()
    assert f["tidal_settings"][1] == [0.8, 0.0, 0.1, 30] and "to zero after 30 idle min" in to_zero.label
    assert f["dominates_without_scale_to_zero"] is dominates((always_on,), (hpa,))
    assert "Without scale to zero" in report.without_zero(front)
