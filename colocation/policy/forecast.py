"""Online demand forecasts for forecast-driven lending (docs/concepts/lending.md#forecast-driven-lending), pure.

`seasonal_forecast` predicts a group's online demand per minute from its own per-minute history, assuming only
that traffic repeats daily: for each coming minute, the demand at the same minute of day (+-`SLACK_MIN` minutes,
so a peak that comes a little early still counts) on each of the last up-to-7 days, each day first brought to
today's level (the mean of the last 24 hours over that day's mean of the 24 hours before the same minute, bounded
0.5-2x: traffic that grows or shrinks over the week is forecast at today's level, not at its busiest days'), then a
high quantile across those days (a cautious profile that one odd day does not dominate). It is a safety profile,
not a mean: lending errs toward taking back early rather than late. The level moves slowly on purpose: renewed
every few minutes, the forecast must not jump (a jump pulls every predicted take-back, and the jobs placed to end
before it are killed); an hour's level made it jump by up to 2x within minutes.

Until a day of history exists (a new cluster's first day) `recent_forecast` stands in: every coming minute at the
largest demand of the last `RECENT_MIN` minutes (2 h, the minimum lend). Without a day it cannot know when the daily
rise comes; it assumes only that the next minimum lend is no busier than the last one, so a lend keeps room for the
recent high and a take-back starts when the lent nodes would leave none. Flat on purpose: an envelope on the last
minutes' level, × (1 + z·σ(h)) with σ the measured change over h minutes, jumped with every burst and killed more than
the threshold rules; the high of the whole day held never lets a group with a night lend again (measured:
docs/results/2026-11-29-llm-autoscaling.md). `demand_forecast` picks the one that exists.

Its burst band (`DemandForecast.upper`): what the demand may reach, not what it is expected to be: the demand now ×
the group's burst ratio (`burst_ratio`: the `BURST_QUANTILE` of the next 2 h's high over the demand at each minute
seen so far; bursty LLM traffic rose 2x within 2 h). Lending plans with it (a lend keeps room for the band, a job on a
lent node must end before the band's take-back, idle lent nodes come back when it passes maxRate); evictions never
read it (a take-back's trigger, size and deadline read the level), so a burst seen ahead empties the lent nodes of new
work instead of killing what runs there. Used everywhere, the band jumps with every rise and its graceful take-backs
killed 14 of 131 jobs on deepseek-r1's day; for planning only, none (docs/results/2026-11-29-llm-autoscaling.md).

`take_back_at` turns a forecast into the time the group's lent nodes are predicted to be taken back: the first
forecast minute where online usage, with every lent node still lent, passes maxRate, minus the drain time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import zip_longest
import math
from dataclasses import dataclass, field

import numpy as np

from cluster.types import GPU_EPS
from colocation.policy.group import GroupView, ratio
from colocation.policy.pools import long_bar_s
from colocation.policy.profile import LendingProfile

DAY_MIN = 1440
MAX_DAYS = 7  # days of history the seasonal profile looks at
SLACK_MIN = 10  # same minute of day +- this many minutes
QUANTILE = 0.85  # across days: with 7 days, between the highest and the second highest
SCALE_MIN, SCALE_MAX = 0.5, 2.0  # today's level against a past day's: bounded
LEVEL_MIN = DAY_MIN  # a level: the mean of the 24 h before the minute (slow: a forecast must not jump minute to minute)
RECENT_MIN = 120  # the cold-start forecast's window and the history it needs: the default minimum lend (2 h),
# the span a lend promises to stay idle
BURST_QUANTILE = 0.9  # of the burst ratios seen (as calibration.QUANTILE: one odd burst does not set it)


@dataclass(frozen=True, slots=True)
class DemandForecast:
    group: str
    start: float  # epoch s of values[0] = the minute after `now` (the minute starting at `now`)
    values: tuple[float, ...]  # predicted online demand per minute, in the group's unit (GPUs; millicores for CPU)
    source: str  # "seasonal", "recent" or either "+xgboost" (the first minutes from the near-term models)
    step_s: float = 60.0
    # the burst band: per minute, at least `values`, what the demand may reach (); empty: no band (the values)
    upper: tuple[float, ...] = ()
    array: np.ndarray = field(init=False, repr=False, compare=False)  # the values, for vectorised scans

    def __post_init__(self) -> None:
        object.__setattr__(self, "array", np.asarray(self.values, dtype=float))

    def band(self) -> DemandForecast:
        """The forecast lending plans with: the burst band where there is one above the values (module docstring),
        else itself."""
        if not self.upper or self.upper == self.values:
            return self
        return DemandForecast(self.group, self.start, self.upper, f"{self.source}, burst band", self.step_s)

    def at(self, i: int) -> float:
        """Epoch s at which values[i] starts."""
        return self.start + i * self.step_s

    def peak(self, now: float, within_s: float) -> tuple[float, float] | None:
        """(largest predicted demand, its minute) over [now, now + within_s), None if the forecast does not reach."""
        best = None
        for i, v in enumerate(self.values):
            t = self.at(i)
            if t + self.step_s <= now:
                continue
            if t >= now + within_s:
                break
            if best is None or v > best[0]:
                best = (v, t)
        return best


def seasonal_forecast(group: str, history: Sequence[float], now: float, horizon_min: int) -> DemandForecast | None:
    """The seasonal profile (module docstring) for the `horizon_min` minutes from `now`; None with less than one
    day of history. `history`: the group's online demand per minute, oldest first, its last value the minute that
    ended at `now`. Negative or non-finite values are read as 0."""
    if horizon_min <= 0:
        raise ValueError(f"horizon_min must be > 0, got {horizon_min}")
    days = min(MAX_DAYS, len(history) // DAY_MIN)
    if days < 1:
        return None
    horizon = min(horizon_min, DAY_MIN)  # yesterday's minute must be in the past
    span = days * DAY_MIN + LEVEL_MIN  # >= SLACK_MIN: every day's window and its level's span are inside
    recent = history[-span:] if len(history) > span else history
    h = np.nan_to_num(np.asarray(recent, dtype=float), nan=0.0, posinf=0.0, neginf=0.0).clip(min=0.0)
    n = len(h)
    # row d-1: minutes [n - d*DAY - SLACK, n - d*DAY + horizon + SLACK) of day d back, clipped into the history
    offsets = np.arange(-SLACK_MIN, horizon + SLACK_MIN)
    starts = n - DAY_MIN * np.arange(1, days + 1)
    idx = np.clip(starts[:, None] + offsets[None, :], 0, n - 1)
    windows = np.lib.stride_tricks.sliding_window_view(h[idx], 2 * SLACK_MIN + 1, axis=1).max(axis=2)
    windows = windows * _scales(h, starts)[:, None]  # each day brought to today's level before they are compared
    profile = np.quantile(windows, QUANTILE, axis=0) if days > 1 else windows[0]
    return DemandForecast(group, now, tuple(float(v) for v in profile[:horizon_min]), "seasonal")


def recent_forecast(group: str, history: Sequence[float], now: float, horizon_min: int) -> DemandForecast | None:
    """The cold-start forecast (module docstring) for the `horizon_min` minutes from `now`: the largest demand of the
    last `RECENT_MIN` minutes, flat, with its burst band (the demand now × `burst_ratio`, never below the high); None
    with fewer minutes of history. `history` as for `seasonal_forecast` (at most a day of it is read)."""
    if horizon_min <= 0:
        raise ValueError(f"horizon_min must be > 0, got {horizon_min}")
    if len(history) < RECENT_MIN:
        return None
    h = np.nan_to_num(np.asarray(history[-DAY_MIN:], dtype=float), nan=0.0, posinf=0.0, neginf=0.0).clip(min=0.0)
    high = float(h[-RECENT_MIN:].max())
    upper = max(high, float(h[-1]) * burst_ratio(h))
    return DemandForecast(group, now, (high,) * horizon_min, "recent", upper=(upper,) * horizon_min)


def burst_ratio(history: np.ndarray, within: int = RECENT_MIN, quantile: float = BURST_QUANTILE) -> float:
    """How far demand rose within `within` minutes: the `quantile`, over every minute of `history` (clean, oldest
    first) with demand and `within` minutes after it, of their high over that minute's demand; at least 1, and 1
    before any such minute."""
    if len(history) <= within:
        return 1.0
    ahead = np.lib.stride_tricks.sliding_window_view(history[1:], within).max(axis=1)  # [t] = high of (t, t+within]
    level = history[:len(ahead)]
    seen = level > GPU_EPS  # less is no demand (a ratio over it says nothing, and may overflow)
    if not seen.any():
        return 1.0
    return max(1.0, float(np.quantile(ahead[seen] / level[seen], quantile)))


def demand_forecast(group: str, history: Sequence[float], now: float, horizon_min: int) -> DemandForecast | None:
    """The group's forecast for lending: the seasonal profile once a day of history exists, the cold-start forecast
    before (the recent high: `recent_forecast`), None with less history than either needs."""
    return (seasonal_forecast(group, history, now, horizon_min)
            or recent_forecast(group, history, now, horizon_min))


@dataclass(frozen=True, slots=True)
class ServiceAhead:
    """One service's near-term forecast as its group sees it: utilization at `replicas` per coming minute."""

    replicas: int
    values: tuple[float, ...]
    expect_rate: float  # where the autoscaler lands a scale-out
    per_replica: float  # what a replica takes of the group (GPUs; millicores for CPU)


def near_term_demand(current: float, services: Sequence[ServiceAhead]) -> tuple[float, ...]:
    """The group's online demand per coming minute from its services' near-term forecasts: each service at the
    replicas the autoscaler would ask for the forecast (ceil(utilization × replicas / expectRate), never fewer than
    now: scale-in is not what a take-back waits for), the rest of the group's demand as it is now."""
    if not services:
        return ()
    rest = current - sum(s.replicas * s.per_replica for s in services)
    out = []
    for h in range(min(len(s.values) for s in services)):
        asked = sum(max(s.replicas, math.ceil(s.values[h] * s.replicas / s.expect_rate - 1e-9)) * s.per_replica
                    for s in services)
        out.append(max(0.0, rest) + asked)
    return tuple(out)


def with_near_term(fc: DemandForecast | None, group: str, now: float, near: Sequence[float],
                   source: str = "xgboost") -> DemandForecast | None:
    """The seasonal profile with its first minutes from a near-term forecast (the trained XGBoost models' next
    minutes of the group's services, better than a daily profile minutes ahead); the near-term alone when no
    seasonal profile exists yet; `fc` unchanged without one."""
    if not near:
        return fc
    rest = fc.values[len(near):] if fc is not None else ()
    named = source if fc is None else f"{fc.source}+{source}"
    values = tuple(float(v) for v in near) + tuple(rest)
    upper = (tuple(max(u, v) for u, v in zip_longest(fc.upper, values, fillvalue=0.0))
             if fc is not None and fc.upper else ())
    return DemandForecast(group, now, values, named, upper=upper)


def _scales(h: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per past day: today's level (the mean of the last LEVEL_MIN minutes) over that day's level at the same time,
    bounded; 1 when that day's level is unknown or quiet (the night says nothing about the day). Per day, not one
    factor over the days' median: traffic that grows or shrinks over the week would otherwise be forecast at the
    level of its busiest days."""
    today = float(h[-LEVEL_MIN:].mean())
    floor = 0.05 * float(h.mean())
    out = np.ones(len(starts))
    for i, s in enumerate(starts):
        past = float(h[max(0, s - LEVEL_MIN):s].mean()) if s > 0 else 0.0
        if past > floor and past > 0:
            out[i] = min(SCALE_MAX, max(SCALE_MIN, today / past))
    return out


def lead_s(g: GroupView, profile: LendingProfile) -> float:
    """How long before a forecast rise a take-back must start: the drain, then the start-up of the group's largest
    replica on the nodes it gets back (a rise a group of pods cannot start in time for is served late)."""
    return profile.drain_s + g.startup_s


def horizon_min(now: float, profile: LendingProfile, startup_s: float = 0.0) -> int:
    """Minutes to forecast: far enough for the longest job a lent node may take (the long-job bar and the margin),
    the minimum lend time, the drain and the largest replica's start-up (`startup_s`); at most a day."""
    reach = max(long_bar_s(now, profile) + profile.deadline_margin_s, profile.min_lend_s) + profile.drain_s + startup_s
    return min(DAY_MIN, math.ceil(reach / 60) + 1)


def take_back_times(views: Sequence[GroupView], forecasts: Mapping[str, DemandForecast], now: float,
                    profile: LendingProfile, model_of: Mapping[str, str | None]) -> dict[str, float]:
    """{GPU model ("" for CPU-only): the earliest predicted take-back of its groups' lent nodes} for the groups with
    one (`take_back_at`); `model_of` maps a group to its GPU model. What the loops hand the scheduling cycle as
    `LendingProfile.take_back_by`."""
    out: dict[str, float] = {}
    for g in views:
        at = take_back_at(g, forecasts.get(g.name), now, profile)
        if at is not None:
            key = model_of.get(g.name) or ""
            out[key] = min(at, out.get(key, at))
    return out


def take_back_at(g: GroupView, fc: DemandForecast | None, now: float, profile: LendingProfile) -> float | None:
    """When the group's lent nodes are predicted to be taken back: the first minute of the forecast's burst band
    (`DemandForecast.band`) whose demand over the capacity heading online (every lent node staying lent) passes
    maxRate, minus the lead (`lead_s`); None when no such minute is within the forecast, or no forecast. It may be
    before `now` (the rise is closer than the drain)."""
    if fc is None:
        return None
    th = g.thresholds or profile.thresholds
    if g.next_replica_over(th.max_rate) and g.lent():
        return now  # the next scale-out of its largest replica takes lent nodes back, whatever the forecast says
    minute = first_over(fc.band(), g.projected_capacity, th.max_rate, now)
    return None if minute is None else minute[1] - lead_s(g, profile)


def first_over(fc: DemandForecast, capacity: float, max_rate: float, now: float,
               within_s: float | None = None) -> tuple[float, float] | None:
    """(usage, minute start) of the first forecast minute from `now` (within `within_s`) whose usage over
    `capacity` passes `max_rate`; None if none. Vectorised: the loops ask it every minute for every group."""
    first = max(0, math.floor((now - fc.start) / fc.step_s))  # the minute `now` is in (minutes ended: skipped)
    last = len(fc.values) if within_s is None else min(len(fc.values),
                                                        math.ceil((now + within_s - fc.start) / fc.step_s))
    if first >= last:
        return None
    v = fc.array[first:last]
    over = v > 0 if capacity <= 0 else v / capacity > max_rate
    if not over.any():
        return None
    i = first + int(np.argmax(over))
    return ratio(fc.values[i], capacity), fc.at(i)
