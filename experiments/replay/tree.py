"""The Helios-derived quota tree (`replay --tree helios`): Helios Earth's virtual clusters grouped into divisions.

- Leaves: every virtual cluster (VC) with a quota on the file's last day (helios_gpus), one leaf each, and beside it
  in its division the VC's best-effort account `<vc>/be` (own 0: borrowed work only, as in the flat mapping).
- Divisions by the VC's GPU quota on Helios: `div-xl` >= 128 GPUs, `div-l` 64-127, `div-m` 32-63, `div-s` < 32
  (powers of two, the sizes Helios hands out; DIVISIONS). An empty band has no division.
- Own quotas (per resource key, as shares of the cluster's capacity, so they add up to it as the flat mapping's do):
  a VC owns POOL_KEPT_BY_VC = 80 % of its share; its division owns the other 20 % of its VCs' shares, a pool its VCs
  share on top of their own (Kueue's additive own).
- Lend limit: a division lends its VCs' quotas but keeps its pool for them, in whole machines: what it keeps of a
  resource is its pool rounded down to a multiple of the largest node's amount of it (GPUs of that model, cores,
  memory), since a reserve smaller than a machine starts no job that needs one. A pool smaller than a machine is lent
  whole (no lend limit), so a subtree may borrow every GPU of a model whose pools are that small: the demo's four G3
  nodes, all of which a 4-worker gang of 8 G3 GPUs needs.
- Borrow limit: every node `borrow_ratio` x capacity, the flat mapping's borrowed quota (a division of 5 % of the
  cluster limited to its own quota could never run a 16-worker gang).
- Weights (fair sharing of what is idle) in proportion to size: a VC's is its share x the number of VCs (mean 1),
  its best-effort account's the same, a division's the sum of its VCs'.
- reclaim_min_runtime_s: RECLAIM_MIN_RUNTIME_S on every division (borrowed work younger is reclaimed last).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from cluster.types import QuotaNodeView, QuotaView

BEST_EFFORT_SUFFIX = "/be"
DIVISIONS: tuple[tuple[str, float], ...] = (("div-xl", 128.0), ("div-l", 64.0), ("div-m", 32.0), ("div-s", 0.0))
POOL_KEPT_BY_VC = 0.8  # of a VC's share, its own; the rest goes to its division's pool
RECLAIM_MIN_RUNTIME_S = 300.0
TREES = ("flat", "helios")


def division_of(gpus: float) -> str:
    """The division of a VC with a quota of `gpus` on Helios (the first band it reaches)."""
    return next(name for name, lower in DIVISIONS if gpus >= lower)


@dataclass(frozen=True)
class Hierarchy:
    """Divisions and their VCs (largest first), each VC's share of the cluster and each node's weight."""

    divisions: dict[str, tuple[str, ...]]
    shares: dict[str, float]  # VC -> its share of the cluster (sums to 1)
    weights: dict[str, float]  # division, VC and best-effort account -> fair-share weight

    def division_share(self, division: str) -> float:
        return sum(self.shares[vc] for vc in self.divisions[division])

    def nodes(self) -> tuple[QuotaNodeView, ...]:
        """The tree for the snapshot: the divisions under the root, each VC and its best-effort account under its
        division."""
        out = [QuotaNodeView(d, None, self.weights[d], RECLAIM_MIN_RUNTIME_S) for d in self.divisions]
        for d, vcs in self.divisions.items():
            for vc in vcs:
                out.append(QuotaNodeView(vc, d, self.weights[vc]))
                out.append(QuotaNodeView(vc + BEST_EFFORT_SUFFIX, d, self.weights[vc]))
        return tuple(out)

    def quotas(self, capacity: Mapping[str, float], borrow_ratio: float,
               machine: Mapping[str, float] | None = None) -> tuple[QuotaView, ...]:
        """Every node's quota of every resource key (module docstring); `machine`: per key, the largest node's amount,
        the unit a division keeps its pool in (none given: the pool as it is)."""
        out: list[QuotaView] = []
        for key, total in sorted(capacity.items()):
            borrowed = total * borrow_ratio
            for d, vcs in self.divisions.items():
                share = self.division_share(d)
                pool = total * share * (1 - POOL_KEPT_BY_VC)
                kept = whole_machines(pool, (machine or {}).get(key))
                out.append(QuotaView(d, key, pool, borrowed, lend_limit=total * share - kept if kept > 0 else None))
                for vc in vcs:
                    out.append(QuotaView(vc, key, total * self.shares[vc] * POOL_KEPT_BY_VC, borrowed))
                    out.append(QuotaView(vc + BEST_EFFORT_SUFFIX, key, 0.0, borrowed))
        return tuple(out)


def whole_machines(amount: float, machine: float | None) -> float:
    """`amount` rounded down to whole machines of `machine` each (None or 0: as it is)."""
    return amount if not machine else machine * math.floor(amount / machine + 1e-9)


def helios_hierarchy(gpus: Mapping[str, float]) -> Hierarchy:
    """The hierarchy of VCs with these GPU quotas (> 0) on Helios."""
    vcs = sorted(((vc, g) for vc, g in gpus.items() if g > 0), key=lambda kv: (-kv[1], kv[0]))
    if not vcs:
        raise ValueError("no virtual cluster has a quota")
    total = sum(g for _, g in vcs)
    divisions: dict[str, list[str]] = {name: [] for name, _ in DIVISIONS}
    for vc, g in vcs:
        divisions[division_of(g)].append(vc)
    shares = {vc: g / total for vc, g in vcs}
    weights = {vc: round(s * len(vcs), 6) for vc, s in shares.items()}
    kept = {d: tuple(members) for d, members in divisions.items() if members}
    weights |= {d: round(sum(weights[vc] for vc in members), 6) for d, members in kept.items()}
    return Hierarchy(kept, shares, weights)
