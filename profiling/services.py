"""Writes for the profiling app: the profile sink's upserts, run summaries and the daily task profiles.

Idempotence. The sink may see any record more than once (a Flink restart re-emits, the sink re-reads
what it had not committed). A (run, minute) / (service, minute) / (pod, ts) row is written once and the
first write wins: the profile job fires each window exactly once, so a later record for a stored minute
is a replay with the same values - or, just after a Flink restore (watermarks are not checkpointed), a
window re-opened by a > 2 min late sample, whose partial figures must not replace the real minute.
Records naming an unknown job, run or service, or missing a field, are skipped and counted: the sink
never stops on a bad record.

The daily batch (`task_profiles_compute`) runs over the DATABASE, not a Flink batch job over archived
topics: the per-minute rows the sink writes already are the archive (the broker here keeps topics in
memory only, so there is no archived stream to re-read), and a 1 GiB Flink job for a GROUP BY over a few
thousand run summaries is waste. Runs are summarized when they end (`runs_ended_summarise`, on the
scheduler's `runs_ended`) and again whenever late minutes of an ended run arrive.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

import psycopg
from django.db import connection, models, transaction
from django.utils import timezone

from colocation.models import InferenceService
from profiling import selectors
from profiling.models import JobMinute, LateSample, RunSummary, ServiceMinute, TaskProfile
from profiling.policy.aggregate import combine_runs, mean
from scheduler.models import JobRun, TrainingJob
from streaming import records as r

log = logging.getLogger(__name__)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
JOB_MINUTE_VALUES = ("samples", *selectors.STAT_FIELDS, "req_gpus", "req_cpu_cores", "req_mem_bytes")
SERVICE_MINUTE_VALUES = ("samples", "replicas", "gpu_util_mean", "sm_active_mean", "cpu_util_mean", "qps",
                         "errors_per_s", "latency_mean_ms", "latency_p99_ms")
LAST_RUNS = 3


@dataclass
class RecordCounts:
    """What one call did with its records."""

    created: int = 0
    unchanged: int = 0  # already stored: a replay, or the same window emitted again
    skipped: int = 0  # unknown job/run/service, or a record missing a required field

    def __add__(self, other: RecordCounts) -> RecordCounts:
        return RecordCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def __str__(self) -> str:
        return (f"{self.created} created, {self.unchanged} unchanged, "
                f"{self.skipped} skipped")


def at_ms(ms: int) -> datetime:
    """An epoch-milliseconds time as an aware UTC datetime (exact: no float on the way)."""
    return EPOCH + timedelta(milliseconds=ms)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _first_per_key(items: Iterable[tuple[tuple, dict]]) -> dict[tuple, dict]:
    """One row per key: the first in the batch (the first write wins, see the module doc)."""
    first: dict[tuple, dict] = {}
    for key, row in items:
        first.setdefault(key, row)
    return first


def _insert_ignoring_conflicts(model: type[models.Model], rows: list[dict]) -> None:
    """Insert `rows` ({field name: value}, the same fields each) stamped `written_at` now; a row another sink
    inserted meanwhile stays (it is the first write). On PostgreSQL: ONE statement whose parameters are one
    array per column, bound server-side in binary (%b) and unnested by the server. bulk_create had Django
    prepare and psycopg quote each of the ~20 values of every row: 7x the CPU, most of the sink's."""
    if not rows:
        return
    written_at = timezone.now()
    fields = [model._meta.get_field(name) for name in [*rows[0], "written_at"]]
    values = [[row[f.name] for row in rows] for f in fields[:-1]] + [[written_at] * len(rows)]
    if connection.vendor != "postgresql":  # the zero-setup SQLite demo
        model.objects.bulk_create([model(**{f.attname: column[i] for f, column in zip(fields, values)})
                                   for i in range(len(rows))], batch_size=500, ignore_conflicts=True)
        return
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    arrays = ", ".join(f"%b::{f.db_type(connection)}[]" for f in fields)
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:  # Django's cursors bind client-side, as text
        cursor.execute(f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) "
                       f"SELECT * FROM unnest({arrays}) ON CONFLICT DO NOTHING", values)


def _insert_new(model: type[models.Model], *, owner: str, rows: dict[tuple, dict]) -> tuple[RecordCounts, set[int]]:
    """Write the `rows` ({(owner id, minute): field values}) that are not stored yet as `model` rows.
    Returns the counts and the owner ids that got a new row."""
    counts, touched = RecordCounts(), set()
    if not rows:
        return counts, touched
    owner_ids, minutes = {k[0] for k in rows}, {k[1] for k in rows}
    existing = set(model.objects.filter(**{f"{owner}_id__in": owner_ids, "minute__in": minutes})
                   .values_list(f"{owner}_id", "minute"))
    new = [{owner: key[0], "minute": key[1], **row} for key, row in rows.items() if key not in existing]
    _insert_ignoring_conflicts(model, new)
    counts.created, counts.unchanged = len(new), len(rows) - len(new)
    return counts, {key[0] for key in rows if key not in existing}


@transaction.atomic
def job_minutes_record(*, records: Iterable[r.JobMinute], now: datetime | None = None) -> RecordCounts:
    """Store the per-minute profiles of training runs; refresh the summary of every ended run they add to."""
    now = now or timezone.now()
    records = list(records)
    valid = [rec for rec in records if all(_is_int(v) for v in (rec.job, rec.run, rec.window_start,
                                                                 rec.samples, rec.emitted_at)) and rec.samples >= 0]
    # (job, attempt) -> (run id, ended?): plain tuples, the sink's hot path has no use for model instances.
    runs = {(job, attempt): (pk, ended_at is not None) for pk, job, attempt, ended_at in
            JobRun.objects.filter(job_id__in={rec.job for rec in valid}, attempt__in={rec.run for rec in valid})
            .values_list("pk", "job_id", "attempt", "ended_at")}
    known = [(runs[(rec.job, rec.run)][0], rec) for rec in valid if (rec.job, rec.run) in runs]
    rows = _first_per_key(
        ((run, at_ms(rec.window_start)),
         {"samples": rec.samples, "emitted_at": at_ms(rec.emitted_at), "estimated": bool(rec.estimated),
          **{name: _number(getattr(rec, name)) for name in JOB_MINUTE_VALUES if name != "samples"}})
        for run, rec in known
    )
    counts, touched = _insert_new(JobMinute, owner="run", rows=rows)
    counts.skipped = len(records) - len(known)
    counts.unchanged += len(known) - len(rows)  # duplicates within the batch
    ended = [pk for pk, has_ended in runs.values() if has_ended and pk in touched]
    if ended:  # late minutes refine the summary of a run that has already ended
        run_summaries_compute(runs=JobRun.objects.filter(pk__in=ended), now=now)
    return counts


@transaction.atomic
def service_minutes_record(*, records: Iterable[r.ServiceMinute]) -> RecordCounts:
    """Store the per-minute load of inference services."""
    records = list(records)
    valid = [rec for rec in records
             if isinstance(rec.service, str) and all(_is_int(v) for v in (rec.window_start, rec.samples,
                                                                           rec.replicas, rec.emitted_at))
             and rec.samples >= 0 and rec.replicas >= 0]
    services = dict(InferenceService.objects.filter(name__in={rec.service for rec in valid})
                    .values_list("name", "pk"))
    known = [rec for rec in valid if rec.service in services]
    rows = _first_per_key(
        ((services[rec.service], at_ms(rec.window_start)),
         {"samples": rec.samples, "replicas": rec.replicas, "emitted_at": at_ms(rec.emitted_at),
          "estimated": bool(rec.estimated), **{name: _number(getattr(rec, name)) for name in SERVICE_MINUTE_VALUES[2:]}})
        for rec in known
    )
    counts, _ = _insert_new(ServiceMinute, owner="service", rows=rows)
    counts.skipped = len(records) - len(known)
    counts.unchanged += len(known) - len(rows)
    return counts


@transaction.atomic
def late_samples_record(*, records: Iterable[r.LateSample]) -> RecordCounts:
    """Keep each dropped sample once (by pod and time); a replay changes nothing."""
    records = list(records)
    rows = {}
    for rec in records:
        if isinstance(rec.pod, str) and rec.pod and _is_int(rec.ts) and _is_int(rec.emitted_at):
            rows.setdefault((rec.pod, at_ms(rec.ts)), rec)
    existing = set(LateSample.objects.filter(pod__in={k[0] for k in rows}, ts__in={k[1] for k in rows})
                   .values_list("pod", "ts"))
    new = [
        LateSample(ts=ts, pod=pod, job_id=rec.job if _is_int(rec.job) else None,
                   run_attempt=rec.run if _is_int(rec.run) and rec.run >= 0 else None,
                   service=rec.service if isinstance(rec.service, str) else "", emitted_at=at_ms(rec.emitted_at))
        for (pod, ts), rec in rows.items() if (pod, ts) not in existing
    ]
    LateSample.objects.bulk_create(new, batch_size=500, ignore_conflicts=True)
    return RecordCounts(created=len(new), unchanged=len(rows) - len(new), skipped=len(records) - len(rows))


# --- summaries and profiles ----------------------------------------------------------------------------


def run_summary_compute(*, run: JobRun, now: datetime | None = None) -> RunSummary | None:
    """Summarize one run from its minutes and its times; None while it has not ended.
    Called when late minutes of an ended run arrive (the scheduler's run ends come through runs_ended_summarise)."""
    summaries = run_summaries_compute(runs=[run], now=now)
    return summaries[0] if summaries else None


def runs_ended_summarise(sender, *, runs: list[JobRun], now: datetime | None, **_) -> None:
    """scheduler.signals.runs_ended: the runs' profiles join their tasks' history at once."""
    run_summaries_compute(runs=runs, now=now)


@transaction.atomic
def run_summaries_compute(*, runs: Iterable[JobRun], now: datetime | None = None) -> list[RunSummary]:
    """Summarize the ended ones of `runs` (create or replace their RunSummary)."""
    now = now or timezone.now()
    runs = [run for run in runs if run.ended_at is not None]
    if not runs:
        return []
    minutes: dict[int, list[dict]] = {}
    for row in JobMinute.objects.filter(run__in=runs).values("run_id", "samples", *selectors.STAT_FIELDS):
        minutes.setdefault(row["run_id"], []).append(row)
    submitted = dict(TrainingJob.objects.filter(pk__in={run.job_id for run in runs})
                     .values_list("pk", "submitted_at"))
    ends = selectors.previous_ends(job_ids=submitted)
    summaries = []
    for run in runs:
        figures = selectors.run_figures(run=run, minutes=minutes.get(run.pk, []), submitted_at=submitted[run.job_id],
                                        previous_end=ends.get((run.job_id, run.attempt - 1)), now=now)
        stats = {f"{res}_{kind}": getattr(stat, kind)
                 for res, stat in figures.usage.stats.items() for kind in ("mean", "peak")}
        summaries.append(RunSummary(run=run, samples=figures.usage.samples, minutes=figures.usage.minutes, **stats,
                                    run_s=figures.run_s, wait_s=figures.wait_s, outcome=run.outcome,
                                    computed_at=now))
    RunSummary.objects.bulk_create(
        summaries, update_conflicts=True, unique_fields=["run"],
        update_fields=["samples", "minutes", *selectors.STAT_FIELDS, "run_s", "wait_s", "outcome", "computed_at"],
    )
    return summaries


def _window(usages: list) -> dict:
    return {"runs": len(usages), **combine_runs(usages).as_dict()}


@transaction.atomic
def task_profiles_compute(*, now: datetime | None = None) -> int:
    """The daily batch: every task's profile over its run summaries (last 3 profiled runs and all runs:
    mean of the run means, max of the peaks; mean run time of succeeded runs; mean wait of all runs).
    Ended runs without a summary (e.g. cancelled through the API) are summarized first.
    Returns the number of task profiles written; profiles of tasks without runs any more are deleted."""
    now = now or timezone.now()
    missing = list(JobRun.objects.filter(ended_at__isnull=False, summary__isnull=True))
    for start in range(0, len(missing), 500):
        run_summaries_compute(runs=missing[start:start + 500], now=now)
    tasks: dict[str, list[dict]] = {}
    rows = (RunSummary.objects.order_by("run__ended_at", "run_id")
            .values("run__job__task_key", "outcome", "run_s", "wait_s", "samples", "minutes", *selectors.STAT_FIELDS))
    for row in rows.iterator(chunk_size=2000):
        tasks.setdefault(row["run__job__task_key"], []).append(row)
    profiles = []
    for task_key, summaries in tasks.items():
        usages = [selectors.usage_of(row) for row in summaries if row["samples"] > 0]
        profiles.append(TaskProfile(
            task_key=task_key, runs=len(summaries), last_3=_window(usages[-LAST_RUNS:]), all_runs=_window(usages),
            mean_run_s=mean(row["run_s"] for row in summaries if row["outcome"] == JobRun.Outcome.SUCCEEDED),
            mean_wait_s=mean(row["wait_s"] for row in summaries), computed_at=now,
        ))
    TaskProfile.objects.bulk_create(
        profiles, batch_size=500, update_conflicts=True, unique_fields=["task_key"],
        update_fields=["runs", "last_3", "all_runs", "mean_run_s", "mean_wait_s", "computed_at"],
    )
    TaskProfile.objects.exclude(task_key__in=tasks.keys()).delete()
    log.info("task profiles: %d tasks from %d runs (%d ended runs summarized late)",
             len(profiles), sum(map(len, tasks.values())), len(missing))
    return len(profiles)
