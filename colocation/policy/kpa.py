"""A Knative/AIBrix-style KPA (stable and panic windows), pure: the second baseline the offline evaluation
(`manage.py autoscale_eval --trace servegen-m-large`) compares Tidal's autoscaling with. Tidal does not use it live.

Followed (knative/serving pkg/autoscaler/scaling/autoscaler.go, and AIBrix's KPA, which ports it):
- the metric is a total over the ready replicas (e.g. utilization × ready: the work); desired = ceil(average over
  the window / per-replica target), over the stable window (180 s) and the panic window (60 s);
- panic when the panic window's desired count is at least `panic_threshold` (2×) the ready count; in panic the
  count never goes down and follows the panic window; panic ends once the stable window has passed without the
  threshold being crossed again;
- scale-down delay (300 s): the count is the largest desired over the delay window, so it goes down only when
  every recommendation of the last 300 s allows it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

STABLE_S = 180.0
PANIC_S = 60.0
PANIC_THRESHOLD = 2.0
SCALE_DOWN_DELAY_S = 300.0


@dataclass(frozen=True, slots=True)
class KpaSpec:
    target: float  # per-replica target of the metric (e.g. utilization 0.7)
    min_replicas: int = 1
    max_replicas: int = 10
    stable_s: float = STABLE_S
    panic_s: float = PANIC_S
    panic_threshold: float = PANIC_THRESHOLD
    scale_down_delay_s: float = SCALE_DOWN_DELAY_S

    def __post_init__(self) -> None:
        if self.target <= 0 or not 0 <= self.min_replicas <= self.max_replicas or self.panic_s > self.stable_s:
            raise ValueError(f"bad KPA spec: target {self.target}, replicas {self.min_replicas}..{self.max_replicas},"
                             f" panic window {self.panic_s} s over the stable window {self.stable_s} s")


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # end of the measured interval, epoch s
    total: float  # the metric summed over the ready replicas


@dataclass(frozen=True, slots=True)
class KpaState:
    panic_since: float | None = None  # when the threshold was last crossed (in panic while within stable_s)
    panic_max: int = 0  # the count panic mode holds (never lower while in panic)
    recommendations: tuple[tuple[float, int], ...] = ()  # (at, desired) within the scale-down delay


@dataclass(frozen=True, slots=True)
class KpaDecision:
    desired: int
    panic: bool
    message: str
    state: KpaState


def window_average(samples: Sequence[Sample], now: float, window_s: float) -> float | None:
    """The mean of the samples in (now - window_s, now], None when none is."""
    inside = [s.total for s in samples if now - window_s < s.at <= now]
    return sum(inside) / len(inside) if inside else None


def decide(spec: KpaSpec, ready: int, samples: Sequence[Sample], state: KpaState, now: float) -> KpaDecision:
    """The KPA's count at `now` from the samples (oldest first) and its last state."""
    stable, panic = window_average(samples, now, spec.stable_s), window_average(samples, now, spec.panic_s)
    if stable is None or panic is None:
        return KpaDecision(max(spec.min_replicas, ready), False, "kpa: no samples in the window", state)
    want_stable = math.ceil(stable / spec.target - 1e-9)
    want_panic = math.ceil(panic / spec.target - 1e-9)
    crossed = want_panic >= spec.panic_threshold * max(1, ready)
    since = now if crossed else state.panic_since
    in_panic = since is not None and now - since < spec.stable_s
    if in_panic:
        raw = max(want_panic, state.panic_max, ready)
        why = f"panic: {panic:.2f} over the last {spec.panic_s:g} s asks {want_panic} (never down in panic)"
    else:
        raw, since = want_stable, None
        why = f"stable: {stable:.2f} over the last {spec.stable_s:g} s at target {spec.target:g} asks {want_stable}"
    recs = tuple((t, r) for t, r in state.recommendations if now - t < spec.scale_down_delay_s) + ((now, raw),)
    desired = max(r for _, r in recs)
    if desired > raw:
        why += f"; held at {desired} by the scale-down delay of {spec.scale_down_delay_s:g} s"
    desired = max(spec.min_replicas, min(spec.max_replicas, desired))
    return KpaDecision(desired, in_panic, f"kpa {why}",
                       KpaState(since, raw if in_panic else 0, recs))
