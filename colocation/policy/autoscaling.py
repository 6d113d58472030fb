"""Inference autoscaling (docs/concepts/autoscaling.md#the-policy), pure: a service's scaling decision from its policy, its recent
per-minute loads, its forecast and `now`; then one arbitration across a resource group by priority.

The live loop (colocation/autoscaler.py), the co-location simulation and the offline evaluation
(`manage.py autoscale_eval`) all call `decide_group`/`decide_service`: one policy, three callers.

A minute's load is measured at the replica count it names; the rules use only the newest minutes measured at the
current count since it last changed (a minute at the old count says nothing about the new one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import time
from enum import StrEnum
from itertools import takewhile

from cluster.types import GPU_UTIL, SM_ACTIVE
from colocation.policy.schedules import Schedule, scheduled_minimum
from colocation.policy.serving import FIT_MINUTES, ServingTargets, breaches, missed, replicas_for_breach, \
    slo_utilization
from colocation.policy.slo_sizing import SPREAD_MINUTES, size_to_slo
from colocation.policy.windows import in_window, local

METRICS = ("gpu", "cpu", "memory", "gpu_memory")
BUSY = "busy"
SYSTEM_MIN_REPLICAS = 2
OUT_MINUTES = 2  # scale out when over maxRate in each of the last 2 minutes
IN_MINUTES = 5  # scale in when under minRate in each of the last 5 minutes
RULE_MINUTES = max(OUT_MINUTES, IN_MINUTES)  # the furthest back the reactive rules look
SAME_RATE = 0.005  # rates closer than half a point read the same in a decision (whole percents)
STABLE_S = 180  # the replica count must have been stable this long
STALE_S = 120  # a minute whose end lies further back than this is dropped
SILENT_MINUTES = 5  # no metrics this long: restore yesterday's maximum
AHEAD = 5  # forecast minutes looked at (at least; a service's start-up time further: lookahead())
AHEAD_OVER = 2  # of which this many over maxRate trigger a scale-out ahead of the peak
LOOKAHEAD_STARTUPS = 2  # a decision holds the next until its replicas serve (one start-up), whose own serve a start-up later
UTILIZATION = frozenset({"gpu", "cpu", "memory", "gpu_memory", BUSY})  # per-replica shares of the work
MINUTE = 60
FLOAT_SLACK = 1e-9  # 0.9/0.6*4 is 6.000000000000001: not a reason for a 7th replica


class ScaleReason(StrEnum):
    SCALE_OUT = "scale-out"
    SCALE_IN = "scale-in"
    PREDICTIVE_OUT = "predictive-scale-out"
    PREDICTIVE_LIMIT = "predictive-scale-in-limit"
    HOLD = "hold"
    SKIP_OFF = "skip-autoscaling-off"
    SKIP_OFFLINE = "skip-offline"
    SKIP_MANUAL = "skip-manual-deploy"
    SKIP_SCALING = "skip-scaling"
    SKIP_UNSTABLE = "skip-unstable"
    STALE = "stale-metrics"
    FALLBACK = "fallback-yesterday-max"
    TO_ZERO = "scale-to-zero"
    FROM_ZERO = "scale-from-zero"
    SCHEDULE = "schedule-minimum"
    PEAK_WINDOW = "peak-window"
    PRIORITY = "priority-capped"
    SLO_OUT = "slo-scale-out"


SKIPS = frozenset({ScaleReason.SKIP_OFF, ScaleReason.SKIP_OFFLINE, ScaleReason.SKIP_MANUAL, ScaleReason.SKIP_SCALING,
                   ScaleReason.SKIP_UNSTABLE})


@dataclass(frozen=True, slots=True)
class Rates:
    """maxRate / minRate / expectRate of one metric, fractions of what a replica has."""

    min_rate: float
    expect_rate: float
    max_rate: float

    def __post_init__(self) -> None:
        if not 0 <= self.min_rate <= self.expect_rate <= self.max_rate <= 1 or self.expect_rate <= 0:
            raise ValueError(f"need 0 <= minRate <= expectRate <= maxRate <= 1 and expectRate > 0, got "
                             f"{self.min_rate}/{self.expect_rate}/{self.max_rate}")


BUSY_RATES = Rates(0.6, 0.7, 0.8)  # docs/concepts/autoscaling.md#the-policy: the workers' busy fraction kept within 0.6-0.8


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    thresholds: tuple[tuple[str, Rates], ...] = (("gpu", Rates(0.3, 0.6, 0.8)),)
    min_replicas: int = SYSTEM_MIN_REPLICAS
    max_replicas: int = 10
    priority: int = 0
    autoscaling: bool = True
    predictive: bool = True  # off: the reactive rule alone
    peak_window: tuple[time, time] | None = None  # local [start, end): no scale-in inside
    scale_to_zero_idle_min: int | None = None
    schedules: tuple[Schedule, ...] = ()
    busy_signal: bool = False  # scale on the "busy" threshold instead of utilization
    tz: str = "UTC"
    # Square-root headroom (beta): every rate is scaled by 1/(1 + beta/sqrt(N)) at N replicas, so a small service
    # keeps more headroom than a large one: a load's minute-to-minute swing grows like the square root of its size
    # (square-root staffing), not in proportion. 0: the plain thresholds.
    headroom: float = 0.0
    serving: ServingTargets | None = None  # an LLM service's SLO, KV-cache and queue targets (policy/serving.py)
    startup_min: int = 0  # minutes from asking a replica (a group: all its pods) to its serving

    def __post_init__(self) -> None:
        if self.headroom < 0 or self.startup_min < 0:
            raise ValueError(f"headroom and startup_min must be >= 0, got {self.headroom}, {self.startup_min}")

    def rates(self) -> dict[str, Rates]:
        """The metrics this policy scales on; the busy signal without its own threshold keeps 0.6-0.8
        (docs/concepts/autoscaling.md#the-policy)."""
        if self.busy_signal:
            return {BUSY: dict(self.thresholds).get(BUSY, BUSY_RATES)}
        return {m: r for m, r in self.thresholds if m in METRICS}


@dataclass(frozen=True, slots=True)
class LoadMinute:
    """One minute of a service, measured with `replicas` serving; utilizations are per replica, 0..1."""

    at: float  # start of the minute, epoch seconds
    replicas: int
    gpu: float | None = None
    cpu: float | None = None
    memory: float | None = None
    gpu_memory: float | None = None
    busy: float | None = None
    qps: float | None = None  # at the gateway: also counted while no replica runs
    busy_source: str = ""  # the metric `busy` was read from (busy_of), named in the decision
    # LLM serving signals (policy/serving.py; docs/reference/llm-serving-metrics.md for the engine's metric names)
    tokens_in: float | None = None  # prompt tokens/s
    tokens_out: float | None = None  # generated tokens/s
    queue: float | None = None  # requests waiting, the whole service
    kv_cache: float | None = None  # KV-cache use, mean over the replicas, 0..1
    ttft_p50: float | None = None  # seconds
    ttft_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p99: float | None = None
    tpot_mean: float | None = None  # the histogram's _sum / _count: exact, where a p99 is interpolated in a bucket
    # tpot_p99 censored by its histogram bucket (serving.bucket_bound): the bucket's upper bound when the reading lies
    # in its top 2 %, where it says only "p99 <= this"; None: the reading is taken as measured (or the buckets unknown)
    tpot_p99_bound: float | None = None

    def value(self, metric: str) -> float | None:
        return getattr(self, metric)


def busy_of(sm_active: float | None, gpu_util: float | None) -> tuple[float | None, str]:
    """The busy signal of a GPU service's minute and its source: SM active where measured, since GPU util counts any
    kernel's time slice (two light servers time-sliced on an H200 read 81 % GPU util at SM active 0.06), else GPU util."""
    if sm_active is not None:
        return sm_active, SM_ACTIVE
    return gpu_util, GPU_UTIL if gpu_util is not None else ""


@dataclass(frozen=True, slots=True)
class ServiceView:
    name: str
    policy: ScalingPolicy
    replicas: int  # desired now
    ready: int  # serving now
    loads: tuple[LoadMinute, ...] = ()  # the last hour or so, oldest first
    replicas_changed_at: float | None = None
    offline: bool = False
    manual_deploy: bool = False
    forecast: tuple[tuple[str, tuple[float, ...]], ...] = ()  # metric -> utilization at `replicas`, h1..h5
    forecast_note: str = ""  # why no forecast is used, when none is
    yesterday_max: int | None = None
    per_replica: float = 1.0  # what one replica takes of its group (GPUs, or CPU millicores)


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    service: str
    current: int
    target: int
    reason: ScaleReason
    message: str
    # the message after its head (the service's name, with its verb and count where it has them): what decide_group
    # quotes of a capped decision; `message` is `head: why` (a skip's without a colon: `name why`)
    why: str
    data: dict = field(default_factory=dict, compare=False)

    @property
    def changes(self) -> bool:
        return self.target != self.current

    def then(self, more: str) -> ScaleDecision:
        """The decision with `more` said at the end of its sentence."""
        return replace(self, message=self.message + more, why=self.why + more)


def _decision(service: str, current: int, target: int, reason: ScaleReason, head: str, why: str,
              data: dict | None = None, sep: str = ": ") -> ScaleDecision:
    """A decision whose message is `head`, `sep`, then `why`."""
    return ScaleDecision(service, current, target, reason, f"{head}{sep}{why}", why, {} if data is None else data)


@dataclass(frozen=True, slots=True)
class Band:
    """How the GPU band a decision applied relates to the owner's, for a service whose SLO moves it
    (_under_slo): `owner` is the owner's band when another was used; `cause` says so in a few words beside each
    band the sentence names, `why` what was measured, at the sentence's end. The limit is recomputed every minute
    from the newest latencies, so one minute may lower the band and the next keep the owner's: `cause` says which."""

    owner: Rates | None = None
    cause: str = ""
    why: str = ""

    def beside(self, metric: str, shown: Callable[[Rates], str], applied: Rates) -> str:
        """The words beside a value of `metric`'s band the sentence names (`shown` phrases it from a band): nothing
        where the value `applied` is the owner's (the SLO lowers minRate only sometimes)."""
        if metric != "gpu" or not self.cause:
            return ""
        if self.owner is None:
            return f" (the owner's: {self.cause})"
        owners = shown(self.owner)
        return "" if owners == shown(applied) else f" (owner's {owners}, {self.cause})"


OWNERS = Band()  # the owner's band, nothing to say about it


# --- one service ----------------------------------------------------------------------------------


def decide_service(view: ServiceView, now: float) -> ScaleDecision:
    """Inference autoscaling for one service: filters, the reactive and predictive rules, scale to zero, then system
    rules."""
    skip = _skip(view, now)
    fresh = _recent_run(view.loads, now)
    if skip is not None and not _waking(view, skip, fresh):
        return _out_while_starting(view, now, fresh, skip)
    if not fresh:
        return _silent(view, now)
    if view.replicas == 0:
        return _from_zero(view, now, fresh[-1])
    idle = _idle(view, now)
    blocked = None if idle is None else _zero_blocked(view, now)
    if idle is not None and blocked is None:
        return idle
    d = _decide(view, now, fresh)
    if idle is None:
        return d
    return d.then(f"; not scaled to zero after {view.policy.scale_to_zero_idle_min} idle minutes: {blocked}")


def _waking(view: ServiceView, skip: ScaleDecision, fresh: Sequence[LoadMinute]) -> bool:
    """A service at zero whose gateway saw a request comes back at once, even within STABLE_S of going to zero:
    the stability wait guards against flapping between counts, and every minute at zero now is a minute its
    requests are not served."""
    return skip.reason is ScaleReason.SKIP_UNSTABLE and view.replicas == 0 and bool(fresh) and bool(fresh[-1].qps)


def lookahead(policy: ScalingPolicy) -> int:
    """Forecast minutes the predictive rule looks at: AHEAD, and at least one start-up time (a replica asked
    for a peak further away than its start-up is in time; one asked later is not). A service that waits for its
    replicas before deciding again looks two start-ups ahead; one that decides while they start, one."""
    startups = 1 if decides_while_starting(policy) else LOOKAHEAD_STARTUPS
    return max(AHEAD, math.ceil(startups * policy.startup_min))


def decides_while_starting(policy: ScalingPolicy) -> bool:
    """An LLM service (one with serving targets) keeps deciding, upward only, while its replicas start and within
    the stability wait: its groups start in many minutes, too long to sit through a second rise blind."""
    return policy.serving is not None


def _out_while_starting(view: ServiceView, now: float, fresh: Sequence[LoadMinute],
                        skip: ScaleDecision) -> ScaleDecision:
    """A scale-out of a service that decides while its replicas start (decides_while_starting), else the skip. The
    starting replicas count as capacity: the work measured on the ready ones is spread over every replica asked,
    so a rise the starting ones will carry asks nothing more (HPA counts its unready pods at 0 % use the same way).
    A scale-in still waits for the SPEC's filters."""
    if (skip.reason not in (ScaleReason.SKIP_SCALING, ScaleReason.SKIP_UNSTABLE) or view.replicas == 0 or not fresh
            or not decides_while_starting(view.policy)):
        return skip
    d = _decide(view, now, fresh, f" ({view.ready} of {view.replicas} ready, the others counted as capacity)")
    return d if d.target > view.replicas else skip


def keep_minutes(policy: ScalingPolicy) -> int:
    """Loads a view needs: no rule looks further back than the scale-in run, the scale-out run or the idle time
    of scale to zero, the TPOT curve's fit and the TTFT limit's search, or the SLO sizing's spread (callers that keep a
    window of minutes size it with this)."""
    serving = policy.serving
    spread = SPREAD_MINUTES + lookahead(policy) if serving and serving.sizes_to_slo else 0
    fit = FIT_MINUTES if serving and (serving.tpot_p99_s or serving.ttft_p99_s) else 0
    return max(IN_MINUTES, OUT_MINUTES, policy.scale_to_zero_idle_min or 0, spread, fit)


def _zero_blocked(view: ServiceView, now: float) -> str | None:
    """Why an idle service may not go to zero now (the normal rules apply instead), or None."""
    policy = view.policy
    if in_peak(policy, now):
        start, end = policy.peak_window
        return f"no scale-in in the peak window {start:%H:%M}–{end:%H:%M}"
    if scheduled_minimum(policy.schedules, now, policy.tz):
        return f"a schedule keeps at least {_floor(view, now)} now"
    return None


def _skip(view: ServiceView, now: float) -> ScaleDecision | None:
    n = view.replicas
    if not view.policy.autoscaling:
        return _hold(view, ScaleReason.SKIP_OFF, view.name, f"autoscaling is off; stays at {n} replicas")
    if view.offline:
        return _hold(view, ScaleReason.SKIP_OFFLINE, view.name, f"is offline; left at {n} replicas", sep=" ")
    if view.manual_deploy:
        return _hold(view, ScaleReason.SKIP_MANUAL, view.name, f"is being deployed by hand; left at {n} replicas",
                     sep=" ")
    if view.ready < n:
        return _hold(view, ScaleReason.SKIP_SCALING, f"{view.name} is still scaling",
                     f"{view.ready} of {n} replicas ready")
    if view.ready > n:  # after a scale-in the surplus serves until it has stopped
        return _hold(view, ScaleReason.SKIP_SCALING, f"{view.name} is still scaling in to {n} replicas",
                     f"{view.ready - n} of {view.ready} serving still to stop")
    changed = view.replicas_changed_at
    if changed is not None and now - changed < STABLE_S:
        return _hold(view, ScaleReason.SKIP_UNSTABLE, view.name, f"changed to {n} replicas {int(now - changed)} s "
                     f"ago; waiting until it has been stable {STABLE_S // 60} minutes", sep=" ")
    return None


def _recent_run(loads: Sequence[LoadMinute], now: float) -> list[LoadMinute]:
    """The unbroken run of minutes ending at the newest, or nothing when the newest lags more than STALE_S
    behind `now` (its metrics are dropped). A missing minute breaks the run: "each of the last k minutes"
    means k consecutive measured minutes."""
    if not loads or now - (loads[-1].at + MINUTE) > STALE_S:
        return []
    run = [loads[-1]]
    for m in reversed(loads[:-1]):
        if run[-1].at - m.at != MINUTE:
            break
        run.append(m)
    return run[::-1]


def _decide(view: ServiceView, now: float, fresh: Sequence[LoadMinute], note: str = "") -> ScaleDecision:
    """The rules and the system rules on the fresh minutes, under the thresholds the SLO allows (_under_slo); `note`
    follows the rules' sentence, before what moved the band."""
    capped, band = _under_slo(view, fresh)
    d = _bounded(capped, now, _rules(capped, _measured(capped, fresh), _at_current_count(capped, fresh), band))
    return d.then(note + (f"; {band.why}" if band.why else ""))


def _under_slo(view: ServiceView, run: Sequence[LoadMinute]) -> tuple[ServiceView, Band]:
    """An LLM service with latency targets: its GPU maxRate lowered to where the predicted TPOT and TTFT p99 stay
    within their targets at the latencies measured (serving.slo_utilization), expectRate with it (its ratio to
    maxRate kept): past that utilization the requests miss their SLO, whatever the owner set. minRate is the
    owner's floor of use, which an SLO (a ceiling) says nothing about: it stays, lowered in proportion only where
    it would reach the lowered expectRate (a band lowered as a whole kept groups idle at night)."""
    policy = view.policy
    rates, t = dict(policy.thresholds), policy.serving
    if t is None or "gpu" not in rates:
        return view, OWNERS
    if t.sizes_to_slo:
        return _sized_to_slo(view, run)
    if t.ttft_p99_s is None and t.tpot_p99_s is None:
        return view, OWNERS
    limit, r = slo_utilization(t, run), rates["gpu"]
    if limit is None:
        return view, Band(cause="no SLO limit from these minutes' latencies")
    cap, why = limit
    if r.max_rate <= cap + SAME_RATE:  # a cap a hair under maxRate would show the owner's band as lowered
        return view, Band(cause=f"the SLO allows {cap:.0%}")
    f = cap / r.max_rate
    expect = r.expect_rate * f
    rates["gpu"] = Rates(r.min_rate if r.min_rate < expect else r.min_rate * f, expect, cap)
    band = Band(r, "lowered for the SLO", f"{why} up to {cap:.0%} use")
    return replace(view, policy=replace(policy, thresholds=tuple(rates.items()))), band


def _sized_to_slo(view: ServiceView, run: Sequence[LoadMinute]) -> tuple[ServiceView, Band]:
    """A service sized to its request SLO (slo_sizing.py): its GPU band moved, its shape kept, so that expectRate
    is the utilization the SLO and min_gain ask; unchanged until the latencies can be fitted."""
    policy, t = view.policy, view.policy.serving
    sizing = size_to_slo(t.slo_ttft_s, t.slo_tpot_s, t.min_gain, run, lookahead(policy))
    if sizing is None:
        return view, Band(cause="no SLO sizing until its latencies can be fitted")
    rates = dict(policy.thresholds)
    r = rates["gpu"]
    u, f = sizing.utilization, sizing.utilization / r.expect_rate
    rates["gpu"] = Rates(min(u, r.min_rate * f), u, max(u, min(1.0, r.max_rate * f)))
    band = Band(r, "sized to the SLO", sizing.why)
    return replace(view, policy=replace(policy, thresholds=tuple(rates.items()))), band


def _measured(view: ServiceView, run: Sequence[LoadMinute]) -> list[LoadMinute]:
    """The minutes the utilization rules read: for a service that decides while its replicas start, the newest
    minutes measured on ready replicas, each rescaled to the current count (the work a minute measured is what it
    is, whoever served it: y × its replicas / N; the newest RULE_MINUTES, all the rules read); for the others, the
    minutes at the current count."""
    if not decides_while_starting(view.policy):
        return _at_current_count(view, run)
    kept: list[LoadMinute] = []
    for m in reversed(run[-RULE_MINUTES:]):
        if m.replicas <= 0:
            break
        f = m.replicas / view.replicas
        kept.append(replace(m, replicas=view.replicas, **{k: v * f for k in UTILIZATION
                                                          if (v := m.value(k)) is not None}))
    return kept[::-1]


def _at_current_count(view: ServiceView, run: Sequence[LoadMinute]) -> list[LoadMinute]:
    """The newest minutes of `run` measured at the current replica count and begun since it last changed: a
    minute served by the old count (a replica still starting, or one going away) says nothing about the new one,
    and ceil(y/expectRate × N) with y measured at fewer replicas than N would overshoot."""
    changed, kept = view.replicas_changed_at, []
    for m in reversed(run):
        if m.replicas != view.replicas or (changed is not None and m.at < changed):
            break
        kept.append(m)
    return kept[::-1]


def _hold(view: ServiceView, reason: ScaleReason, head: str, why: str, sep: str = ": ", **data) -> ScaleDecision:
    return _decision(view.name, view.replicas, view.replicas, reason, head, why, data, sep)


def _silent(view: ServiceView, now: float) -> ScaleDecision:
    """No fresh metrics: wait, and after SILENT_MINUTES restore yesterday's maximum."""
    last = max((m.at + MINUTE for m in view.loads), default=None)
    silent_min = math.inf if last is None else (now - last) // MINUTE
    if silent_min < SILENT_MINUTES or view.yesterday_max is None:
        why = "" if silent_min < SILENT_MINUTES else "; yesterday's maximum is unknown"
        since = "ever" if last is None else f"{int(silent_min)} minutes"
        return _hold(view, ScaleReason.STALE, view.name, f"no fresh metrics for {since}; stays at {view.replicas}{why}")
    target = _clamp(view, view.yesterday_max, _floor(view, now))
    note = _bounded_note(target, view.yesterday_max)
    if target < view.replicas <= view.policy.max_replicas and in_peak(view.policy, now):
        target, note = view.replicas, f" (kept at {view.replicas}: no scale-in in the peak window)"
    return _decision(view.name, view.replicas, target, ScaleReason.FALLBACK, view.name,
                     f"no metrics for {SILENT_MINUTES}+ minutes; restored to yesterday's maximum of "
                     f"{view.yesterday_max} replicas" + note,
                     {"silent_minutes": None if last is None else int(silent_min)})


def _from_zero(view: ServiceView, now: float, newest: LoadMinute) -> ScaleDecision:
    """Back from zero on the first request at the gateway, or when a schedule's window opens; a service without
    scale to zero may not stay at zero (at least 2 replicas)."""
    target = min(_floor(view, now), view.policy.max_replicas)
    if not view.policy.scale_to_zero_idle_min:
        return _decision(view.name, 0, target, ScaleReason.SCALE_OUT, f"{view.name} scales out to {target} replicas",
                         f"it is at zero without scale to zero; bounded by its minimum to {target}")
    if newest.qps:
        return _decision(view.name, 0, target, ScaleReason.FROM_ZERO, view.name, f"back from zero to {target} "
                         f"replicas on {newest.qps:.2f} requests/s at the gateway", {"qps": newest.qps})
    if scheduled_minimum(view.policy.schedules, now, view.policy.tz):
        return _decision(view.name, 0, target, ScaleReason.SCHEDULE, f"{view.name} scales from zero to {target} "
                         f"replicas", f"a schedule keeps at least {target} now")
    return _hold(view, ScaleReason.HOLD, view.name, "at zero replicas, no requests")


def _idle(view: ServiceView, now: float) -> ScaleDecision | None:
    """Scale to zero when every one of the last `idle` minutes, up to the newest, had no request."""
    idle = view.policy.scale_to_zero_idle_min
    if not idle:
        return None
    by_minute = {int(m.at // MINUTE): m for m in view.loads}
    newest = max(by_minute)
    window = [by_minute.get(newest - i) for i in range(idle)]
    if any(m is None or m.qps is None or m.qps > 0 for m in window):
        return None
    return _decision(view.name, view.replicas, 0, ScaleReason.TO_ZERO, view.name,
                     f"no request for {idle} minutes; scaled to zero")


def rates_at(rates: Rates, headroom: float, n: int) -> Rates:
    """The thresholds at `n` replicas under square-root headroom: each rate times 1/(1 + headroom/√n)."""
    if not headroom or n <= 0:
        return rates
    f = 1.0 / (1.0 + headroom / math.sqrt(n))
    return Rates(rates.min_rate * f, rates.expect_rate * f, rates.max_rate * f)


def replicas_for(y: float, n: int, rate: float, headroom: float, up: bool) -> tuple[int, str]:
    """Replicas for the work of utilization `y` at `n` replicas, and the formula as a phrase: without headroom
    ceil(y/rate×n) (up) or floor(y/rate×n) (down); with it, the fewest replicas k whose rate at k (rates_at) runs
    the work (up), or the most whose rate it fills (down)."""
    if not headroom:
        if up:
            k = math.ceil(y / rate * n - FLOAT_SLACK)
            return k, f"ceil({y:.2f}/{rate:.2f}×{n}) = {k}"
        k = math.floor(y / rate * n + FLOAT_SLACK)
        return k, f"floor({y:.2f}/{rate:.2f}×{n}) = {k}"
    work = y * n

    def fits(k: int) -> bool:
        return work <= rate * k / (1.0 + headroom / math.sqrt(k)) + FLOAT_SLACK

    k = max(1, math.ceil(work / rate - FLOAT_SLACK))  # the headroom only adds replicas to the plain answer
    while not fits(k):
        k += 1
    if not up and work < rate * k / (1.0 + headroom / math.sqrt(k)) - FLOAT_SLACK:
        k -= 1
    return k, f"{k} replicas run {y:.2f}×{n} at {rate:.2f} less headroom {headroom:g}/√{k}"


def _rules(view: ServiceView, loads: Sequence[LoadMinute], at_count: Sequence[LoadMinute],
           band: Band = OWNERS) -> ScaleDecision:
    """The reactive rule per metric on `loads` (_measured), the serving targets on `at_count` (latency measured at
    another count says nothing about this one) and the predictive rule; the largest answer wins. With square-root
    headroom the triggers are the rates at the current count (rates_at) and every count is sized at the
    headroom-scaled rate. Each band the sentence names is the one applied, with the owner's beside it where the SLO
    moved it (`band`)."""
    n, policy = view.replicas, view.policy
    answers: list[tuple[int, ScaleReason, str, str]] = []  # (replicas, reason, metric, why)
    for metric, base in sorted(policy.rates().items()):
        ys, rates = _trailing(loads, metric), rates_at(base, policy.headroom, n)
        source = loads[-1].busy_source if metric == BUSY and loads else ""
        named = f"busy ({source})" if source else metric  # the sentence says what busy was read from
        if len(ys) >= OUT_MINUTES and all(v > rates.max_rate for v in ys[-OUT_MINUTES:]):
            k, formula = replicas_for(ys[-1], n, base.expect_rate, policy.headroom, up=True)
            answers.append((max(n + 1, k), ScaleReason.SCALE_OUT, metric,  # over maxRate >= expectRate: one more at least
                            f"{named} {_pcts(ys[-OUT_MINUTES:])} over maxRate {_max(rates)}"
                            f"{band.beside(metric, _max, rates)} for {OUT_MINUTES} minutes: {formula}"
                            + _nudged(k, max(n + 1, k))))
        elif len(ys) >= IN_MINUTES and all(v < rates.min_rate for v in ys[-IN_MINUTES:]):
            k, formula = replicas_for(ys[-1], n, base.expect_rate, policy.headroom, up=False)
            answers.append((min(n - 1, k), ScaleReason.SCALE_IN, metric,  # under minRate <= expectRate: one fewer at least
                            f"{named} under minRate {_min(rates)}{band.beside(metric, _min, rates)} "
                            f"for {IN_MINUTES} minutes (now {ys[-1]:.0%}): {formula}" + _nudged(k, min(n - 1, k))))
        elif ys:
            answers.append((n, ScaleReason.HOLD, metric, f"{named} {ys[-1]:.0%} {_held(ys, rates, band, metric)}"))
    answers += _serving(view, at_count, band)
    ahead = _ahead(view, band)
    if ahead is not None:
        answers.append(ahead)
    if not answers:
        return _hold(view, ScaleReason.STALE, view.name, f"no metric it scales on was measured at {n} replicas yet")
    replicas, reason, metric, why = max(answers, key=lambda a: (a[0], a[1] is not ScaleReason.HOLD))
    if reason is ScaleReason.HOLD and replicas == n:
        why = "; ".join(a[3] for a in answers if a[1] is ScaleReason.HOLD) or why
        if view.forecast_note and policy.predictive:
            why += f"; {view.forecast_note}"
    if reason is ScaleReason.SCALE_IN:
        replicas, reason, why = _limit_in(view, replicas, why)
        replicas, reason, why = _no_flap(view, loads, replicas, reason, why)
        replicas, reason, why = _slo_kept(view, at_count, replicas, reason, why)
    verb = {ScaleReason.HOLD: "stays at", ScaleReason.SCALE_IN: "scales in to"}.get(reason, "scales out to")
    if reason is ScaleReason.PREDICTIVE_LIMIT:
        verb = "stays at" if replicas == n else "scales in only to"
    return _decision(view.name, n, replicas, reason, f"{view.name} {verb} {replicas} replicas", why,
                     {"metric": metric, "loads": {m: _last(loads, m) for m in policy.rates()}, **_bands(view, band)})


def _bands(view: ServiceView, band: Band) -> dict:
    """A decision's data on its bands: each metric's as applied at the current count, the owner's where the SLO
    moved it, and why it moved or did not."""
    out: dict = {"bands": {m: _rates_data(rates_at(r, view.policy.headroom, view.replicas))
                           for m, r in sorted(view.policy.rates().items())}}
    if band.owner:
        out["owner_bands"] = {"gpu": _rates_data(band.owner)}
    if band.cause:
        out["band_note"] = band.cause
    return out


def _rates_data(r: Rates) -> dict[str, float]:
    return {"min_rate": r.min_rate, "expect_rate": r.expect_rate, "max_rate": r.max_rate}


def _min(r: Rates) -> str:
    return f"{r.min_rate:.0%}"


def _expect(r: Rates) -> str:
    return f"{r.expect_rate:.0%}"


def _max(r: Rates) -> str:
    return f"{r.max_rate:.0%}"


def span(min_rate: float, max_rate: float) -> str:
    """A band as a decision's sentence names it, in whole percents; the console's GPU band column shows a recorded
    decision's band with this too, so the two read the same."""
    return f"{min_rate:.0%}–{max_rate:.0%}"


def _span(r: Rates) -> str:
    return span(r.min_rate, r.max_rate)


def _held(ys: Sequence[float], r: Rates, band: Band, metric: str) -> str:
    """Where a hold's newest value lies against the band applied: within it, or past it for fewer minutes than its
    rule needs."""
    over = sum(1 for _ in takewhile(lambda v: v > r.max_rate, reversed(ys)))
    under = sum(1 for _ in takewhile(lambda v: v < r.min_rate, reversed(ys)))
    if over:
        return (f"over maxRate {_max(r)}{band.beside(metric, _max, r)} for {over} of the {OUT_MINUTES} minutes a "
                f"scale-out needs")
    if under:
        return (f"under minRate {_min(r)}{band.beside(metric, _min, r)} for {under} of the {IN_MINUTES} minutes a "
                f"scale-in needs")
    return f"within {_span(r)}{band.beside(metric, _span, r)}"


def _serving(view: ServiceView, loads: Sequence[LoadMinute],
             band: Band = OWNERS) -> list[tuple[int, ScaleReason, str, str]]:
    """An LLM service's serving targets missed in each of the last OUT_MINUTES minutes: scale out to what the
    utilization asks at expectRate, one replica more at least (policy/serving.py)."""
    targets, n = view.policy.serving, view.replicas
    if targets is None or n == 0:
        return []
    found = breaches(targets, loads, n, OUT_MINUTES)
    if not found:
        return []
    rates = view.policy.rates()
    asks = [(_last(loads, m) or 0.0) / r.expect_rate for m, r in rates.items()]
    k, b = replicas_for_breach(n, max(asks, default=None), 1.0), found[0]
    gpu = rates.get("gpu")
    moved = f" {_expect(gpu)}{band.beside('gpu', _expect, gpu)}" if band.owner and gpu else ""
    return [(k, ScaleReason.SLO_OUT, b.signal, f"{b.sentence()} for {OUT_MINUTES} minutes: {k} replicas "
                                               f"(the utilization at expectRate{moved}, one more at least)")]


def _slo_kept(view: ServiceView, loads: Sequence[LoadMinute], k: int, reason: ScaleReason,
              why: str) -> tuple[int, ScaleReason, str]:
    """No scale-in while a latency target was missed in the scale-in window."""
    targets, n = view.policy.serving, view.replicas
    if targets is None or k >= n:
        return k, reason, why
    b = missed(targets, loads[-IN_MINUTES:], n)
    if b is None:
        return k, reason, why
    return n, ScaleReason.HOLD, f"{why}; kept at {n}: {b.sentence()} within the last {IN_MINUTES} minutes"


def _limit_in(view: ServiceView, k: int, why: str) -> tuple[int, ScaleReason, str]:
    """Predictive: never scale in below what the forecast's next AHEAD minutes need at expectRate, where a
    scale-out would size them (the floor formula lands at or above expectRate, so a rise right after a scale-in
    would push the fewer replicas past maxRate)."""
    rates, n, need, note = view.policy.rates(), view.replicas, k, ""
    for metric, values in view.forecast if view.policy.predictive else ():
        ahead = values[:lookahead(view.policy)]
        if metric in rates and ahead:
            peak, r = max(ahead), rates[metric]
            m, formula = replicas_for(peak, n, r.expect_rate, view.policy.headroom, up=True)
            if m > need:
                need, note = m, (f"the {metric} forecast peaks at {peak:.0%} of {n} replicas within {len(ahead)} "
                                 f"minutes: {formula} keep it at expectRate")
    if need <= k:
        return k, ScaleReason.SCALE_IN, why
    return min(n, need), ScaleReason.PREDICTIVE_LIMIT, f"{why}; but {note}"


def _no_flap(view: ServiceView, loads: Sequence[LoadMinute], k: int, reason: ScaleReason,
             why: str) -> tuple[int, ScaleReason, str]:
    """Never scale in to a count where the peak of the last IN_MINUTES minutes (the minutes that justified the
    scale-in) would be over maxRate: the scale-out rule would then fire on the very load just measured, and the
    replicas it asks come back only after the start-up. floor(y/expectRate×N) sizes the newest minute alone, so
    a minute-to-minute swing inside the window can land the fewer replicas over maxRate."""
    n = view.replicas
    if k >= n:
        return k, reason, why
    need, note = k, ""
    for metric, base in sorted(view.policy.rates().items()):
        ys = _trailing(loads, metric)[-IN_MINUTES:]
        if not ys:
            continue
        peak, m = max(ys), max(1, k)
        while m < n and peak * n / m > rates_at(base, view.policy.headroom, m).max_rate + FLOAT_SLACK:
            m += 1
        if m > max(need, 1, k):
            rate = rates_at(base, view.policy.headroom, m - 1).max_rate
            need, note = m, (f"the {metric} peak of the last {IN_MINUTES} minutes ({peak:.0%} of {n}) would be "
                             f"{peak * n / (m - 1):.0%} at {m - 1}, over maxRate {rate:.0%}")
    if need == k:
        return k, reason, why
    return need, ScaleReason.HOLD if need == n else reason, f"{why}; kept at {need}: {note}"


def _ahead(view: ServiceView, band: Band = OWNERS) -> tuple[int, ScaleReason, str, str] | None:
    """Predictive: if any AHEAD_OVER of the next AHEAD forecast minutes exceed maxRate, scale out ahead of the
    peak to what the forecast peak needs."""
    if not view.policy.predictive:
        return None
    rates, n, best = view.policy.rates(), view.replicas, None
    for metric, values in view.forecast:
        if metric not in rates:
            continue
        ahead, base = values[:lookahead(view.policy)], rates[metric]
        r = rates_at(base, view.policy.headroom, n)
        if sum(v > r.max_rate for v in ahead) >= AHEAD_OVER:
            m, formula = replicas_for(max(ahead), n, base.expect_rate, view.policy.headroom, up=True)
            k = max(n, m)
            why = (f"{metric} forecast {_pcts(ahead)} over the next {len(ahead)} minutes exceeds maxRate "
                   f"{_max(r)}{band.beside(metric, _max, r)} {sum(v > r.max_rate for v in ahead)} times: "
                   f"{formula} ahead of the peak")
            if best is None or k > best[0]:
                best = (k, ScaleReason.PREDICTIVE_OUT, metric, why)
    return best


# --- system rules ---------------------------------------------------------------------------------


def _floor(view: ServiceView, now: float) -> int:
    policy = view.policy
    return max(SYSTEM_MIN_REPLICAS, policy.min_replicas, scheduled_minimum(policy.schedules, now, policy.tz))


def _clamp(view: ServiceView, k: int, floor: int) -> int:
    return max(min(floor, view.policy.max_replicas), min(k, view.policy.max_replicas))


def in_peak(policy: ScalingPolicy, now: float) -> bool:
    w = policy.peak_window
    return w is not None and in_window(local(now, policy.tz).time(), w[0], w[1])


def _bounded(view: ServiceView, now: float, d: ScaleDecision) -> ScaleDecision:
    """At least 2 replicas, the schedules' minimum, never above the maximum, no scale-in inside the daytime peak
    window (scale to zero is decided before: never inside the peak window nor while a schedule is active)."""
    n, policy = view.replicas, view.policy
    floor = _floor(view, now)
    target = _clamp(view, d.target, floor)
    if target < n and in_peak(policy, now):
        if n <= policy.max_replicas:
            start, end = policy.peak_window
            return _decision(view.name, n, n, ScaleReason.PEAK_WINDOW, f"{view.name} stays at {n} replicas",
                             f"no scale-in in the peak window {start:%H:%M}–{end:%H:%M} ({d.message})", d.data)
        target = policy.max_replicas  # above its maximum: down to it, no further, in the peak window
    if target == d.target:
        return d
    if target > d.target and floor > max(SYSTEM_MIN_REPLICAS, policy.min_replicas):
        why = f"a schedule keeps at least {floor} now" + (f", its maximum is {target}" if target < floor else "")
        if target > n:
            return _decision(view.name, n, target, ScaleReason.SCHEDULE, f"{view.name} scales to {target} replicas",
                             f"{why} ({d.message})", d.data)
    else:
        why = f"bounded by its {'maximum' if target < d.target else 'minimum'} to {target}"
    return replace(d, target=target, reason=_direction(d.reason, n, target)).then(f"; {why}")


UPWARD = frozenset({ScaleReason.SCALE_OUT, ScaleReason.SLO_OUT, ScaleReason.PREDICTIVE_OUT, ScaleReason.FROM_ZERO, ScaleReason.FALLBACK, ScaleReason.SCHEDULE})


def _direction(reason: ScaleReason, current: int, target: int) -> ScaleReason:
    """The decision's reason after a bound moved its target: a hold that changes nothing, else one that says
    which way it goes."""
    if target == current:
        return ScaleReason.HOLD
    if target > current:
        return reason if reason in UPWARD else ScaleReason.SCALE_OUT
    return ScaleReason.SCALE_IN


# --- a group at once ------------------------------------------------------------------------------


def decide_group(views: Sequence[ServiceView], capacity: float, now: float) -> list[ScaleDecision]:
    """Every service of one resource group. When the group's `capacity` (what inference could have of it)
    cannot give every service what it asks, higher-priority services get theirs first and lower-priority
    ones shrink, never below their minimum; skipped services keep what they have."""
    decisions = {v.name: decide_service(v, now) for v in views}
    by_name = {v.name: v for v in views}
    asked = sum(d.target * by_name[n].per_replica for n, d in decisions.items())
    if asked <= capacity + FLOAT_SLACK:
        return [decisions[v.name] for v in views]
    fixed = {n for n, d in decisions.items() if d.reason in SKIPS or d.target == 0}
    floors = {n: 0 if n in fixed else min(decisions[n].target, _floor(by_name[n], now)) for n in decisions}
    left = capacity - sum(decisions[n].target * by_name[n].per_replica for n in fixed) \
        - sum(floors[n] * by_name[n].per_replica for n in decisions if n not in fixed)
    out = dict(decisions)
    for v in sorted((by_name[n] for n in decisions if n not in fixed), key=lambda v: (-v.policy.priority, v.name)):
        d = decisions[v.name]
        room = math.floor(max(0.0, left) / v.per_replica + FLOAT_SLACK) if v.per_replica > 0 else d.target
        extra = max(0, min(d.target - floors[v.name], room))
        left -= extra * v.per_replica
        got = floors[v.name] + extra
        if got < d.target:
            out[v.name] = _decision(
                v.name, d.current, got, ScaleReason.PRIORITY,
                f"{v.name} gets {got} of the {d.target} replicas it asks (priority {v.policy.priority})",
                f"the group cannot serve every service and higher-priority ones come first; it asked {d.target} on "
                f"{d.why}", {**d.data, "asked": d.target})
    return [out[v.name] for v in views]


# --- helpers --------------------------------------------------------------------------------------


def _bounded_note(target: int, asked: int) -> str:
    return f" (bounded to {target})" if target != asked else ""


def _trailing(loads: Sequence[LoadMinute], metric: str) -> list[float]:
    """The metric's values over the newest minutes up to the first one that lacks it, oldest first."""
    ys: list[float] = []
    for m in reversed(loads):
        if (v := m.value(metric)) is None:
            break
        ys.append(v)
    return ys[::-1]


def _nudged(k: int, target: int) -> str:
    """Rounding at the threshold's edge (maxRate = expectRate, or minRate = expectRate) still moves one replica."""
    return f", moved to {target} (one replica at least)" if k != target else ""


def _pcts(values: Sequence[float]) -> str:
    return "/".join(f"{v:.0%}" for v in values)


def _last(loads: Sequence[LoadMinute], metric: str) -> float | None:
    return next((v for m in reversed(loads) if (v := m.value(metric)) is not None), None)
