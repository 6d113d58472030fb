"""Lending policy per resource group (README: Co-location): when to convert nodes, how many, which ones.

- Take back (offline->online) when projected online usage > maxRate or online pods are pending.
  Size: max(smallest k bringing usage <= expectRate, smallest k whose nodes fit the pending pods,
  first-fit decreasing, after the capacity already being taken back). Choose offline-normal
  co-location nodes with the fewest training jobs, then the least run time so far (the most
  recently started jobs: least work lost). Urgent: pending pods override busy windows.
- Lend (online->offline) when projected usage < minRate and training jobs are pending, no online
  pod is pending and no take-back is in flight. Size: the largest k such that, without the k
  chosen nodes, usage stays <= expectRate and their pods fit (first-fit decreasing) in the free
  room of the nodes that stay online. Choose online-normal co-location nodes with the fewest pods.
- At most `max_parallel` nodes per group convert at once, in-flight ones included; fixed-pool
  nodes are never candidates; at least `min_online_nodes` stay online.
A trigger that cannot act yields a Hold with the reason, so dashboards can say why nothing moved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from cluster.types import GPU_EPS, NodeState, Pool
from colocation.policy.profile import DEFAULT, LendingProfile, Thresholds
from colocation.policy.states import Direction
from colocation.policy.views import GroupNode, GroupView, ratio
from colocation.policy.windows import busy_window


class LendReason(str, Enum):
    LOW_USAGE = "online-usage-below-min"
    HIGH_USAGE = "online-usage-above-max"
    ONLINE_PENDING = "online-pods-pending"
    PARALLEL_LIMIT = "parallel-limit"
    NO_CANDIDATE = "no-candidate-node"
    NO_ROOM = "no-room-to-migrate"
    BUSY_WINDOW = "busy-window"
    TAKE_BACK_IN_FLIGHT = "take-back-in-flight"
    COVERED = "covered-by-take-back-in-flight"


@dataclass(frozen=True, slots=True)
class Lend:
    group: str
    nodes: tuple[str, ...]
    reason: LendReason
    message: str
    usage: float  # projected usage before
    usage_after: float
    direction: Direction = Direction.LEND


@dataclass(frozen=True, slots=True)
class TakeBack:
    group: str
    nodes: tuple[str, ...]
    reason: LendReason  # ONLINE_PENDING when pods wait (urgent), else HIGH_USAGE
    message: str
    usage: float
    usage_after: float
    direction: Direction = Direction.TAKE_BACK


@dataclass(frozen=True, slots=True)
class Hold:
    """A trigger fired but nothing is started this tick."""

    group: str
    direction: Direction
    reason: LendReason
    message: str


LendingDecision = Lend | TakeBack | Hold


def decide_lending(groups: Iterable[GroupView], now: float,
                   profile: LendingProfile = DEFAULT) -> list[LendingDecision]:
    """At most one decision per group, groups by name; pure."""
    out = []
    for g in sorted(groups, key=lambda g: g.name):
        decision = decide_group(g, now, profile)
        if decision is not None:
            out.append(decision)
    return out


def decide_group(g: GroupView, now: float, profile: LendingProfile = DEFAULT) -> LendingDecision | None:
    th = g.thresholds or profile.thresholds
    usage = g.projected_usage
    if g.urgent_pending or usage > th.max_rate:
        return _take_back(g, th, now, profile)
    if usage < th.min_rate and g.pending_training > 0:
        return _lend(g, th, now, profile)
    return None


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _spill(items: Iterable[float], bins: Iterable[float]) -> list[float]:
    """First-fit decreasing of `items` into free room `bins`; returns the items that did not fit."""
    free, left = list(bins), []
    for r in sorted(items, reverse=True):
        i = next((i for i, f in enumerate(free) if r <= f + GPU_EPS), None)
        if i is None:
            left.append(r)
        else:
            free[i] -= r
    return left


def _hold(g: GroupView, d: Direction, reason: LendReason, why: str) -> Hold:
    verb = "lend" if d is Direction.LEND else "take back"
    return Hold(g.name, d, reason, f"{g.name}: would {verb} but {why}")


def _work_lost(n: GroupNode, now: float) -> tuple[int, float, str]:
    """What taking back `n` kills: its training jobs (a gang's worker counts its whole gang: all its workers die),
    then their run time so far (again every worker of a gang), then the name."""
    jobs = {p.job_id if p.job_id is not None else p.name: p for p in n.training}
    return (sum(p.workers for p in jobs.values()),
            sum(p.workers * max(0.0, now - p.started_at) for p in jobs.values()), n.name)


def _take_back(g: GroupView, th: Thresholds, now: float, profile: LendingProfile) -> LendingDecision:
    flight = g.in_flight()
    usage, pending = g.projected_usage, g.urgent_pending
    triggers = []
    if pending:
        need = sum(p.request for p in pending)
        triggers.append(f"{len(pending)} online pods pending needing {need:g} {g.unit}")
    if usage > th.max_rate:
        triggers.append(f"online usage {_pct(usage)} > maxRate {_pct(th.max_rate)}")
    trigger = "; ".join(triggers)
    window = busy_window(now, profile)
    if not pending and profile.hold_against_window and window and window.direction is Direction.LEND:
        return _hold(g, Direction.TAKE_BACK, LendReason.BUSY_WINDOW,
                     f"{trigger} is not urgent inside the {window.start:%H:%M}-{window.end:%H:%M} lending window")
    cands = sorted((n for n in g.nodes if n.pool is Pool.COLOCATION and n.state is NodeState.OFFLINE_NORMAL
                    and n.name not in flight),
                   key=lambda n: _work_lost(n, now))
    if not cands:
        return _hold(g, Direction.TAKE_BACK, LendReason.NO_CANDIDATE, f"{trigger}; no offline-normal co-location node")
    slots = profile.max_parallel - len(flight)
    if slots <= 0:
        return _hold(g, Direction.TAKE_BACK, LendReason.PARALLEL_LIMIT,
                     f"{trigger}; {len(flight)} nodes already converting (max {profile.max_parallel})")
    # Capacity already on its way online takes pending pods first; pods bigger than any node never fit.
    arriving = [n.capacity for n in g.nodes if flight.get(n.name) is Direction.TAKE_BACK]
    biggest = max(n.capacity for n in cands)
    spilled = _spill((p.request for p in pending), arriving)
    need = [r for r in spilled if r <= biggest + GPU_EPS]
    too_big = [r for r in spilled if r > biggest + GPU_EPS]
    caps = [n.capacity for n in cands]
    k_pending = next((k for k in range(len(caps) + 1) if not _spill(need, caps[:k])), len(caps))
    base = g.projected_capacity
    k_usage = next((k for k in range(len(caps) + 1) if ratio(g.demand, base + sum(caps[:k])) <= th.expect_rate),
                   len(caps))
    want = max(k_pending, k_usage)
    if want == 0 and too_big:
        return _hold(g, Direction.TAKE_BACK, LendReason.NO_CANDIDATE,
                     f"{trigger}; pods of {', '.join(f'{r:g}' for r in too_big)} {g.unit} fit on no offline node "
                     f"(largest {biggest:g} {g.unit})")
    if want == 0:
        return _hold(g, Direction.TAKE_BACK, LendReason.COVERED,
                     f"{trigger}; the nodes already being taken back cover it")
    k = min(want, slots)
    chosen = cands[:k]
    after = ratio(g.demand, base + sum(caps[:k]))
    capped = f"; capped at {k} of {want} by max {profile.max_parallel} converting" if k < want else ""
    reason = LendReason.ONLINE_PENDING if pending else LendReason.HIGH_USAGE
    jobs = len({p.job_id if p.job_id is not None else p.name for n in chosen for p in n.training})
    msg = (f"take back {', '.join(n.name for n in chosen)}: {trigger}; target expectRate "
           f"{_pct(th.expect_rate)}, usage after {_pct(after)}; "
           f"{jobs} training jobs requeued to the fixed pool{capped}")
    return TakeBack(g.name, tuple(n.name for n in chosen), reason, msg, usage, after)


def _lend(g: GroupView, th: Thresholds, now: float, profile: LendingProfile) -> LendingDecision:
    flight = g.in_flight()
    usage = g.projected_usage
    trigger = (f"online usage {_pct(usage)} < minRate {_pct(th.min_rate)}, "
               f"{g.pending_training} training jobs pending")
    if Direction.TAKE_BACK in flight.values():
        return _hold(g, Direction.LEND, LendReason.TAKE_BACK_IN_FLIGHT, f"{trigger}; a take-back is in flight")
    window = busy_window(now, profile)
    if profile.hold_against_window and window and window.direction is Direction.TAKE_BACK:
        return _hold(g, Direction.LEND, LendReason.BUSY_WINDOW,
                     f"{trigger}; inside the {window.start:%H:%M}-{window.end:%H:%M} take-back window")
    slots = profile.max_parallel - len(flight)
    if slots <= 0:
        return _hold(g, Direction.LEND, LendReason.PARALLEL_LIMIT,
                     f"{trigger}; {len(flight)} nodes already converting (max {profile.max_parallel})")
    online = [n for n in g.nodes if n.state is NodeState.ONLINE_NORMAL and n.name not in flight]
    cands = sorted((n for n in online if n.pool is Pool.COLOCATION), key=lambda n: (n.pod_count, n.load, n.name))
    if not cands:
        return _hold(g, Direction.LEND, LendReason.NO_CANDIDATE, f"{trigger}; no online-normal co-location node")
    # Pods still on nodes being lent need room too.
    moving = [p.request for n in g.nodes if flight.get(n.name) is Direction.LEND for p in n.inference
              if not p.detached]
    if len(online) <= profile.min_online_nodes:
        return _hold(g, Direction.LEND, LendReason.NO_ROOM,
                     f"{trigger}; only {len(online)} online-normal nodes left (keep {profile.min_online_nodes})")
    k = 0
    for size in range(1, min(slots, len(cands), len(online) - profile.min_online_nodes) + 1):
        out = {n.name for n in cands[:size]}
        if ratio(g.demand, g.projected_capacity - sum(n.capacity for n in cands[:size])) > th.expect_rate:
            break
        items = moving + [p.request for n in cands[:size] for p in n.inference if not p.detached]
        if _spill(items, (n.capacity - n.load for n in online if n.name not in out)):
            break
        k = size
    if k == 0:
        return _hold(g, Direction.LEND, LendReason.NO_ROOM,
                     f"{trigger}; without even one node usage would exceed expectRate "
                     f"{_pct(th.expect_rate)} or its pods would not fit")
    chosen = cands[:k]
    after = ratio(g.demand, g.projected_capacity - sum(n.capacity for n in chosen))
    msg = (f"lend {', '.join(n.name for n in chosen)}: {trigger}; target expectRate {_pct(th.expect_rate)}, "
           f"usage after {_pct(after)}")
    return Lend(g.name, tuple(n.name for n in chosen), LendReason.LOW_USAGE, msg, usage, after)
