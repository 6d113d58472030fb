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

import heapq
import math
from bisect import insort
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from cluster.fit import workers_on
from cluster.types import GPU_EPS, Allocation, JobView, QuotaKind, Topology
from scheduler.policy.decisions import Reason, Reserve, Worker
from scheduler.policy.diagnosis import NoRoom
from scheduler.policy.failures import known_gang_failure
from colocation.policy.pools import expected_run_s
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import Room, pick, room
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import allowed
from scheduler.policy.sentences import reserved
from scheduler.policy.state import CycleState


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


class Reserver:
    """The cycle's reservations: what the first waiting gangs hold, and what this cycle's admissions give back."""

    def __init__(self, state: CycleState, gangs: bool) -> None:
        self.state = state
        self.gangs = gangs  # a gang waits and the profile reserves: admissions must note what they give back
        self.reservations: list[Reservation] = []
        self.starts: list[float] = []  # the reservations' start times, ascending
        self.started: list[Release] = []  # what this cycle's admissions give back, when known
        self._coming: dict[tuple[str | None, bool], list[Release]] = {}  # (model, reclaims) -> releases, soonest first

    def note_started(self, job: JobView, pod: PodRequest, kind: QuotaKind | None, workers: list[Worker]) -> None:
        """Remember what an admission gives back and when (inf: its run time is unknown), for a reservation later in
        this cycle."""
        run_s = expected_run_s(job)
        if run_s is not None or kind is QuotaKind.BORROWED:  # (borrowed work an own-quota gang would reclaim)
            self.state.reserve_failed[pod.gpu_model].clear()  # one more release to come: a reservation may now be found
            at = math.inf if run_s is None else self.state.now + run_s
            self.started.extend(Release(at, Allocation(w.node, pod.gpu_model, w.gpu_shares, pod.cpu_milli,
                                                       pod.memory_mib, kind))
                                for w in workers)

    def reserve(self, job: JobView, attempts: list[NoRoom]) -> str:
        """Reserve for a waiting gang the nodes that free soonest, among those no earlier gang holds; the sentence
        saying so ("" when nothing could be reserved: borrowed quota, or no end known of the jobs in the way)."""
        best = self._soonest(job, attempts)
        if best is None:
            return ""
        model, found, reclaims = best
        self.reservations.append(found)
        insort(self.starts, found.start_at)
        self.state.changes += 1
        table = self.state.tables[model]
        table.reserve(found.rows, found.start_at, firm=not reclaims)
        nodes = [table.names[r] for r in found.rows]
        sentence = reserved(job, nodes, found.start_at, reclaims)
        self.state.decisions.append(Reserve(job.id, job.name, tuple(nodes), found.start_at, Reason.RESERVED, sentence))
        return sentence

    def _soonest(self, job: JobView, attempts: list[NoRoom]) -> tuple[str | None, Reservation, bool] | None:
        state, profile = self.state, self.state.profile
        best: tuple[str | None, Reservation, bool] | None = None
        for a in attempts:
            if profile.quotas and a.kind is QuotaKind.BORROWED:
                continue  # borrowed quota only ever runs on idle capacity: no room is held for it
            model = a.pod.gpu_model
            # no gang easier than one no release order could seat is seated (the releases and held rows being
            # the same): a queue of waiting gangs costs one search per model, not one each
            # An own-quota gang reclaims borrowed work when it starts: for it, that work's room comes back at once
            # (and its nodes stay open to borrowed jobs meanwhile).
            reclaims = a.kind is QuotaKind.OWN and profile.preemption
            memo = (job.workers, *a.pod.dims(), a.pod.pool, job.topology, (a.pod.ends_at, reclaims))
            if known_gang_failure(state.reserve_failed[model], memo):
                continue
            table = state.tables[model]
            found = reserve(table, a.pod, job.workers, job.topology, allowed(a.pod, table, profile),
                            self._coming_on(model, reclaims))
            if found is None:
                state.reserve_failed[model].append(memo)
            elif best is None or found.start_at < best[1].start_at:
                best = (model, found, reclaims)
        return best

    def _coming_on(self, model: str | None, reclaims: bool) -> list[Release]:
        """What comes back on `model`, soonest first: the running jobs' room and this cycle's admissions'."""
        if (model, reclaims) not in self._coming:
            self._coming[model, reclaims] = releases(self.state.holders_by_model.get(model, []), self.state.now,
                                                     reclaims)
        now = self.state.now
        return list(heapq.merge(self._coming[model, reclaims], coming_back(
            (r for r in self.started if r.allocation.gpu_model == model), now, reclaims), key=lambda r: r.at))
