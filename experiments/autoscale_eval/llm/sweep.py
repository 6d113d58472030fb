"""The LLM sweep: HPA and the KPA at several utilization targets, tidal at several threshold settings, every one on
the same minutes with the same group model; the same grid on every trace (nothing here reads the traffic). Where the
grid leaves a baseline point uncovered, tidal is also run at that point's cost (at_baseline_costs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from colocation.policy import hpa, kpa
from colocation.policy.autoscaling import SYSTEM_MIN_REPLICAS, Rates, ScalingPolicy
from colocation.policy.serving import ServingTargets
from experiments.autoscale_eval.llm.front import Point, covering, covers
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
REFINE_LINES = 2  # lines tried at an uncovered baseline point's cost, the highest there first
REFINE_STEPS = 5  # bisections of a knob between two grid values: to 1/32 of the grid's step


@dataclass(frozen=True)
class Line:
    """Tidal's settings with one knob free (a threshold setting's look-ahead margin z, the SLO sizing's min_gain): the
    runs at the grid's values of the knob, in order, and how to run another value."""

    run: Callable[[float], Point]
    grid: tuple[tuple[float, Point], ...]


def line(run: Callable[[float], Point], values: Sequence[float]) -> Line:
    """The line through `run` at each of the grid's `values`."""
    return Line(run, tuple((v, run(v)) for v in values))


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

    def threshold(e: float, b: tuple[float, float], z: float) -> Point:
        return point(Tidal(tidal_policy(e, b, top, slo, model.startup_min), z),
                     f"expect {e:g} min/max ×{b[0]:g}/×{b[1]:g} look-ahead z {z:.10g}")

    def sized(z: float, g: float) -> Point:
        return point(Tidal(gain_policy(g, top, slo, model.startup_min), z),
                     f"sized to the SLO, min_gain {g:.10g} look-ahead z {z:g}")

    out = [point(Hpa(hpa.HpaSpec(t, SYSTEM_MIN_REPLICAS, top)), f"target {t:g}") for t in targets]
    out += [point(Kpa(kpa.KpaSpec(t, SYSTEM_MIN_REPLICAS, top)), f"target {t:g}") for t in targets]
    lines = [line(partial(threshold, e, b), zs) for e in expect for b in bands]
    lines += [line(partial(sized, z), gains) for z in gain_zs]
    out += [p for ln in lines for _, p in ln.grid]
    out += at_baseline_costs(out, lines)
    return Sweep(model.startup_min, tuple(out))


def at_baseline_costs(points: Sequence[Point], lines: Sequence[Line]) -> list[Point]:
    """Tidal at the cost of each baseline point the grid leaves uncovered: on the REFINE_LINES lines highest at its
    cost (between their grid values, linearly), the knob is bisected toward the point's GPU-hours. The comparison is
    then made at the baseline's cost rather than at the grid's; every point tried is a run of its own setting, kept."""
    added: list[Point] = []
    tidal = [p for p in points if p.policy == "tidal"]
    for base in (p for p in points if p.policy != "tidal"):
        for ln, cheap, dear in _bracketing(lines, base)[:REFINE_LINES]:
            if covering(base, tidal + added) is not None:
                break
            added += _bisected(ln, cheap, dear, base)
    return added


def _bracketing(lines: Sequence[Line], base: Point) -> list[tuple[Line, float, float]]:
    """(line, its knob at most `base`'s cost, its knob over it) for every line with neighbouring grid values on either
    side of that cost (the first such pair), the highest there first."""
    c, found = base.gpu_hours_per_mtok, []
    for ln in lines:
        for (v0, p0), (v1, p1) in zip(ln.grid, ln.grid[1:]):
            if p1.gpu_hours_per_mtok < p0.gpu_hours_per_mtok:  # a knob whose cost falls as it grows (min_gain)
                (v0, p0), (v1, p1) = (v1, p1), (v0, p0)
            c0, c1 = p0.gpu_hours_per_mtok, p1.gpu_hours_per_mtok
            if c0 <= c < c1:
                found.append((p0.attainment + (c - c0) / (c1 - c0) * (p1.attainment - p0.attainment), ln, v0, v1))
                break
    return [(ln, cheap, dear) for _, ln, cheap, dear in sorted(found, key=lambda f: -f[0])]


def _bisected(ln: Line, cheap: float, dear: float, base: Point) -> list[Point]:
    """Knob values between `cheap` (at most `base`'s cost) and `dear` (over it), halved toward its cost until one
    covers it."""
    tried: list[Point] = []
    for _ in range(REFINE_STEPS):
        v = (cheap + dear) / 2
        tried.append(p := ln.run(v))
        if covers(p, base):
            break
        cheap, dear = (v, dear) if p.gpu_hours_per_mtok <= base.gpu_hours_per_mtok else (cheap, v)
    return tried


def size(targets: Sequence[float] = TARGETS, expect: Sequence[float] = TIDAL_EXPECT,
         bands: Sequence = TIDAL_BANDS, zs: Sequence[float] = TIDAL_Z, gains: Sequence[float] = TIDAL_GAINS,
         gain_zs: Sequence[float] = GAIN_Z) -> int:
    """Runs in one sweep's grid (at_baseline_costs adds a few where it leaves a baseline point uncovered)."""
    return 2 * len(targets) + len(expect) * len(bands) * len(zs) + len(gains) * len(gain_zs)
