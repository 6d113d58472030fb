"""Hierarchical quotas (Kueue's cohort trees, KEP-79): a tree of quota nodes and the ledger of one cycle over it.

Per node and resource key: `own` (a parent's own is a pool its whole subtree shares, on top of its children's),
`borrow_limit` (inf: none) and `lend_limit` (None: all of its own may be lent). Two measures are kept, as Kueue keeps
one:
- **own class**: a job is own when its demand fits the own quotas on its path (its leaf's, then each ancestor's pool),
  never what a sibling subtree owns. Usage counts against a parent only past what the child's own covers.
- **room to borrow** (Kueue's `available`): a node's subtree quota is its own plus what its children lend (their
  subtree quota less what their lend limit keeps); the root also lends the capacity no quota covers (so borrowing
  stays bounded by what is really idle, as Tidal's flat borrowing was). Usage bubbles to a parent past what a child
  keeps; a leaf's room is what it keeps plus its parent's room, clamped by every inner `borrow_limit` on the path.
  A leaf's own `borrow_limit` caps its borrowed jobs (the flat borrowed quota).
Flat departments are leaves under a root with own 0; then these checks are exactly the flat ledger's (quota.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from cluster.types import GPU_EPS, JobView, QuotaKind, QuotaNodeView, QuotaView
from scheduler.policy.quota import Bound, Demand, QuotaCheck, Shortfall, held

ROOT = 0
_Short = tuple  # (resource, used, limit, amount, node, bound): a Shortfall's fields after its kind


@dataclass(frozen=True, slots=True)
class QuotaTree:
    """The tree as indexed arrays: node 0 is the root (named ""), each node's parent, children and path to the root,
    and per resource key each node's own, borrow limit, lend limit, subtree quota and guaranteed (kept) quota."""

    names: tuple[str, ...]
    parent: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    paths: tuple[tuple[int, ...], ...]  # node, its parent, ..., the root
    index: Mapping[str, int]
    weight: tuple[float, ...]
    reclaim_min_runtime_s: tuple[float, ...]  # the longest set on the node's path
    fence: tuple[int, ...]  # the nearest fenced node on the node's path (-1: none): its work preempts only under it
    own: Mapping[str, tuple[float, ...]]
    borrow: Mapping[str, tuple[float, ...]]
    subtree: Mapping[str, tuple[float, ...]]
    kept: Mapping[str, tuple[float, ...]]  # Kueue's guaranteedQuota: subtree quota its lend limit keeps from the parent
    # resources some lend limit keeps quota of: only there can the root have less room than the cluster has idle
    # (elsewhere its room is the cluster's idle capacity, which placement checks node by node)
    limited: frozenset[str]
    clamped: frozenset[str]  # resources some inner node limits borrowing of, or `limited`: only there is room clamped
    pooled: frozenset[str]  # resources some inner node owns a pool of: only there do ancestors add own room

    @classmethod
    def build(cls, quotas: Iterable[QuotaView], nodes: Iterable[QuotaNodeView], departments: Iterable[str],
              capacity: Mapping[str, float]) -> QuotaTree:
        """The tree of `nodes`; every department with a quota or a job and no node is a leaf under the root.
        Raises ValueError on a cycle."""
        quotas, nodes = tuple(quotas), {n.name: n for n in nodes}
        names = [""] + list(nodes)
        names += sorted({q.department for q in quotas} - set(names) | set(departments) - set(names))
        index = {name: i for i, name in enumerate(names)}
        parent = tuple([-1] + [index[nodes[n].parent or ""] if n in nodes else ROOT for n in names[1:]])
        paths = tuple(_path(i, parent) for i in range(len(names)))
        children = tuple(tuple(c for c in range(1, len(names)) if parent[c] == i) for i in range(len(names)))
        weight = tuple(nodes[n].weight if n in nodes else 1.0 for n in names)
        own_runtime = [nodes[n].reclaim_min_runtime_s if n in nodes else 0.0 for n in names]
        runtime = tuple(max(own_runtime[j] for j in paths[i]) for i in range(len(names)))
        fenced = [n in nodes and nodes[n].fence for n in names]
        fence = tuple(next((j for j in paths[i] if fenced[j]), -1) for i in range(len(names)))
        rows = {(q.department, q.resource): q for q in quotas}
        own, borrow, subtree, kept, limited, clamped, pooled = {}, {}, {}, {}, set(), set(), set()
        for r in {q.resource for q in quotas} | set(capacity):
            own[r], borrow[r], lend = _rows(r, names, children, rows)
            subtree[r], kept[r] = _subtree(own[r], lend, children, parent, capacity.get(r, 0.0))
            if any(x is not None for x in lend[1:]):
                limited.add(r)
            if any(b != math.inf for i, b in enumerate(borrow[r]) if children[i]):
                clamped.add(r)
            if any(o > 0 for i, o in enumerate(own[r]) if children[i]):
                pooled.add(r)
        return cls(tuple(names), parent, children, paths, index, weight, runtime, fence, own, borrow, subtree, kept,
                   frozenset(limited), frozenset(clamped | limited), frozenset(pooled))

    def is_leaf(self, i: int) -> bool:
        return not self.children[i]


def _path(i: int, parent: tuple[int, ...]) -> tuple[int, ...]:
    path = [i]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
        if len(path) > len(parent):
            raise ValueError("the quota tree has a cycle")
    return tuple(path)


def _rows(resource: str, names: list[str], children, rows) -> tuple[tuple[float, ...], tuple[float, ...], list]:
    """Own, borrow limit and lend limit per node. A leaf without a row has nothing (as a flat department without a
    quota row); an inner node without one has no own and no limits."""
    own, borrow, lend = [], [], []
    for i, name in enumerate(names):
        q = rows.get((name, resource))
        own.append(q.own if q else 0.0)
        borrow.append(q.borrowed if q else (0.0 if not children[i] and i else math.inf))
        lend.append(q.lend_limit if q else None)
    return tuple(own), tuple(borrow), lend


def _subtree(own, lend, children, parent, capacity: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Kueue's SubtreeQuota and guaranteedQuota per node; the root's also lends what no quota covers."""
    n = len(own)
    subtree, kept = [0.0] * n, [0.0] * n

    def visit(i: int) -> None:
        subtree[i] = own[i]
        for c in children[i]:
            visit(c)
            subtree[i] += subtree[c] - kept[c]
        kept[i] = max(0.0, subtree[i] - lend[i]) if lend[i] is not None and parent[i] >= 0 else 0.0

    visit(ROOT)
    subtree[ROOT] += max(0.0, capacity - sum(own))
    return tuple(subtree), tuple(kept)


class TreeLedger:
    """QuotaLedger's interface (quota.py) over a QuotaTree: the ledger of a cycle whose snapshot has a tree."""

    def __init__(self, tree: QuotaTree, holders: Iterable[JobView]) -> None:
        self.tree = tree
        n = len(tree.names)
        self._zeros = (0.0,) * n
        self._inf = tuple(0.0 if tree.is_leaf(i) and i else math.inf for i in range(n))
        self._usage: dict[str, list[float]] = {}  # Kueue's Usage: both classes, past what each child keeps
        self._owned: dict[str, list[float]] = {}  # own class: a leaf's own jobs, a parent's past its children's own
        self._borrowed: dict[str, list[float]] = {}  # a leaf's borrowed jobs
        # per leaf and resource, its room; a charge forgets its leaf's, or every leaf's when it changed what other
        # leaves read (an ancestor's pool, or usage where room is clamped)
        self._own_checked: dict[int, dict[str, tuple]] = {}
        self._borrow_checked: dict[int, dict[str, tuple]] = {}
        self._clamp_checked: dict[int, dict[str, tuple]] = {}
        self._checked: dict[int, dict[Demand, tuple]] = {}  # per leaf: a GPU part -> its shortfalls (check)
        self.touched: set[int] = set()  # nodes whose usage changed, until a reader (the fair-share tournament) clears
        self.version = 0  # charges so far (what a reader's memo of figures is valid for)
        self._over: dict[str, np.ndarray] = {}  # per resource, which nodes use past their subtree quota
        self._reclaimable: dict[tuple[str, int], np.ndarray] = {}  # both while the ledger stays at `_over_version`
        self._over_version = -1
        self._ancestors: tuple[np.ndarray, np.ndarray] | None = None
        self._lending: dict[tuple[str, int], tuple[tuple[str, ...], float]] = {}  # static: lend limits are quota
        for department, kind, need in held(holders):
            self.charge(department, kind, need)

    def quota(self, r: str) -> tuple[tuple[float, ...], ...]:
        """(own, borrow limit, subtree quota, kept) per node for resource key `r`."""
        t = self.tree
        if r not in t.own:
            return self._zeros, self._inf, self._zeros, self._zeros
        return t.own[r], t.borrow[r], t.subtree[r], t.kept[r]

    def _rows(self, r: str) -> tuple[list[float], list[float], list[float]]:
        usage = self._usage.get(r)
        if usage is None:
            n = len(self.tree.names)
            usage = self._usage[r] = [0.0] * n
            self._owned[r], self._borrowed[r] = [0.0] * n, [0.0] * n
        return usage, self._owned[r], self._borrowed[r]

    def resources(self):
        """The resource keys charged so far."""
        return self._usage.keys()

    def usage_of(self, r: str) -> tuple[list[float], list[float], list[float]]:
        """Usage, own-class and borrowed-class figures per node (read only)."""
        return self._rows(r)

    def charge(self, department: str, kind: QuotaKind, need: Demand, sign: int = 1) -> None:
        tree = self.tree
        path = tree.paths[tree.index[department]]
        self.touched.update(path)
        self.version += 1
        shared = False
        for r, amount in need:
            usage, owned, borrowed = self._rows(r)
            own, _, _, kept = self.quota(r)
            _bubble(usage, kept, path, sign * amount)
            shared = shared or r in tree.clamped
            if kind is QuotaKind.OWN:
                reached = _bubble(owned, own, path, sign * amount)
                shared = shared or r in tree.pooled and any(own[n] > 0 for n in path[1:reached])
            else:
                borrowed[path[0]] += sign * amount
        memos = (self._own_checked, self._borrow_checked, self._clamp_checked, self._checked)
        for memo in memos:
            if shared:
                memo.clear()
            else:
                memo.pop(path[0], None)

    def release(self, department: str, kind: QuotaKind, need: Demand) -> None:
        self.charge(department, kind, need, sign=-1)

    def usage(self) -> tuple:
        return tuple((r, tuple(u), tuple(self._owned[r]), tuple(self._borrowed[r])) for r, u in self._usage.items())

    def check(self, i: int, need: Demand) -> tuple[_Short | None, _Short | None]:
        """The own and the borrowed shortfall of `need` (a job's GPU part) at leaf `i`, kept until the leaf's figures
        change: waiting jobs ask for the same few GPU parts again and again."""
        memo = self._checked.get(i)
        if memo is None:
            memo = self._checked[i] = {}
        found = memo.get(need)
        if found is None:
            found = memo[need] = (self.own_short(i, need), self.borrow_short(i, need))
        return found

    def own_short(self, i: int, need: Demand) -> _Short | None:
        """The first resource of `need` the own quotas on the leaf's path have no room for, or None."""
        memo = self._own_checked.setdefault(i, {})
        for r, x in need:
            room = memo.get(r)
            if room is None:
                room = memo[r] = self._own_room(i, r)
            used, limit, shown = room
            if used + x > limit + GPU_EPS:
                return r, shown, limit, x, None, None
        return None

    def _own_room(self, i: int, r: str) -> tuple[float, float, float]:
        """(used, limit, used as shown) of the own pools on the leaf's path: its own and the ancestors' pools left."""
        own, owned, path = self.quota(r)[0], self._rows(r)[1], self.tree.paths[i]
        above = sum(max(0.0, own[n] - owned[n]) for n in path[1:]) if r in self.tree.pooled else 0.0
        return min(owned[i], own[i]), own[i] + above, owned[i]  # (an overused leaf's excess already counts above)

    def borrow_short(self, i: int, need: Demand) -> _Short | None:
        """The first resource of `need` the leaf may not borrow: its borrow limit, else the room on its path."""
        memo = self._borrow_checked.setdefault(i, {})
        for r, x in need:
            room = memo.get(r)
            if room is None:
                room = memo[r] = (self._rows(r)[2][i], self.quota(r)[1][i], self.available(r, i))
            borrowed, borrow, (free, node, used, limit) = room
            if borrowed + x > borrow + GPU_EPS:
                return r, borrowed, borrow, x, None, None  # (the flat borrowed quota's words, kept: scenario 12)
            if x > free + GPU_EPS:
                used, limit, name, bound = self.level(r, i, node, used, limit)
                return r, used, limit, x, name, bound
        return None

    def level(self, r: str, i: int, node: int, used: float, limit: float) -> tuple[float, float, str, Bound]:
        """The refusing level of `available(r, i)` as a sentence names it: (used, limit, name, bound). Where the root's
        pool binds, the levels whose lend limits keep it small (outside leaf `i`'s path, the topmost) and what of
        their lendable quota is in use (the rest of the pool counted as used first)."""
        if node != self.tree.paths[i][-1]:
            return used, limit, self.tree.names[node], Bound.BORROW
        names, lendable = self._lenders(r, i)
        if not names:
            return used, limit, "the tree", Bound.POOL
        lent = min(lendable, max(0.0, used - (limit - lendable)))
        return lent, lendable, " and ".join(names), Bound.LEND

    def _lenders(self, r: str, i: int) -> tuple[tuple[str, ...], float]:
        """The topmost nodes off leaf `i`'s path whose lend limit keeps quota of `r`, and what they lend together."""
        key = (r, i)
        found = self._lending.get(key)
        if found is None:
            tree, (_, _, subtree, kept) = self.tree, self.quota(r)
            on_path = set(tree.paths[i])
            tops = [j for j in range(1, len(tree.names)) if kept[j] > GPU_EPS and j not in on_path
                    and not any(kept[a] > GPU_EPS for a in tree.paths[j][1:-1])]
            found = self._lending[key] = (tuple(tree.names[j] for j in tops),
                                          sum(subtree[j] - kept[j] for j in tops))
        return found

    def clamped(self, i: int, need: Demand) -> _Short | None:
        """Own-class work fits its own quotas but the tree has no room on its path (its division borrowed that room
        from outside, or lent it within its lend limit): the first such resource, its level as the node's index."""
        if not self.tree.clamped:
            return None  # (no inner borrow limit nor lend limit: the room is the cluster's idle capacity)
        memo = self._clamp_checked.setdefault(i, {})
        for r, x in need:
            room = memo.get(r)
            if room is None:
                room = memo[r] = self.available(r, i)
            free, node, used, limit = room
            if x > free + GPU_EPS:
                return r, used, limit, x, node
        return None  # (the level's index: TreeJobQuota.reclaim names it)

    def available(self, r: str, i: int) -> tuple[float, int, float, float]:
        """Kueue's available(): room for node `i` on `r` down from the root, clamped by each inner borrow limit on the
        path; with the level that binds and its (used, limit)."""
        own, borrow, subtree, kept = self.quota(r)
        usage = self._rows(r)[0]
        path = self.tree.paths[i]
        root = path[-1]
        if r not in self.tree.clamped:
            return math.inf, root, 0.0, math.inf
        room, node, used, limit = subtree[root] - usage[root], root, usage[root], subtree[root]
        if r not in self.tree.limited:
            room = math.inf
        for n in reversed(path[:-1]):
            if n != i and borrow[n] != math.inf:
                stored, in_parent = subtree[n] - kept[n], max(0.0, usage[n] - kept[n])
                clamp = stored - in_parent + borrow[n]
                if clamp < room:
                    room, node, used, limit = clamp, n, max(0.0, in_parent - stored), borrow[n]
            room += max(0.0, kept[n] - usage[n])
        return room, node, used, limit

    def reclaimable(self, r: str, leaf: int) -> np.ndarray:
        """Per node: whether own work of `leaf` may reclaim that node's borrowed work of `r` now, which is while every
        inner node on the victim's path below their lowest common ancestor uses past its subtree quota (Kueue's
        hierarchical reclaim): work a division lends inside itself is never a victim, and a division stops giving
        victims once it is back at its quota. The victim's own leaf is not asked: its work is borrowed because it
        was admitted past the leaf's own (the flat rule, kept)."""
        if self._over_version != self.version:
            self._over.clear()
            self._reclaimable.clear()
            self._over_version = self.version
        found = self._reclaimable.get((r, leaf))
        if found is None:
            over = self._over.get(r)
            if over is None:
                subtree = self.quota(r)[2]
                over = self._over[r] = np.append(np.asarray(self._rows(r)[0]) - subtree > GPU_EPS, True)
            up, depth = self.ancestors
            common = ((up == up[leaf]) & (up >= 0)).sum(axis=1)  # ancestors shared with `leaf`, the root included
            at = np.arange(up.shape[1])
            asked = (at >= common[:, None]) & (at < depth[:, None])  # inner nodes below the common ancestor
            found = self._reclaimable[(r, leaf)] = (over[up] | ~asked).all(axis=1)
        return found

    def fenced(self, leaf: int) -> np.ndarray | None:
        """Per node: whether it is under the nearest fence on `leaf`'s path, where `leaf`'s work may preempt (None: no
        fence, anywhere)."""
        fence = self.tree.fence[leaf]
        if fence < 0:
            return None
        up, depth = self.ancestors
        return up[:, depth[fence]] == fence

    @property
    def ancestors(self) -> tuple[np.ndarray, np.ndarray]:
        """Per node, its path from the root down to it then -1s (as long as the deepest node's), and its depth."""
        if self._ancestors is None:
            paths = self.tree.paths
            longest = max(map(len, paths))
            self._ancestors = (np.array([p[::-1] + (-1,) * (longest - len(p)) for p in paths], dtype=np.int64),
                               np.array([len(p) - 1 for p in paths], dtype=np.int64))
        return self._ancestors

    def has_own_room(self, department: str, need: Demand, host: Demand = ()) -> bool:
        return self.own_short(self.tree.index[department], need + host) is None

    def host_fits(self, department: str, host: Demand, borrowing: bool) -> bool:
        return self.checker(department, host, borrowing).host_fits()

    def choose(self, department: str, need: Demand, borrowing: bool) -> QuotaCheck:
        return self.checker(department, (), borrowing).choose(need)

    def checker(self, department: str, host: Demand, borrowing: bool) -> TreeJobQuota:
        return TreeJobQuota(self, self.tree.index[department], host, borrowing)


class TreeJobQuota:
    """JobQuota (quota.py) over a TreeLedger: one job's quota checks on each GPU model it may use."""

    def __init__(self, ledger: TreeLedger, leaf: int, host: Demand, borrowing: bool) -> None:
        self.ledger, self.leaf, self.host, self.borrowing = ledger, leaf, host, borrowing
        self._host: tuple[_Short | None, _Short | None] | None = None  # the host part's shortfalls, when first asked

    def _check(self, gpu: Demand) -> tuple[_Short | None, _Short | None]:
        """The own and borrowed shortfall of `gpu` + the host part: resources are checked one by one, GPUs first, so
        the GPU part's (kept per leaf) or else the host part's (once per job)."""
        own, borrowed = self.ledger.check(self.leaf, gpu)
        return own or self.host_checks()[0], borrowed or self.host_checks()[1]

    def host_checks(self) -> tuple[_Short | None, _Short | None]:
        if self._host is None:
            ledger = self.ledger
            self._host = (ledger.own_short(self.leaf, self.host), ledger.borrow_short(self.leaf, self.host))
        return self._host

    def choose(self, gpu: Demand) -> QuotaCheck:
        own, borrowed = self._check(gpu)
        if own is None:
            return _OWN_ROOM
        refused = Shortfall(QuotaKind.OWN, *own)
        if not self.borrowing:
            return QuotaCheck(None, (refused,))
        if borrowed is None:
            return QuotaCheck(QuotaKind.BORROWED, (refused,))
        return QuotaCheck(None, (refused, Shortfall(QuotaKind.BORROWED, *borrowed)))

    def kind(self, gpu: Demand) -> QuotaKind | None:
        own, borrowed = self._check(gpu)
        if own is None:
            return QuotaKind.OWN
        return QuotaKind.BORROWED if self.borrowing and borrowed is None else None

    def reclaim(self, gpu: Demand) -> tuple[int, Shortfall] | None:
        """For own-class work: the tree level whose borrowed work must give room back first (and why), or None."""
        found = self.ledger.clamped(self.leaf, gpu + self.host)
        if found is None:
            return None
        r, used, limit, x, node = found
        used, limit, name, bound = self.ledger.level(r, self.leaf, node, used, limit)
        return node, Shortfall(QuotaKind.BORROWED, r, used, limit, x, name, bound)

    def in_subtree(self, node: int, department: str) -> bool:
        tree = self.ledger.tree
        return node in tree.paths[tree.index[department]]

    def host_fits(self) -> bool:
        own, borrowed = self.host_checks()
        return own is None and (not self.borrowing or borrowed is None)


_OWN_ROOM = QuotaCheck(QuotaKind.OWN, ())


def _bubble(usage: list[float], keep: tuple[float, ...], path: tuple[int, ...], val: float) -> int:
    """Kueue's addUsage/removeUsage: usage goes to a node, and on to its parent past what the node keeps; how many
    nodes of the path it reached."""
    for k, n in enumerate(path):
        if val > 0:
            local = max(0.0, keep[n] - usage[n])
            usage[n] += val
            if val <= local:
                return k + 1
            val -= local
        else:
            stored = usage[n] - keep[n]
            usage[n] += val
            if stored <= 0:
                return k + 1
            val = max(val, -stored)
    return len(path)
