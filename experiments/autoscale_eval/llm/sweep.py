"""The LLM sweep: HPA and the KPA at several utilization targets, tidal at several threshold settings, every one on
the same minutes with the same group model; the same grid on every trace (nothing here reads the traffic)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from colocation.policy import hpa, kpa
from colocation.policy.autoscaling import SYSTEM_MIN_REPLICAS, Rates, ScalingPolicy
from colocation.policy.serving import ServingTargets
from experiments.autoscale_eval.llm.front import Point
from experiments.autoscale_eval.llm.policies import Hpa, Kpa, Tidal
from experiments.autoscale_eval.llm.replica import GroupModel
from experiments.autoscale_eval.llm.run import Slo, replay
from experiments.autoscale_eval.llm.servegen import Workload

TARGETS = (0.45, 0.5, 0.55, 0.6, 0.65)  # HPA's and the KPA's utilization targets
TIDAL_EXPECT = (0.45, 0.5, 0.55, 0.6, 0.65, 0.7)  # above the TPOT cliff the SLO lowers them (policy/serving.py)
TIDAL_BANDS = ((0.9, 1.05), (0.8, 1.1))  # minRate, maxRate as multiples of expectRate
TIDAL_Z = tuple(i / 8 for i in range(13))  # the look-ahead's margin in standard changes (forecast.py): 0-1.5, steps of 0.125
TIDAL_GAINS = tuple(round(0.05 * 20 ** (i / 15), 3) for i in range(16))  # min_gain 0.05-1, evenly in log
GAIN_Z = (0.0, 0.5, 1.0)  # the look-ahead's margin beside the sizing
GAIN_BAND = (0.95, 1.0)  # its band around the utilization the SLO asks: scale out as soon as the level passes it
MAX_OVER_PEAK = 2  # at most this many times the groups the evaluated peak needs at utilization 0.5


@dataclass(frozen=True)
class Sweep:
    startup_min: int
    points: tuple[Point, ...]

    def of(self, policy: str) -> tuple[Point, ...]:
        return tuple(p for p in self.points if p.policy == policy)


def tidal_policy(expect: float, band: tuple[float, float], top: int, slo: Slo,
                 startup_min: int) -> ScalingPolicy:
    """Tidal as an LLM service owner sets it: utilization thresholds, the service's TPOT target (TTFT is left to the
    thresholds: its misses come from bursts that are over before a group could start) and its start-up time."""
    rates = Rates(round(expect * band[0], 4), expect, round(min(1.0, expect * band[1]), 4))
    return ScalingPolicy(thresholds=(("gpu", rates),), min_replicas=SYSTEM_MIN_REPLICAS, max_replicas=top,
                         serving=ServingTargets(tpot_p99_s=slo.tpot_s), startup_min=startup_min)


def gain_policy(min_gain: float, top: int, slo: Slo, startup_min: int) -> ScalingPolicy:
    """Tidal sized to the request SLO (colocation/policy/slo_sizing.py): the band's expectRate is what the SLO and
    `min_gain` ask, minute by minute, under the load's spread over a start-up; the look-ahead's margin (z 0-1) adds
    to it."""
    rates = Rates(GAIN_BAND[0] * 0.6, 0.6, GAIN_BAND[1] * 0.6)  # moved by the sizing; only the shape counts
    return ScalingPolicy(thresholds=(("gpu", rates),), min_replicas=SYSTEM_MIN_REPLICAS, max_replicas=top,
                         serving=ServingTargets(slo_ttft_s=slo.ttft_s, slo_tpot_s=slo.tpot_s, min_gain=min_gain),
                         startup_min=startup_min)


def sweep(w: Workload, model: GroupModel, slo: Slo, tick: Callable[[], None] | None = None,
          targets: Sequence[float] = TARGETS, expect: Sequence[float] = TIDAL_EXPECT,
          bands: Sequence[tuple[float, float]] = TIDAL_BANDS, zs: Sequence[float] = TIDAL_Z,
          gains: Sequence[float] = TIDAL_GAINS, gain_zs: Sequence[float] = GAIN_Z) -> Sweep:
    per_rps = model.utilization(1.0, float(w.tokens_in.mean()), float(w.tokens_out.mean()))
    top = max(SYSTEM_MIN_REPLICAS, MAX_OVER_PEAK * int(float(w.rps.max()) * per_rps / 0.5 + 1))
    first = max(SYSTEM_MIN_REPLICAS, int(float(w.rps[0]) * per_rps / 0.5 + 1))
    tokens = w.tokens

    def point(policy, setting: str) -> Point:
        f = replay(policy, w, model, slo, first).figures(model, tokens)
        if tick:
            tick()
        return Point(policy.name, setting, f["slo_attainment"], f["gpu_hours_per_mtok"])

    out = [point(Hpa(hpa.HpaSpec(t, SYSTEM_MIN_REPLICAS, top)), f"target {t:g}") for t in targets]
    out += [point(Kpa(kpa.KpaSpec(t, SYSTEM_MIN_REPLICAS, top)), f"target {t:g}") for t in targets]
    out += [point(Tidal(tidal_policy(e, b, top, slo, model.startup_min), z),
                  f"expect {e:g} min/max ×{b[0]:g}/×{b[1]:g} look-ahead z {z:g}")
            for e in expect for b in bands for z in zs]
    out += [point(Tidal(gain_policy(g, top, slo, model.startup_min), z),
                  f"sized to the SLO, min_gain {g:g} look-ahead z {z:g}") for g in gains for z in gain_zs]
    return Sweep(model.startup_min, tuple(out))


def size(targets: Sequence[float] = TARGETS, expect: Sequence[float] = TIDAL_EXPECT,
         bands: Sequence = TIDAL_BANDS, zs: Sequence[float] = TIDAL_Z, gains: Sequence[float] = TIDAL_GAINS,
         gain_zs: Sequence[float] = GAIN_Z) -> int:
    """Runs in one sweep."""
    return 2 * len(targets) + len(expect) * len(bands) * len(zs) + len(gains) * len(gain_zs)
