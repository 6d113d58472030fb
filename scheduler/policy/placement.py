"""Placement: filter and score plugins, and choosing the node and GPUs for one request."""

from __future__ import annotations

from types import MappingProxyType
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cluster.types import GPU_EPS, GpuShare, Pool
from scheduler.policy.framework import FilterPlugin, PodRequest, ScorePlugin
from scheduler.policy.nodes import UNRESTRICTED, NodeTable, Restriction
from scheduler.policy.profile import Profile
from scheduler.policy.workload import FragTables, TargetWorkload, gpu_shape, pressure

if TYPE_CHECKING:
    from scheduler.policy.interference import Sharing


@dataclass(slots=True)  # scratch, not frozen (cheaper to build; see PodRequest)
class Placement:
    row: int
    node: str
    gpu_shares: tuple[GpuShare, ...]
    loss: float | None = None  # milli-GPU the typical jobs can no longer use, when placed by least GPU loss
    sharing: Sharing | None = None  # a share beside others, placed with the interference model: their predictions
    overruled: str | None = None  # why the model refused the GPU the least GPU loss alone would take


class PoolMatch:
    """Long jobs and jobs killed by a take-back go to the fixed training pool only (docs/concepts/lending.md#pools)."""

    name = "pool"

    def filter(self, req: PodRequest, table: NodeTable) -> np.ndarray | None:
        return table.fixed_pool if req.pool is Pool.FIXED else None


class ColocationFirst:
    """Short jobs go to the co-location pool first and to the fixed pool only when it has no room."""

    name = "colocation-first"

    def applies(self, req: PodRequest) -> bool:
        return req.pool is Pool.COLOCATION

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        return table.colocation_rows()[rows]


class GpuShareBestFit:
    """Fractional jobs go to the fullest GPU they still fit on, keeping whole GPUs free."""

    name = "gpu-share-best-fit"

    def applies(self, req: PodRequest) -> bool:
        return req.fractional

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        # Only nodes with a GPU in use that the fraction still fits on score above 0.
        scores = np.zeros(len(rows))
        sharing = np.flatnonzero(table.least_shared[rows] + req.gpus <= 1.0 + GPU_EPS)
        if sharing.size:
            used = table.gpu_used[rows[sharing]]
            scores[sharing] = np.where(used + req.gpus <= 1.0 + GPU_EPS, used, 0.0).max(axis=1)
        return scores


class LeastGpuLoss:
    """The node (and the GPU of a share) where the GPU the target workload could not use grows least (gpuloss.py);
    on a table without GPU-loss terms (CPU-only nodes, nothing to lose) it packs as most-allocated does."""

    name = "least-gpu-loss"

    def applies(self, req: PodRequest) -> bool:
        return True

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        if table.loss is None:
            return table.allocated[rows]
        count, milli = gpu_shape(req.gpus)
        return table.loss.scores(rows, count, milli, req.cpu_milli)


class MostAllocated:
    """Pack onto fuller nodes so whole nodes stay free for large multi-GPU jobs."""

    name = "most-allocated"

    def applies(self, req: PodRequest) -> bool:
        return True

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        return table.allocated[rows]


FILTERS: Mapping[str, FilterPlugin] = MappingProxyType({p.name: p for p in (PoolMatch(),)})
SCORERS: Mapping[str, ScorePlugin] = MappingProxyType({p.name: p for p in (GpuShareBestFit(), MostAllocated(),
                                                                            ColocationFirst(), LeastGpuLoss())})


def attach_loss(tables: Mapping[str | None, NodeTable], workload: TargetWorkload) -> None:
    """Give every GPU table the GPU-loss terms of `workload`, displacement pressure over the whole cluster."""
    gpu_tables = {m: t for m, t in tables.items() if m is not None and len(t)}
    if not gpu_tables:
        return
    names = sorted(gpu_tables)
    frag = FragTables(workload, names, max(int(t.gpu_count.max()) for t in gpu_tables.values()))
    models = [m for m, t in gpu_tables.items() for _ in range(len(t))]
    pressures = pressure(workload, models, np.concatenate([t.gpu_count for t in gpu_tables.values()]),
                         np.concatenate([t.cpu_cap for t in gpu_tables.values()]))
    start = 0
    for model, table in gpu_tables.items():
        table.attach_loss(frag, names.index(model), pressures[start:start + len(table)])
        start += len(table)


def place(req: PodRequest, table: NodeTable, profile: Profile) -> Placement | None:
    """The best node for `req` among nodes passing every filter; ties go to the first node by name.

    Fitting on an offline-normal node is not a plugin: it is the rule every profile obeys.
    """
    dims = req.dims()
    restricted = restriction(req, table)
    if not len(table) or not table.may_fit(*dims) or table.known_failure(*dims, req.pool, restricted):
        return None
    scorers = [(name, weight) for name, weight in profile.scorers if SCORERS[name].applies(req)]
    gpu = loss = None
    if req.gpus >= 1 and len(scorers) == 1 and scorers[0] == _PACKING:
        row = table.packing().best(*dims, allowed(req, table, profile))
    elif table.loss is not None and by_loss(scorers):
        row, gpu, loss = least_loss(req, table, profile, dict(scorers))
    else:
        row = scan(req, table, profile, scorers)
    if row is None:
        table.failed.append((*dims, req.pool, restricted))
        return None
    shares = (GpuShare(gpu, float(req.gpus)),) if gpu is not None else table.choose_gpus(row, req.gpus)
    return Placement(row, table.names[row], shares, loss)


# Ranking by most-allocated alone, at weight 1 (so the total is the score itself): what the
# whole-GPU index ranks by (see packing.py).
_PACKING = (MostAllocated.name, 1)


def by_loss(scorers: list[tuple[str, float]]) -> bool:
    """Whether the request is ranked by least GPU loss, the pool aside: what the compiled kernel does in one pass."""
    names = {name for name, _ in scorers}
    return LeastGpuLoss.name in names and names <= {LeastGpuLoss.name, ColocationFirst.name}


def least_loss(req: PodRequest, table: NodeTable, profile: Profile, weights: dict[str, float]
               ) -> tuple[int | None, int | None, float | None]:
    """= scan()'s row for colocation-first and least-gpu-loss, in one pass of the kernel over the table, with the
    GPU of a share the loss chose (None: whole GPUs, the lowest free ones) and the loss there (milli-GPU)."""
    mask = allowed(req, table, profile)
    ok = table.schedulable_rows if mask is None else table.schedulable & mask
    count, milli = gpu_shape(req.gpus)
    bonus = weights.get(ColocationFirst.name, 0.0)
    row, gpu, loss = table.loss.best(ok, count, milli, req.cpu_milli, req.memory_mib,
                                     table.colocation_rows() if bonus else None, bonus, weights[LeastGpuLoss.name])
    return (None, None, None) if row < 0 else (row, gpu if req.fractional else None, loss)


def scan(req: PodRequest, table: NodeTable, profile: Profile, scorers: list[tuple[str, float]]) -> int | None:
    """The best row by the weighted `scorers` over every fitting node the filters allow; ties go to
    the first row. (The plain way, for any request; the index must agree with it.)"""
    rows = filtered(table.fits_mask(*req.dims()), req, table, profile).nonzero()[0]
    if rows.size == 0:
        return None
    scores = total_score(req, table, rows, scorers)
    return int(rows[0] if scores is None else rows[scores.argmax()])


def restriction(req: PodRequest, table: NodeTable) -> Restriction:
    """How the table's reservations restrict `req`, for the failure memos (UNRESTRICTED while it holds none)."""
    if table.reserved_from is None:
        return UNRESTRICTED
    return (req.ends_at, req.borrowed and table.soft_holds)


def allowed(req: PodRequest, table: NodeTable, profile: Profile) -> np.ndarray | None:
    """The rows every filter of the profile allows, and not held for a gang that starts before `req` would end
    (None: all); shares the filters' arrays when it can."""
    held = table.held_for_gangs(req.ends_at, req.borrowed)
    mask = ~held if held is not None else None
    for name in profile.filters:
        rows = FILTERS[name].filter(req, table)
        if rows is not None:
            mask = rows if mask is None else mask & rows
    return mask


def filtered(mask: np.ndarray, req: PodRequest, table: NodeTable, profile: Profile) -> np.ndarray:
    """`mask` (changed in place) narrowed by every filter of the profile, and by the reservations."""
    held = table.held_for_gangs(req.ends_at, req.borrowed)
    if held is not None:
        mask &= ~held
    for name in profile.filters:
        allowed = FILTERS[name].filter(req, table)
        if allowed is not None:
            mask &= allowed
    return mask


def total_score(req: PodRequest, table: NodeTable, rows: np.ndarray, scorers: list[tuple[str, float]]
                ) -> np.ndarray | None:
    """Weighted sum of `scorers` (those of the profile that apply to `req`); None when there are none
    (all rows tie)."""
    total = None
    for name, weight in scorers:
        score = SCORERS[name].score(req, table, rows)
        score = score if weight == 1 else weight * score
        total = score if total is None else total + score
    return total
