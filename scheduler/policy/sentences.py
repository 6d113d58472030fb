"""Every sentence the cycle writes for people, from its diagnoses and decisions: the complete one a decision carries
(`message`, on the job's page and in `describe`) and the short one a list shows (`summary`: My jobs' Why column, the
CLI's list), which names the outcome and what to wait for, without placement internals or scores."""

from __future__ import annotations

from datetime import datetime, timezone
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np

from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, JobView, QuotaKind, Topology
from scheduler.policy.decisions import Admit, CycleDecision, Preempt, Reason, Reserve
from scheduler.policy.diagnosis import Diagnosis, NoRoom
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import Room
from scheduler.policy.interference import describe
from scheduler.policy.nodes import NodeTable
from scheduler.policy.placement import Placement
from scheduler.policy.priority import ScoreBreakdown
from scheduler.policy.quota import Bound, Shortfall
from scheduler.policy.rightsizing import Request

if TYPE_CHECKING:
    from scheduler.policy.queue import Queued

CPU_MARK = "\x00"  # where a waiting job's CPU goes in its kept sentence (checked not to occur in any name)


# -- waiting ----------------------------------------------------------------------------
def no_room(d: NoRoom, request_cpu: str | None = None) -> str:
    """Why a model's nodes had no room, the request's CPU written as `request_cpu` (default: its figure; a waiting
    job's sentence is kept as a template with its CPU left out)."""
    if d.reclaim is not None:
        return f"{quota_refused(d.reclaim[1])}: own quota, once borrowed work under it is reclaimed"
    if request_cpu is None:
        request_cpu = f"{d.pod.cpu_milli}"
    if d.shared_badly:
        return (f"every {d.pod.gpu_model} GPU with room for {d.pod.gpus:g} of a GPU holds a job predicted to share "
                f"badly with it (less work together than one after the other, or a serving job's p99 past its bound)")
    if d.gang is not None:
        return d.gang if d.frame is None else request_cpu.join(d.frame)
    whole, share, cpu, mem = d.bounds
    where = f"{d.pod.gpu_model} node" if d.pod.gpu_model else "CPU node"
    borrowed = " (borrowed quota runs on idle capacity only)" if d.kind is QuotaKind.BORROWED else ""
    return (f"no idle {where} fits {d.pod.describe(request_cpu)}{borrowed}; most free on one node: "
            f"{whole:g} whole GPU{'' if whole == 1 else 's'}, {share:.2f} of a GPU, {cpu}m CPU, {mem} MiB"
            f"{_fragments(d, whole, share)}")


def _fragments(d: NoRoom, whole: float, share: float) -> str:
    """When the free GPUs would do but only as fragments, the sentence says so
    (docs/concepts/placement.md#the-clusters-typical-jobs)."""
    (free, idle), gpus, model = d.free, d.pod.gpus, d.pod.gpu_model
    if gpus >= 1 and free >= gpus > whole:
        return (f"; {free} {model} GPUs free across the cluster, at most {whole:g} on any node; "
                f"this job needs {gpus:g} on one node")
    if 0 < gpus < 1 and idle >= gpus > share + GPU_EPS:
        return (f"; {idle:.2f} {model} GPUs idle across the cluster, at most {share:.2f} of any one GPU; "
                f"this job needs {gpus:g} of one GPU")
    return ""


def shortfall(table: NodeTable, room: Room, workers: int, pod: PodRequest, topology: Topology,
              cpu: str | None = None) -> str:
    """What is missing, in one sentence: the gang's shape and the blocks that come closest (the worker's CPU written
    as `cpu`, default its figure)."""
    per = "one worker per node" if topology is Topology.SPREAD else "packed"
    need = f"needs {workers} workers of {pod if cpu is None else pod.describe(cpu)} ({per})"
    if room.total == 0:
        return f"{need}; no {pod.gpu_model or 'CPU'} node has room for one worker now"
    named = [(n, b) for b, n in enumerate(np.bincount(table.block, weights=room.per_node,
                                                      minlength=len(table.block_names)).astype(int))
             if n and table.block_names[b]]
    named.sort(key=lambda x: (-x[0], x[1]))
    blocks = ", ".join(f"block {table.block_names[b]} has room for {n}" for n, b in named[:3])
    return f"{need}; room for {room.total} across the {pod.gpu_model or 'CPU'} nodes" + (f" ({blocks})" if blocks else "")


_UNITS = MappingProxyType({CPU_KEY: ("CPU", "m"), MEMORY_KEY: ("memory", " MiB")})


def quota_refused(s: Shortfall) -> str:
    """A quota without room for the job; on a quota tree, the level that refuses, its limit and its figure."""
    if s.bound is not None:
        return tree_level_refused(s)
    unit = _UNITS.get(s.resource)
    of = "" if s.node is None else f" of {s.node}"  # a level of the quota tree above the job's department
    if unit is None:  # GPUs
        return f"{s.kind.value} {s.resource} quota{of} {_gpus(s.used)}/{_gpus(s.limit)} used, needs {_gpus(s.amount)}"
    name, suffix = unit
    return f"{s.kind.value} {name} quota{of} {s.used:g}{suffix}/{s.limit:g}{suffix} used, needs {s.amount:g}{suffix}"


def tree_level_refused(s: Shortfall) -> str:
    """The quota-tree level that refuses borrowed work, in the words of its limit: "department ml may borrow at most
    8 A100; 8 borrowed", "department ml lends at most 8 A100; 8 lent", "the tree lends at most 16 A100; 16 lent"."""
    limit = f"{_figure(s.resource, s.limit)} {_UNITS.get(s.resource, (s.resource,))[0]}"
    figures = f"{_figure(s.resource, s.used)} {'borrowed' if s.bound is Bound.BORROW else 'lent'}, " \
              f"needs {_figure(s.resource, s.amount)}"
    if s.bound is Bound.BORROW:
        return f"department {s.node} may borrow at most {limit}; {figures}"
    if s.bound is Bound.LEND:
        many = " and " in s.node
        return (f"department{'s' if many else ''} {s.node} lend{'' if many else 's'} at most {limit}"
                f"{' together' if many else ''}; {figures}")
    return f"the tree lends at most {limit}; {figures}"


def _figure(resource: str, x: float) -> str:
    """An amount of a resource key as its quota shows it: "8" (GPUs), "4000m" (CPU), "16384 MiB" (memory)."""
    unit = _UNITS.get(resource)
    return _gpus(x) if unit is None else f"{x:g}{unit[1]}"


def _gpus(amount: float) -> str:
    """A GPU amount to 3 decimals."""
    return f"{round(amount, 3):g}"


def gang_needs(table: NodeTable, job: JobView, pod: PodRequest, free: int, fits: Room | None,
               cpu: str | None) -> str:
    """A gang's shortfall when no node has room for one worker, or too few whole GPUs are free at all."""
    if fits is not None:
        return shortfall(table, fits, job.workers, pod, job.topology, cpu)
    return (f"needs {job.workers} workers of {pod if cpu is None else pod.describe(cpu)}: "
            f"{pod.gpus * job.workers:g} whole {pod.gpu_model} GPUs, {free} free across the cluster")


def held_for_own(model: str | None, waiting: float, arrived: float, window_s: float) -> str:
    return (f"idle {model} GPUs are kept for own-quota work ({waiting:g} GPUs waiting, {arrived:g} arrived in the last "
            f"{window_s:g} s): borrowed work there would be reclaimed before it ran {window_s:g} s")


def waiting(q: Queued, diagnosis: Diagnosis, cpu: str | None = None) -> tuple[str, int, bool]:
    """The sentence of a job that waits, its CPU written as `cpu` (default: the figure); how many times it is written
    so, and whether the sentence depends on the CPU elsewhere too."""
    if not q.models:
        return f"framework {q.job.framework} is not certified on {q.job.gpu_model or 'any GPU model'}", 0, False
    if not diagnosis.refusals:
        return "no node of a compatible GPU model exists", 0, False
    # Spelled out for the preferred and the best fallback model; the rest only named (cheap).
    # Refusals come model by model, so the first two models seen are the first two listed.
    shown: list[str | None] = []
    parts: list[str] = []
    others: set[str | None] = set()
    marks, exact = 0, False
    for model, why in diagnosis.refusals:
        if model not in shown:
            if len(shown) == 2:
                others.add(model)
                continue
            shown.append(model)
        if type(why) is NoRoom:
            if cpu is not None and why.templated:
                parts.append(no_room(why, cpu))
                marks += 1
                continue
            exact = exact or cpu is not None
            parts.append(no_room(why))
        else:
            parts.append(quota_refused(why))
    message = "; ".join(parts)
    if others:
        named = ", ".join(sorted(m or "CPU" for m in others))
        message += f"; no quota or room on the other certified models either ({named})"
    return message, marks, exact


def blocked(head: JobView) -> str:
    return f"waiting behind job {head.name} (strict FCFS)"


def reserved(job: JobView, nodes: list[str], start_at: float, reclaims: bool) -> str:
    shown = ", ".join(nodes[:6]) + (f" and {len(nodes) - 6} more" if len(nodes) > 6 else "")
    return (f"reserved {shown} for job {job.name}; expected start {clock(start_at)} "
            f"(when the jobs there are expected to end); until then only jobs ending before it use them"
            + (", and borrowed ones, which it reclaims when it starts" if reclaims else ""))


# -- admitted and preempted ---------------------------------------------------------------
def admitted(q: Queued, pod: PodRequest, kind: QuotaKind | None, placement: Placement, breakdown: ScoreBreakdown,
             asked: Request, preempting: tuple[int, ...]) -> str:
    job = q.job
    gpus = ",".join(f"{s.index}" if s.share == 1 else f"{s.index}:{s.share:g}" for s in placement.gpu_shares)
    parts = [f"admitted on {placement.node}" + (f" (GPUs {gpus})" if gpus else "")]
    if placement.loss is not None:
        parts.append(f"GPU the typical jobs cannot use: {placement.loss / 1000:+.2f} (placed where it grows least)")
    if placement.sharing is not None:
        parts.append(f"sharing GPU {placement.gpu_shares[0].index}: {describe(placement.sharing)}")
    if placement.overruled is not None:
        parts.append(f"kept off the GPU least GPU loss alone takes: {placement.overruled}")
    parts.append(f"{kind.value} quota of {job.department}" if kind else "no quotas")
    if job.gpus and pod.gpu_model != job.gpu_model:
        parts.append(f"{pod.gpu_model} instead of {job.gpu_model}: no room there, most idle certified model"
                     if job.gpu_model else f"{pod.gpu_model}: most idle certified model")
    parts.append(f"score {breakdown}")
    if q.request != asked:
        parts.append(f"right-sized from {asked} to {q.request}" + (f" ({q.request.basis})" if q.request.basis else ""))
    if preempting:
        parts.append(f"after preempting {len(preempting)} job(s)")
    if q.pool_why:
        parts.append(q.pool_why)
    return "; ".join(parts)


def gang_admitted(q: Queued, pod: PodRequest, kind: QuotaKind | None, table: NodeTable, nodes: list[str], n: int,
                  breakdown: ScoreBreakdown, asked: Request, preempting: tuple[int, ...]) -> str:
    job = q.job
    blocks = sorted({table.block_names[table.block[table.row[node]]] for node in nodes} - {""})
    where = (f"admitted {n} workers on {len(nodes)} node{'s' if len(nodes) > 1 else ''} "
             f"({', '.join(nodes[:6])}{', …' if len(nodes) > 6 else ''})"
             + (f", block {blocks[0]}" if len(blocks) == 1 else f", {len(blocks)} blocks" if blocks else ""))
    parts = [where, f"{kind.value} quota of {job.department}" if kind else "no quotas", f"score {breakdown}"]
    if job.gpus and pod.gpu_model != job.gpu_model:
        parts.append(f"{pod.gpu_model}: most idle certified model" + (f", not {job.gpu_model}" if job.gpu_model else ""))
    if q.request != asked:
        parts.append(f"each worker right-sized from {asked} to {q.request}")
    if preempting:
        parts.append(f"after preempting {len(preempting)} job(s)")
    if q.pool_why:
        parts.append(q.pool_why)
    return "; ".join(parts)


def preempted(for_job: JobView, victim: JobView, nodes: list[str], run_time_s: float, reclaim: bool, model: str | None,
              total: int, victim_score: int, aging_preempts: bool, fair: bool = False) -> str:
    why = (f"to give {for_job.department} back its own {model or 'CPU'} quota" if reclaim
           else f"for fair share: {for_job.department}'s share after stays at or below {victim.department}'s" if fair
           else f"for higher score {total} > {victim_score}" if aging_preempts
           else f"for higher priority {total} > {victim_score} (base + utilization; aging only orders the queue)")
    where = (f"on {nodes[0]}" if not victim.gang else
             f"(all {victim.workers} workers of the gang, on {', '.join(nodes)})")
    return (f"preempted {where} after {run_time_s:.0f}s {why} (job {for_job.name}); "
            f"requeued with its original submit time and history")


# -- short sentences for lists ------------------------------------------------------------
_WAITING = MappingProxyType({
    Reason.QUOTA_EXHAUSTED: "waiting for quota: its department's own and borrowed quota are in use",
    Reason.NO_IDLE_CAPACITY: "waiting for idle GPUs: borrowed quota runs on idle capacity only",
    Reason.NO_CAPACITY: "waiting for room: no node has enough free now",
    Reason.NO_COMPATIBLE_MODEL: "cannot run: its framework is certified on none of the GPU models it may use",
    Reason.BLOCKED: "waiting for the job at the head of the queue (first come, first served)",
    Reason.RESERVED: "waiting for reserved nodes to free",
})


def summary(decision: CycleDecision) -> str:
    """The decision in a few words, for a list; the complete sentence is its `message`."""
    if isinstance(decision, Admit):
        where = f"{decision.gpu_model} on {decision.node}" if decision.gpu_model else decision.node
        if decision.peers:
            where = f"{len(decision.workers)} workers, {decision.gpu_model or 'CPU'}"
        quota = f", {decision.quota_kind.value} quota" if decision.quota_kind else ""
        return f"running: {where}{quota}"
    if isinstance(decision, Preempt):
        return ("preempted to give its quota back to its owner; requeued" if decision.reason is Reason.PREEMPTED_RECLAIM
                else "preempted by a higher-priority job; requeued")
    if isinstance(decision, Reserve):
        return f"waiting: {len(decision.nodes)} node(s) reserved, expected start {clock(decision.start_at)}"
    return _WAITING[decision.reason]


def clock(at: float) -> str:
    """A moment as the sentences show it (UTC; the console shows local times)."""
    return datetime.fromtimestamp(at, timezone.utc).strftime("%b %d %H:%M UTC")
