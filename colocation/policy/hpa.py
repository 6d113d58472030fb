"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2) algorithm for one Utilization metric, pure: the
baseline the offline evaluation (`manage.py autoscale_eval`) compares Tidal's autoscaling with. Tidal does not use it
live.

Followed (kubernetes/kubernetes, pkg/controller/podautoscaler/):
- replica_calculator.go GetResourceReplicas: usageRatio = utilization / target over the *ready* pods; if
  |1 - usageRatio| <= tolerance (default 0.1, --horizontal-pod-autoscaler-tolerance) keep the current count,
  else ceil(usageRatio × readyPods). On a scale-up with unready (starting) pods, those count at 0% usage
  ("rebalanceUnready"); if the rebalanced ratio is within tolerance or flips direction, keep the count, else
  ceil(newRatio × allPods) — so a HPA does not scale up again for load its starting pods will take.
- horizontal.go stabilizeRecommendationWithBehaviors: every raw recommendation is kept with its time (the
  first reconcile records the current count); scale-up uses the min over the scale-up window (default 0 s:
  the new one alone), scale-down the *max* over the scale-down window (default 300 s).
- convertDesiredReplicasWithBehaviorRate, default behavior: scale-up at most max(100 %, 4 pods) per 15 s
  period (selectPolicy Max); scale-down up to 100 %; then minReplicas/maxReplicas.
  (docs: kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details and
  "#default-behavior"; KEP-4951 for the tolerance.) Decided once a minute here, so one period's scale-up limit
  applies per decision (after a scale-up, the rebalance above holds further ones until the new pods are ready).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TOLERANCE = 0.1
DOWNSCALE_WINDOW_S = 300.0
UPSCALE_WINDOW_S = 0.0
UP_PODS = 4  # default scaleUp policy: +4 pods or +100 % per period, whichever is more
UP_PERCENT = 100


@dataclass(frozen=True, slots=True)
class HpaSpec:
    target: float  # target average utilization, 0..1 (Utilization target / 100)
    min_replicas: int = 1
    max_replicas: int = 10
    tolerance: float = TOLERANCE
    downscale_window_s: float = DOWNSCALE_WINDOW_S
    upscale_window_s: float = UPSCALE_WINDOW_S

    def __post_init__(self) -> None:
        if self.target <= 0 or not 1 <= self.min_replicas <= self.max_replicas or self.tolerance < 0:
            raise ValueError(f"bad HPA spec: target {self.target}, replicas {self.min_replicas}..{self.max_replicas}, "
                             f"tolerance {self.tolerance}")


@dataclass(frozen=True, slots=True)
class Recommendation:
    at: float
    replicas: int


@dataclass(frozen=True, slots=True)
class HpaDecision:
    current: int
    raw: int  # the replica calculator's answer, before stabilization and limits
    desired: int
    message: str
    recommendations: tuple[Recommendation, ...]  # history to pass to the next call

    @property
    def changes(self) -> bool:
        return self.desired != self.current


def replicas_for_metric(current: int, ready: int, utilization: float, target: float,
                        tolerance: float = TOLERANCE) -> int:
    """replica_calculator.go for a Utilization target: `utilization` is the mean over the `ready` pods; the
    other current - ready pods are starting (unready). No ready pod: no metric, keep the count."""
    if ready <= 0:
        return current
    ratio = utilization / target
    unready = max(0, current - ready)
    if not (unready and ratio > 1.0):
        return current if abs(1.0 - ratio) <= tolerance else math.ceil(ratio * ready)
    rebalanced = ratio * ready / (ready + unready)  # starting pods counted at 0 %
    if abs(1.0 - rebalanced) <= tolerance or rebalanced < 1.0:
        return current
    return math.ceil(rebalanced * (ready + unready))


def _stabilize(spec: HpaSpec, current: int, raw: int, history: tuple[Recommendation, ...],
               now: float) -> tuple[int, tuple[Recommendation, ...]]:
    """stabilizeRecommendationWithBehaviors: up = min over the up window, down = max over the down window
    (both including the new recommendation); the count moves only as far as they allow."""
    up = min([raw] + [r.replicas for r in history if r.at > now - spec.upscale_window_s])
    down = max([raw] + [r.replicas for r in history if r.at > now - spec.downscale_window_s])
    stabilized = current
    if stabilized < up:
        stabilized = up
    if stabilized > down:
        stabilized = down
    keep = now - max(spec.downscale_window_s, spec.upscale_window_s)
    return stabilized, tuple(r for r in history if r.at > keep) + (Recommendation(now, raw),)


def decide(spec: HpaSpec, *, current: int, ready: int, utilization: float,
           history: tuple[Recommendation, ...], now: float) -> HpaDecision:
    """One HPA reconcile: the desired replica count, and the recommendation history for the next one."""
    if not history:
        history = (Recommendation(now, current),)  # recordInitialRecommendation
    raw = replicas_for_metric(current, ready, utilization, spec.target, spec.tolerance)
    stabilized, history = _stabilize(spec, current, raw, history, now)
    up_limit = max(current * (100 + UP_PERCENT) // 100, current + UP_PODS)
    desired = max(spec.min_replicas, min(stabilized, up_limit, spec.max_replicas))
    why = (f"utilization {utilization:.0%} over {ready} ready of {current} vs target {spec.target:.0%} "
           f"(tolerance {spec.tolerance:.0%}): raw {raw}")
    if stabilized != raw:
        why += f", stabilized to {stabilized} (max over the last {spec.downscale_window_s:.0f} s)"
    if desired != stabilized:
        why += f", limited to {desired}"
    return HpaDecision(current, raw, desired, why, history)
