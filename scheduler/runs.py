"""A job's runs by name: the pods of an attempt (one per gang worker), a gang's headless Service, the job a
pod belongs to, and the workers still running."""


from scheduler.models import JobRun, TrainingJob


# A worker's state in JobRun.workers: running, then succeeded, or the run's outcome (failed, preempted, killed,
# ...) when its own end or the whole run's ended it, or "stopped" when another worker's end did.
WORKER_RUNNING, WORKER_SUCCEEDED, WORKER_STOPPED = "running", "succeeded", "stopped"


def run_pod_name(job_id: int, attempt: int, rank: int | None = None) -> str:
    """A run's pod: one per attempt, and for a gang one per worker rank, job-<id>-<attempt>-<rank> (the simulated
    cluster names one per job: simulated_training.simulated_pod_name)."""
    return f"job-{job_id}-{attempt}" if rank is None else f"job-{job_id}-{attempt}-{rank}"


def run_service_name(job_id: int, attempt: int) -> str:
    """A gang run's headless Service (a DNS label starting with a letter): its workers are <pod>.<service>."""
    return f"gang-{job_id}-{attempt}"


def run_service(run: JobRun) -> str | None:
    """The headless Service of a gang's run; None for a one-worker run (it has none)."""
    return run_service_name(run.job_id, run.attempt) if run.workers else None


def job_of_pod(name: str) -> int | None:
    """The job of a pod named by run_pod_name; None for any other pod."""
    parts = name.split("-")
    if len(parts) not in (3, 4) or parts[0] != "job" or not parts[1].isdigit():
        return None
    return int(parts[1]) if len(parts) == 3 or parts[3].isdigit() else None


def open_run(job: TrainingJob) -> JobRun | None:
    return job.runs.filter(ended_at__isnull=True).order_by("-attempt").first()


def run_live_pods(run: JobRun) -> list[str]:
    """The pods of a run that should be on the cluster: every worker still running (rank 0 first)."""
    if not run.workers:
        return [run.pod] if run.pod else []
    return [w["pod"] for w in run.workers if w["state"] == WORKER_RUNNING]


def run_worker(run: JobRun, pod: str) -> dict | None:
    """The worker of a gang's run that `pod` is; None for a one-worker run or another pod."""
    return next((w for w in run.workers if w["pod"] == pod), None)
