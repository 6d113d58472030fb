"""Sizing an LLM service to its request SLO (docs/concepts/autoscaling.md#sizing-to-the-request-slo), pure.

A request meets the SLO when its time to first token and its time per output token are both within their targets;
the owner asks for as many of them as GPUs are worth: one more replica is added while it would bring at least
`min_gain` of a fully used replica's requests within the SLO. That is the Lagrangian of "most requests within the
SLO for the GPU-hours": the utilization u kept maximizes E[share within SLO at u] - min_gain / u (1 / u replicas per
fully used one), so the answer moves with what the latencies measure: calm traffic runs close to the TPOT cliff,
bursty traffic, whose prefill queue makes first tokens wait, keeps more headroom, and a burst that no headroom
would serve is not bought at any price.

The latencies as functions of u are fitted to the newest minutes the engine measured (TPOT = step / (1 - u), the
step the median of TPOT p50 × (1 - u): the median request's TPOT, each request counted within while it is within the
target, so a spread of requests' TPOT around it is not modelled, nor a linear growth, unlike serving.TpotCurve's p99
for a p99 target; the prefill wait of an M/G/1 queue, mean W(u) = w·u / (1 - u) with w from Little's law on the
queue, its tail exponential with P(wait > 0) = u), and the load a start-up ahead is uncertain: u is spread by the
relative change the recent request rate showed over one start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from colocation.policy.serving import decode_step, measured_minutes, prefill_wait

LEVEL_MIN = 5  # the request rate's level: the mean of this many minutes
SPREAD_MINUTES = 360  # the load's spread is measured over this many minutes (callers keep them: keep_minutes)
GRID = np.arange(0.05, 0.99, 0.005)  # utilizations tried
EPS = np.array([NormalDist().inv_cdf((i + 0.5) / 16) for i in range(16)])  # the load's spread, 16 equal-weight draws


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """A replica's latencies against its utilization, fitted at the measured utilization `u0`."""

    step: float  # decode step, s
    own: float  # TTFT less its queue wait at u0 (the prompt's prefill and a decode step), s
    u0: float
    w: float  # the prefill wait's scale: mean wait W(u) = w·u / (1 - u), s

    def within(self, u: np.ndarray, ttft_s: float, tpot_s: float) -> np.ndarray:
        """The share of requests within both targets at utilization `u` (0 at or past saturation)."""
        u = np.clip(u, 1e-6, None)
        live = u < 1.0
        free = np.where(live, 1.0 - u, 1.0)
        base = self.own - self.step / (1.0 - self.u0) + self.step / free  # the prompt's own time at u
        slack = ttft_s - base
        if self.w > 0:
            ttft_ok = 1.0 - u * np.exp(-np.maximum(slack, 0.0) * free / self.w)
        else:
            ttft_ok = np.ones_like(u)
        ok = np.where(slack >= 0, ttft_ok, 0.0) * (self.step / free <= tpot_s)
        return np.where(live, ok, 0.0)


def fit(loads: Sequence, utilization: str = "gpu") -> LatencyModel | None:
    """The model from the newest minutes measured short of saturation, None without TTFT p99, queue, rate and TPOT
    p50 (the step: serving.decode_step over them; the wait: the newest minute, burstiness changes from one window to
    the next; averaging it over the start-up or hours did no better in the evaluation)."""
    measured = measured_minutes(loads, utilization)
    step = decode_step(measured)
    fitted = None if step is None else prefill_wait(*measured[-1])
    if fitted is None:
        return None
    w, own = fitted
    return LatencyModel(step, max(0.0, own), measured[-1][1], w)


def spread(loads: Sequence, horizon: int) -> float:
    """The root-mean-square relative change from the request rate's level (LEVEL_MIN minutes) to the rate
    `horizon` minutes later, over the minutes held (0 when too few). A normal spread of this width did as well in
    the evaluation as the changes' own quantiles, and as twice the horizon."""
    qps = np.array([m.qps if m.qps is not None else np.nan for m in loads], dtype=float)
    if len(qps) < LEVEL_MIN + horizon + 1:
        return 0.0
    level = np.convolve(qps, np.ones(LEVEL_MIN) / LEVEL_MIN, mode="valid")[:-horizon]
    later = qps[LEVEL_MIN - 1 + horizon:]
    ok = (level > 0) & np.isfinite(level) & np.isfinite(later)
    if not ok.any():
        return 0.0
    return float(np.sqrt(np.mean(((later[ok] - level[ok]) / level[ok]) ** 2)))


def expected_within(model: LatencyModel, u: np.ndarray, sigma: float, ttft_s: float, tpot_s: float) -> np.ndarray:
    """The share within the SLO at planned utilizations `u`, the load spread by a relative `sigma` (each draw
    weighed by its requests)."""
    scale = np.maximum(0.0, 1.0 + sigma * EPS)
    draws = model.within(np.outer(u, scale), ttft_s, tpot_s)
    return (draws * scale).sum(axis=1) / scale.sum()


@dataclass(frozen=True, slots=True)
class Sizing:
    utilization: float  # kept
    attainment: float  # predicted there
    sigma: float
    why: str


def size_to_slo(ttft_s: float, tpot_s: float, min_gain: float, loads: Sequence, horizon: int,
                utilization: str = "gpu") -> Sizing | None:
    """The utilization to keep (module docstring), None when the latencies cannot be fitted yet."""
    model = fit(loads, utilization)
    if model is None:
        return None
    sigma = spread(loads, horizon)
    within = expected_within(model, GRID, sigma, ttft_s, tpot_s)
    best = int(np.argmax(within - min_gain / GRID))
    u, a = float(GRID[best]), float(within[best])
    why = (f"sized to the SLO (TTFT {ttft_s:g} s, TPOT {tpot_s * 1e3:g} ms): {a:.1%} of requests predicted within "
           f"it at {u:.0%} use, the load ±{sigma:.0%} over {horizon} minutes; a replica more would keep under "
           f"{min_gain:.0%} of a full one's requests in")
    return Sizing(u, a, sigma, why)
