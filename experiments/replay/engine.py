"""The replay event loop: the real policy (`schedule(snapshot, get_profile(name))`) on a virtual clock.

Timeline mode (a trace with times). The clock jumps from event to event. A scheduling cycle runs
only when something changed that could let a job start: an arrival, or a finish / a recheck tick
while jobs are pending. All events up to the cycle time are applied first (batched), and cycles
are at least `min_cycle_s` virtual seconds apart (default 10 s: a pod arriving within 10 s of the
previous cycle waits for the next one). While jobs wait, a cycle also runs every `recheck_s`
(default 600 s, the aging step) so aging and the preemption age limit can take effect with no
other event. With nothing pending, finishes are only booked (at their exact time), no cycle runs.
Finishes are booked at their exact end times, so allocation over time is exact.

Inflate mode (Alibaba FGD experiment). Pods are sampled (seeded, with replacement) from the
trace's placeable GPU pods and submitted; they never finish. Each cycle submits a batch of
max(1, unallocated GPUs // inflate_divisor) pods (the batch shrinks as the cluster fills, down to
one pod per cycle), `inflate_step_s` virtual seconds apart. The run stops at the first cycle in
which a GPU pod cannot be placed; the allocation "at that moment" is taken at that pod's place in
the cycle's decision order (what was admitted before it, minus what was preempted before it).
"""

from __future__ import annotations

import math
import multiprocessing as mpc
import queue as queue_mod
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

from cluster.clock import VirtualClock
from cluster.simulated.alibaba import PodRow, PodTrace, Shapes, Unplaceable, unplaceable
from cluster.simulated.traces import GangPlan, demo_run_s, gang_plan, with_blocks, workers_room
from cluster.types import JobStatus, JobView, NodeView, QuotaView
from experiments.replay import mapping as mp
from experiments.replay.metrics import (CAPACITY_REASONS, HEADLINE, JobRecord, Recorder, class_waits, headline,
                                        mean_spread, pooled_by_size)
from experiments.simulated_training import SimulatedTraining
from scheduler.policy import Admit, CycleResult, Preempt, Profile, StillPending, get_profile, schedule
from scheduler.policy.cache import CycleCache
from scheduler.policy.decisions import Reserve
from scheduler.policy.dispatch import dispatch
from scheduler.policy.profile import TIDAL
from scheduler.policy.workload import TargetWorkload, job_shape

Progress = Callable[[float], None]  # called with an absolute progress value
# Profiles replay runs besides the named ones: what a feature buys, the same code with it off.
VARIANTS: dict[str, Profile] = {
    "tidal-no-reservations": replace(TIDAL, name="tidal-no-reservations", reservations=False),
    # Kueue's fair sharing over the quota tree (with `--tree helios`; on flat departments, between departments)
    "tidal-fair": replace(TIDAL, name="tidal-fair", fair_sharing=True),
}
# The noise floor (replay --noise-floor): the profile without reservations replayed again with its cycles this much
# further apart than in its last replay (its replicates as many steps on), a change that should not matter. What it
# moves a figure by, one replay cannot tell from chance: a cycle admitting a job 0.1 s later changes what the next
# ones see. Replicates (Options.replicates) step their cycles by the same amount.
NOISE_POLICY, CLOCK_SHIFT_S = "tidal-no-reservations", 0.1
NOISE_RUN = f"{NOISE_POLICY} replayed again, its cycles {CLOCK_SHIFT_S:g} s further apart than in its last replay"


def shifted(setup: Setup, times: int = 1) -> Setup:
    """`setup` with its cycles `times` x CLOCK_SHIFT_S further apart."""
    return replace(setup, options=replace(setup.options,
                                          min_cycle_s=setup.options.min_cycle_s + times * CLOCK_SHIFT_S))


def replicate(setup: Setup, k: int) -> Setup:
    """The k-th replicate of `setup`: seed + k (the department draw) and its cycles k x CLOCK_SHIFT_S further apart."""
    seed = setup.options.seed + k
    return replace(shifted(setup, k), mapping=replace(setup.mapping, seed=seed))


@dataclass(frozen=True)
class Options:
    load_factor: float = 1.0
    min_cycle_s: float = 10.0
    recheck_s: float = 600.0
    inflate: bool = False
    inflate_divisor: float = 64.0
    inflate_step_s: float = 10.0
    inflate_max_pods: int = 200_000  # a safety bound, never reached on the Alibaba traces
    seed: int = 0
    gang_share: float | None = None  # gangs (the demo's rule) holding this share of GPU-time; None: no gangs
    gang_source: str = ""  # where the share comes from (said in the report)
    demo_speedup: float | None = None  # the demo's clock: run times / it (2 min - 2 h), arrivals / it x load factor
    # each policy replayed this many times, the k-th with seed `seed + k` (which department each pod is drawn for)
    # and its cycles k x CLOCK_SHIFT_S further apart (timeline mode): the size classes' marks are then read over all
    # of them (metrics.pooled_by_size), the headline marks as their mean and spread (metrics.mean_spread)
    replicates: int = 1


@dataclass(frozen=True)
class Setup:
    """Everything replay needs that does not depend on the policy (built once, shared by all)."""

    trace: PodTrace
    nodes: tuple[NodeView, ...]
    mapping: mp.Mapping
    quotas: tuple[QuotaView, ...]
    certified: dict[str, frozenset[str]]
    pods: tuple[PodRow, ...]  # placeable pods, in file order
    preferred: dict[int, str | None]  # line -> the user's GPU model
    unplaceable: tuple[Unplaceable, ...]
    capacity_by_model: dict[str, int]
    options: Options
    gangs: GangPlan | None = None  # which pods run as gangs (Options.gang_share)

    def workers(self, pod: PodRow) -> int:
        return self.gangs.of(pod) if self.gangs else 1

    @property
    def spread(self) -> float:
        """Inter-arrival times are multiplied by this: the gangs' growth of the offered GPU-time (1 without), over
        the demo's speed-up (with --demo)."""
        return (self.gangs.growth if self.gangs else 1.0) / (self.options.demo_speedup or 1.0)

    def run_s(self, pod: PodRow) -> float:
        return run_seconds(pod, self.trace.end, self.options)

    @property
    def mode(self) -> str:
        return "inflate" if self.options.inflate or not self.trace.timed else "timeline"

    @property
    def total(self) -> float:
        """Progress bar total: pods to submit (timeline, in every replicate) or GPUs to fill (inflate)."""
        if self.mode == "timeline":
            return float(len(self.pods) * self.options.replicates)
        return float(sum(self.capacity_by_model.values()))


def run_seconds(pod: PodRow, trace_end: float, options: Options) -> float:
    """A pod's run time: the trace's (mapping.run_time), or the demo's (cluster.simulated.traces.demo_run_s)."""
    return demo_run_s(pod, options.demo_speedup) if options.demo_speedup else mp.run_time(pod, trace_end)


def build_setup(trace: PodTrace, nodes: list[NodeView], mapping: mp.Mapping, options: Options) -> Setup:
    nodes = with_blocks(nodes)  # topology blocks, as every simulated cluster has them
    shapes = Shapes(nodes)
    bad = tuple(unplaceable(trace.pods, shapes))
    bad_lines = {u.line for u in bad}
    pods = tuple(p for p in trace.pods if p.line not in bad_lines)
    models = mp.gpu_models(nodes)
    capacity = mp.cluster_capacity(nodes)
    gangs = None
    if options.gang_share is not None:
        gangs = gang_plan(pods, options.gang_share, lambda p: run_seconds(p, trace.end, options),
                          lambda p: _room(p, shapes, nodes))
    return Setup(trace, tuple(nodes), mapping, mapping.quotas(nodes), mp.certified(pods, models), pods,
                 {p.line: shapes.preferred(p) for p in pods}, bad, {m: int(capacity[m]) for m in models}, options,
                 gangs)


def _room(pod: PodRow, shapes: Shapes, nodes: Sequence[NodeView]) -> int:
    """The most workers of the pod's shape one of its GPU models could ever hold (a gang's workers share a model)."""
    return max((workers_room(pod.gpus, pod.cpu_milli, pod.memory_mib, [n for n in nodes if n.gpu_model == m])
                for m in shapes.candidates(pod)), default=0)


class ReplayCluster(SimulatedTraining):
    """The shared acting layer (experiments.simulated_training.SimulatedTraining), recording what happens."""

    def __init__(self, setup: Setup, clock: VirtualClock, recorder: Recorder) -> None:
        super().__init__(setup.nodes, setup.quotas, setup.certified, clock, tree=setup.mapping.tree())
        self.gpu_models = tuple(setup.capacity_by_model)
        self.rec = recorder
        self.pending = 0
        # the target workload of the least-gpu-loss placement: the trace's (the live loop learns its own)
        self.workload = TargetWorkload.from_shapes(Counter(job_shape(p.cpu_milli, p.gpus, p.gpu_spec)
                                                           for p in setup.pods)) if setup.pods else None
        self.cycle_cache = CycleCache()  # this run's, kept from cycle to cycle

    def add(self, job: JobView, pod: PodRow, run_time_s: float | None, preferred: str | None) -> None:
        self.submit(job, run_time_s)
        self.pending += 1
        # one record per job: a gang's wait and completion count once, its GPUs are all its workers'
        self.rec.submitted(JobRecord(job.id, job.name, pod.line, mp.Mapping.own_eligible(pod), job.total_gpus,
                                     preferred, job.submitted_at, job.submitted_at, workers=job.workers,
                                     department=mp.department_of(job.department)))

    def _completed(self, job: JobView, at: float) -> None:
        self.run_time.pop(job.id, None)  # finished jobs are not kept: the record has what the report needs
        self.rec.finished(job.id, at)

    def apply(self, result: CycleResult) -> None:
        recording = _Recording(self)
        dispatch(result, recording)
        recording.close()

    def cycle(self, profile: Profile) -> CycleResult:
        result = schedule(self.snapshot(), profile, workload=self.workload, cache=self.cycle_cache)
        self.apply(result)
        return result


class _Recording:
    """One cycle's effects (scheduler.policy.dispatch.Effects): the simulated cluster's, and what the recorder
    reads of them; walked in decision order, so the first failure is measured at its place in the cycle."""

    def __init__(self, sim: ReplayCluster) -> None:
        self.sim, self.rec, self.now = sim, sim.rec, sim.clock.now()
        self.allocated = self.rec.alloc  # GPUs held at this point of the cycle's decisions
        self.admits = 0
        self.waiting = 0  # GPU jobs still pending
        self.waits: list[tuple[int, str, int]] = []  # (job, reason, admissions before it in queue order)

    def preempt(self, d: Preempt) -> bool:
        self.allocated -= self.sim.jobs[d.job_id].total_gpus
        held = self.sim.preempt(d)
        self.sim.pending += 1
        self.rec.preempted(d.job_id, self.now, d.reason.value)
        return held

    def admit(self, d: Admit) -> bool:
        if not self.sim.admit(d):
            return False  # a worker could not be bound: nothing was, the job waits (counted in bind_failures)
        self.sim.pending -= 1
        self.admits += 1
        self.allocated += d.rightsized.gpus * len(d.workers) if d.gpu_model else 0.0
        self.rec.admitted(d.job_id, self.now, d.gpu_model, d.quota_kind)
        return True

    def wait_for_victims(self, d: Admit, victims: tuple[int, ...]) -> None:
        self.sim.wait_for_victims(d, victims)

    def reserve(self, d: Reserve) -> None:
        self.rec.reserved(d.job_id)

    def pending(self, d: StillPending) -> None:
        job = self.sim.jobs[d.job_id]
        self.waits.append((d.job_id, d.reason.value, self.admits))
        self.waiting += job.gpus > 0
        if d.reason in CAPACITY_REASONS and job.gpus and self.rec.first_failure is None:
            self.rec.failure(self.now, d.job_name, d.reason, self.allocated)
        elif d.reason.value == "quota-exhausted":
            self.rec.quota_refusals += 1

    def close(self) -> None:
        """The cycle's waits, once every decision was acted on."""
        for job_id, reason, before in self.waits:
            self.rec.waits(job_id, self.now, reason, self.admits - before)
        self.rec.cycles += 1
        self.rec.waiting(self.now, self.waiting)


@dataclass
class PolicyRun:
    policy: str
    profile: Profile  # the object the run used: get_profile(policy), as the live loop loads it
    mode: str
    figures: dict
    timeline: list[list[float]]
    wall_s: float
    events: int
    extra: dict = field(default_factory=dict)
    fairness: list[list[float]] = field(default_factory=list)  # Jain's index of usage / fair share over time

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0


@dataclass(frozen=True)
class NoiseFloor:
    """NOISE_POLICY replayed on the shifted setup, and what that moves each mark by against its first replay."""

    run: PolicyRun
    changes: dict[str, float | None]


def replay_profile(name: str) -> Profile:
    """`get_profile(name)`, the same call the live loop makes, or one of replay's variants of a profile."""
    return VARIANTS[name] if name in VARIANTS else get_profile(name)


def run_policy(setup: Setup, name: str, progress: Progress | None = None) -> PolicyRun:
    """Replay one policy. The profile is `get_profile(name)`: the same call the live loop makes (or a variant)."""
    profile = replay_profile(name)
    started = time.perf_counter()
    if setup.mode == "inflate":
        rec, end, extra = _inflate(setup, profile, progress)
        figures = rec.summary(end, setup.mode)
    else:
        rec, end, extra = _timeline(setup, profile, progress)
        figures = rec.summary(end, setup.mode)
        if setup.options.replicates > 1:
            figures["replicates"] = _replicates(setup, profile, (class_waits(rec.jobs.values(), end), figures),
                                                progress)
    wall = time.perf_counter() - started
    return PolicyRun(name, profile, setup.mode, figures, rec.timeline_points(end), wall, rec.events, extra,
                     rec.fairness.timeline(min(end, rec.window_end)))


def _replicates(setup: Setup, profile: Profile, first: tuple[dict[str, list[float]], dict],
                progress: Progress | None) -> dict:
    """The policy replayed again as replicate k = 1 .. replicates - 1 (replicate()); over every replay, the first
    (`first`: its waits per class and its summary) included: the size classes' marks, and each headline mark's mean and
    spread."""
    waits, marks, pods = [first[0]], [headline(first[1])], len(setup.pods)
    for k in range(1, setup.options.replicates):
        step = None if progress is None else (lambda value, done=k * pods: progress(done + value))
        rec, end, _ = _timeline(replicate(setup, k), profile, step)
        waits.append(class_waits(rec.jobs.values(), end))
        marks.append(headline(rec.summary(end, setup.mode)))
    return {"n": len(waits), "cycles_further_apart_s": CLOCK_SHIFT_S,
            "seeds": [setup.options.seed + k for k in range(len(waits))], "by_size": pooled_by_size(waits),
            "marks": {name: mean_spread([m[name] for m in marks]) for name in HEADLINE}}


# -- several policies, optionally in parallel worker processes ----------------------------------
Job = tuple[Setup, str]  # a replay to run: the setup and the policy
_WORKER_JOBS: dict[str, Job] = {}
_WORKER_QUEUE = None


def _worker(label: str) -> PolicyRun:
    (setup, name), queue = _WORKER_JOBS[label], _WORKER_QUEUE
    step = max(setup.total / 200, 1e-9)
    last = [-step]

    def progress(value: float) -> None:
        if value - last[0] >= step or value >= setup.total:
            last[0] = value
            queue.put((label, value))

    return run_policy(setup, name, progress)


def run_policies(setup: Setup, names: Sequence[str], workers: int = 1,
                 bar: Callable[[str, float], Callable[[float], None]] | None = None) -> list[PolicyRun]:
    """Every policy on the same setup; results in the order of `names` (run_replays)."""
    runs = run_replays({n: (setup, n) for n in dict.fromkeys(names)}, workers, bar)
    return list(runs.values())


def run_replays(jobs: dict[str, Job], workers: int = 1,
                bar: Callable[[str, float], Callable[[float], None]] | None = None) -> dict[str, PolicyRun]:
    """Each labelled replay, results by label in the order given. `bar(label, total)` returns a progress callback.
    With workers > 1, they run in forked processes (each calls get_profile itself: one process per replay, so
    nothing is shared between their simulated clusters)."""
    callbacks = {label: bar(label, s.total) if bar else None for label, (s, _) in jobs.items()}
    if workers <= 1 or len(jobs) == 1 or "fork" not in mpc.get_all_start_methods():
        return {label: run_policy(s, name, callbacks[label]) for label, (s, name) in jobs.items()}
    global _WORKER_JOBS, _WORKER_QUEUE
    ctx = mpc.get_context("fork")
    _WORKER_JOBS, _WORKER_QUEUE = jobs, ctx.Queue()
    try:
        with ProcessPoolExecutor(min(workers, len(jobs)), mp_context=ctx) as pool:
            futures = {label: pool.submit(_worker, label) for label in jobs}
            while not all(f.done() for f in futures.values()):
                try:
                    label, value = _WORKER_QUEUE.get(timeout=0.2)
                except queue_mod.Empty:
                    continue
                if callbacks[label]:
                    callbacks[label](value)
            results = {label: f.result() for label, f in futures.items()}
        for label, (s, _) in jobs.items():
            if callbacks[label]:
                callbacks[label](s.total)
        return results
    finally:
        _WORKER_JOBS, _WORKER_QUEUE = {}, None


def _timeline(setup: Setup, profile: Profile, progress: Progress | None) -> tuple[Recorder, float, dict]:
    opt = setup.options
    trace_end = setup.trace.end
    arrivals = sorted(((p.creation * setup.spread / opt.load_factor, i) for i, p in enumerate(setup.pods)))
    start = arrivals[0][0] if arrivals else 0.0
    clock = VirtualClock(start)
    rec = Recorder(setup.capacity_by_model, start, window_end=arrivals[-1][0] if arrivals else start,
                   shares=setup.mapping.shares)
    sim = ReplayCluster(setup, clock, rec)
    n, i, last_cycle = len(arrivals), 0, -math.inf
    while True:
        next_arrival = arrivals[i][0] if i < n else math.inf
        next_finish = sim.backend.next_finish_at()
        next_finish = math.inf if next_finish is None else next_finish
        if sim.pending:
            wake = min(next_arrival, next_finish, last_cycle + opt.recheck_s)
        else:
            wake = next_arrival
        if wake == math.inf:
            break
        t = max(wake, last_cycle + opt.min_cycle_s, clock.now())
        clock.set(t)
        sim.finish_elapsed()
        submitted = i
        while i < n and arrivals[i][0] <= t:
            at, k = arrivals[i]
            pod = setup.pods[k]
            preferred = setup.preferred[pod.line]
            run_s = setup.run_s(pod)
            sim.add(mp.job(k + 1, pod, setup.mapping, at, preferred, workers=setup.workers(pod), expected_s=run_s),
                    pod, run_s, preferred)
            i += 1
        if not sim.pending:
            continue
        result = sim.cycle(profile)
        last_cycle = t
        if progress and i != submitted:
            progress(i)
        if i >= n and not result.admitted and sim.backend.next_finish_at() is None:
            break  # nothing runs, nothing arrives, nothing could start: the rest never will
    # book the remaining finishes at their exact times
    while (next_finish := sim.backend.next_finish_at()) is not None:
        clock.set(max(next_finish, clock.now()))
        sim.finish_elapsed()
    if progress:
        progress(n)
    return rec, max(clock.now(), rec.now), {"trace_end_s": trace_end, "load_factor": opt.load_factor}


def _inflate(setup: Setup, profile: Profile, progress: Progress | None) -> tuple[Recorder, float, dict]:
    opt = setup.options
    rng = random.Random(opt.seed)
    sample = [p for p in setup.pods if p.gpus]
    clock = VirtualClock(0.0)
    rec = Recorder(setup.capacity_by_model, 0.0)
    sim = ReplayCluster(setup, clock, rec)
    submitted = 0
    while rec.first_failure is None and sample and submitted < opt.inflate_max_pods:
        batch = max(1, int((rec.capacity - rec.alloc) // opt.inflate_divisor))
        for _ in range(batch):
            pod = rng.choice(sample)
            submitted += 1
            preferred = setup.preferred[pod.line]
            job = mp.job(submitted, pod, setup.mapping, clock.now(), preferred, name=f"{pod.name}#{submitted}",
                         workers=setup.workers(pod))
            sim.add(job, pod, None, preferred)
        sim.cycle(profile)
        if progress:
            progress(rec.alloc)
        clock.advance(opt.inflate_step_s)
    return rec, clock.now(), {"pods_submitted": submitted, "seed": opt.seed,
                              "pending_at_stop": sum(j.status is JobStatus.PENDING for j in sim.jobs.values())}
