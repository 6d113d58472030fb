"""The LLM replay: minute by minute, the ready groups serve the minute's requests (replica.py), the autoscaler sees
the minute (policies.py) and its answer applies (a new group serves after the start-up; scale-in at once, the
highest-indexed group first). Work a saturated minute could not serve waits one more minute, then times out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from experiments.autoscale_eval.llm.policies import Observed
from experiments.autoscale_eval.llm.replica import GroupModel
from experiments.autoscale_eval.llm.servegen import Workload
from experiments.autoscale_eval.service import Replicas

MINUTE = 60.0
CAP_S = 60.0  # latencies an overloaded engine reports: its request timeout


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float = 1.0
    tpot_s: float = 0.05


class Autoscaler(Protocol):
    name: str

    def step(self, seen: Observed, now: float, size: int, ready: int) -> int: ...

    def changed(self, now: float) -> None: ...


@dataclass
class LlmRun:
    policy: str
    groups: np.ndarray  # provisioned (starting + ready) during each minute
    ready: np.ndarray
    ok: np.ndarray  # per minute: the share of its requests within both SLO targets
    requests: np.ndarray  # per minute

    def figures(self, model: GroupModel, tokens: float) -> dict:
        gpu_hours = float(self.groups.sum()) * model.gpus / 60.0
        return {"slo_attainment": round(float((self.ok * self.requests).sum() / self.requests.sum()), 6),
                "gpu_hours": round(gpu_hours, 1),
                "gpu_hours_per_mtok": round(gpu_hours / (tokens / 1e6), 6),
                "max_groups": int(self.groups.max()), "mean_groups": round(float(self.groups.mean()), 2),
                "minutes_below_slo": int((self.ok < 0.99).sum())}


def replay(policy: Autoscaler, w: Workload, model: GroupModel, slo: Slo, initial: int, start: float = 0.0) -> LlmRun:
    n = w.minutes
    pool = Replicas(initial)
    groups, ready_at, ok = np.zeros(n, dtype=int), np.zeros(n, dtype=int), np.zeros(n)
    waiting, per_rps = 0.0, None  # requests/s carried from a saturated minute; work per request/s, learned
    for t in range(n):
        at = start + t * MINUTE
        groups[t], ready = pool.size, pool.ready(t)
        ready_at[t] = ready
        rps, tin, tout = float(w.rps[t]), float(w.tokens_in[t]), float(w.tokens_out[t])
        load = rps + waiting
        m = model.serve(load / ready, tin, tout, float(w.cv[t]), slo.ttft_s) if ready else None
        if m is None or m.utilization >= 1.0:
            served = 0.0 if m is None else 1.0 / m.utilization
            waiting, ok[t] = min(rps, load * (1.0 - served)), 0.0
        else:
            waiting, ok[t] = 0.0, m.ttft_ok if m.tpot_s <= slo.tpot_s else 0.0
            if rps > 0:
                per_rps = m.utilization * ready / load
        seen = _observed(at, ready, rps, tin, tout, m, per_rps)
        target = policy.step(seen, at + MINUTE, pool.size, pool.ready(t + 1))
        if target != pool.size:
            pool.scale(target, t + 1, model.startup_min)
            policy.changed(at + MINUTE)
    return LlmRun(policy.name, groups, ready_at, ok, w.rps * 60.0)


def _observed(at: float, ready: int, rps: float, tin: float, tout: float, m, per_rps: float | None) -> Observed:
    if m is None:
        return Observed(at, 0, 0.0, rps, per_rps, 0.0, 0.0, CAP_S, CAP_S, CAP_S, CAP_S, CAP_S, 0.0, rps * CAP_S)
    cap = lambda v: min(CAP_S, v)  # noqa: E731
    u = min(1.0, m.utilization)
    served = rps if m.utilization < 1 else rps / m.utilization
    return Observed(at, ready, u, rps, per_rps, served * tin, served * tout, cap(m.ttft_p50_s), cap(m.ttft_p99_s),
                    cap(m.tpot_s), cap(m.tpot_s), cap(m.tpot_s), m.kv_cache,
                    m.queue * ready if math.isfinite(m.queue) else rps * CAP_S)
