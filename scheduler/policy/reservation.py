"""Reservations for gangs, and backfill (as Slurm's backfill scheduler does).

Each of the first gangs in queue order that can start nowhere (Profile.reservation_depth) gets the nodes that free
soonest: the jobs holding its GPU model are released in the order they are expected to end (start + expected run
time: the mean of past runs, else the stated duration; unknown ends never come), until the gang fits on nodes no
earlier gang holds; the nodes it would take then are held from that moment. Until then, the rest of the cycle may
use their room only for a job expected to end before the reservation starts, so a backfilled job never delays the
gang when run times are exact. A reservation holds only against what its gang could not preempt: an own-quota gang
(when the profile preempts) reclaims borrowed work when it starts, so jobs on borrowed quota use its nodes freely.
Jobs of unknown run time never backfill. Each cycle reserves anew from the snapshot, so reservations follow what
really ended.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from cluster.fit import workers_on
from cluster.types import GPU_EPS, Allocation, JobView, QuotaKind, Topology
from colocation.policy.pools import expected_run_s
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import Room, pick, room
from scheduler.policy.nodes import NodeTable


@dataclass(frozen=True, slots=True)
class Release:
    """Room a job is expected to give back at `at` (one worker's allocation)."""

    at: float
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class Reservation:
    rows: tuple[int, ...]
    start_at: float


def expected_end(job: JobView, now: float) -> float | None:
    """When a running job should end (not before `now`); None when its run time is unknown."""
    run_s = expected_run_s(job)
    if run_s is None or job.started_at is None:
        return None
    return max(now, job.started_at + run_s)


def _back_at(end: float | None, alloc: Allocation, now: float, reclaims: bool) -> float | None:
    """When `alloc`'s room comes back: its job's expected end (None or inf: unknown, never), or now for borrowed work
    when the gang reclaims it (`reclaims`: as an own-quota gang sees it)."""
    return now if reclaims and alloc.quota_kind is QuotaKind.BORROWED else end


def releases(jobs: list[JobView], now: float, reclaims: bool = False) -> list[Release]:
    """What each holding job gives back and when, soonest first."""
    out: list[Release] = []
    for job in jobs:
        end = expected_end(job, now)
        out += [Release(at, a) for a in job.allocations if (at := _back_at(end, a, now, reclaims)) is not None]
    out.sort(key=lambda r: r.at)
    return out


def coming_back(started: Iterable[Release], now: float, reclaims: bool) -> list[Release]:
    """What this cycle's admissions give back and when (their end, inf when unknown), soonest first."""
    out = [Release(at, r.allocation) for r in started
           if (at := _back_at(r.at, r.allocation, now, reclaims)) != math.inf]
    out.sort(key=lambda r: r.at)
    return out


def reserve(table: NodeTable, pod: PodRequest, workers: int, topology: Topology, allowed: np.ndarray | None,
            coming: list[Release]) -> Reservation | None:
    """The soonest moment the gang fits on `table` as jobs end, and the nodes it would take then."""
    used = table.gpu_used.copy()
    whole, cpu, mem = table.whole_free.copy(), table.cpu_free.copy(), table.mem_free.copy()
    per_node = room(table, pod, allowed, topology).per_node.copy()
    total = int(per_node.sum())
    ok = table.schedulable if allowed is None else table.schedulable & allowed
    cap = 1 if topology is Topology.SPREAD else None
    i = 0
    while i < len(coming):
        at = coming[i].at
        while i < len(coming) and coming[i].at == at:  # everything ending at the same moment at once
            alloc = coming[i].allocation
            i += 1
            row = table.row.get(alloc.node) if alloc.gpu_model == table.gpu_model else None
            if row is None:
                continue
            for s in alloc.gpu_shares:
                used[row, s.index] = max(0.0, used[row, s.index] - s.share)
            whole[row] = int((used[row] <= GPU_EPS).sum())
            cpu[row] += alloc.cpu_milli
            mem[row] += alloc.memory_mib
            if ok[row]:
                k = workers_on(pod.gpus, pod.cpu_milli, pod.memory_mib, int(whole[row]), int(cpu[row]), int(mem[row]))
                k = k if cap is None else min(k, cap)
                total += k - int(per_node[row])
                per_node[row] = k
        if total >= workers:
            rows = pick(table, Room(per_node), workers)
            if rows is not None:
                return Reservation(tuple(sorted(set(rows))), at)
    return None


def clock(at: float) -> str:
    """A moment as the sentences show it (UTC; the console shows local times)."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%b %d %H:%M UTC")
