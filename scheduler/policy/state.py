"""The scratchpad of one scheduling cycle (kube-scheduler's CycleState): what the snapshot gives, built on first use
(with no job pending nothing is; victim indexes only for the models where preemption is tried) and changed as the
cycle admits, evicts and reserves, so later jobs see it; the decisions so far; what is known not to fit."""

from __future__ import annotations

from collections import defaultdict
from functools import cached_property
from itertools import chain

import numpy as np

from cluster.types import JobView, QuotaKind, Snapshot, capacity_by_resource
from scheduler.policy.cache import CycleCache
from scheduler.policy.decisions import CycleDecision
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import LeastGpuLoss, attach_loss
from scheduler.policy.preemption import Candidate, VictimIndex
from scheduler.policy.priority import score
from scheduler.policy.profile import Profile
from scheduler.policy.quota import QuotaLedger
from scheduler.policy.quotatree import QuotaTree, TreeLedger
from scheduler.policy.fairshare import FairShares
from scheduler.policy.interference import Model
from scheduler.policy.sharing import Residents
from scheduler.policy.workload import TargetWorkload, jobs_workload


class CycleState:
    def __init__(self, snapshot: Snapshot, profile: Profile, workload: TargetWorkload | None,
                 cache: CycleCache, interference: Model | None = None) -> None:
        self.snap = snapshot
        self.profile = profile
        self.workload = workload
        self.interference = interference  # with it, shares go where their GPU's jobs get on with them (sharing.py)
        self.cache = cache
        self.now = snapshot.now
        self.decisions: list[CycleDecision] = []
        # Kueue-style inadmissible cache (cycle.py): what waited stays valid while nothing changed. `changes` counts
        # admissions (with their evictions), reservations, and a gang's evictions given back when that did not
        # restore every figure bit for bit; `takes` counts evictions tried.
        self.changes = 0
        self.takes = 0
        # attempts known to fail on a model, until an eviction frees room there (see failures.py)
        self.preempt_failed: dict[str | None, list[tuple]] = defaultdict(list)
        self.gang_failed: dict[str | None, list[tuple]] = defaultdict(list)  # gangs known not to fit now
        self.gang_preempt_failed: dict[str | None, list[tuple]] = defaultdict(list)  # ... nor by preempting
        self.reserve_failed: dict[str | None, list[tuple]] = defaultdict(list)  # ... nor reserved as jobs end
        # fair-share preemption known to fail per (model, department), while the ledger stays at the version kept
        self.fair_failed: dict[tuple[str | None, str], tuple[int, list[tuple]]] = {}
        self.fallbacks: dict[tuple, list] = {}  # fallback models by idle capacity, until an admission changes it
        self._victims: dict[str | None, VictimIndex] = {}
        # no churn (held_for_own): GPUs of own-class work not admitted yet per preferred model, and per protection
        # window the GPUs of own-class work started per model that arrived within it
        self.own_waiting: dict[str | None, float] = {}
        self._own_waiting_jobs: dict[int, tuple[str | None, float]] = {}
        self._own_arrived: dict[float, dict[str | None, float]] = {}
        self._own_started: list[tuple[float, str | None, float]] = []  # this cycle's: (submitted at, model, GPUs)
        self._leaves: dict[str | None, np.ndarray] = {}
        # running jobs' scores as victims: the last cycle's (from the cache), and this one's for the next
        self._last_scores = cache.victim_scores
        self.scores: dict[int, tuple[JobView, Profile, int]] = {}

    @cached_property
    def tables(self) -> dict[str | None, NodeTable]:
        tables = self.cache.node_tables(self.snap.nodes)
        if any(name == LeastGpuLoss.name for name, _ in self.profile.scorers):
            # without a learned workload, the shapes of the snapshot's jobs, each on its framework's certified models
            workload = self.workload or jobs_workload(self.snap.jobs, self.snap.compatible_models)
            if workload is not None:
                attach_loss(tables, workload)
        return tables

    @cached_property
    def residents(self) -> Residents:
        """Who shares each GPU (only read with an interference model)."""
        return Residents(self.holders, self.tables)

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
    def tree(self) -> QuotaTree | None:
        """The quota tree (None: flat departments, the flat ledger's faster checks)."""
        snap = self.snap
        if not snap.tree and not self.profile.fair_sharing:
            return None
        return self.cache.quota_tree(snap.quotas, snap.tree, lambda: {j.department for j in snap.jobs},
                                     lambda: capacity_by_resource(snap.nodes))

    @cached_property
    def shares(self) -> FairShares | None:
        """Fair shares on the ledger (None: the profile does not share fairly)."""
        if not self.profile.fair_sharing or not self.profile.quotas or self.tree is None:
            return None
        return FairShares(self.tree, self.ledger)

    @cached_property
    def ledger(self) -> QuotaLedger | TreeLedger:
        if self.tree is not None:
            return TreeLedger(self.tree, self.holders)
        return QuotaLedger(self.snap.quotas, self.holders, self.cache.quota_limits(self.snap.quotas))

    def victims(self, model: str | None) -> VictimIndex:
        """Jobs holding resources on the model's nodes as possible victims (as the cycle started)."""
        index = self._victims.get(model)
        if index is None:
            index = self._victims[model] = VictimIndex(self.tables[model], self._candidates(model))
        return index

    def hold_for_own(self, queue: list) -> None:
        """Count the queue's own-class work per preferred model (a tree where some node protects its borrowed work
        with reclaim_min_runtime_s; held_for_own reads it)."""
        if self.tree is None or not any(self.tree.reclaim_min_runtime_s):
            return
        own = self.profile.own_base
        for q in queue:
            if q.score.base == own and q.models and q.models[0] is not None:
                gpus = q.request.gpus * q.job.workers
                self._own_waiting_jobs[q.job.id] = (q.models[0], gpus)
                self.own_waiting[q.models[0]] = self.own_waiting.get(q.models[0], 0.0) + gpus

    def held_for_own(self, model: str | None, window_s: float) -> tuple[float, float]:
        """No churn: the GPUs of `model` that borrowed work protected for `window_s` (its reclaim_min_runtime_s) must
        leave idle, as (own-class work waiting for them, own-class work started there that arrived within the
        window). With the waiting work that arrived then, the second is the last window's own arrivals: the forecast
        of the next, which would reclaim borrowed work before the window is over."""
        if window_s <= 0:
            return 0.0, 0.0
        arrived = self._own_arrived.get(window_s)
        if arrived is None:  # once per window length and cycle; admissions keep it (admitted)
            arrived = self._own_arrived[window_s] = {}
            since = self.now - window_s
            started = ((j.submitted_at, j.allocation.gpu_model, j.total_gpus) for j in self.holders
                       if j.allocation.quota_kind is QuotaKind.OWN)
            for at, started_on, gpus in chain(started, self._own_started):
                if at >= since:
                    arrived[started_on] = arrived.get(started_on, 0.0) + gpus
        return self.own_waiting.get(model, 0.0), arrived.get(model, 0.0)

    def admitted(self, job: JobView, model: str | None) -> None:
        """`job` no longer waits: own-class work started on `model`, if it arrived within a window (held_for_own)."""
        counted = self._own_waiting_jobs.pop(job.id, None)
        if counted is None:
            return
        self.own_waiting[counted[0]] -= counted[1]
        self._own_started.append((job.submitted_at, model, counted[1]))
        for window_s, arrived in self._own_arrived.items():
            if job.submitted_at >= self.now - window_s:
                arrived[model] = arrived.get(model, 0.0) + counted[1]

    def leaves(self, model: str | None) -> np.ndarray:
        """Each victim candidate's quota-tree node on the model (a cycle with a tree)."""
        found = self._leaves.get(model)
        if found is None:
            index, cands = self.tree.index, self.victims(model).cands
            found = self._leaves[model] = np.fromiter((index[c.job.department] for c in cands), dtype=np.int64,
                                                      count=len(cands))
        return found

    def _candidates(self, model: str | None) -> list[Candidate]:
        table, profile, last, scores = self.tables[model], self.profile, self._last_scores, self.scores
        tree, now = self.tree, self.now
        candidates = []
        for job in self.holders_by_model.get(model, ()):
            if not job.preemptible:
                continue
            known = last.get(id(job))
            if known is not None and known[0] is job and known[1] is profile:
                total = known[2]
            else:
                total = score(job, job.allocation.quota_kind, self.now, profile).preemption(profile)
            if job.started_at is not None:  # its wait, hence its score, no longer grows
                scores[id(job)] = (job, profile, total)
            run_s = job.run_time_s(now)
            # no churn: borrowed work younger than its tree node's reclaim_min_runtime is the last victim
            young = tree is not None and run_s < tree.reclaim_min_runtime_s[tree.index[job.department]]
            for alloc in job.allocations:  # a gang: each worker, evicted all together
                if alloc.node not in table.row:
                    continue  # a node outside the snapshot: nothing to reclaim there
                borrowed = alloc.quota_kind is QuotaKind.BORROWED
                candidates.append(Candidate(job, alloc, table.row[alloc.node], total, run_s, borrowed,
                                            borrowed and young))
        return candidates

    def finish(self) -> None:
        """Hand this cycle's victim scores to the next."""
        self.cache.victim_scores = self.scores
