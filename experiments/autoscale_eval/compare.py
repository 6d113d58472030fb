"""The four policies side by side on the same minutes of traffic."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from colocation.policy import hpa
from colocation.policy.autoscaling import Rates, ScalingPolicy
from experiments.autoscale_eval.forecasting import Forecast
from experiments.autoscale_eval.policies import Hpa, Spec, Static
from experiments.autoscale_eval.run import Run, run
from experiments.autoscale_eval.service import ServiceModel

POLICIES = ("static", "hpa", "reactive", "tidal")
MAX_OVER_STATIC = 2  # the autoscaled service may grow to this many times the static (peak) size

Progress = Callable[[str, int], Callable[[int], None]]  # (label, total) -> tick(n)


def _scaling(model: ServiceModel, max_replicas: int, predictive: bool, rates: Rates | None = None,
             headroom: float = 0.0, idle_min: int | None = None) -> ScalingPolicy:
    return ScalingPolicy(thresholds=(("gpu", rates or model.rates),), min_replicas=model.min_replicas,
                         max_replicas=max_replicas, predictive=predictive, headroom=headroom,
                         scale_to_zero_idle_min=idle_min)


def hpa_autoscaler(model: ServiceModel, top: int, target: float | None = None) -> Hpa:
    """Kubernetes HPA at `target` utilization (default: the service's expectRate)."""
    return Hpa(hpa.HpaSpec(model.rates.expect_rate if target is None else target, model.min_replicas, top))


def tidal_autoscaler(model: ServiceModel, top: int, fc: Forecast | None, rates: Rates | None = None,
                     headroom: float = 0.0, idle_min: int | None = None) -> Spec:
    """decide_service with the forecast when it is usable (without one, its decisions say why)."""
    values = fc.values if fc is not None and fc.usable else None
    return Spec("tidal", _scaling(model, top, True, rates, headroom, idle_min), values,
                fc.notional if fc is not None else 1, fc.note if fc is not None else "no forecast")


def replay(demand: np.ndarray, start: float, model: ServiceModel, fc: Forecast | None,
           progress: Progress | None = None) -> tuple[dict[str, Run], int, int]:
    """The four policies on the same minutes, each from the replicas the first minute needs (static: the peak's).
    Without a forecast tidal runs without one (and its decisions say why)."""
    static = model.replicas_for(float(demand.max()))
    top, first = MAX_OVER_STATIC * static, model.replicas_for(float(demand[0]))
    autoscalers = {
        "static": (Static(), static),
        "hpa": (hpa_autoscaler(model, top), first),
        "reactive": (Spec("reactive", _scaling(model, top, False)), first),
        "tidal": (tidal_autoscaler(model, top, fc), first),
    }
    runs = {}
    for name, (policy, initial) in autoscalers.items():
        tick = progress(name, len(demand)) if progress else None
        runs[name] = run(policy, demand, start, model, initial, tick)
    return runs, static, top
