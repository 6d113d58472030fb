"""Nodes for every worker of a gang at once, or none (all workers on one GPU model, i.e. one NodeTable).

`pack` puts the workers on the fewest nodes, and prefers a single topology block (BLOCK_LABEL) that can hold the
whole gang; `spread` puts one worker per node, again of one block when one has enough such nodes. Among nodes that
hold as many workers, fuller ones come first (emptier nodes stay whole for the next gang), and the last node is the
one that fits the remaining workers most tightly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.types import Topology
from scheduler.policy.framework import PodRequest
from scheduler.policy.nodes import NodeTable


@dataclass(frozen=True, slots=True)
class Room:
    """How many workers of one shape each node of a table could take now."""

    per_node: np.ndarray  # workers per row (0 where the node does not fit one, or is filtered out)

    @property
    def total(self) -> int:
        return int(self.per_node.sum())


def room(table: NodeTable, pod: PodRequest, allowed: np.ndarray | None, topology: Topology,
         free: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> Room:
    """Workers of `pod`'s shape each allowed, schedulable row could take; `free` = (whole free GPUs, CPU, memory)
    per row, the table's own by default (a reservation asks with what will be free later)."""
    whole, cpu, mem = free if free is not None else (table.whole_free, table.cpu_free, table.mem_free)
    big = np.iinfo(np.int64).max
    k = np.full(len(table), big, dtype=np.int64)
    if pod.gpus >= 1:
        k = np.minimum(k, whole // int(pod.gpus))
    if pod.cpu_milli:
        k = np.minimum(k, cpu // pod.cpu_milli)
    if pod.memory_mib:
        k = np.minimum(k, mem // pod.memory_mib)
    k = np.where(table.schedulable, np.maximum(k, 0), 0)
    if allowed is not None:
        k = np.where(allowed, k, 0)
    if topology is Topology.SPREAD or k.max(initial=0) == big:  # (a request of nothing: one per node)
        k = np.minimum(k, 1)
    return Room(k)


def pick(table: NodeTable, room: Room, workers: int) -> list[int] | None:
    """A row per worker (rows repeat when a node takes several), or None when the gang does not fit."""
    k = room.per_node
    if room.total < workers:
        return None
    rows = np.flatnonzero(k)
    chosen = _in_one_block(table, rows, k, workers)
    if chosen is None:
        chosen = _fewest(table, rows, k, workers)
    return [int(r) for r in chosen for _ in range(_take(k, chosen, r, workers))]


def _take(k: np.ndarray, chosen: list[int], row: int, workers: int) -> int:
    """Workers that go on `row`: as many as it takes, in order, until the gang is complete."""
    before = 0
    for r in chosen:
        if r == row:
            return int(min(k[r], workers - before))
        before += int(k[r])
    return 0


def _order(table: NodeTable, rows: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Most workers first, then fuller nodes, then node order."""
    return rows[np.lexsort((rows, -table.allocated[rows], -k[rows]))]


def _fewest(table: NodeTable, rows: np.ndarray, k: np.ndarray, workers: int) -> list[int]:
    """The fewest nodes of `rows` that hold the gang; the last one the tightest fit for what remains."""
    ordered = _order(table, rows, k)
    counts = k[ordered]
    n = int(np.searchsorted(np.cumsum(counts), workers)) + 1  # nodes needed
    head = ordered[: n - 1]
    remaining = workers - int(counts[: n - 1].sum())
    rest = ordered[n - 1:]
    enough = rest[k[rest] >= remaining]
    last = enough[np.lexsort((enough, -table.allocated[enough], k[enough]))][0]
    return [*head.tolist(), int(last)]


def _in_one_block(table: NodeTable, rows: np.ndarray, k: np.ndarray, workers: int) -> list[int] | None:
    """The fewest nodes within one block (ties: the block with the least room, then block order); None when no
    block holds the gang."""
    if table.block_names == [""]:
        return None  # no node carries a block label
    labelled = rows[table.block[rows] != 0] if table.block_names[0] == "" else rows  # "" sorts first
    if not labelled.size:
        return None
    blocks = table.block[labelled]
    most = int(k[labelled].max())
    found = _by_counts(blocks, k[labelled], most, workers, len(table.block_names)) if most <= _FEW_LEVELS else \
        _by_sorting(labelled, blocks, k, workers, len(table.block_names))
    return None if found is None else _fewest(table, labelled[blocks == found], k, workers)


_FEW_LEVELS = 64  # workers per node up to this: count nodes per (block, workers) instead of sorting them


def _by_counts(blocks: np.ndarray, k: np.ndarray, most: int, workers: int, n_blocks: int) -> int | None:
    """= _by_sorting(), from how many nodes of each block take 1..most workers: taking the nodes that take most
    first, the nodes a block needs are those of the levels above the one that completes the gang, plus as many of
    that level as the rest needs."""
    counts = np.bincount(blocks * (most + 1) + k, minlength=n_blocks * (most + 1)).reshape(n_blocks, most + 1)
    levels = np.arange(most, 0, -1)
    nodes = counts[:, :0:-1]  # per block, nodes taking most, most - 1, ... 1 workers
    held = np.cumsum(nodes * levels, axis=1)
    enough = held >= workers
    fits = np.flatnonzero(enough[:, -1])
    if not fits.size:
        return None
    level = enough[fits].argmax(axis=1)  # the first level (most first) at which the block holds the gang
    before_held = np.where(level > 0, held[fits, level - 1], 0)
    before_nodes = np.where(level > 0, np.cumsum(nodes[fits], axis=1)[np.arange(fits.size), level - 1], 0)
    needed = before_nodes + -(-(workers - before_held) // levels[level])
    return int(fits[np.lexsort((fits, held[fits, -1], needed))[0]])


def _by_sorting(labelled: np.ndarray, blocks: np.ndarray, k: np.ndarray, workers: int, n_blocks: int) -> int | None:
    """The best block from one sort of the candidate rows by block, most workers first."""
    by_block = np.lexsort((-k[labelled], blocks))  # by block, most workers first
    order, sorted_blocks = labelled[by_block], blocks[by_block]
    counts = k[order]
    starts = np.flatnonzero(np.r_[True, sorted_blocks[1:] != sorted_blocks[:-1]])
    lengths = np.diff(np.r_[starts, len(order)])
    cum = np.cumsum(counts)
    before = np.repeat(cum[starts] - counts[starts], lengths)
    within = cum - before  # workers the block's first nodes hold, node by node
    enough = np.flatnonzero(within >= workers)
    if not enough.size:
        return None
    first_blocks, first = np.unique(sorted_blocks[enough], return_index=True)  # each block's first sufficient node
    position = enough[first]
    nodes_needed = position - np.repeat(starts, lengths)[position] + 1
    totals = np.bincount(blocks, weights=k[labelled], minlength=n_blocks)[first_blocks]
    return int(first_blocks[np.lexsort((first_blocks, totals, nodes_needed))[0]])
