"""Preemption: choose victims on the snapshot only; the acting layer evicts and requeues them.

Like Kueue's preemption.GetTargets: who may be a victim, then the cheapest set on ONE node
that frees the whole need (no scattered partial frees), losing the least work. NumPy finds
the nodes where evicting every eligible job would be enough; the exact victim choice then
runs node by node in order of a lower bound on the cost, stopping when no node can beat the
best set found.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from cluster.types import GPU_EPS, Allocation, JobView
from scheduler.policy.framework import PodRequest
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import FILTERS
from scheduler.policy.profile import Profile


@dataclass(frozen=True, slots=True)
class Candidate:
    """A job holding resources on a node, as a possible victim."""

    job: JobView
    allocation: Allocation
    row: int
    score: int
    run_time_s: float
    borrowed: bool


@dataclass(frozen=True, slots=True)
class Victims:
    row: int
    jobs: tuple[Candidate, ...]

    @property
    def work_lost_s(self) -> float:
        return sum(c.run_time_s for c in self.jobs)

    def key(self) -> tuple[int, float, int, int]:
        """Fewest own-quota victims, then least work lost, then fewest victims, then node order."""
        return (sum(not c.borrowed for c in self.jobs), self.work_lost_s, len(self.jobs), self.row)


def eligible(c: Candidate, score: int, own_quota: bool, profile: Profile) -> bool:
    """Own-quota work reclaims any borrowed job; otherwise only lower scores past the minimum run time."""
    if own_quota and c.borrowed:
        return True
    return c.score < score and c.run_time_s >= profile.min_runtime_s


class VictimIndex:
    """The jobs holding resources on one NodeTable, as arrays for the feasibility pass."""

    def __init__(self, table: NodeTable, candidates: Iterable[Candidate]) -> None:
        self.table = table
        self.cands = list(candidates)
        self.by_row: dict[int, list[int]] = defaultdict(list)
        for i, c in enumerate(self.cands):
            self.by_row[c.row].append(i)
        self.row = np.array([c.row for c in self.cands], dtype=np.int64)
        self.score = np.array([c.score for c in self.cands], dtype=np.int64)
        self.run_time = np.array([c.run_time_s for c in self.cands], dtype=float)
        self.borrowed = np.array([c.borrowed for c in self.cands], dtype=bool)
        self.cpu = np.array([c.allocation.cpu_milli for c in self.cands], dtype=float)
        self.mem = np.array([c.allocation.memory_mib for c in self.cands], dtype=float)
        self.alive = np.ones(len(self.cands), dtype=bool)
        shares = [(i, c.row, s.index, s.share) for i, c in enumerate(self.cands) for s in c.allocation.gpu_shares]
        self.share_cand = np.array([s[0] for s in shares], dtype=np.int64)
        self.share_cell = np.array([s[1] * table.gpu_used.shape[1] + s[2] for s in shares], dtype=np.int64)
        self.share = np.array([s[3] for s in shares], dtype=float)

    def remove(self, victims: Victims) -> None:
        for c in victims.jobs:
            i = next(i for i in self.by_row[c.row] if self.cands[i] is c)
            self.by_row[c.row].remove(i)
            self.alive[i] = False

    def find(self, req: PodRequest, score: int, own_quota: bool, profile: Profile) -> Victims | None:
        """The best victim set on a single node whose eviction lets `req` fit there."""
        if not self.cands:
            return None
        elig = self.alive & (self.score < score) & (self.run_time >= profile.min_runtime_s)
        if own_quota:
            elig |= self.alive & self.borrowed
        if not elig.any():
            return None
        allowed = self.table.schedulable.copy()
        for name in profile.filters:
            allowed &= FILTERS[name].filter(req, self.table)
        feasible = allowed & self._fits_if_evicted(req, elig)
        rows = np.flatnonzero(feasible)
        if rows.size == 0:
            return None
        n = len(self.table)
        own_lb = np.where(self._fits_if_evicted(req, elig & self.borrowed), 0, 1)
        work_lb = np.full(n, np.inf)
        np.minimum.at(work_lb, self.row[elig], self.run_time[elig])
        best: Victims | None = None
        for row in rows[np.lexsort((rows, work_lb[rows], own_lb[rows]))]:
            if best is not None and (own_lb[row], work_lb[row], 1, row) >= best.key():
                break  # a lower bound of every later node's cost: none can beat the best
            pool = [self.cands[i] for i in self.by_row[int(row)] if elig[i]]
            chosen = _victims_on_row(req, self.table, int(row), pool)
            if chosen is not None and (best is None or chosen.key() < best.key()):
                best = chosen
        return best

    def _fits_if_evicted(self, req: PodRequest, elig: np.ndarray) -> np.ndarray:
        """Per node: would `req` fit if every job in `elig` left?"""
        t = self.table
        n = len(t)
        cpu = t.cpu_free + np.bincount(self.row, weights=self.cpu * elig, minlength=n)
        mem = t.mem_free + np.bincount(self.row, weights=self.mem * elig, minlength=n)
        freed = np.bincount(self.share_cell, weights=self.share * elig[self.share_cand], minlength=t.gpu_used.size)
        used = t.gpu_used - freed.reshape(t.gpu_used.shape)
        ok = (cpu >= req.cpu_milli) & (mem >= req.memory_mib) & (np.bincount(self.row[elig], minlength=n) > 0)
        if req.gpus >= 1:
            ok &= (used <= GPU_EPS).sum(axis=1) >= req.gpus
        elif req.gpus > 0:
            ok &= (used + req.gpus <= 1.0 + GPU_EPS).any(axis=1)
        return ok


def _victims_on_row(req: PodRequest, table: NodeTable, row: int, pool: list[Candidate]) -> Victims | None:
    """Borrowed first, then least work lost, until the need is met; then drop unneeded victims."""
    chosen: list[Candidate] = []
    for c in sorted(pool, key=lambda c: (not c.borrowed, c.run_time_s)):
        chosen.append(c)
        if _fits_after(req, table, row, chosen):
            break
    else:
        return None
    for c in sorted(chosen, key=lambda c: -c.run_time_s):
        rest = [v for v in chosen if v is not c]
        if _fits_after(req, table, row, rest):
            chosen = rest
    return Victims(row, tuple(chosen))


def _fits_after(req: PodRequest, table: NodeTable, row: int, evicted: Iterable[Candidate]) -> bool:
    used = table.gpu_used[row].copy()
    cpu, mem = int(table.cpu_free[row]), int(table.mem_free[row])
    for c in evicted:
        for s in c.allocation.gpu_shares:
            used[s.index] -= s.share
        cpu += c.allocation.cpu_milli
        mem += c.allocation.memory_mib
    if cpu < req.cpu_milli or mem < req.memory_mib:
        return False
    if req.gpus >= 1:
        return int((used <= GPU_EPS).sum()) >= req.gpus
    return req.gpus == 0 or bool((used + req.gpus <= 1.0 + GPU_EPS).any())
