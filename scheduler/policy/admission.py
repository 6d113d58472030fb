"""Admitting an assignment: its room taken in the cycle's tables and quota ledger (later jobs see it) and its Admit
decision (a gang's workers in rank order, as one decision)."""

from __future__ import annotations

from types import MappingProxyType

from cluster.types import QuotaKind
from scheduler.policy.assignment import Assignment
from scheduler.policy.decisions import Admit, Reason, Worker
from scheduler.policy.priority import rebased
from scheduler.policy.queue import Queued
from scheduler.policy.quota import demand
from scheduler.policy.reservation import Reserver
from scheduler.policy.rightsizing import requested
from scheduler.policy.sentences import admitted, gang_admitted
from scheduler.policy.state import CycleState

_ADMITTED = MappingProxyType({QuotaKind.OWN: Reason.ADMITTED_OWN, QuotaKind.BORROWED: Reason.ADMITTED_BORROWED,
                              None: Reason.ADMITTED})


def admit(state: CycleState, reserver: Reserver, q: Queued, a: Assignment, preempting: tuple[int, ...]) -> None:
    state.admitted(q.job, a.pod.gpu_model)
    if a.rows is not None:
        _admit_gang(state, reserver, q, a, preempting)
        return
    state.changes += 1
    job, pod, kind, placement = q.job, a.pod, a.kind, a.placement
    state.tables[pod.gpu_model].allocate(placement.row, placement.gpu_shares, pod.cpu_milli, pod.memory_mib)
    if state.interference is not None:
        state.residents.remove(preempting)
        state.residents.add(job, pod.gpu_model, placement.row, placement.gpu_shares)
    state.fallbacks.clear()  # idle capacity changed (here and by the evictions, if any, made for this job)
    if kind is not None:
        state.ledger.charge(job.department, kind, demand(pod.gpu_model, pod.gpus, pod.cpu_milli, pod.memory_mib))
    if reserver.gangs:
        reserver.note_started(job, pod, kind, [Worker(placement.node, placement.gpu_shares)])
    breakdown = rebased(q.score, kind, state.profile)
    asked = requested(job)
    state.decisions.append(Admit(
        job.id, job.name, placement.node, pod.gpu_model, placement.gpu_shares, kind,
        asked, q.request, breakdown, preempting, _ADMITTED[kind],
        admitted(q, pod, kind, placement, breakdown, asked, preempting)))


def _admit_gang(state: CycleState, reserver: Reserver, q: Queued, a: Assignment, preempting: tuple[int, ...]) -> None:
    """Allocate every worker (in rank order) and admit the gang as one decision."""
    state.changes += 1
    pod, kind = a.pod, a.kind
    table = state.tables[pod.gpu_model]
    workers = []
    for row in a.rows:
        shares = table.choose_gpus(row, pod.gpus)
        table.allocate(row, shares, pod.cpu_milli, pod.memory_mib)
        workers.append(Worker(table.names[row], shares))
    state.fallbacks.clear()
    job, n = q.job, len(a.rows)
    if kind is not None:
        state.ledger.charge(job.department, kind, demand(pod.gpu_model, pod.gpus * n, pod.cpu_milli * n,
                                                         pod.memory_mib * n))
    reserver.note_started(job, pod, kind, workers)
    breakdown = rebased(q.score, kind, state.profile)
    asked = requested(job)
    nodes = sorted({w.node for w in workers})
    first = workers[0]
    state.decisions.append(Admit(
        job.id, job.name, first.node, pod.gpu_model, first.gpu_shares, kind, asked, q.request, breakdown,
        preempting, _ADMITTED[kind], gang_admitted(q, pod, kind, table, nodes, n, breakdown, asked, preempting),
        tuple(workers[1:])))
