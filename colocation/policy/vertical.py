"""Vertical scaling (docs/concepts/autoscaling.md#the-policy): per-replica resources recommended from a service's measured
utilization, pure.

Per resource: the 95th percentile of the per-minute utilization (a fraction of what a replica has now) times
what it has, divided by the rate the service wants to run at (its expectRate), rounded up to a sane step and
never below a floor. GPUs: quarter GPUs up to one, whole GPUs above (what the cluster can bind); CPU in steps
of 250 millicores; memory in 512 MiB steps. A resource without enough minutes keeps its current size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_MINUTES = 60  # fewer measured minutes say too little about a day
PERCENTILE = 0.95
DEFAULT_EXPECT = 0.6
GPU_STEP, CPU_STEP, MEMORY_STEP = 0.25, 250, 512
GPU_FLOOR, CPU_FLOOR, MEMORY_FLOOR = 0.25, 250, 1024
MEMORY_EXPECT = 0.8  # memory is not elastic: keep a fifth as headroom


@dataclass(frozen=True, slots=True)
class Resources:
    gpus: float  # 0 for a CPU-only service
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Usage:
    """Per-minute utilizations over the last day, fractions of what one replica has."""

    gpu: tuple[float, ...] = ()
    cpu: tuple[float, ...] = ()
    memory: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Recommendation:
    resources: Resources
    message: str
    minutes: int


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _gpus(need: float) -> float:
    if need <= 1:
        return max(GPU_FLOOR, math.ceil(need / GPU_STEP - 1e-9) * GPU_STEP)
    return float(math.ceil(need - 1e-9))


def _step(need: float, step: int, floor: int) -> int:
    return max(floor, math.ceil(need / step - 1e-9) * step)


def recommend(current: Resources, usage: Usage, *, gpu_expect: float = DEFAULT_EXPECT,
              cpu_expect: float = DEFAULT_EXPECT, memory_expect: float = MEMORY_EXPECT) -> Recommendation | None:
    """The per-replica resources that would have run the day's p95 at the expected rates; None when no resource
    has MIN_MINUTES of data."""
    parts, out = [], {"gpus": current.gpus, "cpu_milli": current.cpu_milli, "memory_mib": current.memory_mib}
    minutes = 0
    if current.gpus > 0 and len(usage.gpu) >= MIN_MINUTES:
        p = percentile(usage.gpu, PERCENTILE)
        out["gpus"] = _gpus(p * current.gpus / gpu_expect)
        parts.append(f"GPU p95 {p:.0%} of {current.gpus:g} at expectRate {gpu_expect:.0%} → {out['gpus']:g} GPUs")
        minutes = max(minutes, len(usage.gpu))
    if len(usage.cpu) >= MIN_MINUTES:
        p = percentile(usage.cpu, PERCENTILE)
        out["cpu_milli"] = _step(p * current.cpu_milli / cpu_expect, CPU_STEP, CPU_FLOOR)
        parts.append(f"CPU p95 {p:.0%} of {current.cpu_milli} m at {cpu_expect:.0%} → {out['cpu_milli']} m")
        minutes = max(minutes, len(usage.cpu))
    if len(usage.memory) >= MIN_MINUTES:
        p = percentile(usage.memory, PERCENTILE)
        out["memory_mib"] = _step(p * current.memory_mib / memory_expect, MEMORY_STEP, MEMORY_FLOOR)
        parts.append(f"memory p95 {p:.0%} of {current.memory_mib} MiB at {memory_expect:.0%} → "
                     f"{out['memory_mib']} MiB")
        minutes = max(minutes, len(usage.memory))
    if not parts:
        return None
    resources = Resources(**out)
    return Recommendation(resources, f"per replica {resources.gpus:g} GPUs, {resources.cpu_milli} m CPU, "
                                     f"{resources.memory_mib} MiB over {minutes} minutes (" + "; ".join(parts) + ")",
                          minutes)
