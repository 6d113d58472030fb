"""Assignment (Kueue's flavor assigner): a GPU model, a quota kind and nodes for one pod or every worker of a gang,
or a Diagnosis of why each model failed.

The preferred GPU model is tried first, then, with model fallback, the other certified models by most idle
capacity. A one-pod job that left its model open goes, among the certified models with room, to the one whose
placement loses the fewest GPUs to fragmentation (own quota before borrowed; placements ranked by least GPU loss). On each model the quota comes first (own, else borrowed) and then a node with free room; a gang needs a
node for every worker, on one model (gang.py). Only the first two models tried are diagnosed in full (what a
waiting job's sentence spells out); the others are only named.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cluster.types import GPU_EPS, JobView, QuotaKind
from scheduler.policy.diagnosis import NO_FREE, Diagnosis, NoRoom
from scheduler.policy.failures import known_gang_failure
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import pick, room
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import SCORERS, Placement, allowed, by_loss, place, restriction
from scheduler.policy.queue import Queued
from scheduler.policy.quota import Demand, gpu_demand
from scheduler.policy.quotatree import TreeJobQuota
from scheduler.policy.sentences import CPU_MARK, gang_needs, held_for_own, shortfall
from scheduler.policy.sharing import place_share, signature
from scheduler.policy.state import CycleState

_REFUSED = object()  # the model's quota has no room
_SHARED_BADLY = object()  # a share with room only beside jobs the interference model refuses it with


@dataclass(slots=True)
class Assignment:
    pod: PodRequest
    kind: QuotaKind | None
    placement: Placement | None = None  # one pod's node and GPUs
    rows: list[int] | None = None  # a gang's: a row of the model's table per worker, in rank order


class Assigner:
    def __init__(self, state: CycleState) -> None:
        self.state = state
        self._split: dict[tuple[tuple[str | None, ...], str | None], tuple[list, list]] = {}
        self._gpu_demands: dict[float, dict[str | None, Demand]] = {}  # GPUs of a whole job -> model -> its demand

    def assign(self, q: Queued, ends_at: float) -> Assignment | Diagnosis:
        """The first model with quota and room for `q` (a job that would end at `ends_at`), or why none had."""
        state, job, req = self.state, q.job, q.request
        profile = state.profile
        # a job that may not be preempted is admitted on own quota only
        quota = state.ledger.checker(job.department, q.host, profile.borrowing and job.preemptible) \
            if profile.quotas else None
        diagnosis = Diagnosis(quota=quota)
        tree = isinstance(quota, TreeJobQuota)
        demands = self._gpu_demands.get(req.gpus * job.workers)
        if demands is None:
            demands = self._gpu_demands[req.gpus * job.workers] = {}
        best: Assignment | None = None  # an open-model job's least-loss placement so far
        for n, model in enumerate(self.model_order(q)):
            spelled = n < 2  # (see the module's docstring)
            kind = self._quota_kind(q, quota, demands, model, spelled, diagnosis)
            if kind is _REFUSED:
                continue
            pod = PodRequest(model, req.gpus, req.cpu_request_milli, req.memory_mib, q.pool, ends_at,
                             kind is QuotaKind.BORROWED)
            table = state.tables[model]
            blocked = tree and kind is QuotaKind.OWN and quota.reclaim(demands[model])
            if blocked:  # own quota, but the tree's room on its path is borrowed: only a reclaim makes room
                attempt = NoRoom(pod, kind, None, reclaim=blocked)
            elif tree and kind is QuotaKind.BORROWED and (held := self._held(q, model, table)):
                attempt = NoRoom(pod, kind, None, NO_FREE, held_for_own(model, *held))
            elif job.gang:
                rows = gang_rows(state, job, pod, table)
                if rows is not None:
                    return Assignment(pod, kind, rows=rows)
                attempt = NoRoom(pod, kind, None, NO_FREE, *self._gang_shortfall(q, pod, table)) if spelled \
                    else NoRoom(pod, kind, None)
            else:
                placement = self._place(q, pod, table)
                if isinstance(placement, Placement):
                    if job.gpu_model is not None or placement.loss is None:
                        return Assignment(pod, kind, placement)
                    best = _least_loss(best, Assignment(pod, kind, placement))
                    continue
                attempt = NoRoom(pod, kind, table.bounds(), (table.free_whole_gpus(), table.idle_gpus()),
                                 shared_badly=placement is _SHARED_BADLY) if spelled else NoRoom(pod, kind, None)
            diagnosis.attempts.append(attempt)
            diagnosis.refusals.append((model, attempt if spelled else None))
        return best or diagnosis

    def _place(self, q: Queued, pod: PodRequest, table: NodeTable) -> Placement | object | None:
        """A node for one pod: a share ranked by least GPU loss where the jobs on the GPU get on with it, when the
        cycle has an interference model (sharing.py), _SHARED_BADLY when it has room only beside jobs the model
        refuses it with; else placement.py's."""
        state, profile = self.state, self.state.profile
        if (state.interference is None or not pod.fractional or table.loss is None or not len(table)
                or not by_loss([(n, w) for n, w in profile.scorers if SCORERS[n].applies(pod)])):
            return place(pod, table, profile)
        if not table.may_fit(*pod.dims()):
            return None
        found = place_share(pod, signature(q.job), table, profile, state.residents, state.interference)
        return found if found is not None or place(pod, table, profile) is None else _SHARED_BADLY

    def _held(self, q: Queued, model: str | None, table: NodeTable) -> tuple[float, float, float] | None:
        """No churn: a borrowed job leaves the model's idle GPUs to the own-class work that would reclaim it within its
        leaf's reclaim_min_runtime_s (CycleState.held_for_own); that work's GPUs (waiting, arrived) and the window
        when the job would take them, else None."""
        tree = self.state.tree
        window = tree.reclaim_min_runtime_s[tree.index[q.job.department]]
        waiting, arrived = self.state.held_for_own(model, window)
        held = waiting + arrived
        if held > GPU_EPS and table.idle_gpus() - q.request.gpus * q.job.workers < held - GPU_EPS:
            return waiting, arrived, window
        return None

    def _quota_kind(self, q: Queued, quota, demands: dict[str | None, Demand], model: str | None, spelled: bool,
                    diagnosis: Diagnosis) -> QuotaKind | None | object:
        """The quota kind the job would use on `model` (None: no quotas), or _REFUSED (the refusal noted)."""
        if quota is None:
            return None
        gpu = demands.get(model)
        if gpu is None:
            gpu = demands[model] = gpu_demand(model, q.request.gpus * q.job.workers)
        if spelled:
            check = quota.choose(gpu)
            diagnosis.refusals.extend((model, why) for why in check.refused)
            kind = check.kind
        else:
            kind = quota.kind(gpu)
        if kind is None:
            if not spelled:
                diagnosis.refusals.append((model, None))
            return _REFUSED
        return kind

    def model_order(self, q: Queued) -> Iterator[str | None]:
        """Preferred model first; then the others by most idle capacity. They are sorted only once
        the preferred model failed (a failure changes no capacity: the order is the one sorting up
        front gives), and the order is kept until an admission changes some idle capacity."""
        key = (q.models, q.job.gpu_model)
        split = self._split.get(key)
        if split is None:
            models = [m for m in q.models if m in self.state.tables]
            head = [models.pop(0)] if models and models[0] == q.job.gpu_model else []
            split = self._split[key] = (head, models)
        head, rest = split
        yield from head
        if len(rest) >= 2:
            tables, fallbacks = self.state.tables, self.state.fallbacks
            order = fallbacks.get(key)
            if order is None:
                order = fallbacks[key] = sorted(rest, key=lambda m: (-tables[m].idle_gpus(), m or ""))
            rest = order
        yield from rest

    def _gang_shortfall(self, q: Queued, pod: PodRequest, table: NodeTable) -> tuple[str, tuple[str, str] | None]:
        """What a waiting gang misses on one model (the cheap sentence when too few whole GPUs are free at all), and
        the sentence split where the worker's CPU goes when it depends on the CPU only there (None: room per block,
        which the CPU changes, is named)."""
        job = q.job
        free = table.free_whole_gpus() if len(table) else 0
        fits = None
        if pod.gpus * job.workers <= free:
            fits = room(table, pod, allowed(pod, table, self.state.profile), job.topology)
            if fits.total:
                return shortfall(table, fits, job.workers, pod, job.topology), None
        frame = gang_needs(table, job, pod, free, fits, CPU_MARK).split(CPU_MARK)
        if len(frame) != 2:  # the mark in a name: written plainly, without a frame
            return gang_needs(table, job, pod, free, fits, None), None
        return f"{pod.cpu_milli}".join(frame), (frame[0], frame[1])


def _least_loss(best: Assignment | None, other: Assignment) -> Assignment:
    """The better of two placements of an open-model job: own quota first, then the fewer GPUs lost (the first
    tried on a tie)."""
    if best is None:
        return other
    return other if _rank(other) < _rank(best) else best


def _rank(a: Assignment) -> tuple[bool, float]:
    return a.kind is QuotaKind.BORROWED, a.placement.loss


def gang_rows(state: CycleState, job: JobView, pod: PodRequest, table: NodeTable) -> list[int] | None:
    """A row per worker of the gang on `table`, or None; the failures of a cycle are remembered (capacity only
    shrinks until something is evicted), so a stream of gangs too large for what is left costs little."""
    if not len(table) or not table.may_fit(*pod.dims()) or pod.gpus * job.workers > table.free_whole_gpus():
        return None  # not even one worker fits anywhere, or fewer whole GPUs are free than the gang needs
    memo = (job.workers, *pod.dims(), pod.pool, job.topology, restriction(pod, table))
    failed = state.gang_failed[pod.gpu_model]
    if known_gang_failure(failed, memo):
        return None
    rows = pick(table, room(table, pod, allowed(pod, table, state.profile), job.topology), job.workers)
    if rows is None:
        failed.append(memo)
    return rows
