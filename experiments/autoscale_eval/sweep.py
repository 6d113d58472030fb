"""The autoscaling front: HPA at several utilization targets and tidal at several threshold settings on the same
minutes, each point (overloaded minutes, replica-hours), and whether tidal's front dominates HPA's.

Tidal's knobs are the two settings a service owner gives the live autoscaler: its thresholds, expectRate (where
every scaling lands) with minRate/maxRate (the triggers) a band × expectRate on either side -- the counterpart of
HPA's target and its tolerance, which is relative (|1 - y/target| <= 0.1); the grid tries HPA's ±10 % and a
narrower ±5 % (the band is a setting of its own: how far the load may wander before a scaling) -- and its
square-root headroom (ScalingPolicy.headroom: every rate times 1/(1 + h/√N) at N replicas, so small counts keep more
room for their relatively larger swings) -- and scale to zero after an idle time (ScalingPolicy.scale_to_zero_idle_min,
KEDA's cooldown; HPA cannot go below minReplicas). The front is over the grid of all four; the verdict is also given
without scale to zero, so a front won only by idle hours says so.
An idle time longer than the traffic's longest idle run can never fire: its runs would repeat the ones without scale to
zero, so they are left out.
The XGBoost forecast is trained once and shared by every tidal point: only the settings change."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from colocation.policy.autoscaling import Rates
from experiments.autoscale_eval.compare import hpa_autoscaler, tidal_autoscaler
from experiments.autoscale_eval.forecasting import Forecast
from experiments.autoscale_eval.front import covering, dominates
from experiments.autoscale_eval.run import run
from experiments.autoscale_eval.service import ServiceModel

HPA_TARGETS = (0.5, 0.6, 0.7, 0.8, 0.9)
TIDAL_EXPECT = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
TIDAL_HEADROOM = (0.0, 0.1, 0.25, 0.5, 1.0, 1.5)
TIDAL_BANDS = (0.05, 0.1)  # relative, as HPA's tolerance: minRate/maxRate = expectRate × (1 ∓ band)
TIDAL_IDLE = (None, 30, 60)  # scale to zero after this many minutes without a request; None: never
BAND = 0.1

Setting = tuple[float, float, float, int | None]  # (expectRate, headroom, band, idle minutes)


@dataclass(frozen=True, slots=True)
class Point:
    policy: str  # "hpa" or "tidal"
    knob: float  # HPA's target, or tidal's expectRate
    overloaded_min: int
    replica_hours: float
    headroom: float = 0.0  # tidal's square-root headroom
    band: float = BAND  # tidal's minRate/maxRate: expectRate × (1 ∓ band)
    idle_min: int | None = None  # tidal's scale to zero after this many idle minutes; None: never

    def pair(self) -> list:
        return [self.overloaded_min, self.replica_hours]

    @property
    def objectives(self) -> tuple[float, float]:
        return self.overloaded_min, self.replica_hours

    @property
    def label(self) -> str:
        if self.policy == "hpa":
            return f"hpa target {self.knob:.2f}"
        zero = f" to zero after {self.idle_min} idle min" if self.idle_min else ""
        return f"tidal expectRate {self.knob:.2f} band ±{self.band:.0%} headroom {self.headroom:g}{zero}"


def tidal_rates(expect: float, band: float = BAND) -> Rates:
    """expectRate with minRate/maxRate `band` of it on either side (maxRate at most 1)."""
    return Rates(round(expect * (1 - band), 4), expect, round(min(1.0, expect * (1 + band)), 4))


@dataclass(frozen=True)
class Front:
    startup_min: int
    hpa: tuple[Point, ...]
    tidal: tuple[Point, ...]

    @property
    def dominates(self) -> bool:
        return dominates(self.tidal, self.hpa)

    @property
    def always_on(self) -> tuple[Point, ...]:
        """Tidal's points without scale to zero: HPA's own terms (never under minReplicas)."""
        return tuple(p for p in self.tidal if p.idle_min is None)

    def lines(self) -> list[str]:
        """One sentence per HPA point: which tidal point covers it, or that none does."""
        out = []
        for p in self.hpa:
            q = covering(p, self.tidal)
            head = f"{p.label} ({p.overloaded_min} overloaded min, {p.replica_hours:,.2f} replica-h)"
            out.append(f"{head}: covered by {q.label} ({q.overloaded_min} min, {q.replica_hours:,.2f} replica-h)"
                       if q else f"{head}: no tidal point covers it")
        return out

    def figures(self) -> dict:
        return {"startup_min": self.startup_min, "hpa": [p.pair() for p in self.hpa],
                "tidal": [p.pair() for p in self.tidal], "hpa_targets": [p.knob for p in self.hpa],
                "tidal_settings": [[p.knob, p.headroom, p.band, p.idle_min] for p in self.tidal],
                "tidal_band_relative": True, "dominates": self.dominates,
                "dominates_without_scale_to_zero": dominates(self.always_on, self.hpa),
                "uncovered_hpa": [p.knob for p in self.hpa if covering(p, self.tidal) is None]}


def settings(expect: Sequence[float] = TIDAL_EXPECT, headroom: Sequence[float] = TIDAL_HEADROOM,
             bands: Sequence[float] = TIDAL_BANDS, idle: Sequence[int | None] = TIDAL_IDLE) -> tuple[Setting, ...]:
    """Tidal's grid: (expectRate, headroom, band, idle minutes)."""
    return tuple((e, h, b, i) for i in idle for e in expect for h in headroom for b in bands)


def longest_idle(demand: np.ndarray) -> int:
    """The longest run of minutes without work (no request at the gateway)."""
    best = run_ = 0
    for busy in demand > 0:
        run_ = 0 if busy else run_ + 1
        best = max(best, run_)
    return best


def grid(demand: np.ndarray, tidal: Sequence[Setting] = settings()) -> tuple[Setting, ...]:
    """The settings worth running on `demand`: an idle time it never reaches would repeat the run without it."""
    most = longest_idle(demand)
    return tuple(s for s in tidal if s[3] is None or s[3] <= most)


def sweep(demand: np.ndarray, start: float, model: ServiceModel, fc: Forecast | None, top: int,
          tick: Callable[[int], None] | None = None, hpa_targets: Sequence[float] = HPA_TARGETS,
          tidal: Sequence[Setting] | None = None) -> Front:
    """Every HPA target and tidal setting (default: `grid(demand)`) on the same minutes, from the replicas the first
    minute needs."""
    first = model.replicas_for(float(demand[0]))

    def point(name: str, knob: float, policy, headroom: float = 0.0, band: float = BAND,
              idle: int | None = None) -> Point:
        f = run(policy, demand, start, model, first, tick).figures(model, demand)
        return Point(name, knob, f["overloaded_min"], f["replica_hours"], headroom, band, idle)

    hpa = tuple(point("hpa", t, hpa_autoscaler(model, top, t)) for t in hpa_targets)
    tid = tuple(point("tidal", e, tidal_autoscaler(model, top, fc, tidal_rates(e, b), h, idle), h, b, idle)
                for e, h, b, idle in (grid(demand) if tidal is None else tidal))
    return Front(model.startup_min, hpa, tid)
