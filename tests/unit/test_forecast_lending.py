"""Forecast-driven lending: the seasonal forecast, take back ahead of the rise, lend only what stays idle,
deadline-aware placement on lent nodes, and no change at all without a forecast.

Default thresholds: minRate 40%, expectRate 60%, maxRate 80%; nodes have 4 GPUs; drain 15 min, min lend 1 h,
deadline margin 30 min. NOW is 14:00 UTC, outside every busy window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.types import NodeState, Pool
from colocation.policy import (DEFAULT, DemandForecast, Hold, LendReason, PoolReason, TakeBack, decide_group,
                               decide_lending, lend_bar_s, long_bar_s, preferred_pool, seasonal_forecast,
                               take_back_at)
from colocation.policy.forecast import (DAY_MIN, RECENT_MIN, ServiceAhead, burst_ratio, demand_forecast, horizon_min,
                                        near_term_demand, recent_forecast, with_near_term)
from experiments.builders import scheduling as b
from experiments.builders.colocation import NOW, G, N, at, online_fleet
from scheduler.policy import schedule
from scheduler.policy.decisions import Admit
from scheduler.policy.profile import TIDAL

ON = DEFAULT.with_(forecast=True, min_lend_s=3600.0)  # the tables below are written for a 1-hour minimum lend
MIN = 60.0
H = 3600.0


def fc(*points: tuple[float, float], base: float, minutes: int = 180, start: float = NOW,
       group: str = "t4") -> DemandForecast:
    """A flat forecast at `base` with (minute offset from `start`, demand) points raised from there on."""
    values = [base] * minutes
    for offset, demand in sorted(points):
        values[int(offset):] = [demand] * (minutes - int(offset))
    return DemandForecast(group, start, tuple(values), "seasonal")


def lent_group(demand_per_node: float = 2.0) -> G:
    """3 online nodes at 2/4 GPUs (usage 50%), 2 lent nodes with one training job each."""
    loads = [(demand_per_node,)] * 3
    return G().nodes(*online_fleet(*loads), N("t4-4").offline(600), N("t4-5").offline(60))


# ---- take back ahead of the rise ---------------------------------------------------------------------

@pytest.mark.parametrize("forecast,profile,fires", [
    (fc((10, 11), base=6), ON, True),  # 11/12 = 92% > 80% in 10 min, inside the 15 min drain
    (fc((14, 11), base=6), ON, True),  # the minute 14:14-14:15 still starts inside the drain
    (fc((15, 11), base=6), ON, False),  # 15 min away: not yet
    (fc((10, 9.6), base=6), ON, False),  # 9.6/12 = 80%, not > maxRate
    (fc((10, 11), base=6), DEFAULT, False),  # forecast off: the threshold rules alone
    (None, ON, False),  # no forecast for the group
    (fc((10, 11), base=6), ON.with_(drain_s=30 * MIN), True),
])
def test_take_back_ahead_of_the_rise(forecast, profile, fires):
    d = decide_group(lent_group().build(), NOW, profile, forecast)
    assert isinstance(d, TakeBack) is fires
    if not fires:
        assert d is None


def test_forecast_take_back_is_sized_to_expect_rate_at_the_peak_and_says_so():
    # peak 11 within the drain: k with 11/(12+4k) <= 60% -> 2 nodes; the youngest job's node first
    d = decide_group(lent_group().build(), NOW, ON, fc((10, 11), (13, 10), base=6))
    assert isinstance(d, TakeBack) and d.reason is LendReason.FORECAST_RISE
    assert d.nodes == ("t4-5", "t4-4")
    assert d.message.startswith("take back t4-5, t4-4: forecast 14:10 online 92% > maxRate 80%; target expectRate 60%")


def test_forecast_source_is_named_when_not_seasonal():
    f = fc((5, 11), base=6)
    xgb = DemandForecast(f.group, f.start, f.values, "xgboost")
    d = decide_group(lent_group().build(), NOW, ON, xgb)
    assert "forecast (xgboost) 14:05 online 92% > maxRate 80%" in d.message


@pytest.mark.parametrize("group", [
    G().nodes(*online_fleet((2,), (2,), (2,))),  # nothing lent: nothing to take back, no noise
    G().nodes(*online_fleet((2,), (2,), (2,)), N("t4-4").offline(60).state(NodeState.ONLINE_UNNORMAL)),
])
def test_forecast_rise_with_nothing_lent_decides_nothing(group):
    assert decide_group(group.build(), NOW, ON, fc((5, 11), base=6)) is None


def test_forecast_take_back_is_held_inside_the_lending_window_unless_urgent():
    evening = at("19:00")
    f = fc((5, 11), base=6, start=evening)
    d = decide_group(lent_group().build(), evening, ON, f)
    assert isinstance(d, Hold) and d.reason is LendReason.BUSY_WINDOW and "forecast 19:05" in d.message
    urgent = decide_group(lent_group().pending(1).build(), evening, ON, f)
    assert isinstance(urgent, TakeBack) and urgent.reason is LendReason.ONLINE_PENDING


@pytest.mark.parametrize("points, urgent", [
    (((5, 11),), False),  # 92 % of the 12 online GPUs: over maxRate, but the pods still fit
    (((5, 12),), False),  # 100 %: full, nothing waits yet
    (((5, 13),), True),  # 108 %: a pod would pend at 19:05
    (((14, 13),), True),  # inside the 15-minute drain
    (((15, 13), (5, 11)), False),  # past the drain: a take-back started then is still in time
])
def test_a_forecast_over_full_capacity_is_urgent_inside_the_lending_window(points, urgent):
    """Busy windows hold a take-back unless it is urgent; a forecast that online demand will not fit within the drain
    time (usage > 100 %: pods would pend) is urgent seen ahead, so the nodes come back before the pods wait."""
    evening = at("19:00")
    d = decide_group(lent_group().build(), evening, ON, fc(*points, base=6, start=evening))
    if urgent:
        assert isinstance(d, TakeBack) and "urgent inside the 18:00-22:00 lending window: forecast 19:" in d.message
        assert "> 100%, its pods would wait" in d.message
    else:
        assert isinstance(d, Hold) and d.reason is LendReason.BUSY_WINDOW


def test_threshold_take_back_with_a_forecast_is_sized_to_the_coming_peak():
    lent = [N(f"t4-{i}").offline(600 - i) for i in range(4, 8)]
    g = G().nodes(*online_fleet((4,), (4,), (2,)), *lent).build()
    today = decide_group(g, NOW, DEFAULT)  # 10/12 = 83%: 1 node gives 10/16 = 62%, 2 nodes 50%
    ahead = decide_group(g, NOW, ON, fc((5, 13), base=10))  # 13 coming: 13/20 = 65% > 60% -> 3 nodes
    assert today.nodes == ("t4-7", "t4-6") and today.reason is LendReason.HIGH_USAGE
    assert ahead.nodes == ("t4-7", "t4-6", "t4-5") and ahead.reason is LendReason.HIGH_USAGE
    assert ahead.message.startswith("take back t4-7, t4-6, t4-5: online usage 83% > maxRate 80%; "
                                    "forecast peak 14:05 online 108%; target expectRate 60%")


# ---- lend only what stays idle ------------------------------------------------------------------------

def idle_group() -> G:
    """5 online nodes, 2 of 20 GPUs used (10%), training waiting: today's rule lends 3 (max_parallel)."""
    return G().nodes(*online_fleet((1,), (1,), (), (), ())).training_pending(4)


@pytest.mark.parametrize("forecast,nodes,reason", [
    (None, ("t4-3", "t4-4", "t4-5"), LendReason.LOW_USAGE),  # no forecast: today's lend
    (fc((30, 9), base=2), ("t4-3", "t4-4"), LendReason.LOW_USAGE),  # 9/12 = 75% ok; 9/8 not: 2 nodes
    (fc((59, 13), base=2), None, LendReason.FORECAST_NEEDS_BACK),  # 13/16 = 81% within the hour: hold
    (fc((60, 13), base=2), ("t4-3", "t4-4", "t4-5"), LendReason.LOW_USAGE),  # the rise is past min_lend_s
    (fc((30, 6.4), base=2), ("t4-3", "t4-4", "t4-5"), LendReason.LOW_USAGE),  # 6.4/8 = 80% is not > 80%
])
def test_lend_only_what_stays_idle(forecast, nodes, reason):
    d = decide_group(idle_group().build(), NOW, ON, forecast)
    assert d.reason is reason
    if nodes is None:
        assert isinstance(d, Hold)
        assert d.message == ("t4: would lend but online usage 10% < minRate 40%, 4 training jobs pending; lending "
                             "even one node, forecast 14:59 online 81% > maxRate 80% within the 1.0 h minimum lend")
    else:
        assert d.nodes == nodes


def test_a_lend_capped_by_the_forecast_says_why():
    d = decide_group(idle_group().build(), NOW, ON, fc((30, 9), base=2))
    assert d.message.endswith("; no more: lending one more node, forecast 14:30 online 112% > maxRate 80% "
                              "within the 1.0 h minimum lend")


def test_min_lend_s_is_a_knob():
    d = decide_group(idle_group().build(), NOW, ON.with_(min_lend_s=20 * MIN), fc((30, 13), base=2))
    assert d.nodes == ("t4-3", "t4-4", "t4-5")


# ---- no forecast: today's behaviour, unchanged --------------------------------------------------------

GROUPS = [
    lent_group(), lent_group(3.5), idle_group(), G().nodes(*online_fleet((4,), (4,), (4,)), N("t4-4").offline(60)),
    G().nodes(*online_fleet((1,), (), ())).training_pending(2).pending(2),
]


@pytest.mark.parametrize("group", GROUPS)
def test_without_a_forecast_decisions_are_todays(group):
    g = group.build()
    today = decide_group(g, NOW, DEFAULT)
    assert decide_group(g, NOW, ON, None) == today
    assert decide_group(g, NOW, DEFAULT, fc((5, 30), base=30)) == today  # forecast switched off: ignored
    assert decide_lending([g], NOW, DEFAULT, {"t4": fc((5, 30), base=30)}) == decide_lending([g], NOW)
    assert decide_lending([g], NOW, ON, {"other": fc((5, 30), base=30)}) == decide_lending([g], NOW)


# ---- take_back_at and lend_bar_s ----------------------------------------------------------------------

@pytest.mark.parametrize("forecast,expected", [
    (fc((90, 11), base=6), NOW + 90 * MIN - 900),  # first minute over maxRate, minus the drain
    (fc((5, 11), base=6), NOW + 5 * MIN - 900),  # may be before now: the rise is closer than the drain
    (fc(base=6), None),
    (None, None),
])
def test_take_back_at(forecast, expected):
    assert take_back_at(lent_group().build(), forecast, NOW, ON) == expected


@pytest.mark.parametrize("take_back_by,model,bar", [
    ((), "T4", 12 * H),  # nothing predicted: the long-job bar
    ((("T4", NOW + 3 * H),), "T4", 2.5 * H),  # 3 h away, 30 min margin
    ((("T4", NOW + 20 * H),), "T4", 12 * H),  # further than the long-job bar
    ((("T4", NOW - H),), "T4", 0.0),  # already due
    ((("V100", NOW + 3 * H),), "T4", 12 * H),  # another model's take-back
    ((("", NOW + 2 * H),), None, 1.5 * H),  # CPU-only
])
def test_lend_bar_s(take_back_by, model, bar):
    profile = ON.with_(take_back_by=take_back_by)
    assert lend_bar_s(NOW, profile, model) == pytest.approx(bar)
    assert lend_bar_s(NOW, profile, model) <= long_bar_s(NOW, profile)


# ---- deadline-aware placement -------------------------------------------------------------------------

AT_0905 = at("09:05")
MORNING = at("06:35")  # 2.5 h before the take-back: bar 2.0 h (the night bar is 2.4 h)


@pytest.mark.parametrize("hours,model,pools,reason", [
    (3.0, "T4", (Pool.FIXED,), PoolReason.LONG),  # past the night bar already
    (2.2, "T4", (Pool.FIXED,), PoolReason.TAKE_BACK_SOON),  # ends 08:47: inside the 30 min margin
    (1.9, "T4", (Pool.COLOCATION, Pool.FIXED), PoolReason.SHORT),  # ends 08:29, before 08:35
    (2.2, "V100", (Pool.COLOCATION, Pool.FIXED), PoolReason.SHORT),  # V100 nodes are not being taken back
    (2.2, None, (Pool.FIXED,), PoolReason.TAKE_BACK_SOON),  # any model: bounded by the earliest take-back
])
def test_placement_against_the_predicted_take_back(hours, model, pools, reason):
    job = b.JobBuilder().model(model).duration(hours * H).build()
    choice = preferred_pool(job, MORNING, ON.with_(take_back_by=(("T4", AT_0905),)))
    assert (choice.pools, choice.reason) == (pools, reason)


def test_placement_message_names_the_take_back():
    job = b.JobBuilder(7).duration(3 * H).build()
    choice = preferred_pool(job, at("12:00"), ON.with_(take_back_by=(("T4", at("14:05")),)))
    assert choice.message == ("job-7: expected 3.0 h (stated duration) > 1.6 h until T4's predicted take-back at "
                              "14:05 - 30 min margin: fixed pool")


# ---- the seasonal forecast ----------------------------------------------------------------------------

def daily(days: int, seed: int = 0, noise: float = 0.3) -> np.ndarray:
    """A day-periodic demand (GPUs): 2 at night, 10 at the 20:00 peak, with noise."""
    t = np.arange(days * DAY_MIN)
    shape = 6 - 4 * np.cos(2 * np.pi * ((t % DAY_MIN) - 20 * 60) / DAY_MIN)
    return np.clip(shape + np.random.default_rng(seed).normal(0, noise, len(t)), 0, None)


def test_seasonal_forecast_follows_a_periodic_series():
    history = daily(8)
    start = 7 * DAY_MIN  # forecast the 8th day from the first 7
    out = seasonal_forecast("t4", history[:start], float(start * 60), DAY_MIN)
    truth = history[start:]
    assert out.source == "seasonal" and out.start == start * 60 and len(out.values) == DAY_MIN
    err = np.asarray(out.values) - truth
    assert np.abs(err).mean() < 1.0  # within 1 GPU of the truth on average
    assert (err >= -0.5).mean() > 0.9  # a cautious profile: rarely below the truth


@pytest.mark.parametrize("growth", [1.05, 1.0, 0.95])
def test_seasonal_forecast_follows_the_level_of_traffic_that_grows_or_shrinks(growth):
    # (e26: replaces "scales with a busier last hour": the level is now each day's trailing 24 h, which does not
    # jump within minutes.) Each day `growth` times the one before: every past day brought to today's level is
    # exactly tomorrow's curve, whichever quantile is taken.
    history = daily(9, noise=0.0) * np.repeat(growth ** np.arange(9), DAY_MIN)
    now = 8.0 * DAY_MIN * 60
    out = seasonal_forecast("t4", history[:8 * DAY_MIN], now, 120)
    assert np.asarray(out.values) == pytest.approx(np.asarray(
        [history[8 * DAY_MIN + k - 10:8 * DAY_MIN + k + 11].max() for k in range(120)]), rel=1e-9)


def test_seasonal_forecast_does_not_jump_minute_to_minute():
    # a busier last hour (50% up) moves the forecast by its share of the trailing day only: about 2%, not 50%
    history = daily(8, noise=0.0)
    busier = history.copy()
    busier[-60:] *= 1.5
    now = 8.0 * DAY_MIN * 60
    base, moved = (np.asarray(seasonal_forecast("t4", h, now, 60).values) for h in (history, busier))
    assert np.all(moved >= base) and np.all(moved <= 1.05 * base)


@pytest.mark.parametrize("minutes,none", [(DAY_MIN - 1, True), (DAY_MIN, False), (0, True)])
def test_seasonal_forecast_needs_a_day_of_history(minutes, none):
    assert (seasonal_forecast("t4", [1.0] * minutes, NOW, 60) is None) is none


@pytest.mark.parametrize("minutes,source", [(RECENT_MIN - 1, None), (RECENT_MIN, "recent"),
                                            (DAY_MIN - 1, "recent"), (DAY_MIN, "seasonal")])
def test_demand_forecast_is_the_recent_high_until_a_day_of_history(minutes, source):
    out = demand_forecast("t4", [1.0] * minutes, NOW, 60)
    assert (out.source if out is not None else None) == source


def test_recent_forecast_is_the_high_of_the_last_two_hours_flat():
    # a high 2 h ago counts though the demand dipped since; a higher one just before does not
    history = [2.0] * 300
    history[-RECENT_MIN - 1], history[-RECENT_MIN] = 20.0, 9.0
    out = recent_forecast("t4", history, NOW, 30)
    assert out.values == (9.0,) * 30 and out.start == NOW and out.source == "recent"


def test_a_cold_group_lends_only_what_the_recent_high_leaves_idle_and_says_so():
    # 2 of 20 GPUs used now, 9 an hour ago: 9/16 ok, 9/12 = 75% ok, 9/8 not -> 2 nodes, as a seasonal rise
    d = decide_group(idle_group().build(), NOW, ON, recent_forecast("t4", [2.0] * 200 + [9.0] + [2.0] * 59, NOW, 180))
    assert d.nodes == ("t4-3", "t4-4")
    assert "lending one more node, forecast (recent) 14:00 online 112% > maxRate 80%" in d.message


def test_a_cold_group_is_taken_back_when_its_lent_nodes_leave_no_room_for_the_recent_high():
    # 3 online nodes at 6 of 12 GPUs now; 11 an hour ago would be 92% > 80%: back now, ahead of its return
    history = [6.0] * RECENT_MIN
    history[-60] = 11.0
    d = decide_group(lent_group().build(), NOW, ON, recent_forecast("t4", history, NOW, 60))
    assert isinstance(d, TakeBack) and d.reason is LendReason.FORECAST_RISE and "forecast (recent)" in d.message


# ---- the cold-start forecast's burst band: plan for the burst, evict for the level ----------------------------

def bursty(level: float = 2.0, burst: float = 4.0, every: int = 240, hours: int = 12) -> list[float]:
    """`level` GPUs, doubling to `burst` for 30 minutes every `every` minutes, ending on a quiet minute."""
    return [burst if m % every >= every - 30 else level for m in range(hours * 60 - 31)]


@pytest.mark.parametrize("history, expected", [
    ([2.0] * 600, 1.0),  # flat: no burst seen
    (bursty(), 2.0),  # most minutes see the doubling within 2 h
    ([2.0] * RECENT_MIN, 1.0),  # no minute has 2 h after it yet
    ([0.0] * 300, 1.0),  # no demand: nothing to rise from
])
def test_burst_ratio_is_how_far_demand_rose_within_two_hours(history, expected):
    assert burst_ratio(np.asarray(history)) == pytest.approx(expected)


def test_a_few_odd_bursts_do_not_set_the_burst_ratio():
    h = [2.0] * 2000
    h[1000] = 20.0  # one minute at 10x: 120 of the 1,880 minutes with 2 h after them see it (6 %)
    assert burst_ratio(np.asarray(h)) == 1.0
    h[1500] = h[1700] = 20.0  # three: 360 minutes (19 %), the 90th percentile sees them
    assert burst_ratio(np.asarray(h)) == 10.0


def test_recent_forecast_has_a_burst_band_above_the_high():
    quiet = recent_forecast("t4", bursty(), NOW, 30)  # 2 GPUs now and over the last 2 h; bursts have doubled it
    assert quiet.values == (2.0,) * 30 and quiet.upper == (4.0,) * 30
    assert quiet.band().values == (4.0,) * 30 and quiet.band().source == "recent, burst band"
    burst = recent_forecast("t4", bursty() + [4.0] * 10 + [2.0] * 20, NOW, 30)  # the high is the burst already
    assert burst.values == (4.0,) * 30 and burst.band() is burst


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.floats(0.0, 64.0, allow_nan=False), min_size=RECENT_MIN, max_size=400))
def test_the_burst_band_is_never_below_the_forecast(history):
    out = recent_forecast("t4", history, NOW, 10)
    assert burst_ratio(np.asarray(history)) >= 1.0
    assert all(u >= v for u, v in zip(out.upper, out.values)) and len(out.upper) == len(out.values)
    assert all(b >= v for b, v in zip(out.band().values, out.values))


def test_a_burst_band_over_max_rate_stops_placement_and_brings_idle_lent_nodes_back_but_evicts_nothing():
    # 3 online nodes at 8 of 12 GPUs (67 %), the 2 h high 8 (67 %: no take-back); the band 10.8 would be 90 %
    level = DemandForecast("t4", NOW, (8.0,) * 60, "recent", upper=(10.8,) * 60)
    idle = G().nodes(*online_fleet((3,), (3,), (2,)), N("t4-4").offline(600), N("t4-5").offline()).build()
    d = decide_group(idle, NOW, ON, level)
    assert isinstance(d, TakeBack) and d.reason is LendReason.IDLE_LENT and d.nodes == ("t4-5",)
    assert d.evict_at == NOW and "forecast (recent, burst band) 14:00 online 90% > maxRate 80%" in d.message
    assert decide_group(idle, NOW, ON, replace(level, upper=())) is None  # the level alone: nothing to do
    busy = lent_group(8 / 3).build()  # both lent nodes run training: nothing idle to bring back, and nothing evicted
    assert decide_group(busy, NOW, ON, level) is None
    assert take_back_at(busy, level, NOW, ON) == NOW - ON.drain_s  # no new job on a lent node
    assert take_back_at(busy, replace(level, upper=()), NOW, ON) is None  # the level alone: no take-back predicted


def test_a_cold_group_lends_only_what_the_burst_band_leaves_idle():
    # 2 of 20 GPUs used and the 2 h high 2: 3 nodes go (max_parallel); the band 7: 7/12 = 58 % ok, 7/8 = 88 % not
    band = DemandForecast("t4", NOW, (2.0,) * 180, "recent", upper=(7.0,) * 180)
    d = decide_group(idle_group().build(), NOW, ON, band)
    assert d.nodes == ("t4-3", "t4-4")
    assert "forecast (recent, burst band) 14:00 online 88% > maxRate 80%" in d.message
    assert decide_group(idle_group().build(), NOW, ON, replace(band, upper=())).nodes == ("t4-3", "t4-4", "t4-5")


def test_a_burst_band_over_full_capacity_is_urgent_inside_the_lending_window():
    # 19:00, online usage 83 % > maxRate: held inside the lending window by the level; the band says pods would pend
    evening = at("19:00")
    g = G().nodes(*online_fleet((4,), (4,), (2,)), N("t4-4").offline(600)).build()
    level = DemandForecast("t4", evening, (10.0,) * 60, "recent")
    held = decide_group(g, evening, ON, level)
    assert isinstance(held, Hold) and held.reason is LendReason.BUSY_WINDOW
    d = decide_group(g, evening, ON, replace(level, upper=(13.0,) * 60))
    assert isinstance(d, TakeBack) and d.reason is LendReason.HIGH_USAGE
    assert ("urgent inside the 18:00-22:00 lending window: forecast (recent, burst band) 19:00 online 108% > 100%"
            in d.message)


def test_near_term_minutes_keep_the_burst_band():
    out = with_near_term(DemandForecast("t4", NOW, (4.0,) * 5, "recent", upper=(6.0,) * 5), "t4", NOW, (7.0, 5.0))
    assert out.values == (7.0, 5.0, 4.0, 4.0, 4.0) and out.upper == (7.0, 6.0, 6.0, 6.0, 6.0)


def test_recent_forecast_horizon_must_be_positive():
    with pytest.raises(ValueError, match="horizon_min"):
        recent_forecast("t4", [1.0] * RECENT_MIN, NOW, 0)


def test_seasonal_forecast_horizon_must_be_positive():
    with pytest.raises(ValueError, match="horizon_min"):
        seasonal_forecast("t4", [1.0] * DAY_MIN, NOW, 0)


# ---- property: no job placed on a lent node past its predicted take-back ------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(durations=st.lists(st.floats(60, 14 * H), min_size=1, max_size=8),
       until=st.floats(-H, 16 * H), second_of_day=st.integers(0, 86399))
def test_no_job_is_placed_on_a_lent_node_past_its_predicted_take_back(durations, until, second_of_day):
    now = b.NOW - b.NOW % 86400 + second_of_day
    take_back = now + until
    profile = ON.with_(take_back_by=(("T4", take_back),))
    snap = b.SnapshotBuilder(now).node(
        b.NodeBuilder("lent-1"), b.NodeBuilder("lent-2"),  # offline-normal co-location nodes: lent
        b.NodeBuilder("fixed-1").pool(Pool.FIXED),
    ).quota("a", "T4", 1000).certify("pytorch", "T4")
    jobs = [b.JobBuilder().duration(d).submitted(now - 60) for d in durations]
    result = schedule(snap.job(*jobs).build(), TIDAL, profile)
    by_id = {j.build().id: j.build() for j in jobs}
    for admit in (d for d in result.decisions if isinstance(d, Admit)):
        if admit.node.startswith("lent"):
            assert now + by_id[admit.job_id].expected_duration_s <= take_back - profile.deadline_margin_s


# ---- the lead: drain and the largest replica's start-up -----------------------------------------------

@pytest.mark.parametrize("startup_s,fires", [(0.0, False), (10 * MIN, True)])
def test_a_take_back_leads_the_rise_by_the_drain_and_the_largest_startup(startup_s, fires):
    """A rise 20 minutes away: outside the 15-minute drain alone, inside drain + a 10-minute group start-up."""
    g = replace(lent_group().build(), startup_s=startup_s)
    assert isinstance(decide_group(g, NOW, ON, fc((20, 11), base=6)), TakeBack) is fires
    assert take_back_at(g, fc((90, 11), base=6), NOW, ON) == NOW + 90 * MIN - 900 - startup_s


def test_the_horizon_reaches_past_the_startup():
    assert horizon_min(NOW, ON, startup_s=3 * H) == horizon_min(NOW, ON) + 180


# ---- the near term from the services' XGBoost forecasts -------------------------------------------------

@pytest.mark.parametrize("services,near", [
    ((), ()),
    # 2 replicas at 0.5 -> ceil(0.5×2/0.6) = 2; at 0.9 -> 3; another pod's 1 GPU stays as it is
    ((ServiceAhead(2, (0.5, 0.9), 0.6, 1.0),), (3.0, 4.0)),
    # a forecast fall never asks fewer replicas than now (a take-back does not wait for a scale-in)
    ((ServiceAhead(2, (0.1,), 0.6, 1.0),), (3.0,)),
    # two services, 2-GPU replicas; the shortest forecast sets the length
    ((ServiceAhead(1, (0.9, 0.9, 0.9), 0.6, 2.0), ServiceAhead(1, (0.3, 1.2), 0.6, 1.0)), (1.0 + 4 + 1, 1.0 + 4 + 2)),
])
def test_near_term_demand(services, near):
    current = 1.0 + sum(s.replicas * s.per_replica for s in services)
    assert near_term_demand(current, services) == near


def test_the_near_term_replaces_the_first_minutes_and_is_named():
    seasonal = fc(base=6, minutes=10)
    both = with_near_term(seasonal, "t4", NOW, (9.0, 8.0))
    assert both.values[:3] == (9.0, 8.0, 6.0) and len(both.values) == 10 and both.source == "seasonal+xgboost"
    alone = with_near_term(None, "t4", NOW, (9.0,))
    assert alone.values == (9.0,) and alone.source == "xgboost"
    assert with_near_term(seasonal, "t4", NOW, ()) is seasonal and with_near_term(None, "t4", NOW, ()) is None


@pytest.mark.parametrize("largest,nodes", [
    (0.0, ("t4-3", "t4-4", "t4-5")),  # 1-GPU replicas or none: today's lend
    (8.0, ("t4-3", "t4-4")),  # 2 used of 20; lending 3 leaves 8 - 2 = 6 free < one 8-GPU group: 2
    (17.0, None),  # not even one node: 18 - 2 = 16 free < 17
])
def test_a_lend_leaves_room_for_one_more_of_the_largest_replica(largest, nodes):
    g = replace(idle_group().build(), largest_replica=largest)
    d = decide_group(g, NOW, ON)
    if nodes is None:
        assert isinstance(d, Hold) and d.reason is LendReason.NO_ROOM and "less than one replica (17 GPU)" in d.message
        return
    assert d.nodes == nodes
    if largest:
        assert "no more: lending one more node would leave less than one replica (8 GPU) free online" in d.message
