"""What a replay measures, recorded as the event loop acts. Pure Python + NumPy.

- allocated GPUs over time (a step function; integrals are exact between events);
- per job: total time pending (queue wait, including waits after a preemption), quota kind of
  its last admission, preemptions, GPU-model fallback;
- the FGD fragmentation measure: GPUs left unallocated at the moment the first GPU pod could not
  be placed for lack of room (reasons no-capacity / no-idle-capacity / no-compatible-model);
- unallocated GPU-hours while GPU work was waiting: from each cycle that left a GPU pod pending
  until the next cycle, the GPUs nobody held (capacity idle while GPU pods were refused);
- per job size (total GPUs: 1 or less, 2-8, more than 8): queueing time (p50, p95, max) and job completion time
  (finish - submit; p50, p95, max) — a gang is one job: its wait and completion count once;
- per size class, the longest waiters and what they waited for: the time between cycles, by the reason each cycle
  gave for its wait, and how many jobs lower in the queue were admitted past it; its longest wait per quota kind;
- fairness (Fairness): per department, GPUs held / its fair share, and Jain's fairness index of those ratios, as time
  means over the arrival window;
- reclaims: preemptions that took back borrowed capacity, per borrowed admission, and the GPU-hours they threw away.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import math

import numpy as np

from cluster.types import QuotaKind
from scheduler.policy import Reason
from scheduler.policy.fairshare import fair_split

CAPACITY_REASONS = frozenset({Reason.NO_CAPACITY, Reason.NO_IDLE_CAPACITY, Reason.NO_COMPATIBLE_MODEL})
# job size classes by total GPUs (all workers): (key, upper bound inclusive)
SIZE_CLASSES: tuple[tuple[str, float], ...] = (("<=1", 1.0), ("2-8", 8.0), (">8", math.inf))
TIMELINE_POINTS = 2000  # kept per policy for the plot and report.json
LONGEST = 3  # longest waiters reported per size class
RECLAIM = Reason.PREEMPTED_RECLAIM.value
YOUNG_S = 300.0  # a reclaim of work that ran less than this is churn (the tree's reclaim_min_runtime_s)


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one has everything (None: no
    values, or all zero)."""
    squares = sum(x * x for x in values)
    return None if not values or squares <= 0 else sum(values) ** 2 / (len(values) * squares)


def fair_shares(capacity: float, quota: Mapping[str, float], demand: Mapping[str, float]) -> dict[str, float]:
    """Each department's fair share of `capacity` GPUs: its quota (share x capacity) as far as it wants it, then what
    the others leave, water-filled in proportion to quota (fairshare.fair_split), none above its demand."""
    kept = {d: min(q, demand.get(d, 0.0)) for d, q in quota.items()}
    extra = fair_split({"": tuple(quota)}, quota, {d: demand.get(d, 0.0) - kept[d] for d in quota},
                       max(0.0, capacity - sum(kept.values())))
    return {d: kept[d] + extra.get(d, 0.0) for d in quota}


class Fairness:
    """Usage / fair share per department over time (fair_shares of its GPUs held and wanted, i.e. held + pending) and
    Jain's index of those ratios over the departments with a fair share: time means (the index's also over the
    contended time alone, when the departments want more than the cluster has), with the index's samples."""

    def __init__(self, capacity: float, shares: Mapping[str, float]) -> None:
        self.capacity = capacity
        self.quota = {d: s * capacity for d, s in shares.items()}
        self.held: dict[str, float] = defaultdict(float)
        self.pending: dict[str, float] = defaultdict(float)
        self.ratio: dict[str, float] = {}  # now, departments with a fair share
        self.index: float | None = None
        self.dirty = False
        self.ratio_integral: dict[str, float] = defaultdict(float)
        self.ratio_time: dict[str, float] = defaultdict(float)
        self.index_integral = self.index_time = 0.0
        self.contended = False  # the departments want more GPUs than the cluster has: only then can shares differ
        self.contended_integral = self.contended_time = 0.0
        self.samples: list[tuple[float, float]] = []  # (time, index) at each change of it

    def move(self, department: str, held: float = 0.0, pending: float = 0.0) -> None:
        self.held[department] += held
        self.pending[department] += pending
        self.dirty = True

    def measure(self, t: float) -> None:
        """The ratios and the index from now on (after the held and pending GPUs changed)."""
        if not self.dirty:
            return
        self.dirty = False
        demand = {d: self.held[d] + max(0.0, self.pending[d]) for d in self.quota}
        self.contended = sum(demand.values()) > self.capacity + 1e-9
        fair = fair_shares(self.capacity, self.quota, demand)
        self.ratio = {d: self.held[d] / f for d, f in fair.items() if f > 1e-9}
        index = jain(list(self.ratio.values()))
        if index != self.index:
            self.samples.append((t, index))
        self.index = index

    def advance(self, dt: float) -> None:
        for d, x in self.ratio.items():
            self.ratio_integral[d] += x * dt
            self.ratio_time[d] += dt
        if self.index is not None:
            self.index_integral += self.index * dt
            self.index_time += dt
            if self.contended:
                self.contended_integral += self.index * dt
                self.contended_time += dt

    def summary(self) -> dict:
        return {"jain_mean": round(self.index_integral / self.index_time, 6) if self.index_time else None,
                "measured_s": round(self.index_time, 3),
                "jain_contended_mean": round(self.contended_integral / self.contended_time, 6)
                if self.contended_time else None,
                "contended_s": round(self.contended_time, 3),
                "usage_over_fair_share": {d: round(self.ratio_integral[d] / self.ratio_time[d], 6)
                                          for d in self.quota if self.ratio_time[d]}}

    def timeline(self, end: float, points: int = TIMELINE_POINTS) -> list[list[float]]:
        """The index sampled at `points` evenly spaced times (its value then; None while nobody wants GPUs)."""
        if not self.samples:
            return []
        times = np.array([t for t, _ in self.samples])
        start = times[0]
        grid = np.linspace(start, max(end, start), points)
        idx = np.searchsorted(times, grid, side="right") - 1
        return [[round(float(t), 3), None if (v := self.samples[i][1]) is None else round(v, 6)]
                for t, i in zip(grid, idx)]


@dataclass(slots=True)
class JobRecord:
    id: int
    name: str
    line: int
    own_eligible: bool  # LS/Guaranteed: entitled to its department's own quota
    gpus: float  # all its workers'
    preferred: str | None
    submitted: float
    pending_since: float | None
    waited_s: float = 0.0
    started: float | None = None
    finished: float | None = None
    kind: QuotaKind | None = None  # of its last admission
    model: str | None = None
    preemptions: int = 0
    fallbacks: int = 0
    workers: int = 1
    waited_for: dict[str, float] = field(default_factory=dict)  # reason -> seconds (from each cycle to the next)
    why: str | None = None  # the last cycle's reason, while waiting
    why_since: float = 0.0
    passed: int = 0  # jobs lower in the queue admitted in a cycle it waited in
    department: str = ""  # the department whose fair share it counts against (its account's)


def _close(rec: JobRecord, t: float) -> None:
    """The reason the job waited for since its last cycle ends at `t`."""
    if rec.why is not None:
        rec.waited_for[rec.why] = rec.waited_for.get(rec.why, 0.0) + t - rec.why_since
        rec.why = None


@dataclass(frozen=True, slots=True)
class FirstFailure:
    at: float
    pod: str
    reason: str
    unallocated_gpus: float
    alloc_share: float


class Recorder:
    def __init__(self, capacity_by_model: dict[str, int], start: float, window_end: float = math.inf,
                 shares: Mapping[str, float] | None = None) -> None:
        """Time means (allocation share, per-model utilization, fairness) are taken over [start, window_end]:
        the arrival window of the trace, not the tail where a few long pods run on alone. `shares`: each
        department's quota share, what its fair share is measured by."""
        self.window_end = window_end
        self.capacity_by_model = dict(capacity_by_model)
        self.capacity = float(sum(capacity_by_model.values()))
        self.start = self.now = start
        self.alloc = 0.0
        self.alloc_by_model: dict[str, float] = defaultdict(float)
        self.alloc_integral = 0.0
        self.model_integral: dict[str, float] = defaultdict(float)
        self.idle_while_waiting = 0.0  # GPU-seconds
        self.waiting_gpu_jobs = 0  # GPU pods the last cycle left pending
        self.timeline: list[tuple[float, float]] = [(start, 0.0)]
        self.jobs: dict[int, JobRecord] = {}
        self.preempt_reasons: Counter[str] = Counter()
        self.lost_gpu_s = 0.0  # work thrown away by preemptions
        self.first_failure: FirstFailure | None = None
        self.quota_refusals = 0
        self.reserved_jobs: set[int] = set()  # gangs that held a reservation at some cycle
        self.lost_by_reason: Counter[str] = Counter()  # GPU-seconds
        self.borrowed_admissions = 0
        self.reclaimed_after: list[tuple[float, int]] = []  # each reclaim: (the victim's run time, its workers)
        self.borrowed_jobs: set[int] = set()
        self.fairness = Fairness(self.capacity, shares or {})
        self.events = 0
        self.cycles = 0

    # -- time -------------------------------------------------------------------
    def advance(self, t: float) -> None:
        dt = t - self.now
        if dt <= 0:
            return
        in_window = max(0.0, min(t, self.window_end) - self.now)
        self.fairness.measure(self.now)
        if in_window:
            self.alloc_integral += self.alloc * in_window
            for model, a in self.alloc_by_model.items():
                self.model_integral[model] += a * in_window
            self.fairness.advance(in_window)
        if self.waiting_gpu_jobs:
            self.idle_while_waiting += (self.capacity - self.alloc) * dt
        self.now = t

    def _change(self, t: float, model: str | None, gpus: float) -> None:
        if not gpus or model is None:
            return
        self.advance(t)
        self.alloc += gpus
        self.alloc_by_model[model] += gpus
        self.timeline.append((t, self.alloc))

    # -- job events ---------------------------------------------------------------
    def submitted(self, rec: JobRecord) -> None:
        self.advance(rec.submitted)
        self.jobs[rec.id] = rec
        self.fairness.move(rec.department, pending=rec.gpus)
        self.events += 1

    def waiting(self, t: float, gpu_jobs: int) -> None:
        """After a cycle at t: how many GPU pods it left pending."""
        self.advance(t)
        self.waiting_gpu_jobs = gpu_jobs

    def waits(self, job_id: int, t: float, reason: str, passed: int) -> None:
        """A cycle at t left the job waiting for `reason`, and admitted `passed` jobs ranked below it."""
        rec = self.jobs[job_id]
        if rec.why != reason:
            _close(rec, t)
            rec.why, rec.why_since = reason, t
        rec.passed += passed

    def admitted(self, job_id: int, t: float, model: str | None, kind: QuotaKind | None) -> None:
        rec = self.jobs[job_id]
        _close(rec, t)
        rec.waited_s += t - rec.pending_since
        rec.pending_since = None
        rec.started, rec.kind, rec.model = t, kind, model
        if rec.preferred is not None and model != rec.preferred:
            rec.fallbacks += 1
        if kind is QuotaKind.BORROWED:
            self.borrowed_admissions += 1
            self.borrowed_jobs.add(job_id)
        self.events += 1
        self._change(t, model, rec.gpus)
        self.fairness.move(rec.department, held=rec.gpus, pending=-rec.gpus)

    def preempted(self, job_id: int, t: float, reason: str) -> None:
        rec = self.jobs[job_id]
        self._change(t, rec.model, -rec.gpus)
        self.fairness.move(rec.department, held=-rec.gpus, pending=rec.gpus)
        lost = (t - rec.started) * rec.gpus
        self.lost_gpu_s += lost
        self.lost_by_reason[reason] += lost
        if reason == RECLAIM:
            self.reclaimed_after.append((t - rec.started, rec.workers))
        rec.preemptions += 1
        rec.pending_since, rec.started = t, None
        self.preempt_reasons[reason] += 1
        self.events += 1

    def finished(self, job_id: int, t: float) -> None:
        rec = self.jobs[job_id]
        self._change(t, rec.model, -rec.gpus)
        self.fairness.move(rec.department, held=-rec.gpus)
        rec.finished = t
        self.events += 1

    def reserved(self, job_id: int) -> None:
        self.reserved_jobs.add(job_id)

    def failure(self, at: float, pod: str, reason: Reason, allocated: float) -> None:
        if self.first_failure is None:
            self.first_failure = FirstFailure(at, pod, reason.value, self.capacity - allocated,
                                              allocated / self.capacity if self.capacity else 0.0)

    # -- figures ------------------------------------------------------------------
    def summary(self, end: float, mode: str) -> dict:
        self.advance(end)
        span = max(min(end, self.window_end) - self.start, 1e-9)
        cap = self.capacity or 1.0
        recs = list(self.jobs.values())
        waits = {  # jobs still waiting at the end count with their wait so far (censored, not dropped)
            "all": _waits(recs, end),
            "own": _waits((r for r in recs if r.own_eligible), end),
            "best_effort": _waits((r for r in recs if not r.own_eligible), end),
        }
        by_kind = {k: _waits((r for r in recs if r.kind is not None and r.kind.value == k), end)
                   for k in ("own", "borrowed")}
        ff = self.first_failure
        inflate = mode == "inflate"
        by_model = {m: round((self.alloc_by_model[m] if inflate else self.model_integral[m] / span) / c, 6)
                    for m, c in sorted(self.capacity_by_model.items()) if c}
        share = (ff.alloc_share if ff else self.alloc / cap) if inflate else self.alloc_integral / span / cap
        return {
            "gpu_alloc_share": round(share, 6),
            "peak_gpu_alloc_share": round(max(a for _, a in self.timeline) / cap, 6),
            "unallocated_gpu_hours": None if inflate else round(self.idle_while_waiting / 3600, 3),
            "unallocated_gpus_at_first_failure": round(ff.unallocated_gpus, 3) if ff else None,
            "first_failure": None if ff is None else {
                "at_s": round(ff.at, 3), "pod": ff.pod, "reason": ff.reason,
                "unallocated_gpus": round(ff.unallocated_gpus, 3), "alloc_share": round(ff.alloc_share, 6)},
            "wait_p50_s": waits["all"]["p50"], "wait_p95_s": waits["all"]["p95"], "wait_p99_s": waits["all"]["p99"],
            "wait_p95_own_s": waits["own"]["p95"],
            "waits_by_class": waits,
            "waits_by_quota_kind": by_kind,
            "preemptions": sum(self.preempt_reasons.values()),
            "preemptions_by_reason": dict(sorted(self.preempt_reasons.items())),
            "jobs_preempted": sum(1 for r in recs if r.preemptions),
            "preempted_gpu_hours_lost": round(self.lost_gpu_s / 3600, 3),
            "by_size": by_size(recs, end),
            "small_wait_p95_s": by_size_p95(recs, end, "<=1"),
            "longest_waits": longest_waits(recs, end),
            "longest_wait_by_kind": longest_by_kind(recs, end),
            "fairness": self.fairness.summary(),
            "reclaims": self.reclaims(),
            "gangs_submitted": sum(1 for r in recs if r.workers > 1),
            "gangs_finished": sum(1 for r in recs if r.workers > 1 and r.finished is not None),
            "gangs_reserved": len(self.reserved_jobs),
            "gpu_model_fallbacks": sum(r.fallbacks for r in recs),
            "jobs_with_preferred_model": sum(1 for r in recs if r.preferred is not None),
            "util_by_gpu_model": by_model,
            "jobs_submitted": len(recs),
            "jobs_finished": sum(1 for r in recs if r.finished is not None),
            "jobs_never_started": sum(1 for r in recs if r.started is None and r.finished is None),
            "cycles": self.cycles,
            "events": self.events,
            "window_s": round(span, 3),
            "end_s": round(end, 3),
        }

    def reclaims(self) -> dict:
        """Preemptions that took back borrowed capacity (preempted-reclaim), per borrowed admission, the GPU-hours of
        work they threw away, the victims' median run time, and the shares of young victims and of gangs."""
        count = self.preempt_reasons[RECLAIM]
        ran = [r for r, _ in self.reclaimed_after]
        return {"preemptions": count, "borrowed_admissions": self.borrowed_admissions,
                "borrowed_jobs": len(self.borrowed_jobs),
                "per_borrowed_admission": round(count / self.borrowed_admissions, 6)
                if self.borrowed_admissions else None,
                "gpu_hours_lost": round(self.lost_by_reason[RECLAIM] / 3600, 3),
                "victim_run_p50_s": round(float(np.median(ran)), 3) if ran else None,
                "young_share": round(sum(r < YOUNG_S for r in ran) / len(ran), 6) if ran else None,
                "gang_share": round(sum(w > 1 for _, w in self.reclaimed_after) / len(ran), 6) if ran else None}

    def timeline_points(self, end: float, points: int = TIMELINE_POINTS) -> list[list[float]]:
        """The allocated-share step function sampled at `points` evenly spaced times (max in each bin)."""
        cap = self.capacity or 1.0
        t = np.array([p[0] for p in self.timeline] + [end])
        a = np.array([p[1] for p in self.timeline] + [self.timeline[-1][1]])
        if len(t) <= points:
            return [[round(float(x), 3), round(float(y) / cap, 6)] for x, y in zip(t, a)]
        edges = np.linspace(t[0], t[-1], points + 1)
        idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
        peak = np.zeros(points)
        np.maximum.at(peak, idx, a)
        # a bin without an event keeps the level reached before it
        has = np.zeros(points, dtype=bool)
        has[idx] = True
        level = a[np.clip(np.searchsorted(t, edges[:-1], side="right") - 1, 0, len(a) - 1)]
        peak = np.where(has, np.maximum(peak, level), level)
        return [[round(float(x), 3), round(float(y) / cap, 6)] for x, y in zip(edges[:-1], peak)]


def _wait(r: JobRecord, end: float) -> float:
    return r.waited_s + (end - r.pending_since if r.pending_since is not None else 0.0)


def _waits(recs: Iterable[JobRecord], end: float) -> dict:
    values = [_wait(r, end) for r in recs]
    return {"n": len(values), **percentiles(values)}


def size_class(total_gpus: float) -> str:
    return next(key for key, upper in SIZE_CLASSES if total_gpus <= upper)


def by_size(recs: Sequence[JobRecord], end: float) -> dict[str, dict]:
    """Per size class: jobs, queueing time (jobs still waiting at the end count with their wait so far) and
    completion time (finish - submit, finished jobs only)."""
    out = {}
    for key, _ in SIZE_CLASSES:
        mine = [r for r in recs if size_class(r.gpus) == key]
        jct = [r.finished - r.submitted for r in mine if r.finished is not None]
        out[key] = {"n": len(mine), "wait": spread([_wait(r, end) for r in mine]),
                    "jct": {"n": len(jct), **spread(jct)}}
    return out


def by_size_p95(recs: Iterable[JobRecord], end: float, key: str) -> float | None:
    """The p95 wait of one size class."""
    return spread([_wait(r, end) for r in recs if size_class(r.gpus) == key])["p95"]


KINDS = ("own", "borrowed", "never started")


def longest_by_kind(recs: Iterable[JobRecord], end: float) -> dict[str, dict[str, float | None]]:
    """Per size class, the longest wait of its jobs by the quota kind of their last admission (never started: still
    waiting at the end; None: no such job)."""
    out: dict[str, dict[str, float | None]] = {key: dict.fromkeys(KINDS) for key, _ in SIZE_CLASSES}
    for r in recs:
        row, kind = out[size_class(r.gpus)], r.kind.value if r.kind else KINDS[2]
        wait = round(_wait(r, end), 3)
        if row[kind] is None or wait > row[kind]:
            row[kind] = wait
    return out


def longest_waits(recs: Sequence[JobRecord], end: float, n: int = LONGEST) -> dict[str, list[dict]]:
    """Per size class, its `n` longest waiters: shape, the quota kind it last ran on (None: never started), its
    wait, the share of it spent on each reason its cycles gave (jobs still waiting count until `end`), and how many
    jobs ranked below it were admitted while it waited."""
    out: dict[str, list[dict]] = {key: [] for key, _ in SIZE_CLASSES}
    for r in sorted(recs, key=lambda r: (-_wait(r, end), r.id)):
        rows = out[size_class(r.gpus)]
        if len(rows) < n:
            rows.append(_longest_row(r, end))
    return out


def _longest_row(r: JobRecord, end: float) -> dict:
    spent = dict(r.waited_for)
    if r.why is not None:
        spent[r.why] = spent.get(r.why, 0.0) + end - r.why_since
    total = sum(spent.values())
    return {"job": r.name, "workers": r.workers, "gpus_per_worker": round(r.gpus / r.workers, 3), "model": r.model,
            "kind": r.kind.value if r.kind else None, "wait_s": round(_wait(r, end), 3),
            "waited_for": {k: round(v / total, 4) for k, v in sorted(spent.items(), key=lambda kv: -kv[1])}
            if total else {}, "passed_by": r.passed}


def class_waits(recs: Iterable[JobRecord], end: float) -> dict[str, list[float]]:
    """Per size class, every job's queueing time (as by_size counts it)."""
    out: dict[str, list[float]] = {key: [] for key, _ in SIZE_CLASSES}
    for r in recs:
        out[size_class(r.gpus)].append(_wait(r, end))
    return out


def pooled_by_size(replicates: Sequence[dict[str, list[float]]]) -> dict[str, dict]:
    """Per size class over several replays of one policy (class_waits of each): p50 and p95 of all their waits
    together, and max the mean of each replay's longest wait (the longest wait one replay should expect)."""
    out = {}
    for key, _ in SIZE_CLASSES:
        waits = [w for r in replicates for w in r[key]]
        figures = spread(waits)
        longest = [max(r[key]) for r in replicates if r[key]]
        figures["max"] = round(float(np.mean(longest)), 3) if longest else None
        out[key] = {"n": len(waits), "wait": figures}
    return out


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p95 and max."""
    if not values:
        return {"p50": None, "p95": None, "max": None}
    p = np.percentile(np.asarray(values, dtype=float), [50, 95])
    return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "max": round(float(max(values)), 3)}


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    p = np.percentile(np.asarray(values, dtype=float), [50, 95, 99])
    return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "p99": round(float(p[2]), 3)}


# The marks a comparison of quota policies reads (issue 41), per replay: name -> how to read it from its summary.
HEADLINE: dict[str, tuple[str, ...]] = {
    "jain_usage_over_fair_share": ("fairness", "jain_mean"),
    "jain_while_contended": ("fairness", "jain_contended_mean"),
    "reclaims_per_borrowed_admission": ("reclaims", "per_borrowed_admission"),
    "reclaim_gpu_hours_lost": ("reclaims", "gpu_hours_lost"),
    "max_wait_gt8_s": ("by_size", ">8", "wait", "max"),
    "small_wait_p95_s": ("small_wait_p95_s",),
}


def headline(summary: dict) -> dict[str, float | None]:
    """The HEADLINE marks of one replay's summary."""
    out = {}
    for name, path in HEADLINE.items():
        value = summary
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        out[name] = value
    return out


def mean_spread(values: Sequence[float | None]) -> dict:
    """Mean, sample standard deviation, min and max of the known values, and every value (replicates' marks)."""
    known = [v for v in values if v is not None]
    if not known:
        return {"mean": None, "sd": None, "min": None, "max": None, "values": list(values)}
    return {"mean": round(float(np.mean(known)), 6), "sd": round(float(np.std(known, ddof=1)), 6) if len(known) > 1
            else 0.0, "min": min(known), "max": max(known), "values": list(values)}
