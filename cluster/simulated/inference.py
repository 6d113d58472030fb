"""Simulated inference load, from public traces read in place (paths passed in), and the
per-replica utilization the autoscaler (colocation/policy/autoscaling.py) reacts to. Pure: no Django, no backend.

- Request rate: a per-minute traffic curve (cluster/simulated/traffic.py: World Cup 98, the GenAI log's GPU work,
  or a CSV), each service on its own day and phase (drawn from the seed, so deterministic), scaled to its peak QPS.
- GPU utilization per replica: y = k · (QPS per ready replica) · (1 + noise), clipped to [0, 1];
  k (GPU busy fraction per request/s on one pod) and the noise spread come from the Alibaba GenAI
  serving trace: per minute, sum of pod duty cycles / system QPS, over the busiest half of minutes.
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
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # traffic.py imports this module
    from cluster.simulated.traffic import Traffic

WORLDCUP_FILE = "invocation_count.csv"
LOCAL_OFFSET_MIN = 120  # the site's local time was GMT+2
DAY_MIN = 1440


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
    """One service's request-rate curve: a window of the traffic curve, shifted and scaled."""

    name: str
    day: int  # curve day the simulation's day 0 maps to
    phase_min: int  # shift of the curve (minutes, may be negative)
    peak_qps: float  # the curve's 99th percentile over the used days maps to this

    def qps(self, minute: int, curve: Sequence[float], scale: float) -> float:
        i = (self.day * DAY_MIN + minute - self.phase_min) % len(curve)
        return curve[i] * scale


class InferenceLoad:
    """Per-minute QPS and utilization of a set of services on a per-minute traffic curve (a
    cluster.simulated.traffic.Traffic: any whole number of days); deterministic for a seed.

    The run covers curve days [start_day, start_day + days) (start_day None: the last `days` days). Each service reads
    the curve from its own day, up to `max_back_days` before start_day (as far as the curve allows), shifted by its
    own phase (+-max_phase_min): the services of a cluster peak together, not in lockstep. Minutes before 0 read the
    days before (a forecaster's history), wrapping round the curve's ends only where it has none."""

    def __init__(self, traffic: Traffic, genai_dir: str | Path, names: Sequence[str], peak_qps: Sequence[float],
                 days: int, seed: int = 0, start_day: int | None = None, max_phase_min: int = 60,
                 max_back_days: int = 6) -> None:
        self.traffic = traffic
        self.curve = tuple(traffic.values.tolist())  # indexing a tuple is faster than an array, minute by minute
        self.model = genai_util_model(str(genai_dir))
        total_days = len(self.curve) // DAY_MIN
        days = max(1, math.ceil(days))
        start = total_days - days if start_day is None else start_day
        if start < 0 or start + days > total_days:
            raise ValueError(f"{traffic.name} has {total_days} whole days: cannot run {days} days from day {start}")
        self.start_day = start
        rng = random.Random(f"inference-load-{seed}")
        self.services: list[ServiceLoad] = []
        self._scale: list[float] = []
        for name, peak in zip(names, peak_qps, strict=True):
            day = start - rng.randint(0, min(max_back_days, start))
            phase = rng.randint(-max_phase_min, max_phase_min)
            window = sorted(self.curve[day * DAY_MIN:(day + days) * DAY_MIN])
            p99 = window[int(0.99 * (len(window) - 1))] or 1.0
            self.services.append(ServiceLoad(name, day, phase, peak))
            self._scale.append(peak / p99)
        self._noise = [random.Random(f"{seed}-{s.name}") for s in self.services]

    def history_minutes(self, i: int) -> int:
        """Minutes of the curve before service i's minute 0 (what a forecaster could have seen)."""
        s = self.services[i]
        return max(0, s.day * DAY_MIN - s.phase_min)

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
