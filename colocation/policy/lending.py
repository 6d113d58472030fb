"""Lending policy per resource group (docs/concepts/lending.md#the-node-state-machine): when to convert nodes, how
many, which ones.

- Take back (offline->online) when projected online usage > maxRate or online pods are pending.
  Size: max(smallest k bringing usage <= expectRate, smallest k whose nodes fit the pending pods,
  first-fit decreasing, after the capacity already being taken back). Choose offline-normal
  co-location nodes with the fewest training jobs, then the least run time so far (the most
  recently started jobs: least work lost). Urgent: pending pods override busy windows.
- Graceful take-back: the node is cordoned (online-unnormal) at once, but its training pods are evicted only at
  `TakeBack.evict_at`: now when urgent (online pods pending), else now + `take_back_grace_s`, or the forecast rise
  for a forecast take-back if later (a take-back the forecast alone fired is no more urgent than a threshold one).
  Nodes are chosen by the jobs (a gang whole) still running at that deadline, then the run time lost. A job past its
  expected end counts as running (its estimate was short; its end is unknown).
  `expedite` names the groups whose in-flight take-backs must evict now (online pods pending).
- Lend (online->offline) when projected usage < minRate and training jobs are pending, no online
  pod is pending and no take-back is in flight. Size: the largest k such that, without the k
  chosen nodes, usage stays <= expectRate and their pods fit (first-fit decreasing) in the free
  room of the nodes that stay online. Choose online-normal co-location nodes with the fewest pods.
- At most `max_parallel` nodes per group convert at once, in-flight ones included; fixed-pool
  nodes are never candidates; at least `min_online_nodes` stay online. Except for a service group waiting for room
  (pending pods of one `PendingPod.group`): a group is placed whole, so the machines it needs are taken back in one
  decision that names it, past `max_parallel` if need be, never node by node across ticks.
A trigger that cannot act yields a Hold with the reason, so dashboards can say why nothing moved.

Forecast-driven (`profile.forecast` and a DemandForecast for the group; otherwise exactly the rules above):
- Urgent take-backs (online pods pending) take only the machines the pending pods need, idle ones first; the
  headroom is left to the rules below, which take it back gracefully.
- A non-urgent take-back evicts when the forecast needs its nodes (`_need_by`), not at their jobs' expected end: a
  node whose jobs end comes back then anyway, and a job that outruns its estimate still gets the time.
- Take back ahead of the rise: when the forecast puts online usage (lent nodes staying lent) above maxRate within
  the lead (`drain_s` and the start-up of the group's largest replica: forecast.lead_s), take back now, sized to
  expectRate at the forecast peak within the lead (also for the threshold
  triggers). Only when something is lent; busy windows hold it like a threshold take-back, unless the forecast puts
  online usage over 100 % within the lead (its pods would pend: urgent, seen ahead).
- Lend only what stays idle: a lend is also sized so that the forecast peak over [now, now + `min_lend_s`] stays
  <= maxRate without the lent nodes (longer, up to the latest expected end of the jobs already on lent nodes: lending
  more must not pull their take-back before it); if not even one node qualifies, a Hold says the forecast needs it.
- Plan for the burst, evict for the level: where the forecast has a burst band (`DemandForecast.band`: the cold-start
  forecast's), lends are sized to it, jobs on lent nodes must end before it passes maxRate (forecast.take_back_at) and
  idle lent nodes come back when it passes maxRate within the lead (as when the next replica would); when a
  take-back evicts and how many nodes it takes read the level.
  Inside a lending busy window, a take-back is urgent seen ahead when the band (the level without one) passes 100 %
  within the lead: online pods would pend before a take-back started later could bring nodes back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from math import inf

from cluster.types import GPU_EPS, NodeState, Pool
from colocation.policy.forecast import DemandForecast, first_over, lead_s
from colocation.policy.group import GroupNode, GroupView, ratio
from colocation.policy.profile import DEFAULT, LendingProfile, Thresholds
from colocation.policy.states import Direction
from colocation.policy.windows import busy_window, local


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
    FORECAST_RISE = "forecast-above-max"  # forecast-driven take-back ahead of the rise
    FORECAST_NEEDS_BACK = "forecast-needs-node-back"  # lend held: the forecast needs the node back within min_lend_s
    IDLE_LENT = "idle-lent-node"  # forecast-driven: the next replica would pass maxRate, an idle lent node comes back
    RECENT_TAKE_BACK = "recent-take-back"  # lend held: a take-back within relend_after_s (hysteresis)


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
    # cordon now, evict the training pods still running from then on (steps.TransitionRecord.evict_at): now when
    # urgent, else now + profile.take_back_grace_s (a forecast take-back: the forecast rise if later)
    evict_at: float = 0.0


@dataclass(frozen=True, slots=True)
class Hold:
    """A trigger fired but nothing is started this tick."""

    group: str
    direction: Direction
    reason: LendReason
    message: str


LendingDecision = Lend | TakeBack | Hold


def decide_lending(groups: Iterable[GroupView], now: float, profile: LendingProfile = DEFAULT,
                   forecasts: Mapping[str, DemandForecast] | None = None) -> list[LendingDecision]:
    """At most one decision per group, groups by name; pure. `forecasts` by group name are used only with
    `profile.forecast`; a group without one gets the threshold rules alone."""
    out = []
    for g in sorted(groups, key=lambda g: g.name):
        fc = forecasts.get(g.name) if profile.forecast and forecasts else None
        decision = decide_group(g, now, profile, fc)
        if decision is not None:
            out.append(decision)
    return out


def decide_group(g: GroupView, now: float, profile: LendingProfile = DEFAULT,
                 forecast: DemandForecast | None = None) -> LendingDecision | None:
    th = g.thresholds or profile.thresholds
    usage = g.projected_usage
    fc = forecast if profile.forecast else None
    if g.urgent_pending or usage > th.max_rate:
        return _take_back(g, th, now, profile, fc)
    if fc is not None and g.lent() and first_over(fc, g.projected_capacity, th.max_rate, now, lead_s(g, profile)):
        return _take_back(g, th, now, profile, fc)
    if fc is not None and _headroom_short(g, th, now, profile, fc) and (idle := _reclaim_idle(g, th, now, profile, fc)):
        return idle
    if usage < th.min_rate and g.pending_training > 0:
        return _lend(g, th, now, profile, fc.band() if fc is not None else None)
    return None


def _headroom_short(g: GroupView, th: Thresholds, now: float, profile: LendingProfile, fc: DemandForecast) -> bool:
    """Would online pass maxRate with every lent node staying lent: at its next replica, or where the forecast's burst
    band says the demand may be within the lead? Then lent nodes take no new job (forecast.take_back_at)."""
    return g.next_replica_over(th.max_rate) or (
        bool(fc.upper) and first_over(fc.band(), g.projected_capacity, th.max_rate, now, lead_s(g, profile)) is not None)


def _reclaim_idle(g: GroupView, th: Thresholds, now: float, profile: LendingProfile,
                  fc: DemandForecast) -> TakeBack | None:
    """Forecast-driven, when one more of the group's largest replica or the forecast's burst band would pass maxRate
    (`_headroom_short`): lent nodes take no new job then (forecast.take_back_at), so one left idle serves nobody; take
    idle ones back (it kills nothing) until usage is at expectRate with room for one more of the largest replica:
    headroom for a rise the forecast did not see."""
    slots = profile.max_parallel - len(g.in_flight())
    base, chosen = g.projected_capacity, []
    for n in sorted((n for n in g.lent() if not n.training), key=lambda n: n.name)[:max(0, slots)]:
        if ratio(g.demand, base) <= th.expect_rate and base - g.demand >= g.largest_replica - GPU_EPS:
            break
        chosen.append(n)
        base += n.capacity
    if not chosen:
        return None
    after = ratio(g.demand, base)
    msg = (f"take back {', '.join(n.name for n in chosen)}: idle lent nodes; {_short_why(g, th, now, profile, fc)} "
           f"(lent nodes take no new training); target expectRate {_pct(th.expect_rate)}, usage after {_pct(after)}")
    return TakeBack(g.name, tuple(n.name for n in chosen), LendReason.IDLE_LENT, msg, g.projected_usage, after,
                    evict_at=now)


def _short_why(g: GroupView, th: Thresholds, now: float, profile: LendingProfile, fc: DemandForecast) -> str:
    """Why `_headroom_short`: the next replica, else the burst band's first minute over maxRate."""
    if g.next_replica_over(th.max_rate):
        return (f"one more replica ({g.largest_replica:g} {g.unit}) would put online usage "
                f"{_pct(ratio(g.demand + g.largest_replica, g.projected_capacity))} over maxRate {_pct(th.max_rate)}")
    band = fc.band()
    over = first_over(band, g.projected_capacity, th.max_rate, now, lead_s(g, profile))
    return _forecast_says(*over, th, profile, band.source) if over else f"forecast ({band.source}) above maxRate"


def _hhmm(t: float, profile: LendingProfile) -> str:
    return f"{local(t, profile.tz):%H:%M}"


def _forecast_says(usage: float, t: float, th: Thresholds, profile: LendingProfile, source: str) -> str:
    via = "" if source == "seasonal" else f" ({source})"
    return f"forecast{via} {_hhmm(t, profile)} online {_pct(usage)} > maxRate {_pct(th.max_rate)}"


def _pct(x: float) -> str:
    return f"{x:.0%}"


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


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


def _work_lost(n: GroupNode, evict_at: float, now: float) -> tuple[int, float, float, str]:
    """What taking back `n` with its evictions at `evict_at` kills: its training jobs still running then (a gang's
    worker counts its whole gang: all its workers die; an unknown end, or one already passed, counts as running),
    then their run time by then (again every worker of a gang), then when its last job is expected to end (nearest
    completion first: the node is free soonest), then the name."""
    jobs = {p.job_id if p.job_id is not None else p.name: p for p in n.training if p.runs_at(evict_at, now)}
    return (sum(p.workers for p in jobs.values()),
            sum(p.workers * max(0.0, evict_at - p.started_at) for p in jobs.values()), _last_end(n, now), n.name)


def _last_end(n: GroupNode, now: float) -> float:
    """When the node's training is expected to be over (an unknown or passed end: never; no training: at once)."""
    return max((p.end(now) for p in n.training), default=-inf)


def _need_by(g: GroupView, fc: DemandForecast, now: float, floor: float) -> float:
    """How long a non-urgent forecast take-back may leave the training on its nodes: until the group's largest
    replica must start for the first forecast minute whose demand passes what online pods can be placed on now (the
    forecast's end if none), never before `floor`. Waiting costs online nothing (pods that pend expedite the eviction)
    and lets jobs about to end finish."""
    full = first_over(fc, g.ready_capacity, 1.0, now)
    return max(floor, (full[1] if full else fc.at(len(fc.values))) - g.startup_s)


def expedite(groups: Iterable[GroupView]) -> frozenset[str]:
    """Groups whose in-flight take-backs must evict now: online pods are pending there (online service wins)."""
    return frozenset(g.name for g in groups if g.urgent_pending)


def _take_back(g: GroupView, th: Thresholds, now: float, profile: LendingProfile,
               fc: DemandForecast | None = None) -> LendingDecision:
    flight = g.in_flight()
    usage, pending = g.projected_usage, g.urgent_pending
    triggers = []
    if pending:
        need = sum(p.request for p in pending)
        triggers.append(f"{len(pending)} online pods pending needing {need:g} {g.unit}")
    if usage > th.max_rate:
        triggers.append(f"online usage {_pct(usage)} > maxRate {_pct(th.max_rate)}")
    demand = g.demand
    evict_at = now if pending else now + profile.take_back_grace_s
    if fc is not None and not triggers:  # the forecast alone fired (decide_group checked it)
        rise = first_over(fc, g.projected_capacity, th.max_rate, now, lead_s(g, profile))
        triggers.append(_forecast_says(*rise, th, profile, fc.source) if rise else "forecast above maxRate")
        # not urgent, like a threshold take-back: the grace at least (a forecast that jumped must not kill now)
        evict_at = max(evict_at, rise[1]) if rise else evict_at
    if fc is not None and (peak := fc.peak(now, lead_s(g, profile))) is not None and peak[0] > demand:
        demand = peak[0]  # land at expectRate at the peak the drain reaches, not just now
        if usage > th.max_rate or pending:  # the forecast's own sentence already names its minute
            triggers.append(f"forecast peak {_hhmm(peak[1], profile)} online "
                            f"{_pct(ratio(demand, g.projected_capacity))}")
    trigger = "; ".join(triggers)
    window = busy_window(now, profile)
    if not pending and profile.hold_against_window and window and window.direction is Direction.LEND:
        span = f"{window.start:%H:%M}-{window.end:%H:%M} lending window"
        # the burst band where there is one: a burst it sees would pend as surely as a rise the level sees
        band = fc.band() if fc is not None else None
        full = first_over(band, g.projected_capacity, 1.0, now, lead_s(g, profile)) if band is not None else None
        if full is None:
            return _hold(g, Direction.TAKE_BACK, LendReason.BUSY_WINDOW, f"{trigger} is not urgent inside the {span}")
        # pods will pend before a take-back started later could bring the nodes back: urgent, seen ahead
        via = "" if band.source == "seasonal" else f" ({band.source})"
        trigger += (f"; urgent inside the {span}: forecast{via} {_hhmm(full[1], profile)} online {_pct(full[0])} "
                    f"> 100%, its pods would wait")
    # a non-urgent take-back with a forecast waits for the jobs on its nodes up to when the forecast needs the nodes
    # (`_need_by`); the nodes are chosen by what still runs then
    need_by = evict_at if pending or fc is None else _need_by(g, fc, now, evict_at)
    cands = sorted(g.lent(), key=lambda n: _work_lost(n, need_by, now))
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
    # whole machines for a whole replica: usage down to expectRate with room for one more of the largest replica
    k_usage = next((k for k in range(len(caps) + 1) if ratio(demand, base + sum(caps[:k])) <= th.expect_rate
                    and base + sum(caps[:k]) - demand >= g.largest_replica - GPU_EPS), len(caps))
    # urgent with a forecast: only the machines the pending pods need evict now; the headroom is left to the forecast
    # rules, which take it back gracefully ahead of the rise (jobs on it may end). Without a forecast nothing else sees
    # the next scale-out coming: the headroom comes back at once too.
    want = k_pending if pending and fc is not None else max(k_pending, k_usage)
    if want == 0 and too_big:
        return _hold(g, Direction.TAKE_BACK, LendReason.NO_CANDIDATE,
                     f"{trigger}; pods of {', '.join(f'{r:g}' for r in too_big)} {g.unit} fit on no offline node "
                     f"(largest {biggest:g} {g.unit})")
    if want == 0:
        return _hold(g, Direction.TAKE_BACK, LendReason.COVERED,
                     f"{trigger}; the nodes already being taken back cover it")
    k = min(want, slots)
    whole = _for_group(pending, arriving, caps)
    if whole is not None and whole[1] > k:
        k = whole[1]
    chosen = cands[:k]
    # evict only when the forecast needs the nodes, not at their jobs' expected end: a node whose jobs end is back
    # at once anyway, and a job that outruns its estimate still gets the time online does not need
    evict_at = need_by
    after = ratio(g.demand, base + sum(caps[:k]))
    capped = f"; capped at {k} of {want} by max {profile.max_parallel} converting" if k < want else ""
    if pending and fc is not None and k_usage > k:
        capped += (f"; now only what the pending pods need: {k} of the {k_usage} machines expectRate wants (the rest "
                   f"waits for a graceful take-back)")
    if whole is not None:
        past = f", past max {profile.max_parallel} converting" if len(flight) + k > profile.max_parallel else ""
        trigger += f"; frees {whole[1]} machines at once for {whole[0]}{past}"
    reason = (LendReason.ONLINE_PENDING if pending else LendReason.HIGH_USAGE if usage > th.max_rate
              else LendReason.FORECAST_RISE)
    jobs = {p.job_id if p.job_id is not None else p.name: p for n in chosen for p in n.training}
    evicting = f"{len(jobs)} training jobs requeued to the fixed pool"
    if evict_at > now:  # graceful: name the deadline and what is expected to be still running then
        left = sum(1 for p in jobs.values() if p.runs_at(evict_at, now))
        ending = f" ({len(jobs) - left} expected to end before)" if left < len(jobs) else ""
        evicting = (f"cordoned, evicting what still runs at {_hhmm(evict_at, profile)}: {left} training jobs "
                    f"requeued to the fixed pool{ending}")
    msg = (f"take back {', '.join(n.name for n in chosen)}: {trigger}; target expectRate "
           f"{_pct(th.expect_rate)}, usage after {_pct(after)}; {evicting}{capped}")
    return TakeBack(g.name, tuple(n.name for n in chosen), reason, msg, usage, after, evict_at=evict_at)


def _for_group(pending: Iterable, arriving: list[float], caps: list[float]) -> tuple[str, int] | None:
    """The first service group among the pending pods that the capacity already arriving does not hold, and how many
    of the candidate machines (in order) its pods need together; None when no group waits."""
    by_group: dict[str, list[float]] = {}
    for p in pending:
        if p.group:
            by_group.setdefault(p.group, []).append(p.request)
    for name, pods in sorted(by_group.items()):
        left = _spill(pods, arriving)
        k = next((k for k in range(1, len(caps) + 1) if not _spill(left, caps[:k])), None)
        if left and k is not None:
            return name, k
    return None


def _keep_idle(g: GroupView, now: float, profile: LendingProfile) -> tuple[float, str]:
    """How long a new lend must leave the forecast below maxRate, and why: the minimum lend, or longer while training
    jobs already on the group's lent nodes are expected to run (they were placed to end before the predicted
    take-back; lending more lowers the online capacity, and must not pull that take-back before their end)."""
    ends = [p.expected_end for n in g.lent() for p in n.training if p.expected_end is not None]
    latest = max(ends, default=now)
    if latest - now > profile.min_lend_s:
        return latest - now, f"the jobs on lent nodes' expected end {_hhmm(latest, profile)}"
    return profile.min_lend_s, f"the {_h(profile.min_lend_s)} minimum lend"


def _lend(g: GroupView, th: Thresholds, now: float, profile: LendingProfile,
          fc: DemandForecast | None = None) -> LendingDecision:
    flight = g.in_flight()
    usage = g.projected_usage
    trigger = (f"online usage {_pct(usage)} < minRate {_pct(th.min_rate)}, "
               f"{g.pending_training} training jobs pending")
    if Direction.TAKE_BACK in flight.values():
        return _hold(g, Direction.LEND, LendReason.TAKE_BACK_IN_FLIGHT, f"{trigger}; a take-back is in flight")
    if g.last_take_back is not None and now - g.last_take_back < profile.relend_after_s:
        return _hold(g, Direction.LEND, LendReason.RECENT_TAKE_BACK,
                     f"{trigger}; a take-back at {_hhmm(g.last_take_back, profile)}: no lend within "
                     f"{_h(profile.relend_after_s)} of one")
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
    k, needed, short = 0, None, False
    keep_s, keep_why = _keep_idle(g, now, profile)
    for size in range(1, min(slots, len(cands), len(online) - profile.min_online_nodes) + 1):
        out = {n.name for n in cands[:size]}
        left = g.projected_capacity - sum(n.capacity for n in cands[:size])
        if ratio(g.demand, left) > th.expect_rate:
            break
        if left - g.demand < g.largest_replica:  # the next scale-out of a group would pend and take a node back
            short = True
            break
        items = moving + [p.request for n in cands[:size] for p in n.inference if not p.detached]
        if _spill(items, (n.capacity - n.load for n in online if n.name not in out)):
            break
        if fc is not None and (needed := first_over(fc, left, th.max_rate, now, keep_s)) is not None:
            break  # the forecast would take this node back too soon: lend only what stays idle
        k = size
    if k == 0 and needed is not None:
        return _hold(g, Direction.LEND, LendReason.FORECAST_NEEDS_BACK,
                     f"{trigger}; lending even one node, {_forecast_says(*needed, th, profile, fc.source)} "
                     f"within {keep_why}")
    room = f"less than one replica ({g.largest_replica:g} {g.unit}) free online"
    if k == 0:
        why = room if short else (f"usage would exceed expectRate {_pct(th.expect_rate)} or its pods would not "
                                  f"fit")
        return _hold(g, Direction.LEND, LendReason.NO_ROOM, f"{trigger}; without even one node {why}")
    chosen = cands[:k]
    after = ratio(g.demand, g.projected_capacity - sum(n.capacity for n in chosen))
    msg = (f"lend {', '.join(n.name for n in chosen)}: {trigger}; target expectRate {_pct(th.expect_rate)}, "
           f"usage after {_pct(after)}")
    if short:
        msg += f"; no more: lending one more node would leave {room}"
    elif needed is not None:
        msg += f"; no more: lending one more node, {_forecast_says(*needed, th, profile, fc.source)} within {keep_why}"
    elif fc is not None:
        msg += f"; the forecast keeps usage <= maxRate {_pct(th.max_rate)} for {keep_why}"
    return Lend(g.name, tuple(n.name for n in chosen), LendReason.LOW_USAGE, msg, usage, after)
