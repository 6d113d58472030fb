"""NodeTable: the free capacity of all nodes of one GPU model as NumPy arrays.

Built once per cycle from the snapshot and updated in place as the cycle admits and
preempts, so every placement decision sees the effect of the previous ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cluster.types import GPU_EPS, GpuShare, NodeView, Pool

_ABSENT = 2.0  # "used" value of padding GPUs: never free, never fits


class NodeTable:
    def __init__(self, gpu_model: str | None, nodes: Sequence[NodeView]) -> None:
        nodes = sorted(nodes, key=lambda n: n.name)
        self.gpu_model = gpu_model
        self.names = [n.name for n in nodes]
        self.row = {name: i for i, name in enumerate(self.names)}
        width = max((n.gpu_count for n in nodes), default=0)
        self.gpu_used = np.full((len(nodes), width), _ABSENT)
        for i, n in enumerate(nodes):
            self.gpu_used[i, :n.gpu_count] = n.used_shares()
        self.gpu_count = np.array([n.gpu_count for n in nodes], dtype=np.int64)
        self.cpu_cap = np.array([n.cpu_milli for n in nodes], dtype=np.int64)
        self.cpu_free = self.cpu_cap - np.array([n.cpu_used for n in nodes], dtype=np.int64)
        self.mem_free = np.array([n.memory_mib - n.memory_used for n in nodes], dtype=np.int64)
        self.schedulable = np.array([n.accepts_training for n in nodes], dtype=bool)
        self.fixed_pool = np.array([n.pool is Pool.FIXED for n in nodes], dtype=bool)
        self.used_sum = np.where(self.gpu_used <= 1.0, self.gpu_used, 0.0).sum(axis=1)
        self.whole_free = (self.gpu_used <= GPU_EPS).sum(axis=1)
        self.max_share_free = 1.0 - self.gpu_used.min(axis=1, initial=_ABSENT)
        # least non-zero GPU usage per node: a fraction g can share a used GPU only where this + g fits
        self.least_shared = np.where(self.gpu_used != 0, self.gpu_used, _ABSENT).min(axis=1, initial=_ABSENT)
        with np.errstate(divide="ignore", invalid="ignore"):  # nodes without GPUs (or CPU) never fit anyway
            self.allocated = self._allocated(slice(None))
        self.failed: list[tuple[float, int, int, Pool | None]] = []  # requests known not to fit now
        self._bounds: tuple[float, float, int, int] | None = None
        self._stale = False
        self._idle = float((self.gpu_count[self.schedulable] - self.used_sum[self.schedulable]).sum())

    def __len__(self) -> int:
        return len(self.names)

    # -- capacity changes -----------------------------------------------------------
    def allocate(self, row: int, shares: Sequence[GpuShare], cpu_milli: int, memory_mib: int) -> None:
        self._change(row, shares, cpu_milli, memory_mib, 1)
        self._stale = True  # cached bounds stay valid upper bounds while capacity only shrinks

    def release(self, row: int, shares: Sequence[GpuShare], cpu_milli: int, memory_mib: int) -> None:
        self._change(row, shares, cpu_milli, memory_mib, -1)
        self._bounds = None
        self.failed.clear()  # freed capacity may now fit what failed before

    def _change(self, row: int, shares: Sequence[GpuShare], cpu: int, mem: int, sign: int) -> None:
        # One node has a handful of GPUs: plain Python beats NumPy calls here.
        real = self.gpu_used[row, : self.gpu_count[row]].tolist()
        for s in shares:
            real[s.index] = min(1.0, max(0.0, real[s.index] + sign * s.share))
        self.gpu_used[row, : len(real)] = real
        used = sum(real)
        if self.schedulable[row]:
            self._idle += self.used_sum[row] - used
        self.used_sum[row] = used
        self.whole_free[row] = sum(u <= GPU_EPS for u in real)
        self.max_share_free[row] = 1.0 - min(real, default=_ABSENT)
        self.least_shared[row] = min((u for u in real if u != 0), default=_ABSENT)
        self.cpu_free[row] -= sign * cpu
        self.mem_free[row] -= sign * mem
        self.allocated[row] = self._allocated(row)

    def _allocated(self, rows: int | slice) -> np.ndarray:
        """Fraction of the node in use: its GPUs, or its CPU on a CPU-only table."""
        if self.gpu_model is None:
            return 1.0 - self.cpu_free[rows] / self.cpu_cap[rows]
        return self.used_sum[rows] / self.gpu_count[rows]

    # -- summaries ------------------------------------------------------------------
    def idle_gpus(self) -> float:
        """GPU capacity nobody uses on nodes that accept training."""
        return self._idle

    def bounds(self, exact: bool = True) -> tuple[float, float, int, int]:
        """Most whole GPUs, largest GPU share, most CPU, most memory free on any one node.

        exact=False may return an older, larger value: still a valid upper bound, and cheap.
        """
        if self._bounds is None or (exact and self._stale):
            self._stale = False
            m = self.schedulable
            if not m.any():
                self._bounds = (0.0, 0.0, 0, 0)
            else:
                self._bounds = (float(self.whole_free[m].max()), float(self.max_share_free[m].max()),
                                int(self.cpu_free[m].max()), int(self.mem_free[m].max()))
        return self._bounds

    def may_fit(self, gpus: float, cpu_milli: int, memory_mib: int) -> bool:
        """Cheap necessary condition checked before any per-node work."""
        whole, share, cpu, mem = self.bounds(exact=False)
        gpu_ok = gpus == 0 or (share + GPU_EPS >= gpus if gpus < 1 else whole >= gpus)
        return gpu_ok and cpu >= cpu_milli and mem >= memory_mib

    def fits_mask(self, gpus: float, cpu_milli: int, memory_mib: int) -> np.ndarray:
        """Offline-normal nodes with room for the request."""
        mask = self.cpu_free >= cpu_milli
        mask &= self.mem_free >= memory_mib
        mask &= self.schedulable
        if gpus >= 1:
            mask &= self.whole_free >= gpus
        elif gpus > 0:
            mask &= self.max_share_free + GPU_EPS >= gpus
        return mask

    def known_failure(self, gpus: float, cpu_milli: int, memory_mib: int, pool: Pool | None) -> bool:
        """A request at least as large as one that already failed (capacity only shrank since)."""
        for g, c, m, p in self.failed:
            if gpus >= g and cpu_milli >= c and memory_mib >= m and (p is None or p == pool):
                return True
        return False

    def choose_gpus(self, row: int, gpus: float) -> tuple[GpuShare, ...]:
        """Whole GPUs: the lowest free indices. A fraction: best fit, the fullest GPU it still fits on."""
        used = self.gpu_used[row].tolist()  # a handful of GPUs: plain Python beats NumPy calls
        if gpus >= 1:
            free = [i for i, u in enumerate(used) if u <= GPU_EPS][: int(gpus)]
            return tuple(GpuShare(i, 1.0) for i in free)
        if gpus > 0:
            fitting = [u if u + gpus <= 1.0 + GPU_EPS else -1.0 for u in used]
            return (GpuShare(fitting.index(max(fitting)), float(gpus)),)
        return ()
