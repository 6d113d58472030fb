"""Simulated inference load, from public traces read in place (paths passed in), and the
real-time threshold autoscaling rule of SPEC §3. Pure: no Django, no backend.

- Request rate: the World Cup 98 per-minute request counts (local time = GMT+2), each service on
  its own day and phase (drawn from the seed, so deterministic), scaled to its peak QPS.
- GPU utilization per replica: y = k · (QPS per ready replica) · (1 + noise), clipped to [0, 1];
  k (GPU busy fraction per request/s on one pod) and the noise spread come from the Alibaba GenAI
  serving trace: per minute, sum of pod duty cycles / system QPS, over the busiest half of minutes.
- Replicas (`replicas_next`): scale out when y > maxRate in each of the last 2 minutes
  (N' = ceil(y/expectRate·N)); scale in when y < minRate in each of the last 5 minutes
  (N' = floor(y/expectRate·N)); at least 2 replicas; within the service's min/max.
"""

from __future__ import annotations

import csv
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path

WORLDCUP_FILE = "invocation_count.csv"
LOCAL_OFFSET_MIN = 120  # the site's local time was GMT+2
DAY_MIN = 1440
FLOAT_SLACK = 1e-9  # 0.9/0.6*4 is 6.000000000000001: not a reason for a 7th replica


@dataclass(frozen=True, slots=True)
class ScaleThresholds:
    """Per-service real-time thresholds (fractions of GPU utilization) and replica bounds."""

    min_rate: float = 0.3
    expect_rate: float = 0.6
    max_rate: float = 0.8
    min_replicas: int = 2
    max_replicas: int = 10_000
    out_minutes: int = 2
    in_minutes: int = 5

    def __post_init__(self) -> None:
        if not 0 < self.min_rate <= self.expect_rate <= self.max_rate:
            raise ValueError(f"need 0 < minRate <= expectRate <= maxRate, got "
                             f"{self.min_rate}/{self.expect_rate}/{self.max_rate}")
        if self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas < min_replicas")


SYSTEM_MIN_REPLICAS = 2  # SPEC §3 system rule


def replicas_next(history: Sequence[float], n: int, thresholds: ScaleThresholds = ScaleThresholds()) -> int:
    """Replica count after this minute; `history` is utilization per minute, newest last, measured
    with the current `n` replicas (the caller restarts it when the count changes)."""
    th = thresholds
    floor_n = max(SYSTEM_MIN_REPLICAS, th.min_replicas)
    clamp = lambda k: max(floor_n, min(th.max_replicas, k))  # noqa: E731
    if n <= 0:
        return clamp(n)
    y = history[-1] if history else None
    if y is not None and len(history) >= th.out_minutes and all(v > th.max_rate for v in history[-th.out_minutes:]):
        return clamp(max(n, math.ceil(y / th.expect_rate * n - FLOAT_SLACK)))
    if y is not None and len(history) >= th.in_minutes and all(v < th.min_rate for v in history[-th.in_minutes:]):
        return clamp(min(n, math.floor(y / th.expect_rate * n + FLOAT_SLACK)))
    return clamp(n)


# -- traces ----------------------------------------------------------------------------------
@lru_cache(maxsize=4)
def worldcup_local_minutes(folder: str | Path) -> tuple[float, ...]:
    """Requests per minute, local time, whole local days only; gaps filled with the previous value."""
    path = Path(folder) / WORLDCUP_FILE
    with open(path, newline="") as f:
        rows = [(datetime.fromisoformat(r["period"]), float(r["count"])) for r in csv.DictReader(f)]
    if not rows:
        raise ValueError(f"{path}: no rows")
    first = rows[0][0] + timedelta(minutes=LOCAL_OFFSET_MIN)
    day0 = datetime(first.year, first.month, first.day) + timedelta(days=1)  # first full local day
    out: list[float] = []
    last = rows[0][1]
    for t, count in rows:
        i = int((t + timedelta(minutes=LOCAL_OFFSET_MIN) - day0).total_seconds() // 60)
        if i < 0:
            last = count
            continue
        while len(out) < i:
            out.append(last)  # gap of a few minutes
        if len(out) == i:
            out.append(count)
        last = count
    whole = len(out) // DAY_MIN * DAY_MIN
    return tuple(out[:whole])


@dataclass(frozen=True, slots=True)
class UtilModel:
    """GPU busy fraction per (request/s per pod), and the relative spread around it."""

    per_qps: float
    noise: float
    minutes: int  # trace minutes it was fitted on


@lru_cache(maxsize=4)
def genai_util_model(folder: str | Path) -> UtilModel:
    """Fit y = k · QPS-per-pod from the GenAI duty cycles (pod_gpu_duty_cycle_anon.csv, %) and
    generative QPS (qps.csv): per minute, k = sum(duty)/100 / sum(QPS); median over the busier
    half of minutes (idle minutes say nothing about cost per request); noise = spread (IQR/1.35)
    of k relative to the median."""
    folder = Path(folder)
    qps: dict[int, float] = defaultdict(float)
    with open(folder / "qps.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["request_type"].startswith("Generative"):
                qps[int(float(r["timestamp_anon"]) // 60)] += float(r["value"])
    busy: dict[int, float] = defaultdict(float)
    with open(folder / "pod_gpu_duty_cycle_anon.csv", newline="") as f:
        for r in csv.DictReader(f):
            busy[int(float(r["timestamp_anon"]) // 60)] += float(r["value"]) / 100.0
    minutes = sorted(m for m in qps if m in busy and qps[m] > 0)
    if len(minutes) < 10:
        raise ValueError(f"{folder}: too few overlapping minutes of QPS and duty cycle ({len(minutes)})")
    median_qps = statistics.median(qps[m] for m in minutes)
    ks = sorted(busy[m] / qps[m] for m in minutes if qps[m] >= median_qps)
    k = statistics.median(ks)
    q1, q3 = ks[len(ks) // 4], ks[3 * len(ks) // 4]
    return UtilModel(k, (q3 - q1) / 1.35 / k, len(minutes))


# -- services --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ServiceLoad:
    """One service's request-rate curve: a window of the World Cup trace, shifted and scaled."""

    name: str
    day: int  # trace day the simulation's day 0 maps to
    phase_min: int  # shift of the curve (minutes, may be negative)
    peak_qps: float  # the trace's 99th percentile over the used days maps to this

    def qps(self, minute: int, curve: Sequence[float], scale: float) -> float:
        i = (self.day * DAY_MIN + minute - self.phase_min) % len(curve)
        return curve[i] * scale


class InferenceLoad:
    """Per-minute QPS and utilization of a set of services; deterministic for a seed."""

    def __init__(self, worldcup_dir: str | Path, genai_dir: str | Path, names: Sequence[str],
                 peak_qps: Sequence[float], days: int, seed: int = 0, max_phase_min: int = 60,
                 first_day: int = 7, last_day: int = 70) -> None:
        self.curve = worldcup_local_minutes(str(worldcup_dir))
        self.model = genai_util_model(str(genai_dir))
        total_days = len(self.curve) // DAY_MIN
        rng = random.Random(f"inference-load-{seed}")
        days = max(1, math.ceil(days))
        last_day = min(last_day, total_days - days - 1)
        self.services: list[ServiceLoad] = []
        self._scale: list[float] = []
        for name, peak in zip(names, peak_qps, strict=True):
            day = rng.randint(min(first_day, last_day), last_day)
            phase = rng.randint(-max_phase_min, max_phase_min)
            window = sorted(self.curve[day * DAY_MIN:(day + days) * DAY_MIN])
            p99 = window[int(0.99 * (len(window) - 1))] or 1.0
            self.services.append(ServiceLoad(name, day, phase, peak))
            self._scale.append(peak / p99)
        self._noise = [random.Random(f"{seed}-{s.name}") for s in self.services]

    def qps(self, i: int, minute: int) -> float:
        return self.services[i].qps(minute, self.curve, self._scale[i])

    def utilization(self, i: int, minute: int, ready: int) -> float:
        """GPU utilization of one ready replica of service i at `minute` (1.0 when none is ready)."""
        q = self.qps(i, minute)
        noise = 1.0 + self._noise[i].gauss(0.0, self.model.noise)
        if ready <= 0:
            return 1.0 if q > 0 else 0.0
        return min(1.0, max(0.0, self.model.per_qps * q / ready * max(0.0, noise)))

    def replicas_for(self, qps: float, expect_rate: float) -> float:
        """Replicas that would run `qps` at `expect_rate` utilization (for sizing)."""
        return self.model.per_qps * qps / expect_rate
