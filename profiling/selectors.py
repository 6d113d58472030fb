"""Reads for the profiling app: task histories for the scheduler, profile and load series for the API."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Max, QuerySet, Sum, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from cluster.types import JobStatus
from cluster.types import JobView
from profiling.models import RESOURCES, Forecast, JobMinute, LateSample, RunSummary, ServiceMinute
from profiling.policy.aggregate import Minute, Stat, TaskHistory, Usage, combine_minutes, run_profile
from scheduler.models import JobRun, TrainingJob
from scheduler.policy.priority import utilization_points
from scheduler.policy.profile import get_profile
from scheduler.policy.rightsizing import RecentUse, Request, recent_use, requested, rightsize

USE_FRESH = timedelta(minutes=10)  # the newest profiled minute older than this: the pipeline is down

STAT_FIELDS = tuple(f"{resource}_{stat}" for resource in RESOURCES for stat in ("mean", "peak"))


def _stats(row) -> dict[str, Stat]:
    """Per-resource stats of a JobMinute / RunSummary (model or values() dict)."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name)
    return {r: Stat(mean=get(f"{r}_mean"), peak=get(f"{r}_peak")) for r in RESOURCES}


def usage_of(summary) -> Usage:
    """A RunSummary (model or values() dict with samples, minutes and the stat fields) as a Usage."""
    get = summary.get if isinstance(summary, dict) else lambda name: getattr(summary, name)
    return Usage(samples=get("samples"), minutes=get("minutes"), stats=_stats(summary))


# --- what the scheduler reads -----------------------------------------------------------------------


HISTORY_RUNS = 20  # the newest runs per task the scheduler reads (right-sizing uses 3, the pool rule all 20)


def task_histories(*, task_keys: Iterable[str]) -> dict[str, TaskHistory]:
    """The recent past of each task (its newest HISTORY_RUNS ended runs), from the run summaries (fresh as
    soon as a run ends): one query for all tasks, bounded however many runs a task has had."""
    keys = set(task_keys)
    if not keys:
        return {}
    newest_first = Window(RowNumber(), partition_by=F("run__job__task_key"),
                          order_by=[F("run__ended_at").desc(), F("run_id").desc()])
    rows = (
        RunSummary.objects.filter(run__job__task_key__in=keys)
        .annotate(recency=newest_first).filter(recency__lte=HISTORY_RUNS)
        .order_by("run__ended_at", "run_id")
        .values("run__job__task_key", "run__job__gpus", "outcome", "run_s", "samples", "minutes", *STAT_FIELDS)
    )
    runs: dict[str, list] = {}
    run_s: dict[str, list[float]] = {}
    for row in rows:
        key = row["run__job__task_key"]
        profile = run_profile(usage_of(row), gpus=float(row["run__job__gpus"]))
        if profile is not None:
            runs.setdefault(key, []).append(profile)
        if row["outcome"] == JobRun.Outcome.SUCCEEDED:
            run_s.setdefault(key, []).append(row["run_s"])
    return {key: TaskHistory(task_key=key, runs=tuple(runs.get(key, ())), run_s=tuple(run_s.get(key, ())))
            for key in runs.keys() | run_s.keys()}


# --- run summaries (computed by services on run end; computed on read for a run still going) -----------


@dataclass(frozen=True)
class RunFigures:
    """A run's minutes combined, with its run and wait time (see RunSummary for the wait rule)."""

    usage: Usage
    run_s: float
    wait_s: float


def run_figures(*, run: JobRun, minutes: Iterable, submitted_at: datetime, previous_end: datetime | None,
                now: datetime) -> RunFigures:
    """`minutes`: the run's JobMinute rows (models or values() dicts); `previous_end`: the end of the job's
    previous attempt (None for attempt 1). An open run's run time counts until `now`."""
    usage = combine_minutes(
        Minute(samples=m["samples"] if isinstance(m, dict) else m.samples, stats=_stats(m)) for m in minutes
    )
    queued_from = previous_end if run.attempt > 1 and previous_end is not None else submitted_at
    run_s = ((run.ended_at or now) - run.started_at).total_seconds()
    return RunFigures(usage=usage, run_s=max(0.0, run_s),
                      wait_s=max(0.0, (run.started_at - queued_from).total_seconds()))


def previous_ends(*, job_ids: Iterable[int]) -> dict[tuple[int, int], datetime | None]:
    """(job id, attempt) -> when that attempt ended, for the wait time of the attempt after it."""
    return {(job_id, attempt): ended for job_id, attempt, ended in
            JobRun.objects.filter(job_id__in=set(job_ids)).values_list("job_id", "attempt", "ended_at")}


# --- the API's series --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSeries:
    run: JobRun
    summary: dict  # samples, minutes, the resources' {mean, peak}, run_s, wait_s, outcome, final, computed_at
    minutes: list[JobMinute]
    late_samples: int


@dataclass(frozen=True)
class Advice:
    runs: int  # past runs the advice is from (at most the profile's rightsizing_runs)
    requested: Request
    rightsized: Request
    utilization_points: int
    use: RecentUse  # the figures the rule read
    gpu_util_target: float
    cpu_util_target: float


@dataclass(frozen=True)
class JobProfile:
    job: TrainingJob
    runs: list[RunSeries]
    late_samples: int
    advice: Advice | None


def _summary_dict(figures: RunFigures | None, summary: RunSummary | None, outcome: str) -> dict:
    usage = usage_of(summary) if summary else figures.usage
    return {
        "samples": usage.samples, "minutes": usage.minutes, **usage.as_dict(),
        "run_s": summary.run_s if summary else figures.run_s,
        "wait_s": summary.wait_s if summary else figures.wait_s,
        "outcome": outcome, "final": summary is not None,
        "computed_at": summary.computed_at if summary else None,
    }


def job_profile(*, job: TrainingJob, attempt: int | None = None, since: datetime | None = None,
                until: datetime | None = None, now: datetime | None = None) -> JobProfile:
    """Every run of `job` (or one attempt) with its per-minute series (optionally within [since, until))
    and its summary: the stored RunSummary of an ended run, else computed from all its minutes now."""
    now = now or timezone.now()
    every_run = list(JobRun.objects.filter(job=job).select_related("summary").order_by("attempt"))
    ends = {r.attempt: r.ended_at for r in every_run}
    runs = [r for r in every_run if attempt is None or r.attempt == attempt]
    all_minutes: dict[int, list[JobMinute]] = {}
    for m in JobMinute.objects.filter(run__in=runs).order_by("minute"):
        all_minutes.setdefault(m.run_id, []).append(m)
    late = {}
    for run_attempt in LateSample.objects.filter(job_id=job.pk).values_list("run_attempt", flat=True):
        late[run_attempt] = late.get(run_attempt, 0) + 1
    series = []
    for run in runs:
        minutes = all_minutes.get(run.pk, [])
        summary = getattr(run, "summary", None) if run.ended_at else None
        figures = None if summary else run_figures(run=run, minutes=minutes, submitted_at=job.submitted_at,
                                                   previous_end=ends.get(run.attempt - 1), now=now)
        shown = [m for m in minutes if (since is None or m.minute >= since) and (until is None or m.minute < until)]
        series.append(RunSeries(run=run, summary=_summary_dict(figures, summary, run.outcome), minutes=shown,
                                late_samples=late.get(run.attempt, 0)))
    return JobProfile(job=job, runs=series, late_samples=sum(late.values()),
                      advice=rightsizing_advice(job=job))


def rightsizing_advice(*, job: TrainingJob) -> Advice | None:
    """What the scheduler would bind for `job` now from its task's past runs (None: no history, the request
    is kept), and the utilization term of its priority score (docs/concepts/quotas-and-priority.md#priority-score)."""
    history = task_histories(task_keys=[job.task_key]).get(job.task_key)
    if history is None or not history.runs:
        return None
    profile = get_profile(settings.TIDAL_SCHEDULER_PROFILE)
    view = JobView(
        id=job.pk, name=job.name, task_key=job.task_key, department=job.department.name,
        framework=str(job.framework), gpu_model=job.gpu_model.name if job.gpu_model else None,
        gpus=float(job.gpus), cpu_milli=job.cpu_milli, memory_mib=job.memory_mib, status=JobStatus.PENDING,
        submitted_at=job.submitted_at.timestamp(), history=history.runs, keep_request=job.keep_request,
    )
    return Advice(runs=min(len(history.runs), profile.rightsizing_runs), requested=requested(view),
                  rightsized=rightsize(view, profile), utilization_points=utilization_points(view, profile),
                  use=recent_use(view, profile), gpu_util_target=profile.gpu_util_target,
                  cpu_util_target=profile.cpu_util_target)


def service_load(*, service_id: int, since: datetime, until: datetime) -> QuerySet[ServiceMinute]:
    """The inference service's per-minute load with since <= minute < until, oldest first."""
    return ServiceMinute.objects.filter(service_id=service_id, minute__gte=since, minute__lt=until).order_by("minute")



def forecasts_vs_actuals(*, service_id: int, since: datetime, until: datetime, horizon: int = 5,
                         target: str = "gpu") -> list[dict]:
    """Per minute in [since, until): what was forecast `horizon` minutes earlier (utilization at the replicas it
    was made at, rescaled to the replicas that served the minute) and what was measured."""
    forecasts = {f.minute: f for f in Forecast.objects.filter(service_id=service_id, target=target, horizon=horizon,
                                                               minute__gte=since, minute__lt=until)}
    field = "gpu_util_mean" if target == "gpu" else "cpu_util_mean"
    actual = {m.minute: m for m in service_load(service_id=service_id, since=since, until=until)}
    rows = []
    for minute in sorted(forecasts.keys() | actual.keys()):
        f, a = forecasts.get(minute), actual.get(minute)
        served = a.replicas if a is not None and a.replicas else None
        value = None if f is None else f.value * f.replicas / (served or f.replicas)
        rows.append({"minute": minute, "forecast": value, "actual": getattr(a, field) if a is not None else None,
                     "replicas": served})
    return rows


# --- figures for /metrics --------------------------------------------------------------------------


def gpus_in_use(*, minute: datetime) -> dict[str, float]:
    """GPUs really busy in one minute, per resource group: utilization x GPUs of every training run and
    inference service profiled in that minute (a service's replicas x GPUs per replica)."""
    used: dict[str, float] = defaultdict(float)
    jobs = (JobMinute.objects.filter(minute=minute, gpu_util_mean__isnull=False, run__node__isnull=False).order_by()
            .values_list("run__node__resource_group__name").annotate(busy=Sum(F("gpu_util_mean") * F("req_gpus"))))
    for group, busy in jobs:
        used[group] += busy or 0.0
    services = (ServiceMinute.objects.filter(minute=minute, gpu_util_mean__isnull=False).order_by()
                .values_list("service__gpu_model__resource_groups__name", "gpu_util_mean", "replicas",
                             "service__gpus_per_replica"))
    for group, util, replicas, per_replica in services:
        if group:
            used[group] += util * replicas * float(per_replica)
    return dict(used)


def gpus_in_use_now(*, now: datetime) -> tuple[datetime | None, dict[str, float]]:
    """The newest profiled minute and the GPUs really busy in it per resource group (gpus_in_use); (None, {}) when
    there is none, or it is older than USE_FRESH: the pipeline is down, and an old figure would read as today's."""
    newest = max(filter(None, newest_minutes().values()), default=None)
    if newest is None or now - newest >= USE_FRESH:
        return None, {}
    return newest, gpus_in_use(minute=newest)


def newest_minutes() -> dict[str, datetime | None]:
    """The newest minute the sink has written for jobs and for services (the pipeline's lag behind now)."""
    return {"job": JobMinute.objects.aggregate(m=Max("minute"))["m"],
            "service": ServiceMinute.objects.aggregate(m=Max("minute"))["m"]}


def newest_service_forecasts(*, since: datetime, target: str = "gpu") -> dict[int, tuple[int, tuple[float, ...]]]:
    """Per service, the newest forecast made at or after `since` by a usable model: (the replicas it was made at,
    utilization at them h = 1, 2, ...). The autoscaler writes them each tick (profiling/forecasting.py)."""
    rows = Forecast.objects.filter(target=target, made_at__gte=since, model__usable=True).order_by(
        "service_id", "-made_at", "horizon").values_list("service_id", "made_at", "horizon", "value", "replicas")
    out: dict[int, tuple[int, tuple[float, ...]]] = {}
    newest: dict[int, datetime] = {}
    for service, made_at, _, value, replicas in rows:
        if newest.setdefault(service, made_at) != made_at:
            continue
        reps, values = out.get(service, (replicas, ()))
        out[service] = (reps, values + (value,))
    return out
