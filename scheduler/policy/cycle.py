"""One scheduling cycle: snapshot -> queue -> (model, quota, node) per job -> preempt -> decisions.

Jobs are taken in queue order (score, then submit time; or submit time for FCFS). For each,
the preferred GPU model is tried first, then, with model fallback, the other certified
models by most idle capacity. On each model the quota comes first (own, else borrowed) and
then a node with free room. Only when no model has room does an own-quota job preempt, on
the first model where victims on one node free its whole need. Every admission and
preemption updates the cycle's node tables and quota ledger, so later jobs see it.

A gang (a job of several workers) is admitted only with a node for every worker, on one model (gang.py); the
first gangs that cannot start (own quota) reserve the nodes that free soonest, and later jobs use their room only
when they end before it (reservation.py).
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from cluster.types import GPU_EPS, Allocation, JobStatus, JobView, Pool, QuotaKind, Snapshot, Topology
from colocation.policy.pools import expected_run_s, preferred_pool
from colocation.policy.profile import LendingProfile
from scheduler.policy.decisions import Admit, CycleResult, Decision, Preempt, Reason, Reserve, StillPending, Worker
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import pick, room, shortfall
from scheduler.policy.nodes import NodeTable, node_tables
from scheduler.policy.placement import LeastGpuLoss, Placement, allowed, attach_loss, ends_for_memo, place
from scheduler.policy.preemption import Candidate, VictimIndex, Victims
from scheduler.policy.reservation import Release, Reservation, clock, releases, reserve
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


class _PerJob:
    """What only depends on a job and the profile (right-sized request, utilization points, the
    CPU and memory part of its quota demand),
    kept from one cycle to the next: the pending jobs of one cycle are mostly the very same
    (frozen) JobView objects in the next. Entries are checked by identity, so the memo only
    saves work; it holds the jobs of the last cycle only."""

    def __init__(self) -> None:
        self.profile: Profile | None = None
        self.last: dict[int, tuple[JobView, Request, int, Demand]] = {}
        self.now: dict[int, tuple[JobView, Request, int, Demand]] = {}

    def start(self, profile: Profile) -> None:
        if self.profile is not profile and self.profile != profile:
            self.last = {}
        self.profile = profile

    def get(self, job: JobView, profile: Profile) -> tuple[JobView, Request, int, Demand]:
        """(job, right-sized request, utilization points, host demand)."""
        entry = self.last.get(id(job))
        if entry is None or entry[0] is not job:
            request = rightsize(job, profile)
            entry = (job, request, utilization_points(job, profile),
                     host_demand(request.cpu_request_milli, request.memory_mib))
        self.now[id(job)] = entry
        return entry

    def finish(self) -> None:
        self.last, self.now = self.now, {}


# One memo per process, taken out while a cycle uses it (a concurrent cycle builds its own).
_PER_JOB: dict[str, _PerJob] = {}


@dataclass(slots=True)
class _NoRoom:
    """A model whose quota had room but whose nodes did not; formatted only if the job waits."""

    pod: PodRequest
    kind: QuotaKind | None
    bounds: tuple[float, float, int, int] | None  # most free on one node (upper bounds); None: not shown
    free: tuple[int, float] = (0, 0.0)  # wholly free and idle GPUs across the model's nodes, when shown
    gang: str | None = None  # a gang's shortfall (gang.shortfall), when shown

    def __str__(self) -> str:
        if self.gang is not None:
            return self.gang
        whole, share, cpu, mem = self.bounds
        where = f"{self.pod.gpu_model} node" if self.pod.gpu_model else "CPU node"
        borrowed = " (borrowed quota runs on idle capacity only)" if self.kind is QuotaKind.BORROWED else ""
        return (f"no idle {where} fits {self.pod}{borrowed}; most free on one node: "
                f"{whole:g} whole GPU{'' if whole == 1 else 's'}, {share:.2f} of a GPU, {cpu}m CPU, {mem} MiB"
                f"{self._fragments(whole, share)}")

    def _fragments(self, whole: float, share: float) -> str:
        """When the free GPUs would do but only as fragments, the sentence says so (README: Training scheduler)."""
        (free, idle), gpus, model = self.free, self.pod.gpus, self.pod.gpu_model
        if gpus >= 1 and free >= gpus > whole:
            return (f"; {free} {model} GPUs free across the cluster, at most {whole:g} on any node; "
                    f"this job needs {gpus:g} on one node")
        if 0 < gpus < 1 and idle >= gpus > share + GPU_EPS:
            return (f"; {idle:.2f} {model} GPUs idle across the cluster, at most {share:.2f} of any one GPU; "
                    f"this job needs {gpus:g} of one GPU")
        return ""


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
        self._breakdowns: dict[tuple[int, int, int], ScoreBreakdown] = {}
        self.reservations: list[Reservation] = []  # what the first waiting gangs hold
        self._coming: dict[str | None, list[Release]] = {}  # what the holders of a model give back, soonest first
        self.gang_failed: dict[str | None, list[tuple]] = defaultdict(list)  # gangs known not to fit now
        self.gang_preempt_failed: dict[str | None, list[tuple]] = defaultdict(list)  # ... nor by preempting
        self.reserve_failed: dict[str | None, list[tuple]] = defaultdict(list)  # ... nor reserved as jobs end
        self.started: list[Release] = []  # what this cycle's admissions give back, when known (gangs waiting)
        self.gangs = False

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
            for job in self.holders_by_model.get(model, ()):
                total = score(job, job.allocation.quota_kind, self.now, self.profile).total
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
        return CycleResult(self.now, tuple(self.decisions))

    def queue(self) -> list[Queued]:
        per_job = _PER_JOB.pop("last", None) or _PerJob()
        per_job.start(self.profile)
        pending = JobStatus.PENDING
        items = [self._queued(j, per_job) for j in self.snap.jobs if j.status is pending]
        per_job.finish()
        _PER_JOB["last"] = per_job
        if self.profile.order is QueueOrder.FIFO:
            items.sort(key=lambda q: (q.job.submitted_at, q.job.id))
        else:
            items.sort(key=lambda q: (-q.score.total, q.job.submitted_at, q.job.id))
        return items

    def _queued(self, job: JobView, per_job: _PerJob) -> Queued:
        profile = self.profile
        _, request, utilization, host = per_job.get(job, profile)
        if job.gang:
            host = host_demand(request.cpu_request_milli * job.workers, request.memory_mib * job.workers)
        models = self._models(job)
        kind = None
        if profile.quotas:
            first = models[0] if models else job.gpu_model
            own = self.ledger.has_own_room(job.department, gpu_demand(first, request.gpus * job.workers), host)
            kind = QuotaKind.OWN if own else QuotaKind.BORROWED
        # = score(job, kind, now, profile), with the utilization term from the memo
        return Queued(job, request, self._breakdown(base_points(kind, profile), utilization,
                                                    aging_points(waited_s(job, self.now), profile)), models, host,
                      self._pool(job))

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
        job, req, profile = q.job, q.request, self.profile
        refusals: list[tuple[str | None, object]] = []  # (model, why) formatted only if the job waits
        attempts: list[_NoRoom] = []
        quota = self.ledger.checker(job.department, q.host, profile.borrowing) if profile.quotas else None
        ends_at = self._ends_at(job)
        for n, model in enumerate(self._model_order(q)):
            # Every model tried and not used adds to `refusals`, so the first two models are the ones
            # a waiting job's message spells out (see _why); the others it only names, so for them
            # the refusals are not built (why = None).
            spelled = n < 2
            if quota is None:
                kind = None
            elif spelled:
                check = quota.choose(gpu_demand(model, req.gpus * job.workers))
                for why in check.refused:
                    refusals.append((model, why))
                kind = check.kind
            else:
                kind = quota.kind(gpu_demand(model, req.gpus * job.workers))
            if kind is None and quota is not None:
                if not spelled:
                    refusals.append((model, None))
                continue
            pod = PodRequest(model, req.gpus, req.cpu_request_milli, req.memory_mib, q.pool, ends_at)
            table = self.tables[model]
            if job.gang:
                rows = self._gang_rows(job, pod, table)
                if rows is not None:
                    self._admit_gang(q, pod, kind, rows, ())
                    return True
                attempt = _NoRoom(pod, kind, None, gang=self._gang_shortfall(job, pod, table) if spelled else None)
            else:
                placement = place(pod, table, profile)
                if placement is not None:
                    self._admit(q, pod, kind, placement, ())
                    return True
                attempt = _NoRoom(pod, kind, table.bounds(), (table.free_whole_gpus(), table.idle_gpus())) \
                    if spelled else _NoRoom(pod, kind, None)
            attempts.append(attempt)
            refusals.append((model, attempt if spelled else None))
        if self.profile.preemption and (self._preempt_gang(q, attempts) if job.gang else self._preempt_for(q, attempts)):
            return True
        reason, message = self._why(q, attempts, refusals)
        if job.gang and attempts and profile.reservations and len(self.reservations) < profile.reservation_depth:
            sentence = self._reserve(q, attempts)  # the first waiting gangs, highest in the queue first
            if sentence:
                reason, message = Reason.RESERVED, f"{message}; {sentence}"
        self._pending(q, position, reason, message)
        return False

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
        memo = (job.workers, *pod.dims(), pod.pool, job.topology, ends_for_memo(pod, table))
        failed = self.gang_failed[pod.gpu_model]
        if _known_gang_failure(failed, memo):
            return None
        rows = pick(table, room(table, pod, allowed(pod, table, self.profile), job.topology), job.workers)
        if rows is None:
            failed.append(memo)
        return rows

    def _gang_shortfall(self, job: JobView, pod: PodRequest, table) -> str:
        """What a waiting gang misses on one model; the cheap sentence when too few whole GPUs are free at all."""
        free = table.free_whole_gpus() if len(table) else 0
        if pod.gpus * job.workers > free:
            return (f"needs {job.workers} workers of {pod}: {pod.gpus * job.workers:g} whole {pod.gpu_model} GPUs, "
                    f"{free} free across the cluster")
        return shortfall(table, room(table, pod, allowed(pod, table, self.profile), job.topology), job.workers, pod,
                         job.topology)

    def _admit_gang(self, q: Queued, pod: PodRequest, kind: QuotaKind | None, rows: list[int],
                    preempting: tuple[int, ...]) -> None:
        """Allocate every worker (in rank order) and admit the gang as one decision."""
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
        self._started(job, pod, workers)
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

    def _started(self, job: JobView, pod: PodRequest, workers: list) -> None:
        """Remember what an admission gives back and when, for a reservation later in this cycle."""
        run_s = expected_run_s(job)
        if run_s is not None:
            self.reserve_failed[pod.gpu_model].clear()  # one more release to come: a reservation may now be found
            self.started.extend(Release(self.now + run_s, Allocation(w.node, pod.gpu_model, w.gpu_shares,
                                                                     pod.cpu_milli, pod.memory_mib, None))
                                for w in workers)

    def _reserve(self, q: Queued, attempts: list[_NoRoom]) -> str:
        """Reserve for a waiting gang the nodes that free soonest, among those no earlier gang holds; the sentence
        saying so ("" when nothing could be reserved: borrowed quota, or no end known of the jobs in the way)."""
        best: tuple[str | None, Reservation] | None = None
        for a in attempts:
            if self.profile.quotas and a.kind is QuotaKind.BORROWED:
                continue  # borrowed quota only ever runs on idle capacity: no room is held for it
            model = a.pod.gpu_model
            # no gang easier than one no release order could seat is seated (the releases and held rows being
            # the same): a queue of waiting gangs costs one search per model, not one each
            memo = (q.job.workers, *a.pod.dims(), a.pod.pool, q.job.topology, a.pod.ends_at)
            if _known_gang_failure(self.reserve_failed[model], memo):
                continue
            table = self.tables[model]
            if model not in self._coming:
                self._coming[model] = releases(self.holders_by_model.get(model, []), self.now)
            coming = list(heapq.merge(self._coming[model], sorted(
                (r for r in self.started if r.allocation.gpu_model == model), key=lambda r: r.at), key=lambda r: r.at))
            found = reserve(table, a.pod, q.job.workers, q.job.topology, allowed(a.pod, table, self.profile),
                            coming)
            if found is None:
                self.reserve_failed[model].append(memo)
            elif best is None or found.start_at < best[1].start_at:
                best = (model, found)
        if best is None:
            return ""
        model, found = best
        self.reservations.append(found)
        table = self.tables[model]
        table.reserve(found.rows, found.start_at)
        nodes = [table.names[r] for r in found.rows]
        shown = ", ".join(nodes[:6]) + (f" and {len(nodes) - 6} more" if len(nodes) > 6 else "")
        sentence = (f"reserved {shown} for job {q.job.name}; expected start {clock(found.start_at)} "
                    f"(when the jobs there are expected to end); until then only jobs ending before it use them")
        self.decisions.append(Reserve(q.job.id, q.job.name, tuple(nodes), found.start_at, Reason.RESERVED, sentence))
        return sentence

    def _why(self, q: Queued, attempts: list[_NoRoom], refusals: list[tuple[str | None, object]]
             ) -> tuple[Reason, str]:
        if not q.models:
            return Reason.NO_COMPATIBLE_MODEL, (f"framework {q.job.framework} is not certified on "
                                                f"{q.job.gpu_model or 'any GPU model'}")
        if not refusals:
            return Reason.NO_CAPACITY, "no node of a compatible GPU model exists"
        # Spelled out for the preferred and the best fallback model; the rest only named (cheap).
        # Refusals come model by model, so the first two models seen are the first two listed.
        shown: list[str | None] = []
        parts: list[str] = []
        others: set[str | None] = set()
        for model, why in refusals:
            if model not in shown:
                if len(shown) == 2:
                    others.add(model)
                    continue
                shown.append(model)
            parts.append(str(why))
        message = "; ".join(parts)
        if others:
            named = ", ".join(sorted(m or "CPU" for m in others))
            message += f"; no quota or room on the other certified models either ({named})"
        if not attempts:
            return Reason.QUOTA_EXHAUSTED, message
        for a in attempts:
            if a.kind is not QuotaKind.BORROWED:
                return Reason.NO_CAPACITY, message
        return Reason.NO_IDLE_CAPACITY, message

    # -- preemption -------------------------------------------------------------------
    def _preempt_for(self, q: Queued, attempts: list[_NoRoom]) -> bool:
        """Own-quota (or quota-less) work may preempt; borrowed work only ever uses idle capacity."""
        for a in attempts:
            if a.kind is QuotaKind.BORROWED or not self.holders_by_model.get(a.pod.gpu_model):
                continue  # (nobody to preempt on an empty model: the burst of a first cycle)
            total = rebased(q.score, a.kind, self.profile).total
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
            total = rebased(q.score, a.kind, self.profile).total
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
                taken.extend(self._take(model, victims))
                rows = self._gang_rows(job, a.pod, table)
                if rows is not None:
                    break
            if rows is None:
                self._give_back(model, taken)
                self.gang_preempt_failed[model].append(memo)
                continue
            self._preempt_decisions(q, a, taken)
            self._admit_gang(q, a.pod, a.kind, rows, _job_ids(taken))
            return True
        return False

    def _take(self, model: str | None, victims: Victims) -> list[Candidate]:
        """Free what the victims hold (a gang's every worker) in the tables, the ledger and the victim index."""
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
        total = rebased(q.score, a.kind, self.profile).total
        by_job: dict[int, list[Candidate]] = {}
        for c in taken:
            by_job.setdefault(c.job.id, []).append(c)
        for cands in by_job.values():
            c = cands[0]
            reclaim = c.borrowed and a.kind is QuotaKind.OWN
            why = (f"to give {q.job.department} back its own {a.pod.gpu_model or 'CPU'} quota" if reclaim
                   else f"for higher score {total} > {c.score}")
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
        job = q.job
        table = self.tables[pod.gpu_model]
        table.allocate(placement.row, placement.gpu_shares, pod.cpu_milli, pod.memory_mib)
        self._fallbacks.clear()  # idle capacity changed (here and by the evictions, if any, made for this job)
        if kind is not None:
            self.ledger.charge(job.department, kind, _demand(pod))
        if self.gangs:
            self._started(job, pod, [Worker(placement.node, placement.gpu_shares)])
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
                and (top == top2 or top is Topology.PACK) and e2 >= e):
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

