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
from collections.abc import Sequence
from dataclasses import dataclass

MAX_STEP = 2.0  # a latency breach at most doubles the replicas per decision (HPA's default scale-up is +100 %)
SIGNALS = ("ttft_p99", "tpot_p99", "queue", "kv_cache")
STEP_MINUTES = 15  # minutes the decode step is measured over (its median)
SATURATED = 0.9  # a minute this busy says little about the step (its TPOT is mostly the queue)


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
    limits = [_tpot_limit(targets.tpot_p99_s, measured), _ttft_limit(targets.ttft_p99_s, *measured[-1])]
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


def _tpot_limit(target: float | None, measured: Sequence) -> tuple[float, str] | None:
    """TPOT = step / (1 - u) (a running batch's step, stretched by the share of time other work takes): the step is
    TPOT p50 × (1 - u), the median over the minutes measured (it is the group's, whatever the load), and TPOT stays
    within the target up to u = 1 - step / target."""
    step = decode_step(measured)
    if target is None or step is None:
        return None
    if step >= target:
        return None
    return 1.0 - step / target, f"a {step * 1e3:.1f} ms decode step keeps TPOT within {target * 1e3:g} ms"


def decode_step(measured: Sequence) -> float | None:
    """The group's decode step, TPOT p50 × (1 - u) over the (minute, u) pairs measured: their median."""
    steps = sorted(m.tpot_p50 * (1.0 - u) for m, u in measured if m.tpot_p50 is not None)
    return steps[len(steps) // 2] if steps else None


def _ttft_limit(target: float | None, m, u: float) -> tuple[float, str] | None:
    """TTFT = the prompt's own time plus its wait for the prefill queue. The mean wait W is measured by Little's law
    (requests waiting / requests per second) and grows like u / (1 - u) (Kingman's M/G/1 approximation, whose
    burstiness term the measured wait carries); its tail is exponential with P(wait > 0) = u, so the p99 wait is
    W / u × ln(100 u). The prompt's own time is TTFT p99 less that wait; TTFT p99 stays within the target up to
    the u found by bisection. The newest minute alone: burstiness changes from one window to the next."""
    fitted = None if target is None else prefill_wait(m, u)
    if fitted is None:
        return None
    per_load, own = fitted
    wait = m.queue / m.qps
    if not 0 <= own < target:  # below 0: the minute does not fit the model (its TTFT p99 under the wait's)
        return None
    lo, hi = 0.0, 1.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if own + _p99_wait(mid, per_load) <= target else (lo, mid)
    return lo, f"a mean prefill wait of {wait:.2f} s at {u:.0%} keeps TTFT p99 within {target:g} s"


def _p99_wait(u: float, per_load: float) -> float:
    return per_load / (1.0 - u) * math.log(100.0 * u) if 100.0 * u > 1.0 else 0.0


def _show(signal: str, v: float) -> str:
    if signal == "kv_cache":
        return f"{v:.0%}"
    if signal == "queue":
        return f"{v:.1f}"
    return f"{v:.3g}"
