"""Least GPU loss: tidal's placement. The node (and, for a share, the GPU) where the GPU the target workload could
not use grows least, counting three ways a placement loses GPU (each in milli-GPU, summed):
  - fragmentation (FGD's measure, workload.py): idle GPU too small, or on a node a typical task does not fit;
  - stranding: idle GPU a node's CPU cannot feed, max(0, idle - CPU left / c), c the CPU typical GPU tasks ask per
    GPU (`workload.cpu_per_gpu`): a CPU-hungry pod on a node whose CPU its GPUs need strands them;
  - displacement: the pod's GPU x the node's `workload.pressure` above the least pressed candidate's: the GPU that
    tasks only such nodes can take would lose there (the part every candidate shares changes no choice).
Scored as FGD scores: 100 x sigmoid(-growth / 1000) truncated to an integer, the first node (then GPU) among equal
scores — near-equal nodes tie and go to the first in the tie-break order, which packs (a strict minimum scatters).

One compiled kernel (numba) serves the live scheduler's NodeTable, replay and the FGD experiment's ClusterState:
`Loss` holds a cluster's per-node terms (GPU left per GPU, cnt/sum per threshold, fragmentation x W), kept in step
by `update(row)` after each change, and `best` scans every node once: the fit, the least pressure among the fitting
nodes, and the score of each candidate, with no per-node Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit, typeof

from scheduler.policy.workload import DEFAULT_CPU_REQUEST, MILLI, FragTables, Shape, TargetWorkload, cpu_per_gpu

MAX_SCORE = 100
TIE_BREAK = 1e-4  # weight of the fuller-node tie-break: below one score step (1 / 100)


# -- the kernel ----------------------------------------------------------------------------------------------------
# Its arrays travel in named tuples (numba types each field): what the target workload gives, what every node has,
# the terms kept per node, the pod asked for, and the open-addressing set of states seen in one call.
class Shapes(NamedTuple):
    """The target workload's integer tables (workload.FragTables) and the CPU typical GPU tasks ask per GPU."""

    thresholds: np.ndarray
    cpu_values: np.ndarray
    table: np.ndarray
    weight: int
    c: float


class Nodes(NamedTuple):
    """Every node's figures, read in place: milli-GPU left per GPU, CPU and memory left, GPUs, model index, bonus
    group, displacement pressure (and its bits, for the state hash)."""

    left: np.ndarray
    cpu_left: np.ndarray
    mem_left: np.ndarray
    gpu_count: np.ndarray
    model: np.ndarray
    group: np.ndarray
    pressure: np.ndarray
    pressure_bits: np.ndarray


class Terms(NamedTuple):
    """What `update(row)` keeps per node: count and sum of GPUs at or above each threshold, fragmentation x W, idle
    milli-GPU and the state hash."""

    cnt: np.ndarray
    sums: np.ndarray
    frag: np.ndarray
    idle: np.ndarray
    state: np.ndarray


class Pod(NamedTuple):
    """`count` GPUs of `milli` each, its CPU (`score_cpu`: as scored, a zero request counting as the default) and
    memory."""

    count: int
    milli: int
    cpu: int
    score_cpu: int
    mem: int


class Seen(NamedTuple):
    """The states seen in one call (cleared by a new stamp)."""

    slots: np.ndarray
    stamps: np.ndarray


@njit(cache=True, nogil=True)
def _frag_w(cnt, sums, idle, cpu, model, shapes):
    """Fragmentation x W of one node in the given state (workload.py's integer form)."""
    table = shapes.table
    rank = np.searchsorted(shapes.cpu_values, cpu, side="right")
    top = table.shape[3] - 1
    acc = shapes.weight * idle
    for m in range(shapes.thresholds.shape[0]):
        c = cnt[m] if cnt[m] < top else top
        acc -= sums[m] * table[m, model, rank, c]
    return acc


_FNV = 1099511628211  # FNV-1a's 64-bit prime (products wrap: int64 arithmetic)


@njit(cache=True, nogil=True)
def _terms(row, nodes, shapes, terms):
    """Recompute one node's cnt, sums, idle, fragmentation and state hash from its GPUs' milli left."""
    thresholds, left, cnt, sums = shapes.thresholds, nodes.left, terms.cnt, terms.sums
    total = 0
    for m in range(thresholds.shape[0]):
        cnt[row, m] = 0
        sums[row, m] = 0
    h = ((nodes.group[row] * _FNV ^ nodes.model[row]) * _FNV ^ nodes.gpu_count[row]) * _FNV
    h = ((h ^ nodes.cpu_left[row]) * _FNV ^ nodes.pressure_bits[row]) * _FNV
    for g in range(left.shape[1]):
        x = left[row, g]
        h = (h ^ x) * _FNV
        total += x
        for m in range(thresholds.shape[0]):
            if x >= thresholds[m]:
                cnt[row, m] += 1
                sums[row, m] += x
    terms.idle[row] = total
    h = (h ^ (h >> 31)) * 0x7FB5D329728EA185  # avalanche, so the low bits that index the set depend on all
    terms.state[row] = (h ^ (h >> 27)) * 0x5BD1E9955BD1E995
    terms.frag[row] = _frag_w(cnt[row], sums[row], total, nodes.cpu_left[row], nodes.model[row], shapes)


@njit(cache=True, nogil=True)
def _all_terms(nodes, shapes, terms):
    for row in range(nodes.left.shape[0]):
        _terms(row, nodes, shapes, terms)


@njit(cache=True, nogil=True)
def _left_from_used(row, used, left):
    """A NodeTable row's GPU use (fractions; > 1 pads GPUs the node lacks) as milli-GPU left."""
    for g in range(used.shape[1]):
        u = used[row, g]
        left[row, g] = round((1.0 - u) * MILLI) if u <= 1.0 else 0


@njit(cache=True, nogil=True)
def _all_left_from_used(used, left):
    for row in range(used.shape[0]):
        _left_from_used(row, used, left)


@njit(cache=True, nogil=True)
def _terms_from_used(row, used, nodes, shapes, terms):
    """`_terms` after reading the row's GPU left from its use (one call from Python instead of two: each costs
    microseconds)."""
    _left_from_used(row, used, nodes.left)
    _terms(row, nodes, shapes, terms)


@njit(cache=True, nogil=True)
def _first_of_state(h, seen, stamp):
    """Whether state hash h is seen for the first time in this call (an open-addressing set, cleared by `stamp`)."""
    slots, stamps = seen.slots, seen.stamps
    mask = slots.shape[0] - 1
    i = h & mask
    while stamps[i] == stamp:
        if slots[i] == h:
            return False
        i = (i + 1) & mask
    stamps[i], slots[i] = stamp, h
    return True


@njit(cache=True, nogil=True)
def _candidates(nodes, ok, terms, seen, stamp, pod):
    """The fitting rows (ascending), each the first in its state, and their least pressure. Rows in one state (GPUs,
    CPU left, pressure, bonus group) score alike: a later one loses every tie to the first."""
    left, cpu_left, mem_left, idle, pressure, state = (nodes.left, nodes.cpu_left, nodes.mem_left, terms.idle,
                                                       nodes.pressure, terms.state)
    count, milli = pod.count, pod.milli
    n = left.shape[0]
    rows = np.empty(n, dtype=np.int64)
    k = 0
    least = np.inf
    share = count == 1 and milli < MILLI
    total = count * milli
    for r in range(n):
        if idle[r] < total or not ok[r] or cpu_left[r] < pod.cpu or mem_left[r] < pod.mem:
            continue
        if count:
            fits = 0
            for g in range(left.shape[1]):
                if (left[r, g] >= milli) if share else (left[r, g] == MILLI):
                    fits += 1
            if fits < (1 if share else count):
                continue
        if not _first_of_state(state[r], seen, stamp):
            continue
        rows[k] = r
        k += 1
        if pressure[r] < least:
            least = pressure[r]
    return rows[:k], least


@njit(cache=True, nogil=True)
def quantized(growth):
    """The score of a growth in milli-GPU: 100 x sigmoid(-growth / 1000), truncated (FGD's)."""
    return math.floor(MAX_SCORE / (1.0 + math.exp(growth / 1000.0)))


@njit(cache=True, nogil=True)
def _growth(r, g, nodes, terms, least, shapes, pod, scratch_cnt, scratch_sums):
    """Milli-GPU lost if the pod went to row r (for a share: on its GPU g; whole GPUs: g = -1)."""
    cnt, sums, idle, cpu_left, c = terms.cnt, terms.sums, terms.idle, nodes.cpu_left, shapes.c
    count = pod.count
    total = count * pod.milli
    thresholds = shapes.thresholds
    M = thresholds.shape[0]
    if g < 0:
        for m in range(M):
            scratch_cnt[m] = cnt[r, m] - count
            scratch_sums[m] = sums[r, m] - count * MILLI
    else:
        x = nodes.left[r, g]
        after = x - pod.milli
        for m in range(M):
            t = thresholds[m]
            scratch_cnt[m] = cnt[r, m] - (1 if x >= t else 0) + (1 if after >= t else 0)
            scratch_sums[m] = sums[r, m] - (x if x >= t else 0) + (after if after >= t else 0)
    new = _frag_w(scratch_cnt, scratch_sums, idle[r] - total, cpu_left[r] - pod.score_cpu, nodes.model[r], shapes)
    growth = (new - terms.frag[r]) / shapes.weight
    if c > 0:
        growth += max(0.0, idle[r] - total - (cpu_left[r] - pod.cpu) / c) - max(0.0, idle[r] - cpu_left[r] / c)
    return growth + total * (nodes.pressure[r] - least)


@njit(cache=True, nogil=True)
def _share_gpus(r, left, milli, out):
    """The GPUs of row r a share of `milli` may go to, into `out`: each partly used one it fits on, and the first
    free one (the others would change the node alike). Returns how many."""
    k, free_seen = 0, False
    for g in range(left.shape[1]):
        x = left[r, g]
        if x < milli or (x == MILLI and free_seen):
            continue
        free_seen = free_seen or x == MILLI
        out[k] = g
        k += 1
    return k


@njit(cache=True, nogil=True)
def _bound(q):
    """An upper bound of the growths that score at least q (100 x sigmoid(-growth / 1000) >= q), with a margin for
    rounding: a higher growth scores less than q."""
    if q <= 0:
        return np.inf
    g = 1000.0 * math.log(MAX_SCORE / q - 1.0)
    return g + 1e-6 * max(1.0, abs(g))


@njit(cache=True, nogil=True)
def _row(r, nodes, terms, least, shapes, pod, bound, gpus, sc, ss):
    """(score, GPU, growth) of row r, or score -1 when every growth there is above `bound`. A share goes to the GPU
    of the best score, the fullest among equals (whole GPUs stay whole), the first among those; whole GPUs: GPU -1."""
    left = nodes.left
    share = pod.count == 1 and pod.milli < MILLI
    k = _share_gpus(r, left, pod.milli, gpus) if share else 1
    best_q, best_g, best_x, best_growth = -1, -1, MILLI + 1, 0.0
    for i in range(k):
        g = gpus[i] if share else -1
        growth = _growth(r, g, nodes, terms, least, shapes, pod, sc, ss)
        if growth > bound:
            continue
        q = quantized(growth)
        x = left[r, g] if share else 0
        if q > best_q or (q == best_q and x < best_x):
            best_q, best_g, best_x, best_growth = q, g, x, growth
    return best_q, best_g, best_growth


@njit(cache=True, nogil=True)
def _score(q, idle, gpus):
    """score / 100 plus a tie-break below one score step: the fuller node (allocated / 10,000)."""
    allocated = 1.0 - idle / (gpus * MILLI) if gpus else 1.0
    return q / MAX_SCORE + allocated * TIE_BREAK


@njit(cache=True, nogil=True)
def _best(nodes, ok, terms, seen, stamp, bonus, bonus_weight, loss_weight, shapes, pod):
    """(row, GPU, growth) of the highest bonus_weight x bonus + loss_weight x `_score`, the first among equals; row -1
    when nothing fits; GPU -1 but for a share. A candidate whose growth scores below the best (same bonus) is not
    scored: a handful of sigmoids per call."""
    rows, least = _candidates(nodes, ok, terms, seen, stamp, pod)
    M = shapes.thresholds.shape[0]
    sc, ss = np.empty(M, np.int64), np.empty(M, np.int64)
    gpus = np.empty(nodes.left.shape[1], np.int64)
    best_row, best_gpu, best_growth, best, best_base, bound = -1, -1, 0.0, -np.inf, -np.inf, np.inf
    for r in rows:
        base = bonus_weight * bonus[r] if bonus_weight != 0 else 0.0
        if base + loss_weight * (1.0 + TIE_BREAK) < best:
            continue  # even the top score cannot win
        q, g, growth = _row(r, nodes, terms, least, shapes, pod, bound if base == best_base else np.inf, gpus, sc, ss)
        if q < 0:
            continue
        s = loss_weight * _score(q, terms.idle[r], nodes.gpu_count[r])
        if bonus_weight != 0:
            s = base + s
        if s > best:
            best_row, best_gpu, best_growth, best, best_base, bound = r, g, growth, s, base, _bound(q)
    return best_row, best_gpu, best_growth


@njit(cache=True, nogil=True)
def _scores(rows, nodes, terms, shapes, pod):
    """`_score` of each of `rows` (all fitting; a share on its best GPU), their least pressure the least."""
    least = np.inf
    for r in rows:
        least = min(least, nodes.pressure[r])
    M = shapes.thresholds.shape[0]
    sc, ss = np.empty(M, np.int64), np.empty(M, np.int64)
    gpus = np.empty(nodes.left.shape[1], np.int64)
    out = np.empty(rows.shape[0])
    for i in range(rows.shape[0]):
        r = rows[i]
        q, _, _ = _row(r, nodes, terms, least, shapes, pod, np.inf, gpus, sc, ss)
        out[i] = _score(q, terms.idle[r], nodes.gpu_count[r])
    return out


@njit(cache=True, nogil=True)
def _share_scores(rows, gpus, nodes, terms, shapes, pod):
    """The integer score and the growth of a share on GPU gpus[i] of row rows[i], for every candidate (all fitting),
    their least pressure the least: what `_best` ranks a share's GPUs by, each GPU scored (the interference-aware
    choice)."""
    least = np.inf
    for r in rows:
        least = min(least, nodes.pressure[r])
    M = shapes.thresholds.shape[0]
    sc, ss = np.empty(M, np.int64), np.empty(M, np.int64)
    score, growth = np.empty(rows.shape[0], np.int64), np.empty(rows.shape[0])
    for i in range(rows.shape[0]):
        growth[i] = _growth(rows[i], gpus[i], nodes, terms, least, shapes, pod, sc, ss)
        score[i] = quantized(growth[i])
    return score, growth


def _entry(kernel, *args):
    """`kernel`'s compiled entry point for the types of `args` (compiled, or loaded from numba's cache, first): it
    must then be called with arguments of exactly these types."""
    return kernel.compile(tuple(typeof(a) for a in args))


# -- one cluster's terms ---------------------------------------------------------------------------------------------
class Loss:
    """The per-node terms of one cluster (or one GPU model's NodeTable) for one target workload.

    `left` (milli-GPU left per GPU, 0 for GPUs a node lacks), `cpu_left` and `mem_left` are the caller's arrays,
    read in place; after changing a node the caller calls `update(row)`. With `used` (a NodeTable's GPU use, as
    fractions), `left` is the Loss's own, read from `used` at the start and at every update. `model[row]` indexes `tables`' models; `group[row]` (optional) sets apart rows a
    bonus scores differently. `best` scores one row per state (a hash of all the above): an emptying cluster is
    mostly a few kinds of empty node.
    """

    def __init__(self, tables: FragTables, left: np.ndarray | None, cpu_left: np.ndarray, mem_left: np.ndarray,
                 gpu_count: np.ndarray, model: np.ndarray, pressure: np.ndarray, group: np.ndarray | None = None,
                 used: np.ndarray | None = None) -> None:
        if used is not None:
            left = np.empty(used.shape, np.int64)
            _all_left_from_used(used, left)
        self.tables, self.used = tables, used
        pressure = np.ascontiguousarray(pressure, dtype=np.float64)
        n, m = len(left), len(tables.thresholds)
        self.shapes = Shapes(tables.thresholds, tables.cpu_values, tables.table, tables.weight,
                             cpu_per_gpu(tables.workload))
        self.nodes = Nodes(left, cpu_left, mem_left, gpu_count, model,
                           np.zeros(n, np.int64) if group is None else group, pressure, pressure.view(np.int64))
        self.terms = Terms(np.zeros((n, m), np.int64), np.zeros((n, m), np.int64), np.zeros(n, np.int64),
                           np.zeros(n, np.int64), np.zeros(n, np.int64))
        _all_terms(self.nodes, self.shapes, self.terms)
        size = 1 << max(4, (2 * n).bit_length())
        self.seen, self.stamp = Seen(np.zeros(size, np.int64), np.zeros(size, np.int64)), 0
        # update() and best() run after every change and for every placement: they call their kernels' compiled entry
        # points, bound here for the argument types they always pass, without numba's per-call typing of the named
        # tuples (which costs as much as an update, and a third of a best)
        self._update = (_entry(_terms, 0, self.nodes, self.shapes, self.terms) if used is None
                        else _entry(_terms_from_used, 0, used, self.nodes, self.shapes, self.terms))
        self._best = _entry(_best, self.nodes, np.ones(n, np.bool_), self.terms, self.seen, 0, self.nodes.pressure, 0.0,
                            1.0, self.shapes, Pod(0, 0, 0, 0, 0))

    @property
    def workload(self) -> TargetWorkload:
        return self.tables.workload

    def update(self, row: int) -> None:
        if self.used is None:
            self._update(row, self.nodes, self.shapes, self.terms)
        else:
            self._update(row, self.used, self.nodes, self.shapes, self.terms)

    def best(self, ok: np.ndarray, count: int, milli: int, cpu: int, mem: int, bonus: np.ndarray | None = None,
             bonus_weight: float = 0.0, loss_weight: float = 1.0) -> tuple[int, int, float]:
        """(row, GPU, growth in milli-GPU) for a pod of `count` GPUs of `milli` each (0 GPUs: CPU-only) over the rows
        `ok` allows; row -1 when none fits."""
        if ok.dtype != np.bool_ or not ok.flags.c_contiguous:
            ok = np.ascontiguousarray(ok, np.bool_)
        bonus = self.nodes.pressure if bonus is None else np.ascontiguousarray(bonus, np.float64)
        self.stamp += 1
        row, gpu, growth = self._best(self.nodes, ok, self.terms, self.seen, self.stamp, bonus, float(bonus_weight),
                                      float(loss_weight), self.shapes,
                                      Pod(int(count), int(milli), int(cpu), int(cpu or DEFAULT_CPU_REQUEST), int(mem)))
        return int(row), int(gpu), float(growth)

    def scores(self, rows: np.ndarray, count: int, milli: int, cpu: int) -> np.ndarray:
        """The score / 100 (0..1) with the fuller-node tie-break of each of `rows` (fitting ones)."""
        return _scores(rows.astype(np.int64, copy=False), self.nodes, self.terms, self.shapes,
                       Pod(count, milli, cpu, cpu or DEFAULT_CPU_REQUEST, 0))

    def share_scores(self, rows: np.ndarray, gpus: np.ndarray, milli: int, cpu: int) -> tuple[np.ndarray, np.ndarray]:
        """The integer score (0..100) and the growth (milli-GPU) of a share of `milli` on GPU gpus[i] of row rows[i]
        (fitting candidates)."""
        return _share_scores(rows.astype(np.int64, copy=False), gpus.astype(np.int64, copy=False), self.nodes,
                             self.terms, self.shapes, Pod(1, int(milli), int(cpu), int(cpu or DEFAULT_CPU_REQUEST), 0))

    def fragmentation(self) -> float:
        """The fragmented milli-GPU of all nodes (frequency-weighted)."""
        return float(self.terms.frag.sum()) / self.shapes.weight


def warm_up() -> None:
    """Load the compiled kernels (numba's cache: ~0.5 s on a process's first call; ~7 s to compile on a fresh clone)
    on a one-node cluster with the live table's argument types, so a benchmark does not time the loading and a
    worker's first tick is no slower than the next."""
    workload = TargetWorkload((Shape(1000, MILLI, 1), Shape(1000, 500, 1)), (1, 1), 2)
    loss = Loss(FragTables(workload, ("X",), 2), None, np.array([8000]), np.array([8000]), np.array([2]),
                np.zeros(1, np.int64), np.zeros(1), used=np.zeros((1, 2)))
    loss.best(np.ones(1, bool), 1, 500, 1000, 0)
    loss.best(np.ones(1, bool), 1, MILLI, 1000, 0, np.ones(1), 10.0)
    loss.scores(np.zeros(1, np.int64), 1, 500, 1000)
    loss.update(0)
