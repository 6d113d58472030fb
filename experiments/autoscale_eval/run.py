"""The replay loop: minute by minute, serve the trace's demand with the ready replicas, report the minute to the
policy, apply its answer (new replicas serve after the start-up delay)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from experiments.autoscale_eval.policies import Measured, Step
from experiments.autoscale_eval.service import Replicas, ServiceModel

MINUTE = 60.0


class Autoscaler(Protocol):
    name: str

    def step(self, minute: int, now: float, seen: Measured, size: int, ready: int) -> Step: ...

    def changed(self, now: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Event:
    minute: int  # index into the evaluated minutes: the change applies from this minute on
    before: int
    after: int
    reason: str
    message: str


@dataclass
class Run:
    policy: str
    replicas: np.ndarray  # provisioned (starting + ready) during each minute
    ready: np.ndarray
    utilization: np.ndarray  # demand / (ready × capacity), unclipped
    events: list[Event] = field(default_factory=list)

    def figures(self, model: ServiceModel, demand: np.ndarray) -> dict:
        served = np.minimum(demand, self.ready * model.capacity)
        reasons = Counter(e.reason for e in self.events)
        return {
            "overloaded_min": int((self.utilization > 1.0).sum()),
            "over_max_rate_min": int((self.utilization > model.rates.max_rate).sum()),
            "replica_hours": round(float(self.replicas.sum()) / 60.0, 2),
            "scale_events": len(self.events),
            "scale_outs": sum(e.after > e.before for e in self.events),
            "scale_ins": sum(e.after < e.before for e in self.events),
            "reasons": dict(sorted(reasons.items())),
            "unserved_share": round(float(1.0 - served.sum() / demand.sum()), 6) if demand.sum() else 0.0,
            "mean_utilization": round(float(np.mean(np.minimum(self.utilization, 1.0))), 4),
            "max_replicas": int(self.replicas.max()),
        }


def run(policy: Autoscaler, demand: np.ndarray, start: float, model: ServiceModel, initial: int,
        tick: Callable[[int], None] | None = None) -> Run:
    """Replay `demand` (requests/min, minute 0 at `start`) from `initial` ready replicas."""
    n = len(demand)
    pool = Replicas(initial)
    replicas, ready, util = np.zeros(n, dtype=int), np.zeros(n, dtype=int), np.zeros(n)
    events: list[Event] = []
    for t in range(n):
        at = start + t * MINUTE
        replicas[t], ready[t] = pool.size, pool.ready(t)
        util[t] = model.utilization(float(demand[t]), int(ready[t]))
        seen = Measured(at, int(ready[t]), min(1.0, float(util[t])), float(demand[t]) / MINUTE)
        step = policy.step(t, at + MINUTE, seen, pool.size, pool.ready(t + 1))
        if step.target != pool.size:
            events.append(Event(t + 1, pool.size, step.target, step.reason, step.message))
            pool.scale(step.target, t + 1, model.startup_min)
            policy.changed(at + MINUTE)
        if tick is not None:
            tick(1)
    return Run(policy.name, replicas, ready, util, events)
