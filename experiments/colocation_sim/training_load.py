"""The simulation's training side, shaped by real traces (no Django; the traces are read in place).

- Arrivals: a Poisson process whose rate follows an hour-of-week profile measured on the Alibaba GPU 2023 pod list
  (`creation_time` of openb_pod_list_default.csv, over its densest whole weeks; the trace's clock starts at an
  unknown hour, so its first day's 00:00 is taken as the simulation's first midnight), lightly smoothed.
- Run times: the Microsoft Philly job run-time distribution (philly_runtime_from_alibaba_analysis.csv, seconds),
  at least one tick (Philly's 0-60 s jobs end within the minute they start).
- Shapes: the Alibaba 2023 pods' (GPUs, CPU, memory) of the pods that fit the group's node; GPU pods of whole GPUs
  become gangs of 2-16 workers of that shape (`gang_workers_of`) with a probability chosen so gangs hold the Helios
  share of GPUs held by >= 8-GPU jobs (`gang_share`).
- Departments: drawn by the Helios Earth GPU quota shares (`helios_shares`).
- Volume: a job-rate found by bisection so the GPU-hours offered within the run (a job's GPUs x workers x the part of
  its run time before the run ends) are `load` times the training capacity given by the caller.
Deterministic for a seed (random.Random seeded with strings).
"""

from __future__ import annotations

import bisect
import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cluster.simulated.alibaba import read_pods
from cluster.simulated.traces import GANG_WORKERS, gang_share, gang_workers_of, helios_shares, workers_room

HOUR = 3600.0
WEEK_H = 168
ALIBABA_PODS = Path("alibaba-gpu-2023") / "openb_pod_list_default.csv"
PHILLY = Path("philly") / "philly_runtime_from_alibaba_analysis.csv"
HELIOS_QUOTAS = Path("helios") / "Earth_gpu_number.csv"
MIN_RUN_S = 60.0
SMOOTH_H = 3  # hours of the circular moving mean over the hour-of-week counts (about 40 pods per hour otherwise)
DENSE = 0.2  # a whole week counts as dense when each of its days has this share of the last week's mean day
GANG_SAMPLE = 20_000  # templates the gang probability is fitted on


@dataclass(frozen=True, slots=True)
class Shape:
    gpus: float  # per worker; 0 for CPU-only
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class NodeShape:
    gpu_count: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True, slots=True)
class Sources:
    """What the load is drawn from, read once."""

    week: tuple[float, ...]  # 168 hourly rates, mean 1; hour 0 = the simulation's first midnight
    week_source: str
    runtimes: tuple[float, ...]  # sorted, seconds
    gpu_shapes: tuple[Shape, ...]
    cpu_shapes: tuple[Shape, ...]
    gang_share: float
    gang_source: str
    departments: tuple[tuple[str, float], ...]  # (name, cumulative share)


@dataclass(frozen=True, slots=True)
class GroupTarget:
    """One group's training side: its node shape, the nodes training always has (gangs must fit them whole) and the
    capacity the load is relative to (GPUs; millicores for the CPU group)."""

    name: str
    model: str | None
    node: NodeShape
    training_nodes: tuple[NodeShape, ...]
    capacity: float


@dataclass(frozen=True, slots=True)
class PlannedJob:
    at: float  # seconds from the run's start
    group: str
    model: str | None
    name: str
    department: str
    shape: Shape
    workers: int
    run_s: float


@dataclass(frozen=True, slots=True)
class GroupLoad:
    group: str
    jobs: int
    gangs: int
    offered: float  # unit-hours within the run
    capacity: float
    gang_share: float  # of the offered GPU-hours, in gangs
    gang_probability: float


@dataclass(frozen=True, slots=True)
class TrainingLoad:
    jobs: tuple[PlannedJob, ...]  # by arrival
    groups: tuple[GroupLoad, ...]
    sources: Sources
    load: float

    def describe(self) -> str:
        s = self.sources
        per = "; ".join(f"{g.group}: {g.jobs} jobs ({g.gangs} gangs, {g.gang_share:.0%} of the GPU-hours), "
                        f"{g.offered:,.0f} of {g.capacity:,.0f} unit-hours" for g in self.groups)
        return (f"offered load {self.load:.2f} x the training capacity (the static split's training side); "
                f"arrivals: {s.week_source}; run times: Philly ({len(s.runtimes)} jobs, median "
                f"{s.runtimes[len(s.runtimes) // 2] / 60:.0f} min, >= {MIN_RUN_S:.0f} s); shapes: Alibaba 2023 pods "
                f"({len(s.gpu_shapes)} GPU, {len(s.cpu_shapes)} CPU-only); gangs of {GANG_WORKERS[0]}-"
                f"{GANG_WORKERS[1]} workers, target share {s.gang_share:.1%} ({s.gang_source}); departments: Helios "
                f"Earth quota shares ({len(s.departments)} VCs). {per}.")


# -- sources --------------------------------------------------------------------------------------
def week_profile(created: Sequence[float]) -> tuple[tuple[float, ...], int, int]:
    """Hour-of-week arrival rates (mean 1) from creation times (seconds from the trace's start): the trace's longest
    run of dense whole weeks ending at its last whole day, hour 0 = 00:00 of that run's first day. Also the weeks
    used and the creations counted."""
    if not created:
        raise ValueError("no creation times to derive an arrival profile from")
    days = int(max(created) // 86400)  # whole days: 0 .. days-1
    per_day = [0] * max(days, 1)
    for t in created:
        if t < days * 86400:
            per_day[int(t // 86400)] += 1
    if days < 7:
        raise ValueError(f"{days} whole days of creation times: fewer than a week")
    end = days
    last_mean = sum(per_day[end - 7:end]) / 7
    start = end - 7
    while start - 7 >= 0 and min(per_day[start - 7:start]) >= DENSE * last_mean:
        start -= 7
    counts = [0.0] * WEEK_H
    used = 0
    for t in created:
        if start * 86400 <= t < end * 86400:
            counts[int((t - start * 86400) // HOUR) % WEEK_H] += 1
            used += 1
    half = SMOOTH_H // 2
    smooth = [sum(counts[(h + k) % WEEK_H] for k in range(-half, half + 1)) / SMOOTH_H for h in range(WEEK_H)]
    mean = sum(smooth) / WEEK_H
    return tuple(v / mean for v in smooth), (end - start) // 7, used


@lru_cache(maxsize=2)
def sources(traces: Path) -> Sources:
    pods = read_pods(traces / ALIBABA_PODS).pods
    week, weeks, used = week_profile([p.creation for p in pods if p.creation is not None])
    with open(traces / PHILLY, newline="") as f:
        runtimes = tuple(sorted(float(r["runtime"]) for r in csv.DictReader(f)))
    share, where = gang_share(traces / "helios")
    cumulative, acc = [], 0.0
    for name, s in helios_shares(traces / HELIOS_QUOTAS).items():
        acc += s
        cumulative.append((name, acc))
    return Sources(week, f"Alibaba GPU 2023 pod creation times, hour of week over its last {weeks} dense weeks "
                         f"({used} pods)", runtimes,
                   tuple(Shape(p.gpus, p.cpu_milli, p.memory_mib) for p in pods if p.gpus > 0),
                   tuple(Shape(0.0, p.cpu_milli, p.memory_mib) for p in pods if p.gpus == 0),
                   share, where, tuple(cumulative))


# -- drawing --------------------------------------------------------------------------------------
def _fits(s: Shape, node: NodeShape) -> bool:
    return s.gpus <= node.gpu_count and s.cpu_milli <= node.cpu_milli and s.memory_mib <= node.memory_mib


@dataclass(frozen=True, slots=True)
class _Template:
    name: str
    shape: Shape
    run_s: float
    gang_u: float  # below the gang probability: a gang (whole GPUs only)
    workers: int  # should it become a gang
    department: str


def _templates(src: Sources, g: GroupTarget, seed: int, n: int) -> list[_Template]:
    rng = random.Random(f"training-load-{seed}-{g.name}")
    shapes = [s for s in (src.gpu_shapes if g.model else src.cpu_shapes) if _fits(s, g.node)]
    if not shapes:
        raise ValueError(f"no trace pod fits a {g.name} node")
    rooms = {s: workers_room(s.gpus, s.cpu_milli, s.memory_mib, g.training_nodes) for s in set(shapes)}
    out = []
    for i in range(n):
        shape = shapes[int(rng.random() * len(shapes))]
        run = max(MIN_RUN_S, src.runtimes[int(rng.random() * len(src.runtimes))])
        u, d = rng.random(), rng.random()
        name = f"{g.name.lower()}-{seed}-{i}"
        workers = min(gang_workers_of(name), rooms[shape])
        dept = next((name_ for name_, c in src.departments if d < c), src.departments[-1][0])
        out.append(_Template(name, shape, run, u, workers, dept))
    return out


def _gang_eligible(t: _Template) -> bool:
    return t.shape.gpus >= 1 and float(t.shape.gpus).is_integer() and t.workers >= GANG_WORKERS[0]


def _gang_work_share(templates: Sequence[_Template], q: float, span: float) -> float:
    gang = rest = 0.0
    for t in templates:
        work = t.shape.gpus * min(t.run_s, span)
        if _gang_eligible(t) and t.gang_u < q:
            gang += work * t.workers
        else:
            rest += work
    return gang / (gang + rest) if gang + rest else 0.0


def gang_probability(templates: Sequence[_Template], share: float, span: float) -> float:
    """The probability a gang-eligible job becomes a gang so gangs hold `share` of the GPU-time (1.0 if they cannot)."""
    lo, hi = 0.0, 1.0
    if _gang_work_share(templates, 1.0, span) <= share:
        return 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gang_work_share(templates, mid, span) < share else (lo, mid)
    return (lo + hi) / 2


class _Clock:
    """Cumulative profile-hours over the run, and its inverse (arrival times of a unit-rate process)."""

    def __init__(self, week: Sequence[float], hours: int, offset_h: int) -> None:
        self.rates = [week[(offset_h + h) % WEEK_H] for h in range(hours)]
        self.cum = [0.0]
        for r in self.rates:
            self.cum.append(self.cum[-1] + r)

    def at(self, x: float) -> float:
        """Seconds from the start at which `x` profile-hours have passed (inf past the run)."""
        if x >= self.cum[-1]:
            return float("inf")
        h = bisect.bisect_right(self.cum, x) - 1
        return (h + (x - self.cum[h]) / self.rates[h]) * HOUR if self.rates[h] > 0 else h * HOUR


def _plan(templates: list[_Template], gaps: list[float], clock: _Clock, rate: float, q: float,
          span: float) -> tuple[list[tuple[float, _Template, int]], float]:
    out, offered, x = [], 0.0, 0.0
    for t, gap in zip(templates, gaps):
        x += gap / rate
        at = clock.at(x)
        if at >= span:
            return out, offered
        workers = t.workers if _gang_eligible(t) and t.gang_u < q else 1
        units = t.shape.gpus if t.shape.gpus else t.shape.cpu_milli
        offered += units * workers * min(t.run_s, span - at) / HOUR
        out.append((at, t, workers))
    raise ValueError("the training load needs more jobs than drawn")  # _group sizes the draw with room to spare


def _group(src: Sources, g: GroupTarget, load: float, days: int, seed: int,
           offset_h: int) -> tuple[list[PlannedJob], GroupLoad]:
    span = days * 86400.0
    sample = _templates(src, g, seed, GANG_SAMPLE)
    q = gang_probability(sample, src.gang_share, span) if g.model else 0.0
    target = load * g.capacity * span / HOUR
    clock = _Clock(src.week, days * 24, offset_h)
    gaps_rng = random.Random(f"training-arrivals-{seed}-{g.name}")
    n = GANG_SAMPLE
    templates, gaps = sample, [gaps_rng.expovariate(1.0) for _ in range(n)]
    lo, hi = 0.0, 1.0
    while _plan_or_none(templates, gaps, clock, hi, q, span) < target:
        hi *= 2
        if hi > 1e6:
            raise ValueError(f"{g.name}: cannot offer {target:.0f} unit-hours with {n} jobs")
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _plan_or_none(templates, gaps, clock, mid, q, span) < target else (lo, mid)
    planned, offered = _plan(templates, gaps, clock, hi, q, span)
    jobs = [PlannedJob(at, g.name, g.model, t.name, t.department, t.shape, w, t.run_s) for at, t, w in planned]
    gang = sum(j.shape.gpus * j.workers * min(j.run_s, span - j.at) for j in jobs if j.workers > 1)
    total = sum(max(j.shape.gpus, 0.0) * j.workers * min(j.run_s, span - j.at) for j in jobs)
    return jobs, GroupLoad(g.name, len(jobs), sum(1 for j in jobs if j.workers > 1), offered, g.capacity * span / HOUR,
                           gang / total if total else 0.0, q)


def _plan_or_none(templates, gaps, clock, rate, q, span) -> float:
    """Offered unit-hours at `rate`; inf when the drawn jobs run out before the run ends (rate too high)."""
    try:
        return _plan(templates, gaps, clock, rate, q, span)[1]
    except ValueError:
        return float("inf")


def build(traces: Path, groups: Sequence[GroupTarget], load: float, days: int, seed: int = 0,
          offset_h: int = 0) -> TrainingLoad:
    """The training jobs of a run of `days` days (arrival seconds from its start). `offset_h`: the hour of week the
    run starts at (in the profile's hours)."""
    if load < 0:
        raise ValueError(f"training load must be >= 0, got {load}")
    src = sources(traces)
    jobs: list[PlannedJob] = []
    loads = []
    for g in groups:
        if load == 0 or g.capacity <= 0:
            loads.append(GroupLoad(g.name, 0, 0, 0.0, g.capacity * days * 24, 0.0, 0.0))
            continue
        mine, summary = _group(src, g, load, days, seed, offset_h)
        jobs += mine
        loads.append(summary)
    jobs.sort(key=lambda j: (j.at, j.name))
    return TrainingLoad(tuple(jobs), tuple(loads), src, load)
