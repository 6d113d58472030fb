"""Everything the job page shows — "why am I waiting", its runs, profile and advice — read in one place."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings

from colocation.selectors import Room, most_free
from core.models import Decision
from profiling.selectors import Advice, JobProfile, job_profile
from scheduler import selectors
from scheduler.models import JobRun, JobStatus, TrainingJob
from scheduler.policy.priority import AgingStep, next_aging_step
from scheduler.policy.profile import get_profile
from scheduler.selectors import QuotaUsage, Reservation, WorkerRow


@dataclass(frozen=True)
class Step:
    label: str
    at: datetime | None
    state: str  # done | current | todo | bad


@dataclass(frozen=True)
class Waiting:
    """Why a pending job waits: the cycle's sentence and the numbers behind it."""

    message: str
    reason: str
    position: int | None
    ahead: int | None  # jobs of higher score ahead in the queue
    quotas: list[QuotaUsage]  # the quotas the job draws on
    room: Room  # the most free on one schedulable node of its GPU model
    aging: AgingStep | None
    reservation: Reservation | None  # a gang's hold on the nodes that free soonest
    gang_gpus: Decimal  # what a gang needs at once: workers x GPUs


@dataclass(frozen=True)
class WorkerLine:
    """A row of the Workers table."""

    rank: int
    node: str
    gpus: str  # "8 · GPUs 0–7", "0.5 of GPU 3", "—"
    state: str


@dataclass(frozen=True)
class Workers:
    """Where the workers of the open run (else the latest) are."""

    attempt: int
    running: bool  # the run is still open
    lines: list[WorkerLine]


@dataclass(frozen=True)
class JobPage:
    job: TrainingJob
    steps: list[Step]
    attempt: int  # the current or next run (1 = never requeued)
    waiting: Waiting | None
    score: dict | None
    score_kind: str  # own | borrowed | "" (from the base)
    decisions: list[Decision]
    runs: list[JobRun]
    profile: JobProfile
    charts: list[dict]
    advice: Advice | None
    workers: Workers | None  # a gang's workers; None for a one-worker job (its node is in the request) or unstarted
    run_nodes: list[tuple[JobRun, str]]  # each run with the node(s) its workers ran on


def job_page(*, job: TrainingJob, now: datetime) -> JobPage:
    profile = job_profile(job=job, now=now)
    runs = [series.run for series in profile.runs]
    decisions = list(selectors.job_decisions(job=job))
    return JobPage(
        job=job, steps=_steps(job), attempt=len(runs) + (1 if job.status == JobStatus.PENDING else 0) or 1,
        waiting=_waiting(job, decisions, now) if job.status == JobStatus.PENDING else None,
        score=job.score or None, score_kind=_score_kind(job.score), decisions=decisions, runs=runs,
        profile=profile, charts=profile_charts(profile), advice=profile.advice,
        workers=_workers(job) if job.workers > 1 else None,
        run_nodes=[(run, _nodes(run)) for run in runs],
    )


def _nodes(run: JobRun) -> str:
    """The nodes of a run's workers, in rank order, each once; a one-worker run's node."""
    if run.workers:
        return ", ".join(dict.fromkeys(w["node"] for w in sorted(run.workers, key=lambda w: w.get("rank", 0))))
    return run.node.name if run.node_id else "—"


def _workers(job: TrainingJob) -> Workers | None:
    run, rows = selectors.job_workers(job=job)
    if run is None:
        return None
    return Workers(run.attempt, run.ended_at is None, [
        WorkerLine(row.rank, row.node or "—", gpu_text(row), row.state) for row in rows])


def gpu_text(row: WorkerRow) -> str:
    """The GPUs a worker holds on its node: `8 · GPUs 0–7`, `2 · GPUs 1, 3`, `0.5 of GPU 3`, `—` for none."""
    if not row.gpu_shares:
        return "—"
    if len(row.gpu_shares) == 1 and row.gpu_shares[0][1] < 1:
        index, share = row.gpu_shares[0]
        return f"{share:g} of GPU {index}"
    indices = sorted(index for index, _ in row.gpu_shares)
    contiguous = len(indices) > 2 and indices == list(range(indices[0], indices[-1] + 1))
    named = f"{indices[0]}–{indices[-1]}" if contiguous else ", ".join(map(str, indices))
    return f"{row.gpus.normalize():f} · GPU{'s' if len(indices) > 1 else ''} {named}"


def _steps(job: TrainingJob) -> list[Step]:
    """submitted → admitted → running → finished, for the current attempt."""
    finished = job.status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
    order = ["pending", "admitted", "running", "finished"]
    current = "finished" if finished else job.status if job.status in order else "pending"
    at = {"pending": job.submitted_at, "admitted": job.admitted_at, "running": job.started_at,
          "finished": job.finished_at}
    labels = {"pending": "Submitted", "admitted": "Admitted", "running": "Running",
              "finished": job.get_status_display() if finished else "Finished"}
    steps = []
    for name in order:
        index, now_index = order.index(name), order.index(current)
        state = "done" if index < now_index else "current" if index == now_index else "todo"
        if name == "finished" and job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            state = "bad"
        steps.append(Step(labels[name], at[name] if index <= now_index else None, state))
    return steps


def _waiting(job: TrainingJob, decisions: list[Decision], now: datetime) -> Waiting:
    latest = next((d for d in reversed(decisions) if d.kind in (Decision.Kind.PENDING, Decision.Kind.PREEMPTION)), None)
    resources = {job.gpu_model.name} if job.gpu_model_id and job.gpus else set()
    resources |= {"cpu", "memory"}
    quotas = [q for q in selectors.quota_usage(department=job.department) if q.resource in resources]
    waited = (now - job.submitted_at).total_seconds()
    return Waiting(
        message=latest.message if latest else "waiting for the next scheduling cycle",
        reason=job.pending_reason, position=job.queue_position,
        ahead=job.queue_position - 1 if job.queue_position else None, quotas=quotas,
        room=most_free(gpu_model=job.gpu_model.name if job.gpu_model_id and job.gpus else None),
        aging=next_aging_step(waited, get_profile(settings.TIDAL_SCHEDULER_PROFILE)),
        reservation=selectors.reservation_of(job=job), gang_gpus=job.workers * job.gpus,
    )


def _score_kind(score: dict) -> str:
    profile = get_profile(settings.TIDAL_SCHEDULER_PROFILE)
    base = (score or {}).get("base")
    return "own" if base == profile.own_base else "borrowed" if base == profile.borrowed_base else ""


# --- profile charts ---------------------------------------------------------------------------------

# SM active beside GPU util: GPU util counts any kernel's time, SM active how busy the SMs were (shown where measured)
CHARTED = (("gpu_util", "GPU utilization"), ("sm_active", "SM active"), ("gpu_mem_util", "GPU memory"),
           ("cpu_util", "CPU (of request)"), ("mem_util", "Memory (of request)"))
ESTIMABLE = frozenset({"sm_active"})  # attributed from a shared GPU in a minute marked estimated


def estimated_note(minutes: list, total: int) -> str:
    """Says how many of the charted minutes were on a GPU shared with other pods (docs/reference/gpu-metrics.md)."""
    if not minutes:
        return ""
    share = "every minute" if len(minutes) == total else f"{len(minutes)} of {total} minutes"
    return f"estimated for {share}: the GPU was shared with other pods, its SM activity split by their GPU util"


def profile_charts(profile: JobProfile) -> list[dict]:
    """Per resource: per-minute mean and peak over every run, and the running mean and peak since the first
    minute (sample-weighted, like the run summaries). Resources the job has no figures for are left out."""
    minutes = [m for series in profile.runs for m in series.minutes]
    charts = []
    for resource, title in CHARTED:
        rows = [(m.minute, getattr(m, f"{resource}_mean"), getattr(m, f"{resource}_peak"), m.samples)
                for m in minutes if getattr(m, f"{resource}_mean") is not None]
        if not rows:
            continue
        running_mean, running_peak, total, weight, peak = [], [], 0.0, 0, 0.0
        for at, mean, top, samples in rows:
            total, weight, peak = total + mean * samples, weight + samples, max(peak, top or mean)
            running_mean.append([_ms(at), round(total / weight, 4)])
            running_peak.append([_ms(at), round(peak, 4)])
        note = estimated_note([m for m in minutes if m.estimated and getattr(m, f"{resource}_mean") is not None],
                              len(rows)) if resource in ESTIMABLE else ""
        charts.append({"id": f"chart-{resource}", "title": title, "note": note, "percent": True, "series": [
            {"label": "mean per minute", "points": [[_ms(at), round(mean, 4)] for at, mean, _, _ in rows]},
            {"label": "peak per minute", "points": [[_ms(at), round(top, 4)] for at, _, top, _ in rows if top is not None]},
            {"label": "running mean", "points": running_mean, "dash": [5, 4]},
            {"label": "running peak", "points": running_peak, "dash": [2, 3]},
        ]})
    return charts


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)
