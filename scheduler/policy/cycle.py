"""One scheduling cycle: snapshot -> queue -> (model, quota, node) per job -> preempt -> decisions.

Jobs are taken in queue order (score, then submit time; or submit time for FCFS). For each,
the preferred GPU model is tried first, then, with model fallback, the other certified
models by most idle capacity. On each model the quota comes first (own, else borrowed) and
then a node with free room. Only when no model has room does an own-quota job preempt, on
the first model where victims on one node free its whole need. Every admission and
preemption updates the cycle's node tables and quota ledger, so later jobs see it.

A gang (a job of several workers) is admitted only with a node for every worker, on one model (gang.py); the
first gangs that cannot start (own quota) reserve the nodes that free soonest, and later jobs use their room only
when they end before it, or when they run on borrowed quota, which the gang reclaims when it starts (reservation.py).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from cluster.types import GPU_EPS, Allocation, JobStatus, JobView, Pool, QuotaKind, Snapshot, Topology
from colocation.policy.pools import expected_run_s, preferred_pool
from colocation.policy.profile import LendingProfile
from scheduler.policy.decisions import Admit, CycleResult, Decision, Preempt, Reason, Reserve, StillPending, Worker
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import Room, pick, room, shortfall
from scheduler.policy.nodes import NodeTable, no_less_restricted, node_tables
from scheduler.policy.placement import LeastGpuLoss, Placement, allowed, attach_loss, place, restriction
from scheduler.policy.preemption import Candidate, VictimIndex, Victims
from scheduler.policy.reservation import Release, Reservation, clock, coming_back, releases, reserve
from scheduler.policy.priority import (ScoreBreakdown, aging_points, base_points, rebased, score, utilization_points,
                                      waited_s)
from scheduler.policy.profile import Profile, QueueOrder
from scheduler.policy.quota import (Demand, QuotaLedger, allocation_demand, demand, gpu_demand,
                                    host_demand)
from scheduler.policy.rightsizing import Request, requested, rightsize
from scheduler.policy.workload import TargetWorkload, jobs_workload


# Scratch types of the cycle are plain (not frozen) slotted dataclasses: several are built for every
# waiting job of every cycle, and a frozen dataclass takes about 4x as long to construct.
@dataclass(slots=True)
class Queued:
    job: JobView
    request: Request  # right-sized
    score: ScoreBreakdown  # with the quota kind the job would get at the start of the cycle
    models: tuple[str | None, ...]  # certified models, preferred first; (None,) for CPU-only
    host: Demand  # the CPU and memory part of the quota demand (the same on every model; a gang's whole)
    pool: Pool | None  # the pool it asks for; None: any
    total: int  # score.total
    shape: tuple  # its department, framework, preferred model, GPUs and memory (right-sized), workers, topology


class _PerJob:
    """What only depends on a job and the profile (right-sized request, utilization points, the
    CPU and memory part of its quota demand),
    kept from one cycle to the next: the pending jobs of one cycle are mostly the very same
    (frozen) JobView objects in the next. Entries are checked by identity, so the memo only
    saves work; it holds the jobs of the last cycle only."""

    def __init__(self) -> None:
        self.profile: Profile | None = None
        self.last: dict[int, tuple[JobView, Request, int, Demand, tuple]] = {}
        self.now: dict[int, tuple[JobView, Request, int, Demand, tuple]] = {}

    def start(self, profile: Profile) -> None:
        if self.profile is not profile and self.profile != profile:
            self.last = {}
        self.profile = profile

    def get(self, job: JobView, profile: Profile) -> tuple[JobView, Request, int, Demand, tuple]:
        """(job, right-sized request, utilization points, host demand of every worker, shape: what the waiting
        cache reads of the job but its CPU, pool and score)."""
        entry = self.last.get(id(job))
        if entry is None or entry[0] is not job:
            request = rightsize(job, profile)
            entry = (job, request, utilization_points(job, profile),  # the host demand is the whole gang's
                     host_demand(request.cpu_request_milli * job.workers, request.memory_mib * job.workers),
                     (job.department, job.framework, job.gpu_model, request.gpus, request.memory_mib, job.workers,
                      job.topology))
        self.now[id(job)] = entry
        return entry

    def finish(self) -> None:
        self.last, self.now = self.now, {}


# One memo per process, taken out while a cycle uses it (a concurrent cycle builds its own).
_PER_JOB: dict[str, _PerJob] = {}
_SCORES: dict[str, dict[int, tuple[JobView, Profile, int]]] = {}  # running jobs' victim scores (_Cycle.victims)


_NO_FREE = (0, 0.0)


@dataclass(slots=True)
class _NoRoom:
    """A model whose quota had room but whose nodes did not; formatted only if the job waits."""

    pod: PodRequest
    kind: QuotaKind | None
    bounds: tuple[float, float, int, int] | None  # most free on one node (upper bounds); None: not shown
    free: tuple[int, float] = _NO_FREE  # wholly free and idle GPUs across the model's nodes, when shown
    gang: str | None = None  # a gang's shortfall (gang.shortfall), when shown
    frame: tuple[str, str] | None = None  # the gang's, split where the worker's CPU goes (None: more depends on it)

    def __str__(self) -> str:
        return self.text(f"{self.pod.cpu_milli}")

    @property
    def templated(self) -> bool:
        """Whether the sentence depends on the request's CPU only where it is written."""
        return self.gang is None or self.frame is not None

    def text(self, request_cpu: str) -> str:
        """The sentence, the request's CPU written as `request_cpu` (a waiting job's sentence is kept as a template
        with its CPU left out)."""
        if self.gang is not None:
            return self.gang if self.frame is None else request_cpu.join(self.frame)
        whole, share, cpu, mem = self.bounds
        where = f"{self.pod.gpu_model} node" if self.pod.gpu_model else "CPU node"
        borrowed = " (borrowed quota runs on idle capacity only)" if self.kind is QuotaKind.BORROWED else ""
        return (f"no idle {where} fits {self.pod.describe(request_cpu)}{borrowed}; most free on one node: "
                f"{whole:g} whole GPU{'' if whole == 1 else 's'}, {share:.2f} of a GPU, {cpu}m CPU, {mem} MiB"
                f"{self._fragments(whole, share)}")

    def _fragments(self, whole: float, share: float) -> str:
        """When the free GPUs would do but only as fragments, the sentence says so
        (docs/concepts/placement.md#the-clusters-typical-jobs)."""
        (free, idle), gpus, model = self.free, self.pod.gpus, self.pod.gpu_model
        if gpus >= 1 and free >= gpus > whole:
            return (f"; {free} {model} GPUs free across the cluster, at most {whole:g} on any node; "
                    f"this job needs {gpus:g} on one node")
        if 0 < gpus < 1 and idle >= gpus > share + GPU_EPS:
            return (f"; {idle:.2f} {model} GPUs idle across the cluster, at most {share:.2f} of any one GPU; "
                    f"this job needs {gpus:g} of one GPU")
        return ""


@dataclass(slots=True)
class _Waited:
    """A job that waited: when (the cycle's change count), its CPU and score, and what it was told."""

    changes: int
    takes: int  # evictions tried (a gang's preemption is a greedy search: trusted only while its memo stands)
    cpu: int
    exact: bool  # its sentence depends on the CPU beyond where it is written: only that very CPU reads the same
    total: int  # the score its preemption compared (ScoreBreakdown.preemption)
    reason: Reason
    template: str  # the sentence, _CPU_MARK where the job's CPU goes


_KEEP_MISSES, _PROBE_EVERY = 64, 16  # see _Cycle._try
_CPU_MARK = "\x00"  # where a waiting job's CPU goes in its sentence (checked not to occur in any name)

_ADMITTED = {QuotaKind.OWN: Reason.ADMITTED_OWN, QuotaKind.BORROWED: Reason.ADMITTED_BORROWED, None: Reason.ADMITTED}


def _demand(pod: PodRequest) -> Demand:
    return demand(pod.gpu_model, pod.gpus, pod.cpu_milli, pod.memory_mib)


def schedule(snapshot: Snapshot, profile: Profile, lending: LendingProfile | None = None,
             workload: TargetWorkload | None = None) -> CycleResult:
    """Decide admissions, preemptions and reasons for waiting; pure, the snapshot is not changed.

    With `lending` (a cluster with a co-location pool), each pending job's pool comes from the pool rule
    (`preferred_pool`: pinned to fixed, else long or short by its past runs or stated duration at `now`);
    without, a job asks for the pool it names, if any. `workload` is the target workload the least-gpu-loss
    placement keeps usable (the live loop's is learned from the last week's submissions, replay's from the trace);
    without one, the shapes of the snapshot's own jobs."""
    return _Cycle(snapshot, profile, lending, workload).run()


class _Cycle:
    """What the cycle needs is built on first use: with no job pending nothing is, and victim
    indexes only for the models where preemption is actually tried."""

    def __init__(self, snapshot: Snapshot, profile: Profile, lending: LendingProfile | None,
                 workload: TargetWorkload | None) -> None:
        self.snap = snapshot
        self.profile = profile
        self.lending = lending
        self.workload = workload
        self.now = snapshot.now
        self.preempt_failed: dict[str | None, list[tuple]] = defaultdict(list)
        self.decisions: list[Decision] = []
        # per-cycle memos of what only depends on the snapshot
        self._certified: dict[tuple[str, str | None], tuple[str | None, ...]] = {}
        self._split: dict[tuple[tuple[str | None, ...], str | None], tuple[list, list]] = {}
        self._fallbacks: dict[tuple[tuple[str | None, ...], str | None], list] = {}  # until capacity changes
        self._victims: dict[str | None, VictimIndex] = {}
        # running jobs' scores as victims: the last cycle's, and this one's for the next (by identity, as _PerJob)
        self._last_scores: dict[int, tuple[JobView, Profile, int]] = _SCORES.pop("last", {})
        self._scores: dict[int, tuple[JobView, Profile, int]] = {}
        self._gpu_demands: dict[float, dict[str | None, Demand]] = {}  # GPUs of a whole job -> model -> its demand
        self._breakdowns: dict[tuple[int, int, int], ScoreBreakdown] = {}
        self.reservations: list[Reservation] = []  # what the first waiting gangs hold
        self._coming: dict[tuple[str | None, bool], list[Release]] = {}  # (model, reclaims) -> releases, soonest first
        self.gang_failed: dict[str | None, list[tuple]] = defaultdict(list)  # gangs known not to fit now
        self.gang_preempt_failed: dict[str | None, list[tuple]] = defaultdict(list)  # ... nor by preempting
        self.reserve_failed: dict[str | None, list[tuple]] = defaultdict(list)  # ... nor reserved as jobs end
        self.started: list[Release] = []  # what this cycle's admissions give back, when known (gangs waiting)
        self.gangs = False
        # Kueue-style inadmissible cache: what a waiting job got, by everything its try reads of it (_wait_key), valid
        # while nothing changed: `changes` counts admissions (with their evictions), reservations, and a gang's
        # evictions given back when that did not restore every figure bit for bit
        self.changes = 0
        self.takes = 0
        self._misses = 0  # jobs tried in a row without the cache answering
        self._waited: dict[tuple, _Waited] = {}
        self._starts: list[float] = []  # the reservations' start times, ascending

    @cached_property
    def tables(self) -> dict[str | None, NodeTable]:
        tables = node_tables(self.snap.nodes)
        if any(name == LeastGpuLoss.name for name, _ in self.profile.scorers):
            workload = self.workload or self._jobs_workload()
            if workload is not None:
                attach_loss(tables, workload)
        return tables

    def _jobs_workload(self) -> TargetWorkload | None:
        """The shapes of the snapshot's jobs, each allowed on its framework's certified models."""
        return jobs_workload(self.snap.jobs, self.snap.compatible_models)

    @cached_property
    def holders(self) -> list[JobView]:
        return [j for j in self.snap.jobs if j.status.holds_resources and j.allocation is not None]

    @cached_property
    def holders_by_model(self) -> dict[str | None, list[JobView]]:
        by_model: dict[str | None, list[JobView]] = defaultdict(list)
        for job in self.holders:
            by_model[job.allocation.gpu_model].append(job)
        return by_model

    @cached_property
    def ledger(self) -> QuotaLedger:
        return QuotaLedger(self.snap.quotas, self.holders)

    def victims(self, model: str | None) -> VictimIndex:
        """Jobs holding resources on the model's nodes as possible victims (as the cycle started)."""
        index = self._victims.get(model)
        if index is None:
            table = self.tables[model]
            candidates = []
            profile, last, scores = self.profile, self._last_scores, self._scores
            for job in self.holders_by_model.get(model, ()):
                known = last.get(id(job))
                if known is not None and known[0] is job and known[1] is profile:
                    total = known[2]
                else:
                    total = score(job, job.allocation.quota_kind, self.now, profile).preemption(profile)
                if job.started_at is not None:  # its wait, hence its score, no longer grows
                    scores[id(job)] = (job, profile, total)
                for alloc in job.allocations:  # a gang: each worker, evicted all together
                    if alloc.node not in table.row:
                        continue  # a node outside the snapshot: nothing to reclaim there
                    candidates.append(Candidate(job, alloc, table.row[alloc.node], total, job.run_time_s(self.now),
                                                alloc.quota_kind is QuotaKind.BORROWED))
            index = self._victims[model] = VictimIndex(table, candidates)
        return index

    # -- queue ------------------------------------------------------------------------
    def run(self) -> CycleResult:
        head: JobView | None = None
        queue = self.queue()
        self.gangs = self.profile.reservations and any(q.job.gang for q in queue)  # a reservation may come
        for position, q in enumerate(queue):
            if head is not None:
                self._pending(q, position, Reason.BLOCKED, f"waiting behind job {head.name} (strict FCFS)")
            elif not self._try(q, position) and self.profile.head_of_line_blocking:
                head = q.job
        _SCORES["last"] = self._scores
        return CycleResult(self.now, tuple(self.decisions))

    def queue(self) -> list[Queued]:
        per_job = _PER_JOB.pop("last", None) or _PerJob()
        per_job.start(self.profile)
        pending = JobStatus.PENDING
        own_room: dict[tuple, bool] = {}  # the ledger does not change while the queue is built
        items = [self._queued(j, per_job, own_room) for j in self.snap.jobs if j.status is pending]
        per_job.finish()
        _PER_JOB["last"] = per_job
        if self.profile.order is QueueOrder.FIFO:
            items.sort(key=lambda q: (q.job.submitted_at, q.job.id))
        else:
            items.sort(key=lambda q: (-q.total, q.job.submitted_at, q.job.id))
        return items

    def _queued(self, job: JobView, per_job: _PerJob, own_room: dict[tuple, bool]) -> Queued:
        profile = self.profile
        _, request, utilization, host, shape = per_job.get(job, profile)
        models = self._models(job)
        kind = None
        if profile.quotas:
            first = models[0] if models else job.gpu_model
            key = (job.department, first, request.gpus * job.workers, host)
            own = own_room.get(key)
            if own is None:
                own = own_room[key] = self.ledger.has_own_room(job.department, gpu_demand(*key[1:3]), host)
            kind = QuotaKind.OWN if own else QuotaKind.BORROWED
        # = score(job, kind, now, profile), with the utilization term from the memo
        breakdown = self._breakdown(base_points(kind, profile), utilization,
                                    aging_points(waited_s(job, self.now), profile))
        return Queued(job, request, breakdown, models, host,
                      job.preferred_pool if self.lending is None else self._pool(job), breakdown.total, shape)

    def _pool(self, job: JobView) -> Pool | None:
        if self.lending is None:
            return job.preferred_pool
        return preferred_pool(job, self.now, self.lending).preferred

    def _breakdown(self, base: int, utilization: int, aging: int) -> ScoreBreakdown:
        """ScoreBreakdown(...), one shared (frozen) object per distinct score: a handful of values
        per cycle, and building a frozen dataclass costs more than looking one up."""
        key = (base, utilization, aging)
        breakdown = self._breakdowns.get(key)
        if breakdown is None:
            breakdown = self._breakdowns[key] = ScoreBreakdown(base, utilization, aging)
        return breakdown

    def _models(self, job: JobView) -> tuple[str | None, ...]:
        if job.gpus == 0:
            return (None,)
        key = (job.framework, job.gpu_model)
        if key not in self._certified:
            self._certified[key] = self._certified_models(*key)
        return self._certified[key]

    def _certified_models(self, framework: str, preferred: str | None) -> tuple[str | None, ...]:
        compatible = self.snap.compatible_models(framework, preferred)
        if preferred in compatible:
            rest = tuple(m for m in compatible if m != preferred) if self.profile.model_fallback else ()
            return (preferred, *rest)
        return compatible if self.profile.model_fallback or preferred is None else ()

    def _model_order(self, q: Queued) -> Iterator[str | None]:
        """Preferred model first; then the others by most idle capacity. They are sorted only once
        the preferred model failed (a failure changes no capacity: the order is the one sorting up
        front gives), and the order is kept until an admission changes some idle capacity."""
        key = (q.models, q.job.gpu_model)
        split = self._split.get(key)
        if split is None:
            models = [m for m in q.models if m in self.tables]
            head = [models.pop(0)] if models and models[0] == q.job.gpu_model else []
            split = self._split[key] = (head, models)
        head, rest = split
        yield from head
        if len(rest) >= 2:
            order = self._fallbacks.get(key)
            if order is None:
                order = self._fallbacks[key] = sorted(rest, key=lambda m: (-self.tables[m].idle_gpus(), m or ""))
            rest = order
        yield from rest

    # -- one job ----------------------------------------------------------------------
    def _try(self, q: Queued, position: int) -> bool:
        """Admit `q` or say why it waits. Kueue-style, a job is not tried again when one that waited since the last
        change reads the same (_wait_key), asked no more CPU, ranks no higher for preemption (could preempt no more)
        and both had room in their host quota: then it waits for the same reason, its own CPU in the same sentence."""
        job, req = q.job, q.request
        ends_at = self._ends_at(job)
        key = self._wait_key(q, ends_at)
        cpu, total = req.cpu_request_milli, q.score.preemption(self.profile)  # what its preemption compares
        known = self._waited.get(key)
        if (known is not None and known.changes == self.changes and (cpu == known.cpu or cpu > known.cpu
                                                                      and not known.exact)
                and total <= known.total and (job.workers == 1 or known.takes == self.takes) and self._host_fits(q)):
            self._pending(q, position, known.reason, known.template.replace(_CPU_MARK, f"{cpu}"))
            self._misses = 0
            return False
        # After a long run of misses (a burst of admissions: each one makes what waited before stale), only every
        # few jobs are kept, until one is found again: keeping costs, and changes nothing.
        self._misses += 1
        keep = self._misses <= _KEEP_MISSES or self._misses % _PROBE_EVERY == 0
        changes, takes = self.changes, self.takes
        waits = self._attempt(q, position, ends_at, _CPU_MARK if keep else None)
        if waits is None:
            return True
        reason, template, exact, host_fits = waits
        if keep and self.changes == changes and template is not None and host_fits:
            self._waited[key] = _Waited(changes, takes, cpu, exact, total, reason, template)
        return False

    def _wait_key(self, q: Queued, ends_at: float) -> tuple:
        """Everything a try reads of a job but its score and CPU: its shape, department, certified models, pool and
        which reservations it must keep off (those starting before it would end)."""
        return q.shape, q.pool, bisect_left(self._starts, ends_at) if self._starts else 0

    def _host_fits(self, q: Queued) -> bool:
        """The job's CPU and memory fit its department's own and borrowed quota: its CPU then decides no quota
        check, and no quota sentence shows it."""
        return not self.profile.quotas or self.ledger.host_fits(q.job.department, q.host, self.profile.borrowing)

    def _attempt(self, q: Queued, position: int, ends_at: float, mark: str | None = _CPU_MARK
                 ) -> tuple[Reason, str | None, bool, bool] | None:
        """Try every model (and preemption) for `q`: None when admitted, else the reason it waits with, its sentence
        with `mark` where the job's CPU goes (None: not kept), whether more of it depends on the CPU (a gang's room per
        block) and whether its CPU and memory fit its host quota (_host_fits); its StillPending decision appended."""
        job, req, profile = q.job, q.request, self.profile
        refusals: list[tuple[str | None, object]] = []  # (model, why) formatted only if the job waits
        attempts: list[_NoRoom] = []
        quota = self.ledger.checker(job.department, q.host, profile.borrowing) if profile.quotas else None
        need = req.gpus * job.workers
        demands = self._gpu_demands.get(need)
        if demands is None:
            demands = self._gpu_demands[need] = {}
        for n, model in enumerate(self._model_order(q)):
            # Every model tried and not used adds to `refusals`, so the first two models are the ones
            # a waiting job's message spells out (see _why); the others it only names, so for them
            # the refusals are not built (why = None).
            spelled = n < 2
            if quota is None:
                kind = None
            else:
                gpu = demands.get(model)
                if gpu is None:
                    gpu = demands[model] = gpu_demand(model, need)
                if spelled:
                    check = quota.choose(gpu)
                    refusals.extend((model, why) for why in check.refused)
                    kind = check.kind
                else:
                    kind = quota.kind(gpu)
            if kind is None and quota is not None:
                if not spelled:
                    refusals.append((model, None))
                continue
            pod = PodRequest(model, req.gpus, req.cpu_request_milli, req.memory_mib, q.pool, ends_at,
                             kind is QuotaKind.BORROWED)
            table = self.tables[model]
            if job.gang:
                rows = self._gang_rows(job, pod, table)
                if rows is not None:
                    self._admit_gang(q, pod, kind, rows, ())
                    return None
                attempt = _NoRoom(pod, kind, None, _NO_FREE, *self._gang_shortfall(job, pod, table)) if spelled \
                    else _NoRoom(pod, kind, None)
            else:
                placement = place(pod, table, profile)
                if placement is not None:
                    self._admit(q, pod, kind, placement, ())
                    return None
                attempt = _NoRoom(pod, kind, table.bounds(), (table.free_whole_gpus(), table.idle_gpus())) \
                    if spelled else _NoRoom(pod, kind, None)
            attempts.append(attempt)
            refusals.append((model, attempt if spelled else None))
        if self.profile.preemption and (self._preempt_gang(q, attempts) if job.gang else self._preempt_for(q, attempts)):
            return None
        reason, template, marks, exact = self._why(q, attempts, refusals, mark)
        if mark is None:
            message, template = template, None
        elif template.count(mark) == marks:
            message = template.replace(mark, f"{req.cpu_request_milli}")
        else:  # the mark was in some name: written plainly, and not kept
            reason, message, _, _ = self._why(q, attempts, refusals)
            template = None
        if job.gang and attempts and profile.reservations and len(self.reservations) < profile.reservation_depth:
            sentence = self._reserve(q, attempts)  # the first waiting gangs, highest in the queue first
            if sentence:
                reason, message = Reason.RESERVED, f"{message}; {sentence}"
        self._pending(q, position, reason, message)
        return reason, template, exact, quota is None or quota.host_fits()

    def _ends_at(self, job: JobView) -> float:
        """When the job would end if it started now (inf: unknown): it may use room reserved for a gang that starts
        later (backfill)."""
        if not self.reservations:
            return math.inf  # (nothing reserved: never read)
        run_s = expected_run_s(job)
        return math.inf if run_s is None else self.now + run_s

    # -- gangs --------------------------------------------------------------------------
    def _gang_rows(self, job: JobView, pod: PodRequest, table) -> list[int] | None:
        """A row per worker of the gang on `table`, or None; the failures of a cycle are remembered (capacity only
        shrinks until something is evicted), so a stream of gangs too large for what is left costs little."""
        if not len(table) or not table.may_fit(*pod.dims()) or pod.gpus * job.workers > table.free_whole_gpus():
            return None  # not even one worker fits anywhere, or fewer whole GPUs are free than the gang needs
        memo = (job.workers, *pod.dims(), pod.pool, job.topology, restriction(pod, table))
        failed = self.gang_failed[pod.gpu_model]
        if _known_gang_failure(failed, memo):
            return None
        rows = pick(table, room(table, pod, allowed(pod, table, self.profile), job.topology), job.workers)
        if rows is None:
            failed.append(memo)
        return rows

    def _gang_shortfall(self, job: JobView, pod: PodRequest, table) -> tuple[str, tuple[str, str] | None]:
        """What a waiting gang misses on one model (the cheap sentence when too few whole GPUs are free at all), and
        the sentence split where the worker's CPU goes when it depends on the CPU only there (None: room per block,
        which the CPU changes, is named)."""
        free = table.free_whole_gpus() if len(table) else 0
        fits = None
        if pod.gpus * job.workers <= free:
            fits = room(table, pod, allowed(pod, table, self.profile), job.topology)
            if fits.total:
                return shortfall(table, fits, job.workers, pod, job.topology), None
        frame = self._gang_text(table, job, pod, free, fits, _CPU_MARK).split(_CPU_MARK)
        if len(frame) != 2:  # the mark in a name: written plainly, without a frame
            return self._gang_text(table, job, pod, free, fits, None), None
        return f"{pod.cpu_milli}".join(frame), (frame[0], frame[1])

    @staticmethod
    def _gang_text(table: NodeTable, job: JobView, pod: PodRequest, free: int, fits: Room | None,
                   cpu: str | None) -> str:
        """A gang's shortfall when no node has room for one worker, or too few whole GPUs are free at all."""
        if fits is not None:
            return shortfall(table, fits, job.workers, pod, job.topology, cpu)
        return (f"needs {job.workers} workers of {pod if cpu is None else pod.describe(cpu)}: "
                f"{pod.gpus * job.workers:g} whole {pod.gpu_model} GPUs, {free} free across the cluster")

    def _admit_gang(self, q: Queued, pod: PodRequest, kind: QuotaKind | None, rows: list[int],
                    preempting: tuple[int, ...]) -> None:
        """Allocate every worker (in rank order) and admit the gang as one decision."""
        self.changes += 1
        table = self.tables[pod.gpu_model]
        workers = []
        for row in rows:
            shares = table.choose_gpus(row, pod.gpus)
            table.allocate(row, shares, pod.cpu_milli, pod.memory_mib)
            workers.append(Worker(table.names[row], shares))
        self._fallbacks.clear()
        job, n = q.job, len(rows)
        if kind is not None:
            self.ledger.charge(job.department, kind, demand(pod.gpu_model, pod.gpus * n, pod.cpu_milli * n,
                                                            pod.memory_mib * n))
        self._started(job, pod, kind, workers)
        breakdown = rebased(q.score, kind, self.profile)
        asked = requested(job)
        nodes = sorted({w.node for w in workers})
        blocks = sorted({table.block_names[table.block[table.row[node]]] for node in nodes} - {""})
        where = (f"admitted {n} workers on {len(nodes)} node{'s' if len(nodes) > 1 else ''} "
                 f"({', '.join(nodes[:6])}{', …' if len(nodes) > 6 else ''})"
                 + (f", block {blocks[0]}" if len(blocks) == 1 else f", {len(blocks)} blocks" if blocks else ""))
        parts = [where, f"{kind.value} quota of {job.department}" if kind else "no quotas",
                 f"score {breakdown}"]
        if job.gpus and pod.gpu_model != job.gpu_model:
            parts.append(f"{pod.gpu_model}: most idle certified model" + (f", not {job.gpu_model}" if job.gpu_model else ""))
        if q.request != asked:
            parts.append(f"each worker right-sized from {asked} to {q.request}")
        if preempting:
            parts.append(f"after preempting {len(preempting)} job(s)")
        first = workers[0]
        self.decisions.append(Admit(
            job.id, job.name, first.node, pod.gpu_model, first.gpu_shares, kind, asked, q.request, breakdown,
            preempting, _ADMITTED[kind], "; ".join(parts), tuple(workers[1:])))

    def _started(self, job: JobView, pod: PodRequest, kind: QuotaKind | None, workers: list) -> None:
        """Remember what an admission gives back and when (inf: its run time is unknown), for a reservation later in
        this cycle."""
        run_s = expected_run_s(job)
        if run_s is not None or kind is QuotaKind.BORROWED:  # (borrowed work an own-quota gang would reclaim)
            self.reserve_failed[pod.gpu_model].clear()  # one more release to come: a reservation may now be found
            at = math.inf if run_s is None else self.now + run_s
            self.started.extend(Release(at, Allocation(w.node, pod.gpu_model, w.gpu_shares, pod.cpu_milli,
                                                       pod.memory_mib, kind))
                                for w in workers)

    def _reserve(self, q: Queued, attempts: list[_NoRoom]) -> str:
        """Reserve for a waiting gang the nodes that free soonest, among those no earlier gang holds; the sentence
        saying so ("" when nothing could be reserved: borrowed quota, or no end known of the jobs in the way)."""
        best: tuple[str | None, Reservation, bool] | None = None
        for a in attempts:
            if self.profile.quotas and a.kind is QuotaKind.BORROWED:
                continue  # borrowed quota only ever runs on idle capacity: no room is held for it
            model = a.pod.gpu_model
            # no gang easier than one no release order could seat is seated (the releases and held rows being
            # the same): a queue of waiting gangs costs one search per model, not one each
            # An own-quota gang reclaims borrowed work when it starts: for it, that work's room comes back at once
            # (and its nodes stay open to borrowed jobs meanwhile).
            reclaims = a.kind is QuotaKind.OWN and self.profile.preemption
            memo = (q.job.workers, *a.pod.dims(), a.pod.pool, q.job.topology, (a.pod.ends_at, reclaims))
            if _known_gang_failure(self.reserve_failed[model], memo):
                continue
            table = self.tables[model]
            if (model, reclaims) not in self._coming:
                self._coming[model, reclaims] = releases(self.holders_by_model.get(model, []), self.now, reclaims)
            coming = list(heapq.merge(self._coming[model, reclaims], coming_back(
                (r for r in self.started if r.allocation.gpu_model == model), self.now, reclaims), key=lambda r: r.at))
            # (a.pod is not borrowed: borrowed gangs reserve nothing, so it is kept off every earlier gang's rows)
            found = reserve(table, a.pod, q.job.workers, q.job.topology, allowed(a.pod, table, self.profile),
                            coming)
            if found is None:
                self.reserve_failed[model].append(memo)
            elif best is None or found.start_at < best[1].start_at:
                best = (model, found, reclaims)
        if best is None:
            return ""
        model, found, reclaims = best
        self.reservations.append(found)
        insort(self._starts, found.start_at)
        self.changes += 1
        table = self.tables[model]
        table.reserve(found.rows, found.start_at, firm=not reclaims)
        nodes = [table.names[r] for r in found.rows]
        shown = ", ".join(nodes[:6]) + (f" and {len(nodes) - 6} more" if len(nodes) > 6 else "")
        sentence = (f"reserved {shown} for job {q.job.name}; expected start {clock(found.start_at)} "
                    f"(when the jobs there are expected to end); until then only jobs ending before it use them"
                    + (", and borrowed ones, which it reclaims when it starts" if reclaims else ""))
        self.decisions.append(Reserve(q.job.id, q.job.name, tuple(nodes), found.start_at, Reason.RESERVED, sentence))
        return sentence

    def _why(self, q: Queued, attempts: list[_NoRoom], refusals: list[tuple[str | None, object]],
             cpu: str | None = None) -> tuple[Reason, str, int, bool]:
        """The reason and sentence, the request's CPU written as `cpu` (default: the figure), how many times, and
        whether the sentence depends on the CPU elsewhere too."""
        if not q.models:
            return Reason.NO_COMPATIBLE_MODEL, (f"framework {q.job.framework} is not certified on "
                                                f"{q.job.gpu_model or 'any GPU model'}"), 0, False
        if not refusals:
            return Reason.NO_CAPACITY, "no node of a compatible GPU model exists", 0, False
        # Spelled out for the preferred and the best fallback model; the rest only named (cheap).
        # Refusals come model by model, so the first two models seen are the first two listed.
        shown: list[str | None] = []
        parts: list[str] = []
        others: set[str | None] = set()
        marks, exact = 0, False
        for model, why in refusals:
            if model not in shown:
                if len(shown) == 2:
                    others.add(model)
                    continue
                shown.append(model)
            if cpu is not None and type(why) is _NoRoom:
                if why.templated:
                    parts.append(why.text(cpu))
                    marks += 1
                    continue
                exact = True
            parts.append(str(why))
        message = "; ".join(parts)
        if others:
            named = ", ".join(sorted(m or "CPU" for m in others))
            message += f"; no quota or room on the other certified models either ({named})"
        if not attempts:
            return Reason.QUOTA_EXHAUSTED, message, marks, exact
        for a in attempts:
            if a.kind is not QuotaKind.BORROWED:
                return Reason.NO_CAPACITY, message, marks, exact
        return Reason.NO_IDLE_CAPACITY, message, marks, exact

    # -- preemption -------------------------------------------------------------------
    def _preempt_for(self, q: Queued, attempts: list[_NoRoom]) -> bool:
        """Own-quota (or quota-less) work may preempt; borrowed work only ever uses idle capacity."""
        for a in attempts:
            if a.kind is QuotaKind.BORROWED or not self.holders_by_model.get(a.pod.gpu_model):
                continue  # (nobody to preempt on an empty model: the burst of a first cycle)
            total = rebased(q.score, a.kind, self.profile).preemption(self.profile)
            own = a.kind is QuotaKind.OWN
            model = a.pod.gpu_model
            memo = (*a.pod.dims(), a.pod.pool, total, own)
            if _known_failure(self.preempt_failed[model], memo):
                continue
            table = self.tables[model]
            victims = self.victims(model).find(a.pod, total, own, self.profile)
            if victims is None:
                self.preempt_failed[model].append(memo)
                continue
            taken = self._take(model, victims)
            self._preempt_decisions(q, a, taken)
            placement = Placement(victims.row, table.names[victims.row], table.choose_gpus(victims.row, a.pod.gpus))
            self._admit(q, a.pod, a.kind, placement, _job_ids(taken))
            return True
        return False

    def _preempt_gang(self, q: Queued, attempts: list[_NoRoom]) -> bool:
        """Victims node by node, each set freeing a worker's room where there was none, until the whole gang fits;
        when it never does, everything taken is given back and nobody is preempted."""
        job = q.job
        for a in attempts:
            if a.kind is QuotaKind.BORROWED or not self.holders_by_model.get(a.pod.gpu_model):
                continue
            total = rebased(q.score, a.kind, self.profile).preemption(self.profile)
            model, table = a.pod.gpu_model, self.tables[a.pod.gpu_model]
            own = a.kind is QuotaKind.OWN
            memo = (job.workers, *a.pod.dims(), a.pod.pool, job.topology, total, own)
            if _known_gang_preempt_failure(self.gang_preempt_failed[model], memo):
                continue
            index = self.victims(model)
            taken: list[Candidate] = []
            rows = None
            for _ in range(job.workers):
                fits = room(table, a.pod, allowed(a.pod, table, self.profile), job.topology).per_node > 0
                victims = index.find(a.pod, total, own, self.profile, exclude=fits)
                if victims is None:
                    break
                if not taken:
                    before = self._fingerprint(model)
                taken.extend(self._take(model, victims))
                rows = self._gang_rows(job, a.pod, table)
                if rows is not None:
                    break
            if rows is None:
                self._give_back(model, taken)
                if taken and self._fingerprint(model) != before:
                    self.changes += 1  # floats that did not add back exactly: what waited since may not wait now
                self.gang_preempt_failed[model].append(memo)
                continue
            self._preempt_decisions(q, a, taken)
            self._admit_gang(q, a.pod, a.kind, rows, _job_ids(taken))
            return True
        return False

    def _take(self, model: str | None, victims: Victims) -> list[Candidate]:
        """Free what the victims hold (a gang's every worker) in the tables, the ledger and the victim index."""
        self.takes += 1
        index, table = self.victims(model), self.tables[model]
        taken = index.whole(victims)
        index.remove(taken)
        for c in taken:
            alloc = c.allocation
            table.release(c.row, alloc.gpu_shares, alloc.cpu_milli, alloc.memory_mib)
            if alloc.quota_kind is not None:
                self.ledger.release(c.job.department, alloc.quota_kind, allocation_demand(alloc))
        self.preempt_failed[model].clear()
        self.gang_failed[model].clear()
        self.gang_preempt_failed[model].clear()
        self.reserve_failed[model].clear()
        return taken

    def _fingerprint(self, model: str | None) -> tuple:
        """What a preemption changes and a give-back restores (the model's free room, idle GPUs and victims; the
        quota usage): equal before and after, the cycle is where it was (the waiting cache stays valid)."""
        table, index = self.tables[model], self.victims(model)
        return (table.gpu_used.tobytes(), table.cpu_free.tobytes(), table.mem_free.tobytes(), table.idle_gpus(),
                index.alive.tobytes(), *(a.tobytes() for a in index.held_by_borrowed), self.ledger.usage())

    def _give_back(self, model: str | None, taken: list[Candidate]) -> None:
        """Undo _take: a gang's preemption that did not free enough."""
        table = self.tables[model]
        for c in taken:
            alloc = c.allocation
            table.allocate(c.row, alloc.gpu_shares, alloc.cpu_milli, alloc.memory_mib)
            if alloc.quota_kind is not None:
                self.ledger.charge(c.job.department, alloc.quota_kind, allocation_demand(alloc))
        self.victims(model).remove(taken, sign=-1)

    def _preempt_decisions(self, q: Queued, a: _NoRoom, taken: list[Candidate]) -> None:
        total = rebased(q.score, a.kind, self.profile).preemption(self.profile)
        by_job: dict[int, list[Candidate]] = {}
        for c in taken:
            by_job.setdefault(c.job.id, []).append(c)
        for cands in by_job.values():
            c = cands[0]
            reclaim = c.borrowed and a.kind is QuotaKind.OWN
            why = (f"to give {q.job.department} back its own {a.pod.gpu_model or 'CPU'} quota" if reclaim
                   else f"for higher score {total} > {c.score}" if self.profile.aging_preempts
                   else f"for higher priority {total} > {c.score} (base + utilization; aging only orders the queue)")
            nodes = sorted({x.allocation.node for x in cands})
            where = (f"on {nodes[0]}" if not c.job.gang else
                     f"(all {c.job.workers} workers of the gang, on {', '.join(nodes)})")
            self.decisions.append(Preempt(
                c.job.id, c.job.name, c.allocation.node, q.job.id, c.run_time_s, True,
                Reason.PREEMPTED_RECLAIM if reclaim else Reason.PREEMPTED_PRIORITY,
                f"preempted {where} after {c.run_time_s:.0f}s {why} (job {q.job.name}); "
                f"requeued with its original submit time and history"))

    # -- outcomes ---------------------------------------------------------------------
    def _admit(self, q: Queued, pod: PodRequest, kind: QuotaKind | None, placement: Placement,
               preempting: tuple[int, ...]) -> None:
        self.changes += 1
        job = q.job
        table = self.tables[pod.gpu_model]
        table.allocate(placement.row, placement.gpu_shares, pod.cpu_milli, pod.memory_mib)
        self._fallbacks.clear()  # idle capacity changed (here and by the evictions, if any, made for this job)
        if kind is not None:
            self.ledger.charge(job.department, kind, _demand(pod))
        if self.gangs:
            self._started(job, pod, kind, [Worker(placement.node, placement.gpu_shares)])
        breakdown = rebased(q.score, kind, self.profile)
        asked = requested(job)
        self.decisions.append(Admit(
            job.id, job.name, placement.node, pod.gpu_model, placement.gpu_shares, kind,
            asked, q.request, breakdown, preempting, _ADMITTED[kind],
            self._admit_message(q, pod, kind, placement, breakdown, asked, preempting)))

    def _admit_message(self, q: Queued, pod: PodRequest, kind: QuotaKind | None, placement: Placement,
                       breakdown: ScoreBreakdown, asked: Request, preempting: tuple[int, ...]) -> str:
        job = q.job
        gpus = ",".join(f"{s.index}" if s.share == 1 else f"{s.index}:{s.share:g}" for s in placement.gpu_shares)
        parts = [f"admitted on {placement.node}" + (f" (GPUs {gpus})" if gpus else "")]
        if placement.loss is not None:
            parts.append(f"GPU the typical jobs cannot use: {placement.loss / 1000:+.2f} (placed where it grows least)")
        parts.append(f"{kind.value} quota of {job.department}" if kind else "no quotas")
        if job.gpus and pod.gpu_model != job.gpu_model:
            parts.append(f"{pod.gpu_model} instead of {job.gpu_model}: no room there, most idle certified model"
                         if job.gpu_model else f"{pod.gpu_model}: most idle certified model")
        parts.append(f"score {breakdown}")
        if q.request != asked:
            parts.append(f"right-sized from {asked} to {q.request}")
        if preempting:
            parts.append(f"after preempting {len(preempting)} job(s)")
        return "; ".join(parts)

    def _pending(self, q: Queued, position: int, reason: Reason, message: str) -> None:
        self.decisions.append(StillPending(q.job.id, q.job.name, position, q.score, reason,
                                           f"pending: {message}"))


def _job_ids(taken: list[Candidate]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(c.job.id for c in taken))


def _known_gang_failure(failed: list[tuple], attempt: tuple) -> bool:
    """A gang no easier than one that already failed: no fewer workers, none smaller, same pool, ending no sooner, and
    packed if the failed one was packed (spread needs more nodes than pack)."""
    w2, g2, c2, m2, pool2, top2, e2 = attempt
    for w, g, c, m, pool, top, e in failed:
        if (w2 >= w and g2 >= g and c2 >= c and m2 >= m and (pool is None or pool == pool2)
                and (top == top2 or top is Topology.PACK) and no_less_restricted(e2, e)):
            return True
    return False


def _known_gang_preempt_failure(failed: list[tuple], attempt: tuple) -> bool:
    """A gang's preemption no easier than one that already failed (as _known_failure, with workers and topology)."""
    w2, g2, c2, m2, pool2, top2, total2, own2 = attempt
    for w, g, c, m, pool, top, total, own in failed:
        if (w2 >= w and g2 >= g and c2 >= c and m2 >= m and (pool is None or pool == pool2)
                and (top == top2 or top is Topology.PACK) and total2 <= total and (own or not own2)):
            return True
    return False


def _known_failure(failed: list[tuple], attempt: tuple) -> bool:
    """An attempt no easier than one that already failed: not smaller, same pool, no higher score,
    no more reclaim rights (victim sets only shrink as the cycle goes on)."""
    g2, c2, m2, pool2, total2, own2 = attempt
    for g, c, m, pool, total, own in failed:
        if (g2 >= g and c2 >= c and m2 >= m and (pool is None or pool == pool2)
                and total2 <= total and (own or not own2)):
            return True
    return False

