"""Builders for profile records and job runs, shared by the profiling tests."""
from __future__ import annotations

from datetime import timedelta

from profiling import services
from scheduler.models import JobRun, JobStatus, TrainingJob
from streaming import records

T0_MS = 1_700_000_040_000  # a minute boundary (2023-11-14 22:14 UTC)
MINUTE_MS = 60_000


def at(minute: float):
    """The aware datetime `minute` minutes after T0."""
    return services.at_ms(T0_MS) + timedelta(minutes=minute)


def job_minute(job: int, run: int, index: int, samples: int = 12, *, gpu=(0.5, 0.6), gpu_mem=(0.3, 0.4),
               cpu=(0.5, 0.6), mem=(0.4, 0.5), cores=(1.0, 1.5), emitted_at: int | None = None) -> records.JobMinute:
    start = T0_MS + index * MINUTE_MS
    return records.JobMinute(
        job=job, run=run, window_start=start, window_end=start + MINUTE_MS, samples=samples,
        gpu_util_mean=gpu[0], gpu_util_peak=gpu[1], gpu_mem_util_mean=gpu_mem[0], gpu_mem_util_peak=gpu_mem[1],
        cpu_util_mean=cpu[0], cpu_util_peak=cpu[1], mem_util_mean=mem[0], mem_util_peak=mem[1],
        cpu_cores_mean=cores[0], cpu_cores_peak=cores[1], req_gpus=1.0, req_cpu_cores=4.0,
        req_mem_bytes=16 * 2**30, emitted_at=emitted_at if emitted_at is not None else start + 2 * MINUTE_MS,
    )


def service_minute(service: str, index: int, *, qps: float = 120.0, replicas: int = 2,
                   emitted_at: int | None = None) -> records.ServiceMinute:
    start = T0_MS + index * MINUTE_MS
    return records.ServiceMinute(
        service=service, window_start=start, window_end=start + MINUTE_MS, samples=24, replicas=replicas,
        gpu_util_mean=0.55, cpu_util_mean=0.3, qps=qps, errors_per_s=0.1, latency_mean_ms=20.0,
        latency_p99_ms=80.0, emitted_at=emitted_at if emitted_at is not None else start + 2 * MINUTE_MS,
    )


def late_sample(pod: str, index: int, *, job: int | None = None, run: int | None = None,
                service: str | None = None) -> records.LateSample:
    ts = T0_MS + index * 5_000
    return records.LateSample(ts=ts, pod=pod, job=job, run=run, service=service, emitted_at=ts + 4 * MINUTE_MS)


def start_run(job: TrainingJob, *, attempt: int = 1, minute: float = 0) -> JobRun:
    """A run of `job` started `minute` minutes after T0 (the job submitted at T0 - 5 min unless set before)."""
    if attempt == 1:
        TrainingJob.objects.filter(pk=job.pk).update(submitted_at=at(-5), status=JobStatus.RUNNING)
    return JobRun.objects.create(job=job, attempt=attempt, pod=f"job-{job.pk}-{attempt}", started_at=at(minute))


def end_run(run: JobRun, *, minute: float, outcome: str = JobRun.Outcome.SUCCEEDED) -> JobRun:
    """End `run` as the scheduler does: set its end and outcome, then summarize it."""
    run.ended_at, run.outcome = at(minute), outcome
    run.save(update_fields=["ended_at", "outcome"])
    services.run_summary_compute(run=run)
    return run


def past_jobs(world, *profiles: dict, run_minutes: int = 10, **submit) -> list[TrainingJob]:
    """One finished job of the same task per profile dict (job_minute keyword arguments), one after the
    other: each submitted, run once for `run_minutes` minutes of records, succeeded and summarized."""
    jobs = []
    for n, profile in enumerate(profiles):
        job = world.submit(**submit)
        first = n * (run_minutes + 10)
        TrainingJob.objects.filter(pk=job.pk).update(submitted_at=at(first - 5))
        run = JobRun.objects.create(job=job, attempt=1, pod=f"job-{job.pk}-1", started_at=at(first))
        services.job_minutes_record(records=[job_minute(job.pk, 1, first + i, **profile)
                                             for i in range(run_minutes)])
        end_run(run, minute=first + run_minutes)
        TrainingJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, finished_at=at(first + run_minutes))
        jobs.append(job)
    return jobs
