"""What the department tree shows per node and GPU model: own, limits, weight, usage, lent, borrowed and fair share.

Pure (no Django): figures from the policy's QuotaTree and `fair_split`, over what the selectors read
(docs/concepts/quotas-and-priority.md#quota-trees-and-fair-sharing).
- **used**: what the node's subtree holds; **borrowed**: what it holds past its subtree's own (its own plus its
  descendants'); **lent**: what of its unused own (what its lend limit allows) siblings' subtrees borrow through
  the parent, the borrowing split between the lenders in proportion to what each could lend.
- **pending** of a job whose GPU model is open (`gpu_model` omitted) counts on the certified model with the most idle
  GPUs, as the queue tries that model first (`open_pending`); each such demand takes that model's idle GPUs in turn.
- **fair share**: the capacity a node is entitled to with today's demand (used + pending): each leaf first gets its
  demand up to its own quota, and the rest of the model's capacity is split by weight down the tree (`fair_split`),
  none above what it wants. A parent's is its children's sum. A change of weight moves it where subtrees compete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from cluster.types import QuotaNodeView, QuotaView
from scheduler.policy.fairshare import fair_split
from scheduler.policy.quotatree import ROOT, QuotaTree


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """One node's figures for one GPU model (GPUs)."""

    model: str
    own: float
    borrow_limit: float | None  # None: unlimited
    lend_limit: float | None  # None: all of its own may be lent
    subtree_own: float  # its own and its descendants'
    used: float
    pending: float  # what its subtree's waiting jobs ask of this model
    lent: float
    borrowed: float
    fair_share: float


@dataclass(frozen=True, slots=True)
class NodeFigures:
    name: str
    parent: str | None
    depth: int  # 0: under the root
    weight: float
    leaf: bool
    models: tuple[ModelFigures, ...]
    fence: bool = False  # its subtree's work preempts only inside it


@dataclass(frozen=True, slots=True)
class TreeFigures:
    nodes: tuple[NodeFigures, ...]  # depth first, children by name
    capacity: Mapping[str, float]  # GPUs per model in the cluster
    warnings: tuple[str, ...]  # quotas summing past the cluster


def tree_figures(quotas: tuple[QuotaView, ...], nodes: tuple[QuotaNodeView, ...], capacity: Mapping[str, float],
                 used: Mapping[tuple[str, str], float], pending: Mapping[tuple[str, str], float],
                 open_pending: Mapping[tuple[str, tuple[str, ...]], float] = MappingProxyType({})) -> TreeFigures:
    """`used` and `pending`: GPUs per (leaf department, model); `open_pending`: GPUs per (leaf department, the models
    its jobs' framework is certified on) of waiting jobs that leave their model open. Models: those with a quota or
    capacity."""
    pending = open_pending_on_models(open_pending, capacity, used, pending)
    tree = QuotaTree.build(quotas, nodes, {d for d, _ in used} | {d for d, _ in pending}, capacity)
    models = sorted({q.resource for q in quotas if q.resource not in ("cpu", "memory")} | set(capacity))
    lend = {(q.department, q.resource): q.lend_limit for q in quotas}
    per_model = {m: _model(tree, m, lend, capacity.get(m, 0.0), used, pending) for m in models}
    order = _depth_first(tree, ROOT, -1)
    out = tuple(NodeFigures(tree.names[i], tree.names[tree.parent[i]] or None, depth, tree.weight[i], tree.is_leaf(i),
                            tuple(per_model[m][i] for m in models), tree.fence[i] == i) for i, depth in order)
    warnings = tuple(f"own {m} quotas sum to {_n(own)} GPUs; the cluster has {_n(capacity.get(m, 0.0))}"
                     for m in models if (own := sum(tree.own.get(m, ()))) > capacity.get(m, 0.0) + 1e-9)
    return TreeFigures(out, dict(capacity), warnings)


def open_pending_on_models(open_pending: Mapping[tuple[str, tuple[str, ...]], float], capacity: Mapping[str, float],
                           used: Mapping[tuple[str, str], float], pending: Mapping[tuple[str, str], float]
                           ) -> dict[tuple[str, str], float]:
    """`pending` with each open-model demand added on its certified model with the most idle GPUs (capacity less used
    and less the open demand put there before; ties by name), largest demand first."""
    idle = dict(capacity)
    for (_, m), x in used.items():
        idle[m] = idle.get(m, 0.0) - x
    out = dict(pending)
    for (department, models), gpus in sorted(open_pending.items(), key=lambda kv: (-kv[1], kv[0])):
        if not models:
            continue
        model = min(models, key=lambda m: (-idle.get(m, 0.0), m))
        idle[model] = idle.get(model, 0.0) - gpus
        out[(department, model)] = out.get((department, model), 0.0) + gpus
    return out


def _depth_first(tree: QuotaTree, i: int, depth: int) -> list[tuple[int, int]]:
    out = [] if i == ROOT else [(i, depth)]
    for c in sorted(tree.children[i], key=lambda c: tree.names[c]):
        out += _depth_first(tree, c, depth + 1)
    return out


def _model(tree: QuotaTree, m: str, lend: Mapping, capacity: float, used: Mapping, pending: Mapping
           ) -> list[ModelFigures]:
    n = len(tree.names)
    own = tree.own.get(m, (0.0,) * n)
    borrow = tree.borrow.get(m, (0.0,) * n)
    mine = [0.0] * n  # own of the subtree
    held = [0.0] * n
    asked = [0.0] * n
    for i in range(1, n):
        for j in tree.paths[i][:-1]:
            mine[j] += own[i]
            if tree.is_leaf(i):
                held[j] += used.get((tree.names[i], m), 0.0)
                asked[j] += pending.get((tree.names[i], m), 0.0)
    lent = _lent(tree, m, own, mine, held, lend)
    fair = _fair(tree, own, held, asked, capacity)
    return [ModelFigures(m, own[i], None if borrow[i] == float("inf") else borrow[i],
                         lend.get((tree.names[i], m)), mine[i], held[i], asked[i], lent[i],
                         max(0.0, held[i] - mine[i]), fair.get(tree.names[i], 0.0)) for i in range(n)]


def _lent(tree: QuotaTree, m: str, own, mine, held, lend) -> list[float]:
    """At each parent, its children's borrowing past the parent's own pool, split between the children that have
    unused own to lend (within their lend limits), in proportion to it."""
    lent = [0.0] * len(tree.names)
    for p in range(len(tree.names)):
        kids = tree.children[p]
        if not kids:
            continue
        wanted = sum(max(0.0, held[c] - mine[c]) for c in kids) - (own[p] if p != ROOT else 0.0)
        spare = {c: _spare(c, tree, m, mine, held, lend) for c in kids}
        total = sum(spare.values())
        if wanted <= 0 or total <= 0:
            continue
        for c, s in spare.items():
            lent[c] = min(s, wanted * s / total)
    return lent


def _spare(c: int, tree: QuotaTree, m: str, mine, held, lend) -> float:
    spare = max(0.0, mine[c] - held[c])
    limit = lend.get((tree.names[c], m))
    return spare if limit is None else min(spare, limit)


def _fair(tree: QuotaTree, own, held, asked, capacity: float) -> dict[str, float]:
    """Each leaf's demand up to its own, then the rest of `capacity` split by weight from the root."""
    names = tree.names
    leaves = [i for i in range(1, len(names)) if tree.is_leaf(i)]
    want = {i: held[i] + asked[i] for i in leaves}
    kept = {i: min(want[i], own[i]) for i in leaves}
    extra = fair_split({names[p]: tuple(names[c] for c in kids) for p, kids in enumerate(tree.children)},
                       {names[i]: tree.weight[i] for i in range(len(names))},
                       {names[i]: want[i] - kept[i] for i in leaves}, max(0.0, capacity - sum(kept.values())))
    fair = {names[i]: 0.0 for i in range(1, len(names))}
    for i in leaves:
        for j in tree.paths[i][:-1]:
            fair[names[j]] += kept[i] + extra.get(names[i], 0.0)
    return fair


def _n(x: float) -> str:
    return f"{x:,.0f}" if x == int(x) else f"{x:,.3g}"
