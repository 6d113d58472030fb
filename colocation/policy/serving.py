"""LLM serving signals for inference autoscaling (docs/concepts/autoscaling.md#llm-serving-signals), pure.

A service that serves a language model may target, beside its utilization thresholds, an SLO (time to first token
p99, time per output token p99) and a KV-cache or queue target. The signals come from the serving engine's
Prometheus metrics (vLLM's names, SGLang's as the alternative: docs/reference/llm-serving-metrics.md) and ride on
each `LoadMinute`. Every answer names its signal and its target, so the decision's sentence says what moved it.

Latency does not scale with replicas the way utilization does (a queue's wait explodes near saturation), so a missed
SLO sizes the scale-out by the utilization at expectRate and asks one replica more at least, at most doubling per
decision; and a missed SLO in the scale-in window forbids scaling in (an empty queue does not say how many replicas
the latency needs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

MAX_STEP = 2.0  # a latency breach at most doubles the replicas per decision (HPA's default scale-up is +100 %)
SIGNALS = ("ttft_p99", "tpot_p99", "queue", "kv_cache")
STEP_MINUTES = 15  # minutes the decode step is measured over (its median)
# TPOT p99's curve (TpotCurve) is fitted to the newest FIT_MINUTES minutes when they span FIT_SPAN of utilization
# (a narrower span cannot tell a linear growth from the cliff through noise); it is trusted REACH beyond the highest
# utilization measured: enough for a service measured up to 56 % to reach the demo engine's 76 %, and a miss past it
# is caught by the breach rule within 2 minutes.
FIT_MINUTES = 60
FIT_SPAN = 0.15
REACH = 0.2
SATURATED = 0.9  # a minute this busy says little about the step (its TPOT is mostly the queue)
# TTFT p99's limit is read on each of the newest TTFT_MINUTES minutes measured and the median of the minutes that fit
# the queue model is kept (at least TTFT_QUORUM of them, else no limit): one minute's burstiness makes its own limit
# flap (one minute fits, the next does not, a third reads low: the demo's llm-chat went 3 -> 6 -> 2 groups in 25 s).
# 5 out-votes two odd minutes and still follows a change of load within the scale-in run (IN_MINUTES, 5). A window
# without the quorum (a low use queues nothing: no minute fits) keeps the newest limit that had one within FIT_MINUTES.
TTFT_MINUTES = 5
TTFT_QUORUM = math.ceil(TTFT_MINUTES / 2)
# TPOT p99 readings pinned inside a histogram bucket (pinned_at): over minutes whose mean TPOT spans PIN_SPAN, the
# p99 readings within the target grow less than PIN_ELASTICITY as fast as the mean (a true p99 of a spread that
# scales with the step grows as fast: 1; the demo engine's, read in vLLM's 25-50 ms bucket: 0.02-0.12)
PIN_SPAN = 0.05
PIN_ELASTICITY = 0.5
# A TPOT p99 read in the top CENSOR_TOP of its histogram bucket (lo, hi] is censored (bucket_bound): nearly every
# request near the p99's rank fell in that one bucket, so Prometheus's linear interpolation puts the reading just under
# hi whatever the p99 is (all of a minute's requests in vLLM's 25-50 ms bucket read 49.75 ms): it says only p99 <= hi.
CENSOR_TOP = 0.02


@dataclass(frozen=True, slots=True)
class ServingTargets:
    """What an LLM service promises: p99 latencies in seconds, KV-cache use (fraction, 0..1) and waiting requests
    per replica; None: not a target."""

    ttft_p99_s: float | None = None
    tpot_p99_s: float | None = None
    kv_cache: float | None = None  # scale out when the mean KV-cache use of the replicas passes this
    queue_per_replica: float | None = None  # scale out when waiting requests per replica pass this
    # Sizing to the request SLO (slo_sizing.py): a request within TTFT slo_ttft_s and TPOT slo_tpot_s meets it; one
    # more replica is worth its GPUs while it brings at least min_gain of a fully used replica's requests within.
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    min_gain: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft_p99_s", "tpot_p99_s", "queue_per_replica", "slo_ttft_s", "slo_tpot_s"):
            v = getattr(self, name)
            if v is not None and v <= 0:
                raise ValueError(f"{name} must be > 0, got {v}")
        if self.kv_cache is not None and not 0 < self.kv_cache <= 1:
            raise ValueError(f"kv_cache must be in (0, 1], got {self.kv_cache}")
        if self.min_gain is not None and not 0 < self.min_gain <= 1:
            raise ValueError(f"min_gain must be in (0, 1], got {self.min_gain}")
        if self.min_gain is not None and (self.slo_ttft_s is None or self.slo_tpot_s is None):
            raise ValueError("min_gain sizes to the request SLO: set slo_ttft_s and slo_tpot_s too")

    @property
    def sizes_to_slo(self) -> bool:
        return self.min_gain is not None

    def targets(self) -> dict[str, float]:
        """{signal: target} of the targets set."""
        values = (self.ttft_p99_s, self.tpot_p99_s, self.queue_per_replica, self.kv_cache)
        return {s: v for s, v in zip(SIGNALS, values) if v is not None}


@dataclass(frozen=True, slots=True)
class Breach:
    """A serving signal over its target in each of the last `minutes` minutes."""

    signal: str
    values: tuple[float, ...]
    target: float

    def sentence(self) -> str:
        unit = {"ttft_p99": " s", "tpot_p99": " s"}.get(self.signal, "")
        shown = "/".join(_show(self.signal, v) for v in self.values)
        return f"{self.signal} {shown}{unit} over its target {_show(self.signal, self.target)}{unit}"


def signal_value(signal: str, minute, replicas: int) -> float | None:
    """A minute's value of a serving signal; the queue per replica (the engine reports the service's waiting
    requests)."""
    if signal == "queue":
        q = minute.queue
        return None if q is None else q / max(1, replicas)
    return getattr(minute, signal)


def breaches(targets: ServingTargets, loads: Sequence, replicas: int, minutes: int) -> list[Breach]:
    """Every target whose signal was over it in each of the newest `minutes` minutes (each measured)."""
    out = []
    for signal, target in targets.targets().items():
        values = [signal_value(signal, m, replicas) for m in loads[-minutes:]]
        if len(values) == minutes and all(v is not None and v > target for v in values):
            out.append(Breach(signal, tuple(values), target))
    return out


def missed(targets: ServingTargets, loads: Sequence, replicas: int) -> Breach | None:
    """The first latency target missed in any of `loads` (a scale-in is refused while one is), or None."""
    for signal in ("ttft_p99", "tpot_p99"):
        target = targets.targets().get(signal)
        if target is None:
            continue
        over = [v for m in loads if (v := signal_value(signal, m, replicas)) is not None and v > target]
        if over:
            return Breach(signal, (max(over),), target)
    return None


def replicas_for_breach(n: int, utilization: float | None, expect_rate: float) -> int:
    """Replicas after a breach at `n`: what the utilization asks at expectRate, one more at least, at most
    MAX_STEP × n."""
    k = n + 1
    if utilization is not None:
        k = max(k, math.ceil(utilization / expect_rate * n - 1e-9))
    return min(k, max(n + 1, math.ceil(MAX_STEP * n)))


def slo_utilization(targets: ServingTargets, loads: Sequence, utilization: str = "gpu") -> tuple[float, str] | None:
    """The largest utilization at which the newest minutes' latencies predict TPOT and TTFT p99 within their
    targets, and why; None when no target is set, nothing was measured short of saturation (a saturated minute's
    latencies are its queue, not its group) or no utilization would meet a target (more replicas shorten neither a
    decode step nor a prompt's own prefill; the breach rule still acts on the miss)."""
    measured = measured_minutes(loads, utilization)
    if not measured:
        return None
    limits = [_tpot_limit(targets.tpot_p99_s, loads, utilization),
              _ttft_limit(targets.ttft_p99_s, measured[-FIT_MINUTES:])]
    return min((x for x in limits if x is not None), default=None)


def measured_minutes(loads: Sequence, utilization: str = "gpu") -> list[tuple]:
    """(minute, u) of the newest STEP_MINUTES minutes measured short of saturation: a saturated minute's latencies
    are its queue, not its group."""
    return [(m, u) for m in loads[-STEP_MINUTES:] if (u := getattr(m, utilization)) is not None and 0 < u < SATURATED]


def prefill_wait(m, u: float) -> tuple[float, float] | None:
    """The minute's prefill queue: the scale w of its mean wait W = w × u / (1 - u) (Little's law: requests waiting /
    requests per second), and the prompt's own time, TTFT p99 less the p99 wait; None without those signals."""
    if m.ttft_p99 is None or m.queue is None or not m.qps:
        return None
    w = m.queue / m.qps * (1.0 - u) / u
    return w, m.ttft_p99 - _p99_wait(u, w)


def bucket_bound(reading: float, bounds: Sequence[float]) -> float | None:
    """The upper bound hi of the histogram bucket (lo, hi] that a histogram_quantile `reading` lies in, when it lies in
    the bucket's top CENSOR_TOP (reading >= lo + (1 - CENSOR_TOP) × (hi - lo)): the reading then says only that the
    quantile is at most hi. `bounds`: the histogram's `le` values (+Inf among them or not); the lowest bucket starts
    at 0, as histogram_quantile takes it. None when the reading is lower in its bucket, the bounds are unknown, or the
    reading is at or past the highest finite bound (histogram_quantile reads a quantile in the +Inf bucket as that
    bound: it is then a lower bound, not an upper one)."""
    finite = sorted(b for b in bounds if math.isfinite(b))
    if not finite or reading >= finite[-1]:
        return None
    lo = 0.0
    for hi in finite:
        if reading <= hi:
            return hi if reading >= lo + (1.0 - CENSOR_TOP) * (hi - lo) else None
        lo = hi
    return None


def _tpot_limit(target: float | None, loads: Sequence, utilization: str) -> tuple[float, str] | None:
    """The largest u at which the predicted TPOT p99 stays within `target` (TpotCurve), and why; never under the
    highest u measured within it (a curve's guess does not overrule what was measured).

    The curve's shape comes from the mean TPOT (the histogram's _sum / _count: exact at every load), turned into p99
    by the median p99/mean ratio of the minutes. Prometheus interpolates a p99 linearly inside its histogram bucket,
    which over-estimates a tail quantile (conservative) but, when nearly every request falls in one bucket, pins the
    reading just under that bucket's bound whatever the load (vLLM's 25-50 ms bucket reads 46-50 ms for the demo
    engine's p99 from 28 to 50 ms). Such readings (pinned_at) say only that the p99 is within the bound, not how
    far: they set no curve. A reading censored by its bucket's bounds (bucket_bound: the minute's `tpot_p99_bound`)
    says as much, known from the bounds rather than told statistically: it sets no curve either, and counts as
    within the target when its bound is. pinned_at still judges the readings (an engine whose buckets were not read,
    or a reading a little lower in its bucket), the censored ones among them: a censored hour at 38 % use and its
    night's first minutes at 22 %, read a little under the censored top, show pinned together. With no curve (every
    reading within the target pinned or censored, or none set a point) the limit is the highest u measured within
    the target once a minute above it missed (the crossing lies between), and none while nothing missed (the breach
    rule acts on a miss)."""
    fitted = fit_minutes(loads, utilization) if target is not None else []
    if not fitted:
        return None
    minutes = tpot_minutes(fitted)
    seen = measured_within([(u, p99 <= target if bound is None else bound <= target)
                            for u, _, p99, bound in minutes])
    points = [(u, mean, p99) for u, mean, p99, bound in minutes if bound is None]
    censored = [bound for *_, bound in minutes if bound is not None and bound <= target]
    pinned = pinned_at([(u, mean, p99) for u, mean, p99, _ in minutes], target)  # a censored reading is pinned too
    if pinned is not None or not points or (censored and all(p99 > target for _, _, p99 in points)):
        over = [u for u, _, p99, _ in minutes if p99 > target]
        if not over or not seen:
            return None
        shown = (f"reads {pinned * 1e3:.1f} ms at every load within {target * 1e3:g} ms (pinned inside a histogram "
                 f"bucket: no curve)" if pinned is not None else
                 f"reads at the top of its histogram bucket at every load within {target * 1e3:g} ms (so only ≤ "
                 f"{max(censored, default=target) * 1e3:g} ms: no curve)")
        return seen, f"TPOT p99 {shown} and missed it at {min(over):.0%} use, so it was measured within it"
    ratio = float(np.median([p99 / mean for _, mean, p99 in points]))
    of_mean = any(m.tpot_mean is not None for m, _ in fitted)  # the sentence names what these minutes fit
    curve = tpot_curve([(u, mean) for u, mean, _ in points], ratio, of_mean)
    if curve.a * ratio >= target:  # an idle group misses it: more replicas cannot help
        return None
    limit = curve.limit(target)
    if seen > limit:
        return seen, f"{curve.why(target)} up to {limit:.0%} use, but it was measured within it"
    return limit, curve.why(target)


def pinned_at(minutes: Sequence[tuple[float, float, float]], target: float) -> float | None:
    """The p99 reading of the minutes within `target`, their median, when it does not follow their mean TPOT (a
    least-squares elasticity under PIN_ELASTICITY over means that span PIN_SPAN): Prometheus's interpolation inside
    one histogram bucket, not the p99; None when the readings follow the mean (or the means are too close to tell)."""
    within = np.array([(mean, p99) for _, mean, p99 in minutes if p99 <= target])
    if len(within) < 2:
        return None
    log_mean, log_p99 = np.log(within).T
    if np.ptp(log_mean) < math.log1p(PIN_SPAN):
        return None
    elasticity = float(np.polyfit(log_mean, log_p99, 1)[0])
    return float(np.median(within[:, 1])) if elasticity < PIN_ELASTICITY else None


def measured_within(pairs: Sequence[tuple[float, bool]]) -> float:
    """The highest u up to which every minute measured had its TPOT p99 within the target, from (u, within) pairs
    (0 when the lowest missed); at one u, the minutes within come first (as a lower p99 did)."""
    seen = 0.0
    for u, within in sorted(pairs, key=lambda pair: (pair[0], not pair[1])):
        if not within:
            break
        seen = float(u)
    return seen


@dataclass(frozen=True, slots=True)
class TpotCurve:
    """TPOT against utilization: a + b·u + c·u / (1 - u), a, b, c ≥ 0, fitted to the mean TPOT (or to the p99 where
    the engine gave no mean), and its p99 `ratio` × that. The batch's linear growth (b: vLLM's and SGLang's decode
    step grows with the running batch until the KV cache fills) and the queueing cliff (c: the step stretched by the
    share of time other work takes, step / (1 - u) = step + step·u / (1 - u)) are both in it.
    `fitted`: least squares over minutes that span FIT_SPAN of u; else the cliff alone through their median (the
    shape that grows fastest of the two, so the safe guess when the minutes cannot tell them apart). The limit is
    trusted at most REACH beyond `u_max`, the highest u measured, unless the cliff alone allows more."""

    a: float
    b: float
    c: float
    u_min: float
    u_max: float
    minutes: int
    fitted: bool
    ratio: float = 1.0  # p99 / what was fitted
    of_mean: bool = False  # fitted to the mean TPOT

    def p99(self, u: float) -> float:
        cliff = self.c * u / (1.0 - u) if u < 1.0 else (math.inf if self.c else 0.0)
        return self.ratio * (self.a + self.b * u + cliff)

    def crossing(self, target: float) -> float:
        """Where the curve meets `target` (it grows with u: bisection)."""
        lo, hi = 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.p99(mid) <= target else (lo, mid)
        return lo

    def cap(self, target: float) -> float:
        """How far a fitted curve is trusted: REACH beyond the highest u measured, or as far as the cliff alone
        through the curve there (the shape that grows fastest) keeps within `target`."""
        if not self.fitted:
            return 1.0
        return max(self.u_max + REACH, 1.0 - self.p99(self.u_max) * (1.0 - self.u_max) / target)

    def limit(self, target: float) -> float:
        return min(self.crossing(target), self.cap(target))

    def why(self, target: float) -> str:
        use = f"{self.u_min:.0%}" if round(self.u_min, 2) == round(self.u_max, 2) else \
            f"{self.u_min:.0%}–{self.u_max:.0%}"
        over, within = f"over {self.minutes} minutes at {use} use", f"keeps TPOT p99 within {target * 1e3:g} ms"
        of, scaled = ("mean", f", × {self.ratio:.2f} (its p99/mean, the minutes' median),") if self.of_mean else \
            ("p99", "")
        if not self.fitted:
            return (f"TPOT {of} × (1 − u) {self.a * 1e3:.1f} ms {over} (too narrow a span to fit: the cliff "
                    f"alone){scaled} {within}")
        shape = f"TPOT {of} {self.a * 1e3:.1f} + {self.b * 1e3:.1f}·u + {self.c * 1e3:.1f}·u/(1 − u) ms fitted {over}"
        if self.cap(target) < self.crossing(target):
            return f"{shape}{scaled or ','} trusted to {REACH:.0%} past the highest, {within}"
        return f"{shape}{scaled} {within}"


def fit_minutes(loads: Sequence, utilization: str = "gpu") -> list[tuple]:
    """(minute, u) of the newest FIT_MINUTES minutes the TPOT curve is fitted to: measured short of saturation, with a
    TPOT p99 and, where the engine gives one, a positive mean."""
    return [(m, u) for m in loads[-FIT_MINUTES:] if (u := getattr(m, utilization)) is not None and 0 < u < SATURATED
            and m.tpot_p99 and (m.tpot_mean is None or m.tpot_mean > 0)]


def tpot_minutes(fitted: Sequence[tuple]) -> list[tuple[float, float, float, float | None]]:
    """(u, TPOT mean, TPOT p99, the p99's bucket bound where censored) of the minutes fit_minutes kept; a minute
    without a mean (an engine without the histogram's _sum and _count) stands on its p99 (a ratio of 1)."""
    return [(u, m.tpot_p99 if m.tpot_mean is None else m.tpot_mean, m.tpot_p99, m.tpot_p99_bound) for m, u in fitted]


def tpot_curve(pairs: Sequence[tuple[float, float]], ratio: float = 1.0, of_mean: bool = False) -> TpotCurve | None:
    """TPOT against u from (u, TPOT) pairs (TpotCurve), its p99 `ratio` × that; None without any."""
    if not pairs:
        return None
    u, tpot = np.array(pairs).T
    lo, hi = float(u.min()), float(u.max())
    if hi - lo >= FIT_SPAN:
        a, b, c = nnls(np.column_stack([np.ones_like(u), u, u / (1.0 - u)]), tpot)[0].tolist()
        return TpotCurve(a, b, c, lo, hi, len(pairs), True, ratio, of_mean)
    step = float(np.median(tpot * (1.0 - u)))
    return TpotCurve(step, 0.0, step, lo, hi, len(pairs), False, ratio, of_mean)


def decode_step(measured: Sequence) -> float | None:
    """The group's decode step, TPOT p50 × (1 - u) over the (minute, u) pairs measured: their median."""
    steps = sorted(m.tpot_p50 * (1.0 - u) for m, u in measured if m.tpot_p50 is not None)
    return steps[len(steps) // 2] if steps else None


def _ttft_limit(target: float | None, measured: Sequence[tuple]) -> tuple[float, str] | None:
    """The median of the TTFT limits (_minute_ttft_limit) of the minutes that fit the model in the newest window of
    TTFT_MINUTES (minute, u) pairs of `measured` where at least TTFT_QUORUM fit, and why; None without a target or
    such a window. Each minute alone flaps with its burstiness; the median follows the load, not one odd minute. The
    window is searched back over `measured` (FIT_MINUTES): only a queue shows the limit, and a use too low to queue is
    no sign it went away (with the limit lifted, a scale-in landed at a use the next minutes' limit forbade, and the
    service scaled out again within 15 minutes: make run, 2026-11-30)."""
    if target is None:
        return None
    limits = [_minute_ttft_limit(target, m, u) for m, u in measured]
    for end in range(len(measured), TTFT_QUORUM - 1, -1):
        fits = [(measured[i], limits[i]) for i in range(max(0, end - TTFT_MINUTES), end) if limits[i] is not None]
        if len(fits) >= TTFT_QUORUM:
            break
    else:
        return None
    waits, us, values = zip(*((m.queue / m.qps, u, x) for (m, u), x in fits))
    ago = round((measured[-1][0].at - measured[end - 1][0].at) / 60)
    when = f" up to {ago} minutes ago" if ago else ""
    return float(np.median(values)), (
        f"the median TTFT limit over {end - max(0, end - TTFT_MINUTES)} minutes{when} ({len(fits)} fit: mean prefill "
        f"waits {_span(waits, lambda w: f'{w:.2f}')} s at {_span(us, lambda u: f'{u:.0%}')} use) keeps TTFT p99 "
        f"within {target:g} s")


def _minute_ttft_limit(target: float, m, u: float) -> float | None:
    """One minute's TTFT limit: TTFT = the prompt's own time plus its wait for the prefill queue. The mean wait W is
    measured by Little's law (requests waiting / requests per second) and grows like u / (1 - u) (Kingman's M/G/1
    approximation, whose burstiness term the measured wait carries); its tail is exponential with P(wait > 0) = u, so
    the p99 wait is W / u × ln(100 u). The prompt's own time is TTFT p99 less that wait; TTFT p99 stays within the
    target up to the u found by bisection. None when the minute does not fit (nothing waiting: no wait to extrapolate;
    no rate; or the prompt's own time outside [0, target))."""
    fitted = prefill_wait(m, u) if m.queue else None
    if fitted is None:
        return None
    per_load, own = fitted
    if not 0 <= own < target:  # below 0: the minute does not fit the model (its TTFT p99 under the wait's)
        return None
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if own + _p99_wait(mid, per_load) <= target else (lo, mid)
    return lo


def _span(values: Sequence[float], show: Callable[[float], str]) -> str:
    """'lo–hi' as shown, or the one value when they show the same."""
    lo, hi = show(min(values)), show(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _p99_wait(u: float, per_load: float) -> float:
    return per_load / (1.0 - u) * math.log(100.0 * u) if 100.0 * u > 1.0 else 0.0


def _show(signal: str, v: float) -> str:
    if signal == "kv_cache":
        return f"{v:.0%}"
    if signal == "queue":
        return f"{v:.1f}"
    return f"{v:.3g}"
