"""Placement: filter and score plugins, and choosing the node and GPUs for one request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from cluster.types import GPU_EPS, GpuShare, Pool
from scheduler.policy.framework import FilterPlugin, PodRequest, ScorePlugin
from scheduler.policy.nodes import NodeTable
from scheduler.policy.profile import Profile


@dataclass(frozen=True, slots=True)
class Placement:
    row: int
    node: str
    gpu_shares: tuple[GpuShare, ...]


class PoolMatch:
    """Hook for the pool policy: a job that prefers a pool only goes there."""

    name = "pool"

    def filter(self, req: PodRequest, table: NodeTable) -> np.ndarray:
        if req.pool is None:
            return np.ones(len(table), dtype=bool)
        return table.fixed_pool if req.pool is Pool.FIXED else ~table.fixed_pool


class GpuShareBestFit:
    """Fractional jobs go to the fullest GPU they still fit on, keeping whole GPUs free."""

    name = "gpu-share-best-fit"

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        if not req.fractional:
            return np.zeros(len(rows))
        used = table.gpu_used[rows]
        return np.where(used + req.gpus <= 1.0 + GPU_EPS, used, 0.0).max(axis=1)


class MostAllocated:
    """Pack onto fuller nodes so whole nodes stay free for large multi-GPU jobs."""

    name = "most-allocated"

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        if table.gpu_model is None:
            return 1.0 - table.cpu_free[rows] / table.cpu_cap[rows]
        return table.used_sum[rows] / table.gpu_count[rows]


FILTERS: Mapping[str, FilterPlugin] = {p.name: p for p in (PoolMatch(),)}
SCORERS: Mapping[str, ScorePlugin] = {p.name: p for p in (GpuShareBestFit(), MostAllocated())}


def place(req: PodRequest, table: NodeTable, profile: Profile) -> Placement | None:
    """The best node for `req` among nodes passing every filter; ties go to the first node by name.

    Fitting on an offline-normal node is not a plugin: it is the rule every profile obeys.
    """
    if not len(table) or not table.may_fit(*req.dims()) or table.known_failure(*req.dims(), req.pool):
        return None
    mask = table.fits_mask(*req.dims())
    for name in profile.filters:
        mask &= FILTERS[name].filter(req, table)
    rows = np.flatnonzero(mask)
    if rows.size == 0:
        table.failed.append((*req.dims(), req.pool))
        return None
    row = int(rows[np.argmax(total_score(req, table, rows, profile))]) if profile.scorers else int(rows[0])
    return Placement(row, table.names[row], table.choose_gpus(row, req.gpus))


def total_score(req: PodRequest, table: NodeTable, rows: np.ndarray, profile: Profile) -> np.ndarray:
    total = np.zeros(len(rows))
    for name, weight in profile.scorers:
        total += weight * SCORERS[name].score(req, table, rows)
    return total
