"""The nodes of one NodeTable ranked as most-allocated packing ranks them, for whole-GPU requests.

For a whole-GPU request whose only scorer is MostAllocated, the plain scan takes the fitting
node with the highest `allocated`, ties to the lowest row (argmax). This index keeps the
schedulable rows grouped by `allocated` (highest group first) and, within a group, by free
whole GPUs, each list ascending: the best node is the lowest fitting row of the highest group
that has one, found without looking at the nodes too full for the request. Built per cycle
from the table (on its first whole-GPU placement) and moved row by row as the table changes.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from scheduler.policy.nodes import NodeTable


class WholeGpuIndex:
    def __init__(self, table: NodeTable) -> None:
        self.table = table
        self.width = table.gpu_used.shape[1]
        # allocated -> rows by free whole GPUs (index 0..width), each list ascending
        self.groups: dict[float, list[list[int]]] = {}
        self.levels: list[float] = []  # the keys of `groups`, ascending
        # per row, the figures it is filed under (plain lists, not a tuple per row: fewer objects to collect)
        self.level: list[float | None] = [None] * len(table)  # allocated; None: not filed (not schedulable)
        self.free: list[int] = table.whole_free.tolist()
        allocated = table.allocated.tolist()
        for row in np.flatnonzero(table.schedulable).tolist():  # ascending: appends keep lists sorted
            self._group(allocated[row])[self.free[row]].append(row)
            self.level[row] = allocated[row]

    def _group(self, allocated: float) -> list[list[int]]:
        group = self.groups.get(allocated)
        if group is None:
            group = self.groups[allocated] = [[] for _ in range(self.width + 1)]
            insort(self.levels, allocated)
        return group

    def move(self, row: int, allocated: float, whole_free: int) -> None:
        """Re-file `row` under its new figures (unschedulable rows are never filed)."""
        level, free = self.level[row], self.free[row]
        if level is None or (level == allocated and free == whole_free):
            return
        rows = self.groups[level][free]
        del rows[bisect_left(rows, row)]
        if not any(self.groups[level]):
            del self.groups[level]
            del self.levels[bisect_left(self.levels, level)]
        insort(self._group(allocated)[whole_free], row)
        self.level[row], self.free[row] = allocated, whole_free

    def best(self, gpus: float, cpu_milli: int, memory_mib: int, allowed: np.ndarray | None) -> int | None:
        """= the plain scan's argmax: the fitting row (free whole GPUs, CPU, memory, `allowed`) of the
        highest `allocated`, lowest row first; None when no row fits."""
        cpu_free, mem_free = self.table.cpu_free, self.table.mem_free
        need = math.ceil(gpus)
        for level in reversed(self.levels):
            found = None
            for rows in self.groups[level][need:]:
                for row in rows:
                    if found is not None and row > found:
                        break  # the lowest row of this list can no longer beat the one found
                    if cpu_free[row] >= cpu_milli and mem_free[row] >= memory_mib and (
                            allowed is None or allowed[row]):
                        found = row
                        break
            if found is not None:
                return found
        return None
