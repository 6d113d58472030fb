"""Fair sharing of what the quota tree lends (Kueue's KEP-1714, hierarchical): weighted dominant-resource share.

A node's share is, over the resources it uses past its subtree quota, the largest (borrowed x 1000 / what its parent
could ever lend it), divided by its weight (weight 0 while borrowing: infinite, leftovers only). The queue is taken
in a tournament from the root: at each node, the child whose share *after* admitting its head job is lowest (a job on
own quota adds no share, so own work comes first, in the queue's order); within a leaf, the queue's order (score,
then submit time). Borrowed work may preempt borrowed work of another subtree only while the preemptor's branch's
share after stays at or below the victim's branch's share after (Kueue's LessThanOrEqualToFinalShare; not its
LessThanInitialShare, which let a leaf take more than one GPU back from another that had taken one from it), and
only from a branch that borrows: two jobs never preempt each other back and forth. Victims come from the highest-share branch first (victim_shares).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import numpy as np

from cluster.types import GPU_EPS
from scheduler.policy.quota import Demand, allocation_demand, gpu_demand
from scheduler.policy.quotatree import ROOT, QuotaTree, TreeLedger

if TYPE_CHECKING:  # (the queue's module reads the cycle state, which holds the shares)
    from scheduler.policy.queue import Queued


class FairShares:
    """Shares on the cycle's ledger (read as it changes)."""

    def __init__(self, tree: QuotaTree, ledger: TreeLedger) -> None:
        self.tree, self.ledger = tree, ledger
        self._lendable: dict[tuple[int, str], float] = {}
        self._shares: dict[tuple[int, Demand, int], float] = {}  # while the ledger stays at `_version`
        self._version = ledger.version
        self._branches: dict[tuple[int, int], tuple[int, int] | None] = {}
        self._leaves: dict[int, tuple[object, np.ndarray, np.ndarray]] = {}  # a victim index's leaves, borrowed

    def share(self, i: int, need: Demand = (), sign: int = 1) -> float:
        """Node `i`'s weighted share with `need` added (sign 1) or taken away (sign -1)."""
        if self._version != self.ledger.version:
            self._shares.clear()
            self._version = self.ledger.version
        key = (i, need, sign)
        found = self._shares.get(key)
        if found is None:
            found = self._shares[key] = self._share(i, need, sign)
        return found

    def _share(self, i: int, need: Demand, sign: int) -> float:
        tree, ledger = self.tree, self.ledger
        if i == ROOT:
            return 0.0
        ratio, borrowing = 0.0, False
        for r, x in _summed(need, sign, ledger.resources()):
            over = ledger.usage_of(r)[0][i] + x - ledger.quota(r)[2][i]
            if over > GPU_EPS:
                borrowing = True
                lendable = self.lendable(tree.parent[i], r)
                if lendable > 0:
                    ratio = max(ratio, over * 1000.0 / lendable)
        weight = tree.weight[i]
        if weight <= 0:
            return math.inf if borrowing else 0.0
        return ratio / weight

    def lendable(self, i: int, r: str) -> float:
        """Kueue's potentialAvailable: the most node `i` could ever offer its children of `r`."""
        key = (i, r)
        if key not in self._lendable:
            _, borrow, subtree, kept = self.ledger.quota(r)
            if i == ROOT:
                room = subtree[i]
            else:
                room = kept[i] + self.lendable(self.tree.parent[i], r)
                if borrow[i] != math.inf:
                    room = min(room, subtree[i] + borrow[i])
            self._lendable[key] = room
        return self._lendable[key]

    def branches(self, a: int, b: int) -> tuple[int, int] | None:
        """The children of the lowest common ancestor of leaves `a` and `b` on each one's path (None: the same)."""
        key = (a, b)
        if key not in self._branches:
            found = None
            for x, y in zip(self.tree.paths[a][::-1], self.tree.paths[b][::-1]):
                if x != y:
                    found = (x, y)
                    break
            self._branches[key] = found
        return self._branches[key]

    def leaves(self, cands: list) -> tuple[np.ndarray, np.ndarray]:
        """Each candidate's leaf and whether it is borrowed work (kept per victim index: its candidates are fixed)."""
        known = self._leaves.get(id(cands))
        if known is None or known[0] is not cands:
            index = self.tree.index
            known = self._leaves[id(cands)] = (
                cands, np.fromiter((index[c.job.department] for c in cands), dtype=np.int64, count=len(cands)),
                np.fromiter((c.borrowed for c in cands), dtype=bool, count=len(cands)))
        return known[1], known[2]


def tournament(shares: FairShares, queue: list[Queued]) -> Iterator[Queued]:
    """The queue in fair-share order; it reads the ledger as the caller admits what it yields."""
    tree = shares.tree
    waiting: dict[int, deque[tuple[int, Queued]]] = {}
    for n, q in enumerate(queue):
        waiting.setdefault(tree.index[q.job.department], deque()).append((n, q))
    best: dict[int, tuple[tuple[float, int], int] | None] = {}  # node -> (its key at its parent, the leaf it offers)
    touched = shares.ledger.touched
    while True:
        for i in touched:  # usage changed on these paths: their shares, and their ancestors' choices
            best.pop(i, None)
        touched.clear()
        found = _best(shares, waiting, best, ROOT)
        if found is None:
            return
        leaf = found[1]
        _, q = waiting[leaf].popleft()
        for i in tree.paths[leaf]:
            best.pop(i, None)
        yield q


def _best(shares: FairShares, waiting, best, i: int) -> tuple[tuple[float, int], int] | None:
    """The leaf node `i`'s subtree offers next and its key at `i`'s parent (share after its head job, queue order)."""
    if i in best:
        return best[i]
    tree = shares.tree
    found = None
    if tree.is_leaf(i):
        if waiting.get(i):
            n, q = waiting[i][0]
            found = ((shares.share(i, head_demand(q)), n), i)
    else:
        picks = [x for c in tree.children[i] if (x := _best(shares, waiting, best, c)) is not None]
        if picks:
            _, leaf = min(picks)
            n, q = waiting[leaf][0]
            found = ((shares.share(i, head_demand(q)), n), leaf)
    best[i] = found
    return found


def head_demand(q: Queued) -> Demand:
    """What the job charges on its preferred model."""
    model = q.models[0] if q.models else None
    return gpu_demand(model, q.request.gpus * q.job.workers) + q.host


def fair_victims(shares: FairShares, department: str, need: Demand, cands: list) -> np.ndarray:
    """Which borrowed candidates a borrowed job of `department` may preempt: another subtree's whose branch borrows
    (share above 0: a branch within its own quota there lends nothing, and two such branches would take the same GPUs
    from each other at equal shares of 0 back and forth) and whose share now is at or above the preemptor's branch's
    share after (a victim's share only falls as it loses work, so no other could qualify). The set chosen among them
    is then held to the rule itself (fair_after)."""
    leaf = shares.tree.index[department]
    leaves, borrowed = shares.leaves(cands)
    possible = []
    for theirs in np.unique(leaves[borrowed]).tolist():
        pair = shares.branches(leaf, theirs)
        if pair is None:
            continue
        now = shares.share(pair[1])
        if now > 0 and shares.share(pair[0], need) <= now:
            possible.append(theirs)
    return borrowed & np.isin(leaves, possible)


def victim_share(shares: FairShares, department: str, victim: str) -> float:
    """A victim's branch share as `department`'s work sees it: the share of the child of their lowest common ancestor
    on the victim's side (its leaf's own share when both are in one leaf)."""
    index = shares.tree.index
    theirs = index[victim]
    pair = shares.branches(index[department], theirs)
    return shares.share(theirs if pair is None else pair[1])


def fair_after(shares: FairShares, department: str, need: Demand, victims) -> bool:
    """Whether the chosen evictions (the whole set, not one victim at a time) keep to Kueue's fair-sharing rule
    LessThanOrEqualToFinalShare: the preemptor's branch's share after at or below each victim branch's share after."""
    tree = shares.tree
    leaf = tree.index[department]
    freed: dict[int, dict[int, list]] = {}  # victim branch -> job -> what its workers free
    for c in victims:
        pair = shares.branches(leaf, tree.index[c.job.department])
        if pair is None:
            return False
        freed.setdefault(pair[1], {}).setdefault(c.job.id, []).extend(allocation_demand(c.allocation))
    for b, jobs in freed.items():
        mine = shares.share(_mine(shares, leaf, b), need)
        every = [pair for d in jobs.values() for pair in d]
        if mine > shares.share(b, tuple(every), -1):
            return False
    return True


def _mine(shares: FairShares, leaf: int, theirs: int) -> int:
    """The preemptor's branch opposite `theirs` (the child of their common parent on the preemptor's path)."""
    path = shares.tree.paths[leaf]
    parent = shares.tree.parent[theirs]
    return path[path.index(parent) - 1]


def _summed(need: Demand, sign: int, resources) -> list[tuple[str, float]]:
    """`need` with each resource once (a victim set frees several allocations), signed; every resource in use too."""
    out: dict[str, float] = dict.fromkeys(resources, 0.0)
    for r, x in need:
        out[r] = out.get(r, 0.0) + sign * x
    return list(out.items())


def fair_split(children: Mapping[str, tuple[str, ...]], weight: Mapping[str, float], wants: Mapping[str, float],
               idle: float, root: str = "") -> dict[str, float]:
    """Each node's fair share of `idle` (what the console shows beside usage): from the root down, a node's share is
    water-filled between its children by weight, none getting more than its subtree wants (a leaf's `wants`); weight
    0 gets only what the others leave."""
    wanted: dict[str, float] = {}

    def want(n: str) -> float:
        if n not in wanted:
            kids = children.get(n, ())
            wanted[n] = sum(want(c) for c in kids) if kids else wants.get(n, 0.0)
        return wanted[n]

    shares: dict[str, float] = {}

    def split(n: str, amount: float) -> None:
        kids = children.get(n, ())
        positive = [c for c in kids if weight.get(c, 1.0) > 0]
        left = _water_fill(positive, amount, want, weight, shares)
        _water_fill([c for c in kids if weight.get(c, 1.0) <= 0], left, want, {}, shares)
        for c in kids:
            split(c, shares[c])

    split(root, min(idle, want(root)))
    return shares


def _water_fill(kids: list[str], amount: float, want, weight: Mapping[str, float], out: dict[str, float]) -> float:
    """Split `amount` between `kids` in proportion to weight (1 when absent), none above what it wants; returns what
    is left."""
    total = sum(weight.get(c, 1.0) for c in kids)
    for c in sorted(kids, key=lambda c: want(c) / weight.get(c, 1.0)):
        w = weight.get(c, 1.0)
        give = min(want(c), amount * w / total) if total > 0 else 0.0
        out[c] = give
        amount -= give
        total -= w
    return max(0.0, amount)
