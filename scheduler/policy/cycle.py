"""One scheduling cycle: snapshot -> queue -> assign (model, quota, nodes) per job -> preempt -> reserve -> decisions.

This module only orchestrates (Kueue's scheduler.go): jobs are taken in queue order (queue.py); each gets an
assignment or a diagnosis (assignment.py); a job no model had room for may preempt (preemptor.py); the first gangs
that cannot start reserve the nodes that free soonest (reservation.py); admissions update the cycle's node tables and
quota ledger, so later jobs see them (admission.py, state.py); sentences.py writes what people read. What a loop
keeps from one cycle to the next is the caller's CycleCache (cache.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass

from cluster.types import JobView, Snapshot
from colocation.policy.pools import expected_run_s
from colocation.policy.profile import LendingProfile
from scheduler.policy.admission import admit
from scheduler.policy.assignment import Assigner, Assignment
from scheduler.policy.cache import CycleCache
from scheduler.policy.decisions import CycleResult, Reason, StillPending
from scheduler.policy.diagnosis import Diagnosis
from scheduler.policy.fairshare import tournament
from scheduler.policy.interference import Model
from scheduler.policy.preemptor import Preemptor
from scheduler.policy.profile import Profile
from scheduler.policy.queue import Queued, QueueBuilder
from scheduler.policy.reservation import Reserver
from scheduler.policy.sentences import CPU_MARK, blocked, waiting
from scheduler.policy.sharing import signature
from scheduler.policy.state import CycleState
from scheduler.policy.workload import TargetWorkload


def schedule(snapshot: Snapshot, profile: Profile, lending: LendingProfile | None = None,
             workload: TargetWorkload | None = None, cache: CycleCache | None = None,
             interference: Model | None = None) -> CycleResult:
    """Decide admissions, preemptions and reasons for waiting; pure, the snapshot is not changed.

    With `lending` (a cluster with a co-location pool), each pending job's pool comes from the pool rule
    (`preferred_pool`: pinned to fixed, else long or short by its past runs or stated duration at `now`);
    without, a job asks for the pool it names, if any. `workload` is the target workload the least-gpu-loss
    placement keeps usable (the live loop's is learned from the last week's submissions, replay's from the trace);
    without one, the shapes of the snapshot's own jobs. `cache` is the calling loop's (the same decisions with a
    fresh one; it saves work from one cycle to the next). `interference`: the model one-pod shares are placed by
    (interference.py, sharing.py); without one, by least GPU loss alone."""
    return _Cycle(CycleState(snapshot, profile, workload, cache or CycleCache(), interference), lending).run()


@dataclass(slots=True)
class _Waited:
    """A job that waited: when (the cycle's change count), its CPU and score, and what it was told."""

    changes: int
    takes: int  # evictions tried (a gang's preemption is a greedy search: trusted only while its memo stands)
    cpu: int
    exact: bool  # its sentence depends on the CPU beyond where it is written: only that very CPU reads the same
    total: int  # the score its preemption compared (ScoreBreakdown.preemption)
    reason: Reason
    template: str  # the sentence, CPU_MARK where the job's CPU goes


_KEEP_MISSES, _PROBE_EVERY = 64, 16  # see _Cycle._try


class _Cycle:
    def __init__(self, state: CycleState, lending: LendingProfile | None) -> None:
        self.state = state
        self.profile = state.profile
        self.lending = lending
        self.assigner = Assigner(state)
        self.preemptor = Preemptor(state)
        self.reserver = Reserver(state, False)
        # Kueue-style inadmissible cache: what a waiting job got, by everything its try reads of it (_wait_key), valid
        # while nothing changed (state.changes)
        self._waited: dict[tuple, _Waited] = {}
        self._misses = 0  # jobs tried in a row without the cache answering

    def run(self) -> CycleResult:
        state = self.state
        head: JobView | None = None
        queue = QueueBuilder(state, self.lending).build(state.cache.per_job)
        state.hold_for_own(queue)
        self.reserver.gangs = self.profile.reservations and any(q.job.gang for q in queue)  # a reservation may come
        order = queue if state.shares is None else tournament(state.shares, queue)
        for position, q in enumerate(order):
            if head is not None:
                self._pending(q, position, Reason.BLOCKED, blocked(head))
            elif not self._try(q, position) and self.profile.head_of_line_blocking:
                head = q.job
        state.finish()
        return CycleResult(state.now, tuple(state.decisions))

    def _try(self, q: Queued, position: int) -> bool:
        """Admit `q` or say why it waits. Kueue-style, a job is not tried again when one that waited since the last
        change reads the same (_wait_key), asked no more CPU, ranks no higher for preemption (could preempt no more)
        and both had room in their host quota: then it waits for the same reason, its own CPU in the same sentence."""
        state, job = self.state, q.job
        ends_at = self._ends_at(job)
        state.cache.tried += 1
        if not state.cache.remember_waits:
            return self._attempt(q, position, ends_at, None) is None
        key = self._wait_key(q, ends_at)
        cpu, total = q.request.cpu_request_milli, q.score.preemption(self.profile)  # what its preemption compares
        known = self._waited.get(key)
        if (known is not None and known.changes == state.changes and (cpu == known.cpu or cpu > known.cpu
                                                                       and not known.exact)
                and total <= known.total and (job.workers == 1 or known.takes == state.takes) and self._host_fits(q)):
            self._pending(q, position, known.reason, known.template.replace(CPU_MARK, f"{cpu}"))
            self._misses = 0
            return False
        # After a long run of misses (a burst of admissions: each one makes what waited before stale), only every
        # few jobs are kept, until one is found again: keeping costs, and changes nothing.
        self._misses += 1
        keep = self._misses <= _KEEP_MISSES or self._misses % _PROBE_EVERY == 0
        changes, takes = state.changes, state.takes
        waits = self._attempt(q, position, ends_at, CPU_MARK if keep else None)
        if waits is None:
            return True
        reason, template, exact, host_fits = waits
        if keep and state.changes == changes and template is not None and host_fits:
            self._waited[key] = _Waited(changes, takes, cpu, exact, total, reason, template)
        return False

    def _wait_key(self, q: Queued, ends_at: float) -> tuple:
        """Everything a try reads of a job but its score and CPU: its shape, department, certified models, pool and
        which reservations it must keep off (those starting before it would end)."""
        starts = self.reserver.starts
        sig = signature(q.job) if self.state.interference is not None and 0 < q.request.gpus < 1 else None
        return q.shape, q.pool, bisect_left(starts, ends_at) if starts else 0, sig

    def _host_fits(self, q: Queued) -> bool:
        """The job's CPU and memory fit its department's own and borrowed quota: its CPU then decides no quota
        check, and no quota sentence shows it."""
        profile = self.profile
        return not profile.quotas or self.state.ledger.host_fits(q.job.department, q.host,
                                                                 profile.borrowing and q.job.preemptible)

    def _attempt(self, q: Queued, position: int, ends_at: float, mark: str | None = CPU_MARK
                 ) -> tuple[Reason, str | None, bool, bool] | None:
        """Try every model (and preemption) for `q`: None when admitted, else the reason it waits with, its sentence
        with `mark` where the job's CPU goes (None: not kept), whether more of it depends on the CPU (a gang's room per
        block) and whether its CPU and memory fit its host quota (_host_fits); its StillPending decision appended."""
        self.state.cache.tried_in_full += 1
        found = self.assigner.assign(q, ends_at)
        if isinstance(found, Assignment):
            admit(self.state, self.reserver, q, found, ())
            return None
        if self.profile.preemption:
            plan = self.preemptor.plan(q, found.attempts)
            if plan is not None:
                admit(self.state, self.reserver, q, *plan)
                return None
        reason = found.reason(q.models)
        message, template, exact = self._sentence(q, found, mark)
        if (q.job.gang and found.attempts and self.profile.reservations
                and len(self.reserver.reservations) < self.profile.reservation_depth):
            sentence = self.reserver.reserve(q.job, found.attempts)  # the first waiting gangs, highest first
            if sentence:
                reason, message = Reason.RESERVED, f"{message}; {sentence}"
        self._pending(q, position, reason, message)
        return reason, template, exact, found.host_fits()

    @staticmethod
    def _sentence(q: Queued, diagnosis: Diagnosis, mark: str | None) -> tuple[str, str | None, bool]:
        """A waiting job's sentence, and its template with `mark` where the job's CPU goes (None: not kept) and whether
        more of it depends on the CPU."""
        template, marks, exact = waiting(q, diagnosis, mark)
        if mark is None:
            return template, None, exact
        if template.count(mark) == marks:
            return template.replace(mark, f"{q.request.cpu_request_milli}"), template, exact
        return waiting(q, diagnosis)[0], None, exact  # the mark was in some name: written plainly, and not kept

    def _ends_at(self, job: JobView) -> float:
        """When the job would end if it started now (inf: unknown): it may use room reserved for a gang that starts
        later (backfill)."""
        if not self.reserver.reservations:
            return math.inf  # (nothing reserved: never read)
        run_s = expected_run_s(job)
        return math.inf if run_s is None else self.state.now + run_s

    def _pending(self, q: Queued, position: int, reason: Reason, message: str) -> None:
        self.state.decisions.append(StillPending(q.job.id, q.job.name, position, q.score, reason,
                                                 f"pending: {message}"))
