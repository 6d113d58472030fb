"""NodeTable: the free capacity of all nodes of one GPU model as NumPy arrays.

Built once per cycle from the snapshot and updated in place as the cycle admits and
preempts, so every placement decision sees the effect of the previous ones.

`node_tables(nodes)` builds the tables of a whole snapshot. Between two cycles only a few
nodes change, and the cluster layer hands back the very same (frozen) NodeView objects for
the others, so a loop keeps the last snapshot's `Layout` (in its `CycleCache`) and re-reads only
the nodes whose object changed. That only saves work: the tables are the ones a fresh build gives
(same arrays, same values, same order), so schedule() stays a function of its inputs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from operator import is_not
from typing import TYPE_CHECKING

import numpy as np

from cluster.types import BLOCK_LABEL, GPU_EPS, GpuShare, NodeView, Pool
from scheduler.policy.packing import WholeGpuIndex
from scheduler.policy.workload import FragTables

if TYPE_CHECKING:
    from scheduler.policy.gpuloss import Loss

_ABSENT = 2.0  # "used" value of padding GPUs: never free, never fits

# How reservations restrict a request, for the failure memos: its expected end (a later end is kept off more held
# rows), and whether it is on borrowed quota while some rows are held for an own-quota gang (those stay open to it).
Restriction = tuple[float, bool]
UNRESTRICTED: Restriction = (0.0, False)


def no_less_restricted(a: Restriction, b: Restriction) -> bool:
    """A request restricted as `a` is kept off every row one restricted as `b` is."""
    return a[0] >= b[0] and (b[1] or not a[1])


class _Rows:
    """The arrays of one GPU model's table as read from its NodeViews, before any cycle changes them.

    Arrays a cycle never writes (gpu_count, cpu_cap, schedulable, fixed_pool) are read-only and
    shared with the tables; a patch replaces them instead of writing into them.
    """

    def __init__(self, gpu_model: str | None, nodes: list[NodeView]) -> None:  # nodes sorted by name
        self.gpu_model = gpu_model
        self.names = [n.name for n in nodes]
        self.row = {name: i for i, name in enumerate(self.names)}
        width = max((n.gpu_count for n in nodes), default=0)
        # one padded Python list per node, converted at once (a NumPy slice assignment per node is 10x slower)
        padded = [n.used_shares() + (_ABSENT,) * (width - n.gpu_count) for n in nodes]
        self.gpu_used = np.array(padded, dtype=float).reshape(len(nodes), width)
        self.gpu_count = _frozen(np.array([n.gpu_count for n in nodes], dtype=np.int64))
        self.cpu_cap = _frozen(np.array([n.cpu_milli for n in nodes], dtype=np.int64))
        self.cpu_free = self.cpu_cap - np.array([n.cpu_used for n in nodes], dtype=np.int64)
        self.mem_free = np.array([n.memory_mib - n.memory_used for n in nodes], dtype=np.int64)
        self.schedulable = _frozen(np.array([n.accepts_training for n in nodes], dtype=bool))
        self.fixed_pool = _frozen(np.array([n.pool is Pool.FIXED for n in nodes], dtype=bool))
        blocks = [n.labels.get(BLOCK_LABEL, "") for n in nodes]
        self.block_names = sorted(set(blocks))  # "" (no block label) sorts first
        index = {b: i for i, b in enumerate(self.block_names)}
        self.block = _frozen(np.array([index[b] for b in blocks], dtype=np.int64))
        self._derive()

    def _derive(self) -> None:
        """The per-node summaries, always over the whole table (so a patched table equals a fresh one
        bit for bit: the same NumPy reductions on the same arrays)."""
        used = self.gpu_used
        self.used_sum = np.where(used <= 1.0, used, 0.0).sum(axis=1)
        self.whole_free = (used <= GPU_EPS).sum(axis=1)
        self.max_share_free = 1.0 - used.min(axis=1, initial=_ABSENT)
        # least non-zero GPU usage per node: a fraction g can share a used GPU only where this + g fits
        self.least_shared = np.where(used != 0, used, _ABSENT).min(axis=1, initial=_ABSENT)
        with np.errstate(divide="ignore", invalid="ignore"):  # nodes without GPUs (or CPU) never fit anyway
            if self.gpu_model is None:
                self.allocated = 1.0 - self.cpu_free / self.cpu_cap
            else:
                self.allocated = self.used_sum / self.gpu_count
        m = self.schedulable
        self.idle = float((self.gpu_count[m] - self.used_sum[m]).sum())

    def patch(self, changes: list[tuple[int, NodeView]]) -> None:
        """Re-read the given rows (same node name and GPU count) from their new NodeViews."""
        cpu_cap, schedulable, fixed_pool = self.cpu_cap, self.schedulable, self.fixed_pool
        for row, n in changes:
            self.gpu_used[row] = _ABSENT
            self.gpu_used[row, :n.gpu_count] = n.used_shares()
            if cpu_cap[row] != n.cpu_milli:
                cpu_cap = cpu_cap.copy() if cpu_cap is self.cpu_cap else cpu_cap
                cpu_cap[row] = n.cpu_milli
            self.cpu_free[row] = n.cpu_milli - n.cpu_used
            self.mem_free[row] = n.memory_mib - n.memory_used
            if schedulable[row] != n.accepts_training:
                schedulable = schedulable.copy() if schedulable is self.schedulable else schedulable
                schedulable[row] = n.accepts_training
            if fixed_pool[row] != (n.pool is Pool.FIXED):
                fixed_pool = fixed_pool.copy() if fixed_pool is self.fixed_pool else fixed_pool
                fixed_pool[row] = n.pool is Pool.FIXED
        self.cpu_cap, self.schedulable, self.fixed_pool = _frozen(cpu_cap), _frozen(schedulable), _frozen(fixed_pool)
        self._derive()


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class Layout:
    """A snapshot's node list split into per-model tables: which (model, row) each position is."""

    def __init__(self, nodes: Sequence[NodeView]) -> None:
        self.nodes = tuple(nodes)
        positions: dict[str | None, list[int]] = defaultdict(list)  # models in order of first appearance
        for i, n in enumerate(self.nodes):
            positions[n.gpu_model].append(i)
        self.where: list[tuple[str | None, int]] = [(None, 0)] * len(self.nodes)
        self.rows: dict[str | None, _Rows] = {}
        for model, where in positions.items():
            where.sort(key=lambda i: self.nodes[i].name)  # stable, as sorted(nodes, key=name)
            for row, i in enumerate(where):
                self.where[i] = (model, row)
            self.rows[model] = _Rows(model, [self.nodes[i] for i in where])

    def update(self, nodes: Sequence[NodeView]) -> bool:
        """Catch up with `nodes` by re-reading the nodes whose object changed. Returns False, having
        changed nothing, unless `nodes` are the same nodes in the same order with the same GPU models
        and counts: only a fresh layout is right then."""
        old = self.nodes
        if len(nodes) != len(old):
            return False
        changed = _changed(nodes, old)
        if not changed:
            return True
        by_model: dict[str | None, list[tuple[int, NodeView]]] = defaultdict(list)
        for i in changed:
            new, was = nodes[i], old[i]
            if (new.name != was.name or new.gpu_model != was.gpu_model or new.gpu_count != was.gpu_count
                    or new.labels.get(BLOCK_LABEL) != was.labels.get(BLOCK_LABEL)):
                return False
            model, row = self.where[i]
            by_model[model].append((row, new))
        for model, changes in by_model.items():
            self.rows[model].patch(changes)
        self.nodes = tuple(nodes)
        return True


def _changed(nodes: Sequence[NodeView], old: Sequence[NodeView]) -> list[int]:
    """Positions where the node object differs (same length); list.index runs in C."""
    differs = list(map(is_not, nodes, old))
    changed, i = [], -1
    try:
        while True:
            i = differs.index(True, i + 1)
            changed.append(i)
    except ValueError:
        return changed


def node_tables(nodes: Sequence[NodeView], last: Layout | None = None) -> tuple[dict[str | None, NodeTable], Layout]:
    """A NodeTable per GPU model (None: CPU-only nodes), models in order of first appearance, equal to
    `{model: NodeTable(model, nodes of that model)}`, and the layout they came from; given the `last` cycle's layout,
    only the nodes whose object changed are read again (that layout is updated and handed back)."""
    layout = last if last is not None and last.update(nodes) else Layout(nodes)
    return {model: NodeTable.of(rows) for model, rows in layout.rows.items()}, layout


class NodeTable:
    def __init__(self, gpu_model: str | None, nodes: Sequence[NodeView]) -> None:
        self._start(_Rows(gpu_model, sorted(nodes, key=lambda n: n.name)))

    @classmethod
    def of(cls, rows: _Rows) -> NodeTable:
        table = cls.__new__(cls)
        table._start(rows)
        return table

    def _start(self, rows: _Rows) -> None:
        """Own copies of everything the cycle changes; the rest is shared read-only."""
        self.gpu_model = rows.gpu_model
        self.names = rows.names  # shared, never changed (a renamed node means a new _Rows)
        self.row = rows.row
        self.gpu_used = rows.gpu_used.copy()
        self.gpu_count = rows.gpu_count
        self.cpu_cap = rows.cpu_cap
        self.cpu_free = rows.cpu_free.copy()
        self.mem_free = rows.mem_free.copy()
        self.schedulable = rows.schedulable
        self.fixed_pool = rows.fixed_pool
        self.block, self.block_names = rows.block, rows.block_names
        # when each row is reserved for a waiting gang from (inf: not reserved); only jobs ending by then use it ...
        self.reserved_from: np.ndarray | None = None
        # ... except borrowed jobs on rows held for an own-quota gang (it reclaims them): these hold against them too
        self.firm_from: np.ndarray | None = None
        self.soft_holds = False  # some row is held for an own-quota gang
        self.used_sum = rows.used_sum.copy()
        self.whole_free = rows.whole_free.copy()
        self.max_share_free = rows.max_share_free.copy()
        self.least_shared = rows.least_shared.copy()
        self.allocated = rows.allocated.copy()
        # requests known not to fit now: (gpus, cpu, memory, pool, how reservations restrict it: Restriction)
        self.failed: list[tuple[float, int, int, Pool | None, Restriction]] = []
        self._bounds: tuple[float, float, int, int] | None = None
        self._stale = False
        self._idle = rows.idle
        self._packing: WholeGpuIndex | None = None  # built on the first whole-GPU placement
        self.loss: Loss | None = None  # the GPU-loss terms, when the profile places by them (attach_loss)
        self._free_whole: int | None = None  # free_whole_gpus(), until a change
        self.schedulable_rows = self.schedulable  # (a writable copy with the loss terms)
        self._colocation: np.ndarray | None = None

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
        # One node has a handful of GPUs: plain Python (floats, list comprehensions) beats NumPy calls
        # and NumPy scalars here; the values are the same doubles either way.
        count = int(self.gpu_count[row])
        real = self.gpu_used[row, :count].tolist()
        for s in shares:
            real[s.index] = min(1.0, max(0.0, real[s.index] + sign * s.share))
        self.gpu_used[row, :count] = real
        used = sum(real)
        if self.schedulable[row]:
            self._idle += float(self.used_sum[row]) - used
        self.used_sum[row] = used
        whole = len([u for u in real if u <= GPU_EPS])
        self.whole_free[row] = whole
        self._free_whole = None
        self.max_share_free[row] = 1.0 - min(real, default=_ABSENT)
        self.least_shared[row] = min([u for u in real if u != 0], default=_ABSENT)
        self.cpu_free[row] -= sign * cpu
        self.mem_free[row] -= sign * mem
        # = self._allocated(row): used_sum / gpu_count, in Python on a GPU table
        allocated = used / count if self.gpu_model is not None and count else float(self._allocated(row))
        self.allocated[row] = allocated
        if self._packing is not None:
            self._packing.move(row, allocated, whole)
        if self.loss is not None:
            self.loss.update(row)

    def _allocated(self, rows: int | slice) -> np.ndarray:
        """Fraction of the node in use: its GPUs, or its CPU on a CPU-only table."""
        if self.gpu_model is None:
            return 1.0 - self.cpu_free[rows] / self.cpu_cap[rows]
        return self.used_sum[rows] / self.gpu_count[rows]

    def attach_loss(self, tables: FragTables, model: int, pressure: np.ndarray) -> None:
        """Keep the GPU-loss terms of every node (gpuloss.py) for the target workload's `tables`, this table's
        GPU model being `model` there and `pressure` its nodes' displacement pressure."""
        from scheduler.policy.gpuloss import Loss  # numba takes 0.5 s to import: only for a profile that needs it

        # the kernel's arrays all writable: numba compiles read-only ones apart
        self.loss = Loss(tables, None, self.cpu_free, self.mem_free, self.gpu_count.copy(),
                         np.full(len(self), model, np.int64), pressure, self.fixed_pool.astype(np.int64),
                         self.gpu_used)
        self.schedulable_rows = self.schedulable.copy()

    def colocation_rows(self) -> np.ndarray:
        """1.0 for nodes outside the fixed pool, else 0.0 (the colocation-first score)."""
        if self._colocation is None:
            self._colocation = (~self.fixed_pool).astype(float)
        return self._colocation

    def packing(self) -> WholeGpuIndex:
        """The schedulable rows ranked for whole-GPU most-allocated placement (see packing.py)."""
        if self._packing is None:
            self._packing = WholeGpuIndex(self)
        return self._packing

    # -- summaries ------------------------------------------------------------------
    def idle_gpus(self) -> float:
        """GPU capacity nobody uses on nodes that accept training."""
        return self._idle

    def free_whole_gpus(self) -> int:
        """Wholly free GPUs across the nodes that accept training (only for a waiting job's sentence)."""
        if self._free_whole is None:
            self._free_whole = int(self.whole_free[self.schedulable].sum())
        return self._free_whole

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

    def known_failure(self, gpus: float, cpu_milli: int, memory_mib: int, pool: Pool | None,
                      restricted: Restriction = UNRESTRICTED) -> bool:
        """A request at least as large, kept off no fewer reserved rows, as one that already failed (capacity only
        shrank since, reserved rows only grew)."""
        for g, c, m, p, e in self.failed:
            if gpus >= g and cpu_milli >= c and memory_mib >= m and (p is None or p == pool) and \
                    no_less_restricted(restricted, e):
                return True
        return False

    def reserve(self, rows: Sequence[int], start_at: float, firm: bool = True) -> None:
        """Hold `rows` for a gang from `start_at`: from now on only requests that end by then may use them, and, unless
        `firm` (the hold of an own-quota gang, which reclaims borrowed work when it starts), borrowed ones."""
        rows = list(rows)
        if self.reserved_from is None:
            self.reserved_from = np.full(len(self), np.inf)
        self.reserved_from[rows] = start_at
        if not firm:
            self.soft_holds = True
            return
        if self.firm_from is None:
            self.firm_from = np.full(len(self), np.inf)
        self.firm_from[rows] = start_at

    def held_for_gangs(self, ends_at: float, borrowed: bool = False) -> np.ndarray | None:
        """Rows a request ending at `ends_at` (on borrowed quota or not) may not use: reserved for a gang starting
        before; None: none."""
        start = self.firm_from if borrowed else self.reserved_from
        if start is None:
            return None
        held = start < ends_at
        return held if held.any() else None

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
