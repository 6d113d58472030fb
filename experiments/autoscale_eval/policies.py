"""The four policies compared, each one step per simulated minute. reactive and tidal call the real autoscaling
policy (`colocation.policy.autoscaling.decide_service`); hpa calls `colocation.policy.hpa.decide`. Nothing
here decides by itself except `Static`, which never changes."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from colocation.policy import hpa
from colocation.policy.autoscaling import LoadMinute, ScalingPolicy, ServiceView, decide_service, keep_minutes

SERVICE = "wc98-web"


@dataclass(frozen=True, slots=True)
class Step:
    target: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Measured:
    """One minute as a metrics pipeline reports it: GPU utilization per ready replica (a duty cycle, so at most
    1.0 even when overloaded) and the gateway's request rate."""

    at: float
    ready: int
    gpu: float
    qps: float


class Static:
    name = "static"

    def step(self, minute: int, now: float, seen: Measured, size: int, ready: int) -> Step:
        return Step(size, "static", "")

    def changed(self, now: float) -> None:
        pass


class Hpa:
    name = "hpa"

    def __init__(self, spec: hpa.HpaSpec) -> None:
        self.spec = spec
        self._history: tuple[hpa.Recommendation, ...] = ()

    def step(self, minute: int, now: float, seen: Measured, size: int, ready: int) -> Step:
        d = hpa.decide(self.spec, current=size, ready=seen.ready, utilization=seen.gpu, history=self._history,
                       now=now)
        self._history = d.recommendations
        return Step(d.desired, "hpa-scale-out" if d.desired > size else "hpa-scale-in", d.message)

    def changed(self, now: float) -> None:
        pass


class Spec:
    """Inference autoscaling through `decide_service`: reactive alone (predictive off), or tidal with the forecast of
    the work (utilization at `notional` replicas, h1..h5 per minute), scaled to the current replica count."""

    def __init__(self, name: str, policy: ScalingPolicy, forecast: np.ndarray | None = None,
                 notional: int = 1, forecast_note: str = "") -> None:
        self.name, self.policy = name, policy
        self._forecast, self._notional, self._note = forecast, notional, forecast_note
        self._loads: deque[LoadMinute] = deque(maxlen=keep_minutes(policy))  # scale to zero needs its idle window
        self._changed_at: float | None = None

    def view(self, minute: int, size: int, ready: int) -> ServiceView:
        ahead: tuple[tuple[str, tuple[float, ...]], ...] = ()
        if self._forecast is not None and size:
            ahead = (("gpu", tuple(float(v) * self._notional / size for v in self._forecast[minute])),)
        return ServiceView(SERVICE, self.policy, size, ready, tuple(self._loads), self._changed_at,
                           forecast=ahead, forecast_note=self._note)

    def step(self, minute: int, now: float, seen: Measured, size: int, ready: int) -> Step:
        self._loads.append(LoadMinute(seen.at, seen.ready, gpu=seen.gpu, qps=seen.qps))
        d = decide_service(self.view(minute, size, ready), now)
        return Step(d.target, str(d.reason), d.message)

    def changed(self, now: float) -> None:
        self._changed_at = now
