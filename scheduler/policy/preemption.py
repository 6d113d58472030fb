"""Preemption: choose victims on the snapshot only; the acting layer evicts and requeues them.

Like Kueue's preemption.GetTargets: who may be a victim, then the cheapest set on ONE node
that frees the whole need (no scattered partial frees), losing the least work. A gang's workers are
candidates one by one, but evicting one evicts the whole gang: its work lost counts every worker. NumPy finds
the nodes where evicting every eligible job would be enough; the exact victim choice then
runs node by node in order of a lower bound on the cost, stopping when no node can beat the
best set found.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import chain
from operator import attrgetter
from dataclasses import dataclass

import numpy as np

from cluster.types import GPU_EPS, Allocation, JobView
from scheduler.policy.framework import PodRequest
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import filtered
from scheduler.policy.profile import Profile


@dataclass(slots=True, eq=False)
class Candidate:
    """A job holding resources on a node, as a possible victim. Not frozen (one is built for every
    job holding resources on a model where preemption is tried: frozen dataclasses build 4x slower);
    compared by identity."""

    job: JobView
    allocation: Allocation
    row: int
    score: int
    run_time_s: float
    borrowed: bool
    young: bool = False  # borrowed work within its reclaim_min_runtime: evicted only when no other set will do

    @property
    def lost_s(self) -> float:
        """Work lost if evicted: the run time of every worker of its gang."""
        return self.run_time_s * self.job.workers


@dataclass(frozen=True, slots=True)
class Victims:
    row: int
    jobs: tuple[Candidate, ...]
    rank: tuple[float, ...] = ()  # with fair sharing: (minus the lowest victim branch share, the highest score)

    @property
    def work_lost_s(self) -> float:
        return sum({c.job.id: c.lost_s for c in self.jobs}.values())

    def key(self) -> tuple:
        """Fewest own-quota victims, then fewest young borrowed ones (no churn), then (with fair sharing) victims of
        the highest-share branches and the lowest scores, then least work lost, then fewest victims, then node
        order."""
        return (sum(not c.borrowed for c in self.jobs), sum(c.young for c in self.jobs), *self.rank,
                self.work_lost_s, len(self.jobs), self.row)


Ranks = Callable[[list[int]], list[float]]  # candidates (by position) -> their branch's fair share

_ROW, _SCORE, _RUN_TIME, _BORROWED, _YOUNG = (attrgetter(f) for f in ("row", "score", "run_time_s", "borrowed",
                                                                         "young"))
_CPU, _MEMORY, _SHARES = (attrgetter(f"allocation.{f}") for f in ("cpu_milli", "memory_mib", "gpu_shares"))
_INDEX, _SHARE = attrgetter("index"), attrgetter("share")


class VictimIndex:
    """The jobs holding resources on one NodeTable, as arrays for the feasibility pass.

    What borrowed jobs hold is kept summed per node: own-quota work may evict any of them, so
    the common reclaim case needs no per-preemptor aggregation at all.
    """

    def __init__(self, table: NodeTable, candidates: Iterable[Candidate]) -> None:
        # Built for every model where preemption is tried, every cycle, from thousands of candidates: the
        # arrays are read through C-level getters (map/attrgetter), not one comprehension per field.
        self.table = table
        cands = self.cands = list(candidates)
        n = len(cands)
        self.row = np.fromiter(map(_ROW, cands), dtype=np.int64, count=n)
        self.by_row: dict[int, list[int]] = defaultdict(list)  # candidate indices per row, ascending
        order = np.argsort(self.row, kind="stable")
        rows = self.row[order]
        starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]]).tolist() if n else []
        ordered = order.tolist()
        for r, a, b in zip(rows[starts].tolist(), starts, [*starts[1:], n]):
            self.by_row[r] = ordered[a:b]
        self._by_job: dict[int, list[Candidate]] | None = None  # a gang's workers on this table, when first asked
        self._index: dict[int, int] | None = None  # candidate position by id(), when first asked
        self.score = np.fromiter(map(_SCORE, cands), dtype=np.int64, count=n)
        self.run_time = np.fromiter(map(_RUN_TIME, cands), dtype=float, count=n)
        self.borrowed = np.fromiter(map(_BORROWED, cands), dtype=bool, count=n)
        self.young = np.fromiter(map(_YOUNG, cands), dtype=bool, count=n)
        self.cpu = np.fromiter(map(_CPU, cands), dtype=float, count=n)
        self.mem = np.fromiter(map(_MEMORY, cands), dtype=float, count=n)
        self.alive = np.ones(n, dtype=bool)
        width = table.gpu_used.shape[1]
        shares = list(map(_SHARES, cands))
        self.share_cand = np.repeat(np.arange(n, dtype=np.int64), np.fromiter(map(len, shares), dtype=np.int64,
                                                                              count=n))
        flat = list(chain.from_iterable(shares))
        self.share_cell = self.row[self.share_cand] * width + np.fromiter(map(_INDEX, flat), dtype=np.int64,
                                                                          count=len(flat))
        self.share = np.fromiter(map(_SHARE, flat), dtype=float, count=len(flat))
        self.held_by_borrowed = self._held(self.alive & self.borrowed)
        self.youngest_borrowed = np.full(len(table), np.inf)
        np.minimum.at(self.youngest_borrowed, self.row[self.borrowed], self.run_time[self.borrowed])

    def _held(self, elig: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per node: CPU, memory and per-GPU shares held by the jobs in `elig`."""
        n, shape = len(self.table), self.table.gpu_used.shape
        cpu = np.bincount(self.row, weights=self.cpu * elig, minlength=n)
        mem = np.bincount(self.row, weights=self.mem * elig, minlength=n)
        gpu = np.bincount(self.share_cell, weights=self.share * elig[self.share_cand], minlength=n * shape[1])
        return cpu, mem, gpu.reshape(shape)

    @property
    def index(self) -> dict[int, int]:
        """Each candidate's position, by id() (only an eviction asks)."""
        if self._index is None:
            self._index = dict(zip(map(id, self.cands), range(len(self.cands))))
        return self._index

    @property
    def by_job(self) -> dict[int, list[Candidate]]:
        """Each job's candidates on this table (a gang's workers)."""
        if self._by_job is None:
            self._by_job = defaultdict(list)
            for c in self.cands:
                self._by_job[c.job.id].append(c)
        return self._by_job

    def whole(self, victims: Victims) -> list[Candidate]:
        """The candidates evicting `victims` removes: every worker of each victim's gang on this table."""
        out: dict[int, Candidate] = {}
        for c in victims.jobs:
            for w in self.by_job[c.job.id]:
                out[id(w)] = w
        return list(out.values())

    def remove(self, cands: Iterable[Candidate], sign: int = 1) -> None:
        """Take `cands` out of the index (sign 1), or put them back (sign -1: a gang's preemption undone)."""
        cpu, mem, gpu = self.held_by_borrowed
        rows = set()
        for c in cands:
            i = self.index[id(c)]
            if sign > 0:
                self.by_row[c.row].remove(i)
            else:
                self.by_row[c.row].append(i)
            self.alive[i] = sign < 0
            rows.add(c.row)
            if c.borrowed:
                cpu[c.row] -= sign * c.allocation.cpu_milli
                mem[c.row] -= sign * c.allocation.memory_mib
                for s in c.allocation.gpu_shares:
                    gpu[c.row, s.index] -= sign * s.share
        for row in rows:
            left = [self.cands[i].run_time_s for i in self.by_row[row] if self.borrowed[i]]
            self.youngest_borrowed[row] = min(left, default=np.inf)

    def find(self, req: PodRequest, score: int, own_quota: bool, profile: Profile,
             exclude: np.ndarray | None = None, fair: np.ndarray | None = None,
             reclaimable: np.ndarray | None = None, shares: Ranks | None = None,
             within: np.ndarray | None = None) -> Victims | None:
        """The best victim set on a single node whose eviction lets `req` fit there (not on `exclude`d rows); with
        `fair`, only among those candidates (fair-share preemption between borrowers, fairshare.py); with
        `reclaimable`, own-quota work evicts only those of the borrowed candidates (a quota tree's rule, quotatree.py);
        with `shares` (each candidate's branch's fair share), victims of the highest-share branches first, then the
        lowest scores (fair sharing's order, before least work lost); with `within`, only those candidates at all (a
        quota tree's fence)."""
        if not self.cands:
            return None
        allowed = filtered(self.table.schedulable.copy(), req, self.table, profile)
        if exclude is not None:
            allowed &= ~exclude
        alive = self.alive if within is None else self.alive & within
        if fair is not None:
            return self._among(req, allowed, alive & fair, 0, profile, shares)
        borrowed = self.borrowed if reclaimable is None else self.borrowed & reclaimable
        if own_quota:
            # Borrowed victims only: any set without own-quota victims beats every set with one.
            if reclaimable is not None or shares is not None or within is not None:
                found = self._among(req, allowed, alive & borrowed, 0, profile, shares)
            else:  # (the sums every own-quota attempt reads, kept as the cycle evicts)
                rows = np.flatnonzero(allowed & self._fits_if_evicted(req, self.held_by_borrowed))
                found = self._best(req, rows, self.youngest_borrowed, self.alive & self.borrowed, 0, profile) \
                    if rows.size else None
            if found is not None:
                return found
        elig = alive & (self.score < score) & (self.run_time >= profile.min_runtime_s)
        if reclaimable is not None:  # (nor by score: borrowed work a tree protects stays)
            elig &= ~self.borrowed | reclaimable
        if own_quota:
            elig |= alive & borrowed
        return self._among(req, allowed, elig, 0 if not own_quota else 1, profile, shares)

    def _among(self, req: PodRequest, allowed: np.ndarray, elig: np.ndarray, own_lb: int,
               profile: Profile, shares: Ranks | None = None) -> Victims | None:
        """The best victim set among the `elig` candidates, on the `allowed` rows."""
        if not elig.any():
            return None
        rows = np.flatnonzero(allowed & self._fits_if_evicted(req, self._held(elig)))
        if rows.size == 0:
            return None
        youngest = np.full(len(self.table), np.inf)
        np.minimum.at(youngest, self.row[elig], self.run_time[elig])
        return self._best(req, rows, youngest, elig, own_lb, profile, shares)

    def _best(self, req: PodRequest, rows: np.ndarray, youngest: np.ndarray, elig: np.ndarray,
              own_lb: int, profile: Profile, shares: Ranks | None = None) -> Victims | None:
        """Exact victim choice node by node, cheapest lower bound first (nodes where every victim would be young
        borrowed work last, then the youngest victim's run time), on at most profile.preemption_max_nodes nodes
        (exact whenever the bound stops earlier)."""
        best: Victims | None = None
        young = self._all_young(elig)
        order = rows[np.lexsort((rows, youngest[rows], young[rows]))][: profile.preemption_max_nodes]
        for row in order:
            if best is not None and shares is None and (own_lb, int(young[row]), youngest[row], 1, row) >= best.key():
                break  # a lower bound of every later node's cost: none can beat the best (shares: no bound kept)
            picked = [i for i in self.by_row[int(row)] if elig[i]]
            ranks = None if shares is None else shares(picked)
            chosen = _victims_on_row(req, self.table, int(row), [self.cands[i] for i in picked], ranks)
            if chosen is not None and (best is None or chosen.key() < best.key()):
                best = chosen
        return best

    def _all_young(self, elig: np.ndarray) -> np.ndarray:
        """Per node: whether every `elig` candidate there is young borrowed work (reclaim_min_runtime), so that any
        set of victims there has a young one."""
        if not self.young.any():
            return np.zeros(len(self.table), dtype=bool)
        old = np.bincount(self.row, weights=elig & ~self.young, minlength=len(self.table))
        return old == 0

    def _fits_if_evicted(self, req: PodRequest, held: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """Per node: would `req` fit if the jobs holding `held` left?"""
        t = self.table
        cpu, mem, gpu = held
        ok = (t.cpu_free + cpu >= req.cpu_milli) & (t.mem_free + mem >= req.memory_mib)
        used = t.gpu_used - gpu
        if req.gpus >= 1:
            ok &= (used <= GPU_EPS).sum(axis=1) >= req.gpus
        elif req.gpus > 0:
            ok &= (used + req.gpus <= 1.0 + GPU_EPS).any(axis=1)
        return ok


def _victims_on_row(req: PodRequest, table: NodeTable, row: int, pool: list[Candidate],
                    shares: list[float] | None = None) -> Victims | None:
    """Borrowed first, then (with `shares`, each candidate's branch share) the highest share and the lowest score, then
    least work lost, until the need is met; then give back any victim that turned out not to be needed, most work
    first."""
    room = _Room(table, row)
    chosen: list[Candidate] = []
    if shares is None:
        ordered = sorted(pool, key=lambda c: (not c.borrowed, c.young, c.lost_s))
    else:
        share = dict(zip(map(id, pool), shares))
        ordered = sorted(pool, key=lambda c: (not c.borrowed, c.young, -share[id(c)], c.score, c.lost_s))
    for c in ordered:
        room.free(c, 1)
        chosen.append(c)
        if room.fits(req):
            break
    else:
        return None
    for c in sorted(chosen, key=lambda c: -c.lost_s):
        room.free(c, -1)
        if room.fits(req):
            chosen.remove(c)
        else:
            room.free(c, 1)
    if shares is None:
        return Victims(row, tuple(chosen))
    rank = (-min((share[id(c)] for c in chosen), default=0.0), max((c.score for c in chosen), default=0))
    return Victims(row, tuple(chosen), rank)


class _Room:
    """Free capacity of one node while victims are tried (plain lists: a handful of GPUs)."""

    def __init__(self, table: NodeTable, row: int) -> None:
        self.used = table.gpu_used[row].tolist()
        self.cpu = int(table.cpu_free[row])
        self.mem = int(table.mem_free[row])

    def free(self, c: Candidate, sign: int) -> None:
        """Evict (sign 1) or put back (sign -1) a candidate."""
        alloc = c.allocation
        for s in alloc.gpu_shares:
            self.used[s.index] -= sign * s.share
        self.cpu += sign * alloc.cpu_milli
        self.mem += sign * alloc.memory_mib

    def fits(self, req: PodRequest) -> bool:
        if self.cpu < req.cpu_milli or self.mem < req.memory_mib:
            return False
        if req.gpus >= 1:
            return sum(u <= GPU_EPS for u in self.used) >= req.gpus
        return req.gpus == 0 or any(u + req.gpus <= 1.0 + GPU_EPS for u in self.used)
