"""Placing a GPU share where the jobs already on the GPU and it are predicted to get on (interference.py).

Used for a one-pod fractional job ranked by least GPU loss, when the cycle has an interference model: every GPU the
share fits on is scored as the least-GPU-loss kernel scores it (gpuloss.py `share_scores`, the pool bonus added),
listed in the kernel's tie-break order (fuller node, first node, fuller GPU, first GPU), and `interference.choose`
keeps off refused pairings and, among the best-scored GPUs, takes the highest predicted combined throughput. With no
pairing to tell apart it takes the kernel's GPU. A job's signature is the mean of its past runs that measured SM
active, tensor and DRAM activity (framebuffer: their peak GPU memory); without one it gets the model's default.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from cluster.types import GpuShare, JobView
from scheduler.policy.framework import PodRequest
from scheduler.policy.interference import Model, Rule, Sharing, Signature, choose, share
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import ColocationFirst, LeastGpuLoss, Placement, allowed
from scheduler.policy.profile import Profile
from scheduler.policy.workload import MILLI, gpu_shape

GpuKey = tuple[str | None, int, int]  # (GPU model, table row, GPU index)


def signature(job: JobView) -> Signature | None:
    runs = [r for r in job.history
            if r.mean_sm_active is not None and r.mean_tensor_active is not None and r.mean_dram_active is not None]
    if not runs:
        return None
    n = len(runs)
    return Signature(sum(r.mean_sm_active for r in runs) / n, sum(r.mean_tensor_active for r in runs) / n,
                     sum(r.mean_dram_active for r in runs) / n, sum(r.peak_gpu_mem_util for r in runs) / n)


def rule(profile: Profile) -> Rule:
    return Rule(profile.sharing_min_combined, profile.sharing_p99_bound, profile.sharing_mode)


class Residents:
    """The jobs sharing each GPU, by job id, with their signatures: the snapshot's, changed as the cycle admits and
    evicts."""

    def __init__(self, holders: Sequence[JobView], tables: Mapping[str | None, NodeTable]) -> None:
        self.on: dict[GpuKey, dict[int, Signature | None]] = defaultdict(dict)
        for job in holders:
            for alloc in job.allocations:
                table = tables.get(alloc.gpu_model)
                if table is not None and alloc.node in table.row:
                    self.add(job, alloc.gpu_model, table.row[alloc.node], alloc.gpu_shares)

    def add(self, job: JobView, model: str | None, row: int, shares: Sequence[GpuShare]) -> None:
        for s in shares:
            if s.share < 1:
                self.on[(model, row, s.index)][job.id] = signature(job)

    def remove(self, job_ids: Sequence[int]) -> None:
        for jobs in self.on.values():
            for i in job_ids:
                jobs.pop(i, None)

    def at(self, key: GpuKey, gone: Sequence[int] = ()) -> tuple[Signature | None, ...]:
        """The signatures of the jobs on a GPU, but those in `gone` (evicted for the job being placed)."""
        jobs = self.on.get(key)
        return tuple(s for i, s in jobs.items() if i not in gone) if jobs else ()


def place_share(req: PodRequest, new: Signature | None, table: NodeTable, profile: Profile, residents: Residents,
                model: Model, only: np.ndarray | None = None, gone: Sequence[int] = ()) -> Placement | None:
    """The GPU for the share `req` (a job of signature `new`) on `table` (with its GPU-loss terms), or None; `only`:
    the rows it may go to (a preemption's), `gone`: jobs evicted for it."""
    mask = table.fits_mask(*req.dims())
    held = allowed(req, table, profile) if only is None else only
    rows = np.flatnonzero(mask if held is None else mask & held)
    if not rows.size:
        return None
    _, milli = gpu_shape(req.gpus)
    loss = table.loss
    left = loss.nodes.left[rows]
    free = left == MILLI
    r, gpus = np.nonzero(((left >= milli) & ~free) | (free & (np.cumsum(free, axis=1) == 1)))
    if not r.size:
        return None
    rows = rows[r]
    score, growth = loss.share_scores(rows, gpus, milli, req.cpu_milli)
    weights = dict(profile.scorers)
    level = weights[LeastGpuLoss.name] * score / 100
    if weights.get(ColocationFirst.name):
        level = level + weights[ColocationFirst.name] * table.colocation_rows()[rows]
    allocated = 1.0 - loss.terms.idle[rows] / (table.gpu_count[rows] * MILLI)
    order = np.lexsort((gpus, loss.nodes.left[rows, gpus], rows, -allocated, -level))
    rows, gpus, level, growth = rows[order], gpus[order], level[order], growth[order]
    found: dict[int, Sharing | None] = {}

    def sharing(i: int) -> Sharing | None:
        if i not in found:
            on = residents.at((req.gpu_model, int(rows[i]), int(gpus[i])), gone)
            found[i] = share(model, new, on, profile.sharing_mode) if on else None
        return found[i]

    choice = choose(level, sharing, rule(profile))
    if choice is None:
        return None
    i = choice.index
    row = int(rows[i])
    return Placement(row, table.names[row], (GpuShare(int(gpus[i]), float(req.gpus)),), float(growth[i]),
                     choice.sharing, choice.overruled)
