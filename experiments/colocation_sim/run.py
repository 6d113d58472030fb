"""The co-location simulation: one cluster on a virtual clock, 1-minute ticks, the real policies.

Each tick: (1) the backend advances (training pods finish, inference pods become ready, pending
pods are retried); (2) training jobs arrive; (3) inference autoscaling (the real policy,
`autoscaling.decide_group` per group) applied as ReplicaSet scales; (4) `decide_lending` per group
opens transitions;
(5) the step machine (`drive`, as the live controller) runs each open transition as far as it can this tick (a take-back is graceful:
the node is cordoned at once, its training pods evicted only at the decision's `evict_at`; online pods pending
expedite every cordoned take-back of their group, `lending.expedite`; a training pod's expected end is its start +
its job's runtime estimate, exact unless `cfg.runtime_error`, × the calibrated factor of the last finished jobs, as
the live loops read it: colocation/policy/calibration.py);
(6) a scheduling cycle (`schedule(snapshot, get_profile("tidal"), lending)`) over the running jobs and the heads of
the pending queue (`cfg.queue_window` short and as many fixed-pool-only jobs per GPU model,
experiments/colocation_sim/queue.py); the policy gives each its pool (`preferred_pool`). The acting layer here plays the
controller's part; no policy is copied.
The static baseline is the same loop with step (4) off: nodes never move.
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice

import numpy

from cluster.backend import DETACHED_FROM_LABEL, REPLACES_LABEL, RESOURCE_GROUP_LABEL, ReplicaSetView
from cluster.clock import VirtualClock
from cluster.types import NodeState, NodeView, Pool, QuotaView
from colocation import observe
from colocation.policy import (Conflict, Converting, DeletePod, DetachPod, Done, EvictTraining, GroupView, Lend,
                               SetState, TakeBack, TransitionRecord, Wait, decide_lending, drive,
                               requeue_after_take_back)
from colocation.policy import autoscaling
from colocation.policy.calibration import WINDOW, EstimateSource, FinishedRun, RuntimeCalibration, calibrate
from colocation.policy.forecast import DemandForecast, demand_forecast, horizon_min, take_back_times
from colocation.policy.lending import expedite
from colocation.policy.pools import estimate_of, stated_lend_bar_s
from colocation.policy.profile import LendingProfile
from colocation.policy.states import Direction
from experiments.colocation_sim.autoscale import Measured
from experiments.colocation_sim.config import SIM_START, SimConfig
from experiments.colocation_sim.group_nodes import GroupNodes
from experiments.colocation_sim.queue import PendingQueue
from experiments.colocation_sim.world import (build_jobs, build_nodes, build_services, group_capacity, initial_replicas,
                                    modelled_replicas, peak_replicas, static_split)
from experiments.simulated_training import SimulatedTraining
from scheduler.policy import Admit, CycleResult, Preempt, Reserve, StillPending, get_profile, schedule
from scheduler.policy.cache import CycleCache
from scheduler.policy.dispatch import dispatch
from scheduler.policy.workload import jobs_workload

HISTORY_MIN = 7 * 1440 + 60  # what the seasonal forecast reads: up to 7 days and an hour
MAX_STEPS_PER_TICK = 64  # per transition (a virtual tick holds no lock); a lend of a node with many pods needs 2 per pod


@dataclass(frozen=True, slots=True)
class Kill:
    """A training job a take-back ended, with what the lending policy knew (why kills happen)."""

    ran_s: float  # how long the job had run
    left_s: float | None  # its expected remaining run then (None: unknown)
    ahead_s: float  # from the take-back's decision to the eviction
    reason: str  # the take-back's reason: forecast-above-max = the forecast saw the rise; online-pods-pending: urgent


@dataclass
class Metrics:
    minutes: int
    hours: list[int] = field(default_factory=list)  # hour of day per minute
    gpu_util: list[float] = field(default_factory=list)  # busy GPUs / all GPUs, per minute
    gpu_alloc: list[float] = field(default_factory=list)  # allocated GPUs / all GPUs
    online_nodes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    usage: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    pending_online: list[int] = field(default_factory=list)  # urgent online pods pending, per minute
    pending_in_take_back: list[bool] = field(default_factory=list)
    training_pending: list[int] = field(default_factory=list)
    finished: int = 0
    finished_lent: int = 0  # finished on a co-location (lent) node
    started_lent: int = 0  # job starts on lent nodes
    killed: int = 0  # training pods evicted by take-backs
    kills: list[Kill] = field(default_factory=list)  # one per job killed
    preempted: int = 0  # by the scheduler (priority / quota), not a take-back
    transitions: Counter = field(default_factory=Counter)  # completed, by direction value
    decisions: Counter = field(default_factory=Counter)  # Lend/TakeBack/Hold reasons
    conflicts: int = 0
    # invariants (the tests assert them)
    max_converting: int = 0
    unnormal_after_done: int = 0
    fixed_pool_moves: int = 0
    serving_drops: int = 0  # a step left a ReplicaSet with fewer serving pods than before it
    scale_events: int = 0
    jobs_submitted: int = 0
    training_load: str = ""  # how the training load was built (TrainingLoad.describe)
    over_one_gpu: int = 0
    # Lyra's metrics (docs/how-to/colocation-simulation.md#what-it-reports): per job submitted in the run, from
    # submission to its first start / to its
    # end; a job not started (not finished) by the run's end counts until the run's end
    queue_wait_s: list[float] = field(default_factory=list)
    jct_s: list[float] = field(default_factory=list)
    unfinished: int = 0
    # services with fewer serving replicas than the autoscaler asked for a minute earlier, per minute (measured at
    # the start of the minute, before it scales again: a new replica's start-up, shorter than a tick, never counts)
    online_short: list[int] = field(default_factory=list)
    lent_nodes: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # per group, per minute
    lent_gpus: list[float] = field(default_factory=list)  # GPUs on lent nodes, per minute
    lent_node_minutes: int = 0
    tick_s: float = 60.0
    group_wait_s: list[float] = field(default_factory=list)  # per episode of a group service short of groups

    def summary(self, days: float) -> dict[str, float]:
        pending_minutes = sum(1 for p in self.pending_online if p)
        inside = sum(1 for p, t in zip(self.pending_online, self.pending_in_take_back) if p and t)
        return {
            "lent_share": self.finished_lent / self.finished if self.finished else 0.0,
            "kill_rate": self.killed / self.started_lent if self.started_lent else 0.0,
            "online_pending_minutes": pending_minutes,
            "online_pending_minutes_outside_take_back": pending_minutes - inside,
            "transitions_per_day": sum(self.transitions.values()) / days,
            "gpu_util_mean": sum(self.gpu_util) / len(self.gpu_util) if self.gpu_util else 0.0,
            "queue_wait_mean_s": _mean(self.queue_wait_s),
            "queue_wait_p95_s": _p95(self.queue_wait_s),
            "jct_mean_s": _mean(self.jct_s),
            "online_short_minutes": sum(1 for n in self.online_short if n),
            "gpu_hours_lent": sum(self.lent_gpus) * self.tick_h,
            "kills_per_lent_node_hour": (self.killed / (self.lent_node_minutes * self.tick_h)
                                         if self.lent_node_minutes else 0.0),
            "killed": self.killed,
            "jobs_submitted": self.jobs_submitted,
            "jobs_unfinished": self.unfinished,
            "group_waits": len(self.group_wait_s),
            "group_wait_mean_s": _mean(self.group_wait_s),
            "group_wait_p95_s": _p95(self.group_wait_s),
            "group_wait_max_s": max(self.group_wait_s, default=0.0),
        }

    @property
    def tick_h(self) -> float:
        return self.tick_s / 3600.0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


@dataclass(frozen=True)
class Outcome:
    """What the report needs of a finished run (small enough to come back from a worker process)."""

    cfg: SimConfig
    metrics: Metrics
    static_online: dict[str, int]
    static_peak: dict[str, int]


class CoLocationSim:
    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.clock = VirtualClock(SIM_START)
        nodes = build_nodes(cfg)
        # The inference load is sized on the fixed_share layout, so both runs serve the very same load.
        self.services, self.load = build_services(cfg, nodes)
        # the static split: sized on a dry run of the autoscaler over a fresh copy of the load (same draws as this
        # run's); its training side is the training capacity the load is sized on, in both runs
        self.static_peak = peak_replicas(cfg, self.services, build_services(cfg, nodes)[1])
        split, online = static_split(cfg, nodes, self.static_peak)
        self.static_online: dict[str, int] = online if not cfg.lend else {}  # static baseline: online nodes per group
        if not cfg.lend or cfg.fixed_from_static:
            nodes = split
        self.initial = {n.name: (n.state, n.pool) for n in nodes}
        self.group_of = {n.name: n.resource_group for n in nodes}
        self.groups = {g.model or "CPU": g for g in cfg.groups}
        self.group_of_model = {g.model or None: g.model or "CPU" for g in cfg.groups}
        self.model_of = {g.model or "CPU": g.model for g in cfg.groups}  # group -> GPU model ("": CPU-only)
        self.arrivals, self.training_load = build_jobs(cfg, split, SIM_START)
        # the target workload of the least-gpu-loss placement: the shapes of the training the run offers
        self.workload = jobs_workload((a.job for a in self.arrivals), lambda _, model: (model,) if model else ())
        self.cycle_cache = CycleCache()  # this run's, kept from cycle to cycle
        # Departments (Helios quota shares) label the jobs; each one's quota covers the whole cluster, so every job
        # runs on its own quota and the policy's order is the submit order (experiments/colocation_sim/queue.py)
        quotas = []
        for dept in sorted({a.job.department for a in self.arrivals}):
            for key in sorted({n.gpu_model for n in nodes if n.gpu_model}):
                quotas.append(QuotaView(dept, key, sum(n.gpu_count for n in nodes if n.gpu_model == key), 0.0))
            quotas += [QuotaView(dept, "cpu", sum(n.cpu_milli for n in nodes), 0.0),
                       QuotaView(dept, "memory", sum(n.memory_mib for n in nodes), 0.0)]
        self.training = SimulatedTraining(nodes, quotas, {}, self.clock)
        self.backend = self.training.backend
        self.backend.startup_s = cfg.startup_s
        self.profile = get_profile("tidal")
        self.metrics = Metrics(cfg.minutes, training_load=self.training_load.describe(), tick_s=cfg.tick_s)
        self.first_start: dict[int, float] = {}  # job id -> its first start
        self.finished_at: dict[int, float] = {}
        self.total_gpus = sum(n.gpu_count for n in nodes)
        self.records: dict[str, TransitionRecord] = {}
        self.last_take_back: dict[str, float] = {}  # group -> when its latest take-back was decided
        self.take_back_of: dict[str, tuple[float, str]] = {}  # node -> (when, why) its latest take-back was decided
        self.killed_jobs: set[int] = set()
        self.measured = Measured(cfg.autoscale)
        self.util_now: dict[str, float] = {}
        self._short_since: dict[str, float] = {}  # group service -> when it began serving fewer groups than asked
        self._next_arrival = 0
        self.queue = PendingQueue()  # the pending jobs of self.training, in order
        self.holding: set[int] = set()  # jobs of self.training that are not pending (running)
        self._pending_jobs = 0
        self.detached: dict[str, tuple[str, str]] = {}  # detached pod -> (its ReplicaSet, replacement)
        self._dirty = True
        for s in self.services:  # start at what minute 0 needs at expectRate
            n = initial_replicas(cfg, self.load, s.index) * s.size
            self.backend.apply_replicaset(s.name, s.template, n,
                                          node_selector={RESOURCE_GROUP_LABEL: s.group.model or "CPU"})
        self.backend.advance()
        self._node_index = {n.name: i for i, n in enumerate(self.backend.nodes())}
        # a training pod's expected end is its start + its job's runtime estimate (the real run time unless
        # cfg.runtime_error) × the calibrated factor, never the run time the simulation ends it at; the calibration
        # reads the last WINDOW finished jobs, as the live loops read theirs (colocation.selectors.finished_runs)
        self.finished_runs: deque[FinishedRun] = deque(maxlen=WINDOW)
        self.runtime: RuntimeCalibration = calibrate(self.finished_runs)  # none finished yet: the prior
        self.estimates = {a.job.id: estimate_of(a.job.past_run_s, a.job.expected_duration_s) for a in self.arrivals}
        self.expected_run = _Conservative(self.estimates, lambda: self.runtime)
        self.group_nodes = GroupNodes(self.backend, self.expected_run)
        self._figures: dict[str, _NodeFigures] = {}  # per node, for _measure
        # what inference could have of each group: every node but the fixed pool (pools never change here)
        self.capacity: Counter[str] = Counter()
        for n in self.backend.nodes():
            if n.pool is not Pool.FIXED:
                self.capacity[n.resource_group] += n.gpu_count if n.gpu_model else n.cpu_milli
        # forecast-driven lending: per group, the online demand per minute (warmed with the traffic before the run)
        # with this cycle's predicted take-back times and the calibration
        self.lending_now: LendingProfile = cfg.lending.with_(runtime=self.runtime)
        self.forecasts: dict[str, DemandForecast] = {}
        self.history, self._warm = self._warm_history() if cfg.lend and cfg.lending.forecast else ({}, 0)

    def _warm_history(self) -> tuple[dict[str, numpy.ndarray], int]:
        """Per group: room for the run's minutes of online demand, after up to MAX_DAYS days + an hour of the demand
        the traffic before the run modelled (replicas at expectRate, as minute 0 starts) where the curve has them, so
        the seasonal forecast works from minute 0."""
        warm = min([HISTORY_MIN] + [self.load.history_minutes(s.index) for s in self.services])
        out = {}
        for g in self.groups:
            mine = [s for s in self.services if (s.group.model or "CPU") == g]
            h = numpy.zeros(warm + self.cfg.minutes)
            for m in range(-warm, 0):
                h[warm + m] = sum(s.request * modelled_replicas(self.cfg, self.load, s.index, m) for s in mine)
            out[g] = h
        return out, warm

    def _node_figures(self, n: NodeView) -> _NodeFigures:
        figures = self._figures.get(n.name)
        if figures is None or figures.view is not n:
            figures = self._figures[n.name] = _NodeFigures.of(n)
        return figures

    def outcome(self) -> Outcome:
        return Outcome(self.cfg, self.metrics, self.static_online, self.static_peak)

    def _node(self, name: str) -> NodeView:
        return self.backend.nodes()[self._node_index[name]]

    # -- the loop ---------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None) -> Metrics:
        for minute in range(self.cfg.minutes):
            self.tick(minute)
            if progress:
                progress(minute)
        self.close()
        return self.metrics

    def close(self) -> None:
        """The per-job figures of the jobs submitted so far, as of the end of the run."""
        end = SIM_START + self.cfg.minutes * self.cfg.tick_s
        m = self.metrics
        submitted = self.arrivals[:self._next_arrival]
        m.queue_wait_s = [self.first_start.get(a.job.id, end) - a.at for a in submitted]
        m.jct_s = [self.finished_at.get(a.job.id, end) - a.at for a in submitted]
        m.unfinished = sum(1 for a in submitted if a.job.id not in self.finished_at)

    def tick(self, minute: int) -> None:
        self.clock.set(SIM_START + minute * self.cfg.tick_s)
        now = self.clock.now()
        self._finish()
        self._arrive(now)
        self._autoscale(minute, now)
        if self.cfg.lend:
            self._lend(minute, now)
        self._steps(now)
        if minute % self.cfg.schedule_every_min == 0:
            self._schedule(now)
        self._measure(minute, now)
        self.backend.drain_events()  # nothing here reads the backend's events: do not let them pile up

    # -- (1)+(2) training arrivals and completions -------------------------------------------
    def _finish(self) -> None:
        done = self.training.finish_elapsed()
        if not done:
            return
        self._dirty = True
        # the jobs that just finished are the last `done` ones of training.done (a dict keeps insertion order)
        now = self.clock.now()
        for job in islice(reversed(self.training.done.values()), done):
            self.finished_at[job.id] = now
            estimate = self.estimates.get(job.id)  # the one it was placed with
            if estimate is not None and job.started_at is not None:
                real = self.training.ended_at[job.id] - job.started_at  # the run itself, not rounded to the tick
                self.finished_runs.append(FinishedRun(estimate[0], real, estimate[1]))
            self.holding.discard(job.id)
            self.metrics.finished += 1
            if any(self._node(a.node).pool is Pool.COLOCATION for a in job.allocations):  # any worker lent
                self.metrics.finished_lent += 1
        self._recalibrate()

    def _recalibrate(self) -> None:
        """The calibrated factors from the last finished jobs; a change moves every lent job's expected end."""
        runtime = calibrate(self.finished_runs)
        if runtime == self.runtime:
            return
        if [f.value for _, f in runtime.factors] != [f.value for _, f in self.runtime.factors]:
            self.group_nodes.recalibrated()
        self.runtime = runtime
        self.lending_now = self.lending_now.with_(runtime=runtime)

    def _arrive(self, now: float) -> None:
        while self._next_arrival < len(self.arrivals) and self.arrivals[self._next_arrival].at <= now:
            a = self.arrivals[self._next_arrival]
            self.training.submit(a.job, a.run_s)
            self.queue.add(a.job)
            self._next_arrival += 1
            self.metrics.jobs_submitted += 1
            self._dirty = True

    # -- (3) inference autoscaling -----------------------------------------------------------
    def serving(self, sets: Iterable[ReplicaSetView] | None = None) -> dict[str, int]:
        """Pods serving each service: ready ones it owns, plus detached ones still standing in for a
        replacement that is not ready yet (create-before-delete). `sets`: the ReplicaSets if already read."""
        out: Counter[str] = Counter({rs.name: rs.ready for rs in sets or self.backend.replicasets()})
        for pod, (rs, replacement) in self.detached.items():
            r = self.backend.pod(replacement)
            if r is None or not r.ready:
                out[rs] += 1
        return out

    def _autoscale(self, minute: int, now: float) -> None:
        """Measure the minute that just ended, then let the policy decide every group at once; the group's
        capacity is what inference could have of it (every node but the fixed pool)."""
        sets = {rs.name: rs for rs in self.backend.replicasets()}
        pods = self.serving(sets.values())
        serving = {s.name: pods[s.name] // s.size for s in self.services}  # a group serves with every pod ready
        short = [s for s in self.services if serving[s.name] < sets[s.name].replicas // s.size]
        self.metrics.online_short.append(len(short))
        self._group_waits(now, short)
        by_group: dict[str, list[autoscaling.ServiceView]] = defaultdict(list)
        for s in self.services:
            y = self.load.utilization(s.index, minute, serving[s.name])
            self.util_now[s.name] = y
            self.measured.record(s.name, now - self.cfg.tick_s, serving[s.name], y)
            rs = sets[s.name]
            view = self.measured.view(s.name, rs.replicas // s.size, rs.ready // s.size, s.request)
            by_group[s.group.model or "CPU"].append(view)
        capacity = self.capacity
        templates = {s.name: s.template for s in self.services}
        sizes = {s.name: s.size for s in self.services}
        for group, views in by_group.items():
            for d in autoscaling.decide_group(views, capacity[group], now):
                if d.changes:
                    self.backend.apply_replicaset(d.service, templates[d.service], d.target * sizes[d.service])
                    self.measured.changed(d.service, now)
                    self.metrics.scale_events += 1

    def _group_waits(self, now: float, short: list) -> None:
        """For services whose replica is a group: how long each episode of serving fewer groups than asked lasts
        (from the scale-out that pended to every group serving: the take-back of whole nodes and the start-up)."""
        waiting = {s.name for s in short if s.size > 1}
        for name in waiting - self._short_since.keys():
            self._short_since[name] = now
        for name in set(self._short_since) - waiting:
            self.metrics.group_wait_s.append(now - self._short_since.pop(name))

    # -- (4) lending decisions ----------------------------------------------------------------
    def group_views(self, now: float) -> list[GroupView]:
        """The policy's view of each group, observed as the live controller does (colocation/observe.py); the
        sim adds what only it knows: pending training jobs that may use lent nodes, its open transitions."""
        members = self.group_nodes()
        pending_training = {group: self.queue.short_count(model, stated_lend_bar_s(now, self.lending_now, model))
                            for model, group in self.group_of_model.items()}
        pending_online = observe.pending_online(self.backend, self.group_of_model)
        converting: dict[str, list[Converting]] = defaultdict(list)
        for r in self.records.values():
            converting[self.group_of[r.node]].append(Converting(r.node, r.direction))
        # every replica here starts in cfg.startup_s: the take-back's lead counts it (forecast.lead_s)
        largest = {g: max((s.request for s in self.services if (s.group.model or "CPU") == g), default=0.0)
                   for g in members}
        return [GroupView(g, tuple(members[g]), None, pending_training[g], tuple(pending_online[g]),
                          tuple(converting[g]), "GPU" if self.groups[g].model else "millicore", self.cfg.startup_s,
                          largest[g], self.last_take_back.get(g))
                for g in sorted(members)]

    def _forecast(self, minute: int, now: float) -> None:
        """The forecast of each group's online demand from the minutes measured so far (seasonal, or the cold-start
        forecast before a day of them: `demand_forecast`, as the live loop); renewed every
        scheduling period (a forecast starts at the minute it was made; later minutes read it further on)."""
        if minute % self.cfg.schedule_every_min:
            return
        horizon = horizon_min(now, self.cfg.lending, self.cfg.startup_s)  # as the live loop forecasts
        self.forecasts = {}
        for g, h in self.history.items():
            fc = demand_forecast(g, h[:self._warm + minute], now, horizon)
            if fc is not None:
                self.forecasts[g] = fc

    def _lend(self, minute: int, now: float) -> None:
        profile = self.cfg.lending.with_(runtime=self.runtime)
        if profile.forecast:
            self._forecast(minute, now)
        views = self.group_views(now)
        decisions = decide_lending(views, now, profile, self.forecasts if profile.forecast else None)
        if profile.forecast:  # when each model's lent nodes are predicted back: the cycle places jobs by it
            by = take_back_times(views, self.forecasts, now, profile, self.model_of)
            self.lending_now = profile.with_(take_back_by=tuple(by.items()))
        for g in expedite(views):  # online pods pending: the group's cordoned take-backs evict now
            for name, r in self.records.items():
                if r.direction is Direction.TAKE_BACK and r.evict_at > now and self.group_of[name] == g:
                    self.records[name] = replace(r, evict_at=now)
        for d in decisions:
            self.metrics.decisions[f"{type(d).__name__}:{d.reason.value}"] += 1
            if isinstance(d, TakeBack):
                self.last_take_back[d.group] = now
                self.take_back_of.update((node, (now, d.reason.value)) for node in d.nodes)
            if isinstance(d, (Lend, TakeBack)):
                evict_at = d.evict_at if isinstance(d, TakeBack) else 0.0
                for node in d.nodes:
                    self.records[node] = TransitionRecord(node, d.direction, started_at=now, evict_at=evict_at)

    # -- (5) the step machine -----------------------------------------------------------------
    def _steps(self, now: float) -> None:
        if not self.records:
            return
        before = self.serving()
        per_group: Counter[str] = Counter(self.group_of[n] for n in self.records)
        self.metrics.max_converting = max(self.metrics.max_converting, max(per_group.values()))
        pods = observe.PodIndex.of(self.backend)
        for name in sorted(self.records):
            record = self.records[name]
            for action in drive(record, lambda: observe.node_now(self._node(name), pods), now, MAX_STEPS_PER_TICK):
                self.execute(action, now)
                if not isinstance(action, Wait):
                    pods = observe.PodIndex.of(self.backend)  # the action changed the cluster
                record = replace(record, step=action.step)
                if isinstance(action, Done):
                    if not self._node(name).state.normal:
                        self.metrics.unnormal_after_done += 1
                    self.metrics.transitions[record.direction.value] += 1
                    del self.records[name]
                    self._dirty = True
                elif isinstance(action, Conflict):
                    self.metrics.conflicts += 1
                    del self.records[name]
                else:
                    self.records[name] = record
        after = self.serving()
        self.metrics.serving_drops += sum(1 for rs, n in before.items() if after[rs] < n)

    def execute(self, action, now: float) -> None:
        """Carry out one step of a transition (the step machine's action) on the simulated cluster."""
        if isinstance(action, SetState):
            if self.initial[action.node][1] is Pool.FIXED:
                self.metrics.fixed_pool_moves += 1
            self.backend.set_node_state(action.node, action.state)
        elif isinstance(action, DetachPod):
            pod = self.backend.pod(action.pod)
            self.detached[action.pod] = (pod.replicaset, self.backend.detach_pod(action.pod))
            self.group_nodes.detached(pod.node)
        elif isinstance(action, DeletePod):
            self.backend.evict(action.pod, "migrated: replacement ready")
            self.detached.pop(action.pod, None)
        elif isinstance(action, EvictTraining):
            pod = self.backend.pod(action.pod)
            self.backend.evict(action.pod, "take-back")
            # the job's run ends: a gang's other workers are evicted at once and it is requeued whole, once
            # (docs/concepts/gangs-and-reservations.md#preempting-and-taking-back-gangs)
            job = self.training.worker_lost(action.pod, "take-back", requeue_after_take_back)
            if job is not None:
                self.queue.add(job, pinned=True)
                self.holding.discard(job.id)
                self.killed_jobs.add(job.id)
                self.metrics.killed += 1
                self.metrics.kills.append(self._kill(pod, action.node, now))
            self._dirty = True

    def _kill(self, pod, node: str, now: float) -> Kill:
        run = self.expected_run.get(pod.spec.job_id)  # what the policy's expected end reads (GroupNodes)
        decided, reason = self.take_back_of.get(node, (now, "operator"))
        return Kill(now - pod.started_at, None if run is None else pod.started_at + run - now, now - decided, reason)

    # -- (6) training scheduling -------------------------------------------------------------
    def _schedule(self, now: float) -> None:
        if not self._dirty:
            return  # nothing arrived, finished or moved since the last cycle: it would decide the same
        self._dirty = False
        jobs = self.training.jobs
        lending = self.lending_now
        head = self.queue.head(self.cfg.queue_window, lambda model: stated_lend_bar_s(now, lending, model))
        # the running jobs too (the quota ledger and preemption need them), in the order of training.jobs (by id);
        # the policy gives each pending job its pool, as in the live loop
        snapshot = self.training.snapshot(jobs[i] for i in sorted(self.holding.union(head)))
        result = schedule(snapshot, self.profile, lending, self.workload, self.cycle_cache)
        self.apply(result)

    def apply(self, result: CycleResult) -> None:
        """Act on a cycle's decisions: simulated training's effects, with the pending queue kept in step."""
        self._pending_jobs = len(self.queue)
        dispatch(result, _Queueing(self))

    # -- metrics ------------------------------------------------------------------------------
    def _measure(self, minute: int, now: float) -> None:
        m = self.metrics
        nodes = [self._node_figures(n) for n in self.backend.nodes()]
        alloc = sum(f.gpu_used for f in nodes)
        over = sum(f.over_one_gpu for f in nodes)
        busy_inf = alloc_inf = 0.0
        demand: Counter[str] = Counter()
        sets = {rs.name: rs for rs in self.backend.replicasets()}
        for s in self.services:
            rs = sets[s.name]
            gpus = s.template.gpus
            alloc_inf += gpus * len(rs.pods)
            busy_inf += gpus * rs.ready * self.util_now.get(s.name, 0.0)
            demand[s.group.model or "CPU"] += s.pod_request * len(rs.pods)
        for pod, (rs, _) in self.detached.items():
            p = self.backend.pod(pod)
            if p is not None:
                alloc_inf += p.spec.gpus
                busy_inf += p.spec.gpus * self.util_now.get(rs, 0.0)
        # a training pod keeps the GPUs it holds busy
        m.gpu_util.append((busy_inf + alloc - alloc_inf) / self.total_gpus if self.total_gpus else 0.0)
        m.gpu_alloc.append(alloc / self.total_gpus if self.total_gpus else 0.0)
        m.hours.append(int((now - SIM_START) // 3600) % 24)
        m.over_one_gpu += over
        online: Counter[str] = Counter()
        cap: Counter[str] = Counter()
        for f in nodes:
            online[f.group] += f.online
            cap[f.group] += f.online_capacity
        lent: Counter[str] = Counter()
        lent_gpus = 0
        for f in nodes:
            if f.lent:
                lent[f.group] += 1
                lent_gpus += f.gpus
        m.lent_gpus.append(lent_gpus)
        m.lent_node_minutes += sum(lent.values())
        for g, h in self.history.items():
            h[self._warm + minute] = demand[g]
        for g in self.groups:
            m.lent_nodes[g].append(lent[g])
            m.online_nodes[g].append(online[g])
            m.usage[g].append(demand[g] / cap[g] if cap[g] else 0.0)
        urgent = [p for p in self.backend.pending_pods() if p.replaces is None]
        m.pending_online.append(len(urgent))
        taking_back = {self.group_of[r.node] for r in self.records.values() if r.direction is Direction.TAKE_BACK}
        m.pending_in_take_back.append(bool(urgent) and all((p.spec.gpu_model or "CPU") in taking_back
                                                           for p in urgent))
        m.training_pending.append(self._pending_jobs)


class _Conservative(Mapping[int, float]):
    """Expected run seconds by job as lending reads them: each job's estimate × its source's calibrated factor now."""

    def __init__(self, estimates: dict[int, tuple[float, EstimateSource] | None],
                 runtime: Callable[[], RuntimeCalibration]) -> None:
        self._estimates, self._runtime = estimates, runtime

    def __getitem__(self, job_id: int) -> float:
        estimate = self._estimates[job_id]
        if estimate is None:
            raise KeyError(job_id)
        return self._runtime().scale(*estimate)

    def __iter__(self) -> Iterator[int]:
        return (job_id for job_id, estimate in self._estimates.items() if estimate is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Queueing:
    """A cycle's effects (scheduler.policy.dispatch.Effects): simulated training's, with the pending queue kept in
    step and starts and preemptions counted."""

    def __init__(self, sim: CoLocationSim) -> None:
        self.sim, self.training = sim, sim.training
        self.pools: dict[str, Pool] | None = None  # read at the first admission

    def preempt(self, d: Preempt) -> bool:
        held = self.training.preempt(d)
        self.sim.metrics.preempted += 1
        self.sim.queue.add(self.training.jobs[d.job_id], pinned=d.job_id in self.sim.killed_jobs)
        self.sim.holding.discard(d.job_id)
        return held

    def admit(self, d: Admit) -> bool:
        if not self.training.admit(d):
            return False  # a worker could not be bound: the job still waits (SimulatedTraining.bind_failures)
        sim = self.sim
        sim.queue.remove(d.job_id)
        sim.holding.add(d.job_id)
        sim.first_start.setdefault(d.job_id, sim.clock.now())
        sim._pending_jobs -= 1
        if self.pools is None:
            self.pools = {n.name: n.pool for n in sim.backend.nodes()}
        if any(self.pools[w.node] is Pool.COLOCATION for w in d.workers):  # a gang with any worker lent
            sim.metrics.started_lent += 1
        return True

    def wait_for_victims(self, d: Admit, victims: tuple[int, ...]) -> None:
        self.training.wait_for_victims(d, victims)

    def reserve(self, d: Reserve) -> None:
        self.training.reserve(d)

    def pending(self, d: StillPending) -> None:
        self.training.pending(d)


@dataclass(frozen=True, slots=True)
class _NodeFigures:
    """What one minute's metrics take of a node, kept while the backend keeps the node's view (it is unchanged)."""

    view: NodeView
    group: str
    gpu_used: float
    over_one_gpu: int  # GPUs used beyond 1.0
    online: int  # 1: not offline
    online_capacity: int  # online-normal: its GPUs (CPU group: millicores)
    lent: bool  # a co-location node that is offline: lent to training
    gpus: int

    @classmethod
    def of(cls, n: NodeView) -> _NodeFigures:
        return cls(n, n.resource_group, sum(n.gpu_used), sum(1 for u in n.gpu_used if u > 1.0 + 1e-6),
                   0 if n.state.offline else 1,
                   (n.gpu_count if n.gpu_model else n.cpu_milli) if n.state is NodeState.ONLINE_NORMAL else 0,
                   n.pool is Pool.COLOCATION and n.state.offline, n.gpu_count)


def run_sim(cfg: SimConfig, progress: Callable[[int], None] | None = None) -> CoLocationSim:
    sim = CoLocationSim(cfg)
    sim.run(progress)
    return sim


__all__ = ["CoLocationSim", "Metrics", "Outcome", "NodeView", "run_sim", "group_capacity",
           "DETACHED_FROM_LABEL", "REPLACES_LABEL"]
