"""Preemption planning (Kueue's preemption.GetTargets): for a job no model had room for, victims whose eviction makes
room, evicted from the cycle's tables, ledger and victim index, with their Preempt decisions. Own-quota (or
quota-less) work may preempt; borrowed work only ever uses idle capacity. A single pod takes the first model where
victims on one node free its whole need (preemption.py picks them); a gang takes victims node by node until every
worker fits, or gives everything back."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cluster.types import CPU_KEY, QuotaKind
from scheduler.policy.assignment import Assignment, gang_rows
from scheduler.policy.decisions import Preempt, Reason
from scheduler.policy.diagnosis import NoRoom
from scheduler.policy.failures import known_failure, known_gang_preempt_failure
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import room
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import Placement, allowed, place
from scheduler.policy.preemption import Candidate, Victims
from scheduler.policy.priority import rebased
from scheduler.policy.queue import Queued
from scheduler.policy.fairshare import fair_after, fair_victims, victim_share
from scheduler.policy.quota import allocation_demand, demand, gpu_demand
from scheduler.policy.sentences import preempted
from scheduler.policy.sharing import place_share, signature
from scheduler.policy.state import CycleState

Plan = tuple[Assignment, tuple[int, ...]]  # where the job goes, and the jobs evicted for it


class Preemptor:
    def __init__(self, state: CycleState) -> None:
        self.state = state

    def plan(self, q: Queued, attempts: list[NoRoom]) -> Plan | None:
        return self._for_gang(q, attempts) if q.job.gang else self._for_pod(q, attempts)

    def _for_pod(self, q: Queued, attempts: list[NoRoom]) -> Plan | None:
        state = self.state
        for a in attempts:
            model = a.pod.gpu_model
            if not state.holders_by_model.get(model):
                continue  # (nobody to preempt on an empty model: the burst of a first cycle)
            freed: list[Candidate] = []
            if a.reclaim is not None:  # the tree level's room first, then a node's
                freed = self._free_level(q, a)
                if freed is None:
                    continue
                placement = place(a.pod, state.tables[model], state.profile)
                if placement is not None:
                    self._decisions(q, a, freed)
                    return Assignment(a.pod, a.kind, placement), _job_ids(freed)
            # borrowed work preempts only by fair share, if at all
            victims = self._fair(q, a) if a.kind is QuotaKind.BORROWED else self._by_quota_and_score(q, a)
            if victims is None:
                self._undo(model, freed)
                continue
            taken = freed + self._take(model, victims)
            table = state.tables[model]
            placement = self._placement(q, a.pod, table, victims.row, _job_ids(taken))
            if placement is None:  # the interference model refuses every GPU there beside the jobs that stay
                self._undo(model, taken)
                continue
            self._decisions(q, a, taken)
            return Assignment(a.pod, a.kind, placement), _job_ids(taken)
        return None

    def _placement(self, q: Queued, pod: PodRequest, table: NodeTable, row: int, evicted: tuple[int, ...]
                   ) -> Placement | None:
        """The GPUs on the victims' row: best fit, or for a share with an interference model where the jobs that
        stay get on with it (sharing.py)."""
        state = self.state
        if state.interference is None or not pod.fractional or table.loss is None:
            return Placement(row, table.names[row], table.choose_gpus(row, pod.gpus))
        only = np.zeros(len(table), dtype=bool)
        only[row] = True
        return place_share(pod, signature(q.job), table, state.profile, state.residents, state.interference,
                           only, evicted)

    def _by_quota_and_score(self, q: Queued, a: NoRoom) -> Victims | None:
        """Own-quota work reclaims borrowed work; a higher score evicts a lower one past its minimum run time."""
        state, profile, model = self.state, self.state.profile, a.pod.gpu_model
        total = rebased(q.score, a.kind, profile).preemption(profile)
        own = a.kind is QuotaKind.OWN
        reclaimable = self._reclaimable(q, a) if own else None
        memo = (*a.pod.dims(), a.pod.pool, total, self._rights(q, own))
        if known_failure(state.preempt_failed[model], memo):
            return None
        victims = state.victims(model).find(a.pod, total, own, profile, reclaimable=reclaimable,
                                            shares=self._shares(q, model), within=self._within(q, model))
        if victims is None:
            state.preempt_failed[model].append(memo)
        return victims

    def _rights(self, q: Queued, own: bool, level: int | None = None) -> object:
        """What a failure memo compares of who preempts: own quota's rights or none; on a quota tree they are a leaf's
        (its reclaim rights, its fence), only ever equal to the same leaf's."""
        return own if self.state.tree is None else ("leaf", q.job.department, own, level)

    def _within(self, q: Queued, model: str | None) -> np.ndarray | None:
        """The candidates under the nearest fence on `q`'s path, the only ones it may preempt (None: no fence)."""
        state = self.state
        if state.tree is None:
            return None
        fenced = state.ledger.fenced(state.tree.index[q.job.department])
        return None if fenced is None else fenced[state.leaves(model)]

    def _shares(self, q: Queued, model: str | None) -> Callable[[list[int]], list[float]] | None:
        """With fair sharing, each candidate's branch share as `q` sees it, for the candidates (by position) a victim
        choice ranks (victims of the highest-share branch first); None without."""
        shares = self.state.shares
        if shares is None:
            return None
        cands, department = self.state.victims(model).cands, q.job.department
        return lambda picked: [victim_share(shares, department, cands[i].job.department) for i in picked]

    def _reclaimable(self, q: Queued, a: NoRoom) -> np.ndarray | None:
        """On a quota tree, the borrowed candidates own work of `q`'s leaf may reclaim (TreeLedger.reclaimable); None
        on flat departments (any)."""
        state, pod = self.state, a.pod
        if state.tree is None:
            return None
        resource = pod.gpu_model if pod.gpu_model and pod.gpus > 0 else CPU_KEY
        return state.ledger.reclaimable(resource, state.tree.index[q.job.department])[state.leaves(pod.gpu_model)]

    def _free_level(self, q: Queued, a: NoRoom) -> list[Candidate] | None:
        """Own-class work whose tree level lent or borrowed its room (a.reclaim): borrowed work under that level, young
        work last, (with fair sharing) the highest-share branch's and lowest score first, then least work lost, evicted until the level has room for the job (wherever it runs); None,
        nothing evicted, when it never does."""
        state, model = self.state, a.pod.gpu_model
        index = state.victims(model)
        picked = np.flatnonzero(self._under(q, a) & index.alive).tolist()
        shares = self._shares(q, model)
        rank = [0.0] * len(picked) if shares is None else [-x for x in shares(picked)]
        order = [index.cands[i] for _, _, _, _, i in sorted(
            (index.cands[i].young, r, index.cands[i].score if shares is not None else 0, index.cands[i].lost_s, i)
            for i, r in zip(picked, rank))]
        taken: list[Candidate] = []
        for c in order:
            i = index.index[id(c)]
            if index.alive[i] and self._under(q, a)[i]:  # (not gone with its gang, its division still past quota)
                taken += self._take(model, Victims(c.row, (c,)))
                if self._level_has_room(q, a):
                    return taken
        self._undo(model, taken)
        return None

    def _undo(self, model: str | None, taken: list[Candidate]) -> None:
        if taken:
            self._give_back(model, taken)
            self.state.changes += 1  # (what was given back may not add up bit for bit)

    def _under(self, q: Queued, a: NoRoom) -> np.ndarray:
        """The borrowed candidates under the tree level that blocks `q` (a.reclaim) that it may reclaim now."""
        state = self.state
        quota = state.ledger.checker(q.job.department, q.host, False)
        index, node = state.victims(a.pod.gpu_model), a.reclaim[0]
        under = np.fromiter((c.borrowed and quota.in_subtree(node, c.job.department) for c in index.cands),
                            dtype=bool, count=len(index.cands))
        within = self._within(q, a.pod.gpu_model)
        return under & self._reclaimable(q, a) & (True if within is None else within)

    def _fair(self, q: Queued, a: NoRoom) -> Victims | None:
        """Borrowed victims of other subtrees by fair share (fairshare.py); None without fair sharing."""
        state, shares = self.state, self.state.shares
        if shares is None:
            return None
        pod, index = a.pod, state.victims(a.pod.gpu_model)
        # a leaf's larger job finds no victims where a smaller one found none, until the ledger changes (an admission
        # raises some branch's share) or an eviction clears the model's list: most borrowed work waits in a full
        # cluster with nothing admitted in between
        memo = (*pod.dims(), pod.pool, 0, False)
        key, version = (pod.gpu_model, q.job.department), state.ledger.version
        failed = state.fair_failed.get(key)
        if failed is None or failed[0] != version:
            failed = state.fair_failed[key] = (version, [])
        if known_failure(failed[1], memo):
            return None
        need = demand(pod.gpu_model, pod.gpus, pod.cpu_milli, pod.memory_mib)
        fair = fair_victims(shares, q.job.department, need, index.cands)
        victims = index.find(pod, 0, False, state.profile, fair=fair, shares=self._shares(q, pod.gpu_model),
                             within=self._within(q, pod.gpu_model))
        if victims is None:
            failed[1].append(memo)
            return None
        whole = index.whole(victims)
        return victims if fair_after(shares, q.job.department, need, whole) else None

    def _for_gang(self, q: Queued, attempts: list[NoRoom]) -> Plan | None:
        """Victims node by node, each set freeing a worker's room where there was none, until the whole gang fits;
        when it never does, everything taken is given back and nobody is preempted."""
        state, profile, job = self.state, self.state.profile, q.job
        for a in attempts:
            if a.kind is QuotaKind.BORROWED or not state.holders_by_model.get(a.pod.gpu_model):
                continue
            total = rebased(q.score, a.kind, profile).preemption(profile)
            model = a.pod.gpu_model
            own = a.kind is QuotaKind.OWN
            memo = (job.workers, *a.pod.dims(), a.pod.pool, job.topology, total,
                    self._rights(q, own, a.reclaim and a.reclaim[0]))
            if known_gang_preempt_failure(state.gang_preempt_failed[model], memo):
                continue
            taken, rows = self._take_for_gang(q, a, total, own)
            if rows is None:
                state.gang_preempt_failed[model].append(memo)
                continue
            self._decisions(q, a, taken)
            return Assignment(a.pod, a.kind, rows=rows), _job_ids(taken)
        return None

    def _take_for_gang(self, q: Queued, a: NoRoom, total: int, own: bool) -> tuple[list[Candidate], list[int] | None]:
        """Victims taken for the gang on `a`'s model and a row per worker; (nothing, None), all given back, when the
        gang never fits. A gang whose tree level has no room (a.reclaim) first frees it (_free_level)."""
        state, job, model = self.state, q.job, a.pod.gpu_model
        table, index = state.tables[model], state.victims(model)
        taken: list[Candidate] = []
        if a.reclaim is not None:  # the tree level's room first, then nodes'
            taken = self._free_level(q, a)
            if taken is None:
                return [], None
            rows = gang_rows(state, job, a.pod, table)
            if rows is not None:
                return taken, rows
        before = None  # (what a give-back must restore; taken before the first eviction, and only then)
        for _ in range(job.workers):
            fits = room(table, a.pod, allowed(a.pod, table, state.profile), job.topology).per_node > 0
            victims = index.find(a.pod, total, own, state.profile, exclude=fits,
                                 reclaimable=self._reclaimable(q, a) if own else None, shares=self._shares(q, model),
                                 within=self._within(q, model))
            if victims is None:
                break
            if not taken:
                before = self._fingerprint(model)
            taken.extend(self._take(model, victims))
            rows = gang_rows(state, job, a.pod, table)
            if rows is not None:
                return taken, rows
        self._give_back(model, taken)
        if taken and (before is None or self._fingerprint(model) != before):
            state.changes += 1  # floats that did not add back exactly: what waited since may not wait now
        return [], None

    def _level_has_room(self, q: Queued, a: NoRoom) -> bool:
        """Whether the tree has room on `q`'s path for its whole demand on `a`'s model (its reclaim is done)."""
        quota = self.state.ledger.checker(q.job.department, q.host, False)
        return quota.reclaim(gpu_demand(a.pod.gpu_model, a.pod.gpus * q.job.workers)) is None

    def _take(self, model: str | None, victims: Victims) -> list[Candidate]:
        """Free what the victims hold (a gang's every worker) in the tables, the ledger and the victim index."""
        state = self.state
        state.takes += 1
        index, table = state.victims(model), state.tables[model]
        taken = index.whole(victims)
        index.remove(taken)
        for c in taken:
            alloc = c.allocation
            table.release(c.row, alloc.gpu_shares, alloc.cpu_milli, alloc.memory_mib)
            if alloc.quota_kind is not None:
                state.ledger.release(c.job.department, alloc.quota_kind, allocation_demand(alloc))
        state.preempt_failed[model].clear()
        state.fair_failed.clear()
        state.gang_failed[model].clear()
        state.gang_preempt_failed[model].clear()
        state.reserve_failed[model].clear()
        return taken

    def _fingerprint(self, model: str | None) -> tuple:
        """What a preemption changes and a give-back restores (the model's free room, idle GPUs and victims; the
        quota usage): equal before and after, the cycle is where it was (the waiting cache stays valid)."""
        table, index = self.state.tables[model], self.state.victims(model)
        return (table.gpu_used.tobytes(), table.cpu_free.tobytes(), table.mem_free.tobytes(), table.idle_gpus(),
                index.alive.tobytes(), *(a.tobytes() for a in index.held_by_borrowed), self.state.ledger.usage())

    def _give_back(self, model: str | None, taken: list[Candidate]) -> None:
        """Undo _take: a gang's preemption that did not free enough."""
        table = self.state.tables[model]
        for c in taken:
            alloc = c.allocation
            table.allocate(c.row, alloc.gpu_shares, alloc.cpu_milli, alloc.memory_mib)
            if alloc.quota_kind is not None:
                self.state.ledger.charge(c.job.department, alloc.quota_kind, allocation_demand(alloc))
        self.state.victims(model).remove(taken, sign=-1)

    def _decisions(self, q: Queued, a: NoRoom, taken: list[Candidate]) -> None:
        profile = self.state.profile
        total = rebased(q.score, a.kind, profile).preemption(profile)
        by_job: dict[int, list[Candidate]] = {}
        for c in taken:
            by_job.setdefault(c.job.id, []).append(c)
        for cands in by_job.values():
            c = cands[0]
            reclaim = c.borrowed and a.kind is QuotaKind.OWN
            fair = a.kind is QuotaKind.BORROWED
            nodes = sorted({x.allocation.node for x in cands})
            message = preempted(q.job, c.job, nodes, c.run_time_s, reclaim, a.pod.gpu_model, total, c.score,
                                profile.aging_preempts, fair)
            reason = Reason.PREEMPTED_RECLAIM if reclaim else Reason.PREEMPTED_FAIR_SHARE if fair \
                else Reason.PREEMPTED_PRIORITY
            self.state.decisions.append(Preempt(c.job.id, c.job.name, c.allocation.node, q.job.id, c.run_time_s, True,
                                                reason, message))


def _job_ids(taken: list[Candidate]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(c.job.id for c in taken))
