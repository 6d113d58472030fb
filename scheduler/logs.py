"""Job logs, in one place (docs/concepts/job-logs.md): a run's worker log read live from the cluster while its pod exists, the
last part of each worker's log archived when its run ends, archives deleted after their retention.

Archive: `jobs/<job>/run-<attempt>/worker-<rank>.log` in the `logs` storage (STORAGES["logs"]: the filesystem under
TIDAL_RUN_DIR/logs by default, any Django storage backend by configuration), the last TIDAL_LOG_ARCHIVE_BYTES of the
log, cut at a line start. The loops archive a pod's log right before they evict it and when they record its end (a
pod that finished or failed is still readable then), so every way a run ends leaves its log: success, failure,
preemption, a take-back, a cancellation (its orphan pod evicted), a gang stopped for another worker's end. A pod
already gone (lost, deleted by someone else) has nothing left to read: a warning, and nothing archived. Reading or
saving a log never stops a loop: failures are logged and the loop acts on. Around an eviction the log is read
before it and its last lines again after it (where the cluster still shows them: the SIGTERM lines).

Reads: the API's `GET /api/jobs/{id}/logs/` and the console's log panel. A run whose pod can be read is read live
(through a backend made for reading: no cluster lock, no leader lease, nothing written); otherwise, its archive.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from cluster.backend import BackendError, BackendUnavailable
from colocation.live_backend import read_backend
from core.errors import ApplicationError
from scheduler.models import JobRun, TrainingJob

log = logging.getLogger(__name__)
ROOT = "jobs"
LINE_BYTES = 80  # a log line's size, at least, on average: how many lines to ask for to fill the archive
AFTER_EVICTION_LINES = 50  # what a pod can have written between the read before its eviction and the one after
LIVE, ARCHIVE, NONE = "live", "archive", "none"


class LogNotFound(ApplicationError):
    """No such run (or worker's log) of a job the user may see: a 404 with the reason."""

    status = 404


# --- names ---------------------------------------------------------------------------------------------------


def pod_address(pod: str) -> tuple[int, int, int] | None:
    """(job, attempt, rank) of a run's pod, named job-<id>-<attempt>[-<rank>] (scheduler.runs.run_pod_name; rank
    0 for a one-worker run); None for any other pod."""
    parts = pod.split("-")
    if len(parts) not in (3, 4) or parts[0] != "job" or not all(p.isdigit() for p in parts[1:]):
        return None
    return int(parts[1]), int(parts[2]), int(parts[3]) if len(parts) == 4 else 0


def archive_path(job_id: int, attempt: int, rank: int) -> str:
    return f"{ROOT}/{job_id}/run-{attempt}/worker-{rank}.log"


def log_storage() -> Storage:
    return storages["logs"]


def keep_tail(text: str, max_bytes: int) -> str:
    """The last `max_bytes` of `text` (UTF-8), starting at a line start."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    cut = data[len(data) - max_bytes:]
    newline = cut.find(b"\n")
    return cut[newline + 1:].decode("utf-8", errors="replace") if newline >= 0 else ""


def _last_lines(text: str, tail: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[len(lines) - tail:]) if tail else ""


# --- archiving (the loops) ----------------------------------------------------------------------------------


def pod_evict(*, backend, pod: str, reason: str) -> None:
    """Evict a pod (as backend.evict, raising what it raises) with its log archived: read before the eviction, while
    it surely can be, and its last lines again after it, where the cluster still shows them (the simulated cluster's
    SIGTERM lines; a Kubernetes pod in its termination grace), appended to what was read."""
    address = pod_address(pod)
    before = _read(backend, pod, max(100, settings.TIDAL_LOG_ARCHIVE_BYTES // LINE_BYTES)) if address else None
    backend.evict(pod, reason)
    if address is None:
        return
    after = _read(backend, pod, AFTER_EVICTION_LINES, quiet=True)
    text = _joined(before, after)
    if text is not None:
        _archive(pod, address, text)


def pod_logs_archive(*, backend, pods: Iterable[str]) -> int:
    """Archive the log of each of Tidal's run pods in `pods` (others are skipped) when its end is recorded (a pod
    that ended is readable until it is cleaned up). Never raises for a log that cannot be read or saved: that is
    logged and the loop goes on. How many were archived."""
    archived = 0
    for pod in pods:
        address = pod_address(pod)
        text = _read(backend, pod, max(100, settings.TIDAL_LOG_ARCHIVE_BYTES // LINE_BYTES)) if address else None
        if text is not None and _archive(pod, address, text):
            archived += 1
    return archived


def _read(backend, pod: str, tail: int, quiet: bool = False) -> str | None:
    try:
        return backend.pod_logs(pod, tail=tail)
    except (BackendError, BackendUnavailable) as error:
        log.log(logging.INFO if quiet else logging.WARNING, "log of pod %s not archived: it could not be read (%s)",
                pod, error)
        return None


def _joined(before: str | None, after: str | None) -> str | None:
    """`before`, then the lines of `after` that came after its last line (all of them if none is shared)."""
    if before is None or after is None:
        return before if after is None else after
    last = before.rstrip("\n").rpartition("\n")[2]
    lines = after.splitlines(keepends=True)
    shared = max((i for i, line in enumerate(lines) if line.rstrip("\n") == last), default=None)
    return before + "".join(lines[shared + 1:] if shared is not None else lines)


def _archive(pod: str, address: tuple[int, int, int], text: str) -> bool:
    try:
        _save(archive_path(*address), keep_tail(text, settings.TIDAL_LOG_ARCHIVE_BYTES))
    except OSError as error:  # a full disk, an unreachable bucket (storages raise OSError subclasses)
        log.warning("log of pod %s not archived: it could not be saved (%s)", pod, error)
        return False
    return True


def _save(path: str, text: str) -> None:
    storage = log_storage()
    if storage.exists(path):  # a second read (the same pod's end recorded again) replaces the first
        storage.delete(path)
    storage.save(path, ContentFile(text.encode()))


def logs_expire(*, now: datetime, days: int) -> int:
    """Delete archives older than `days` days (their file's modification time); empty folders go with them on the
    filesystem. How many files were deleted."""
    storage, cutoff, deleted = log_storage(), now - timedelta(days=days), 0
    try:
        jobs, _ = storage.listdir(ROOT)
    except FileNotFoundError:
        return 0
    for job in jobs:
        runs, _ = storage.listdir(f"{ROOT}/{job}")
        for run in runs:
            folder = f"{ROOT}/{job}/{run}"
            _, files = storage.listdir(folder)
            for name in files:
                if storage.get_modified_time(f"{folder}/{name}") < cutoff:
                    storage.delete(f"{folder}/{name}")
                    deleted += 1
            _drop_if_empty(storage, folder)
        _drop_if_empty(storage, f"{ROOT}/{job}")
    return deleted


def _drop_if_empty(storage: Storage, folder: str) -> None:
    """Object stores have no folders; on the filesystem an emptied one is removed."""
    try:
        local = storage.path(folder)
    except NotImplementedError:
        return
    dirs, files = storage.listdir(folder)
    if not dirs and not files:
        try:
            os.rmdir(local)
        except OSError:  # something was written into it meanwhile
            pass


# --- reading (the API, the console) -------------------------------------------------------------------------


@dataclass(frozen=True)
class LogTarget:
    """Which log: a run of a job and one of its workers."""

    job: TrainingJob
    run: JobRun
    worker: int
    workers: int

    @property
    def pod(self) -> str:
        return self.run.pods[self.worker]

    @property
    def path(self) -> str:
        return archive_path(self.job.pk, self.run.attempt, self.worker)

    @property
    def filename(self) -> str:
        return f"job-{self.job.pk}-run-{self.run.attempt}-worker-{self.worker}.log"


@dataclass(frozen=True)
class LogRead:
    text: str
    source: str  # LIVE | ARCHIVE | NONE


def log_target(*, job: TrainingJob, attempt: int | None = None, worker: int = 0) -> LogTarget:
    """The run (`attempt`, default the newest) and worker (rank, default 0) of `job` whose log is asked for;
    LogNotFound when the job never ran or has no such run, ApplicationError naming `worker` when out of range."""
    runs = sorted(job.runs.all(), key=lambda r: r.attempt)  # prefetched by the API's queryset
    if not runs:
        raise LogNotFound(f"job {job.pk} has no run yet: its log starts when it runs")
    if attempt is None:
        run = runs[-1]
    else:
        run = next((r for r in runs if r.attempt == attempt), None)
        if run is None:
            have = f"run {runs[0].attempt}" if len(runs) == 1 else f"runs {runs[0].attempt}-{runs[-1].attempt}"
            raise LogNotFound(f"job {job.pk} has no run {attempt} (it has {have})", fields={"run": [
                f"job {job.pk} has no run {attempt}"]})
    workers = len(run.pods) or 1
    if not 0 <= worker < workers:
        which = "worker 0" if workers == 1 else f"workers 0-{workers - 1}"
        raise ApplicationError.for_field("worker", f"run {run.attempt} of job {job.pk} has {which}; no worker {worker}")
    if not run.pods:
        raise LogNotFound(f"run {run.attempt} of job {job.pk} was never given a pod")
    return LogTarget(job, run, worker, workers)


def log_read(*, target: LogTarget, tail: int | None = None) -> LogRead:
    """The worker's log: live while its pod can be read (an open run's, or one that ended a moment ago), else its
    archive; at most the archive's size, or the last `tail` lines."""
    budget = settings.TIDAL_LOG_ARCHIVE_BYTES
    lines = tail if tail is not None else max(100, budget // LINE_BYTES)
    read = _live(target, lines) if target.run.ended_at is None else None
    read = read or _archived(target) or (_live(target, lines) if target.run.ended_at is not None else None)
    if read is None:
        if target.run.ended_at is not None:
            raise LogNotFound(f"no log is kept of run {target.run.attempt} of job {target.job.pk} (worker "
                              f"{target.worker}): it was not archived, or its archive is older than "
                              f"{settings.TIDAL_LOG_RETENTION_DAYS} days")
        return LogRead("", NONE)  # its pod is starting: nothing written yet
    text = keep_tail(read.text, budget)
    return LogRead(_last_lines(text, tail) if tail is not None else text, read.source)


def _live(target: LogTarget, tail: int) -> LogRead | None:
    try:
        return LogRead(read_backend().pod_logs(target.pod, tail=tail), LIVE)
    except (BackendError, BackendUnavailable) as error:
        log.info("log of pod %s not read live: %s", target.pod, error)
        return None


def _archived(target: LogTarget) -> LogRead | None:
    storage = log_storage()
    try:
        with storage.open(target.path, "rb") as archived:
            return LogRead(archived.read().decode("utf-8", errors="replace"), ARCHIVE)
    except (FileNotFoundError, OSError):
        return None


def log_follow(*, target: LogTarget, tail: int | None = None, poll_s: float = 1.0,
               max_s: float | None = None) -> Iterator[str]:
    """The worker's log line by line (each ending in a newline), then each new line as it is written, until its pod
    ends, its run ends, or `max_s` (TIDAL_LOG_FOLLOW_MAX_S) passes: bounded on the server whatever the client does.
    A pod not started yet is waited for; a run already over gives its log once."""
    deadline = time.monotonic() + (settings.TIDAL_LOG_FOLLOW_MAX_S if max_s is None else max_s)
    run = target.run
    while run.ended_at is None and time.monotonic() < deadline:
        try:
            lines = read_backend().follow_pod_logs(target.pod, tail=tail, poll_s=poll_s)
            first = next(lines, None)  # the pod not found raises here, before anything is sent
        except (BackendError, BackendUnavailable):
            time.sleep(poll_s)  # not bound yet (or the cluster did not answer): look again
            run = JobRun.objects.get(pk=run.pk)
            continue
        if first is not None:
            yield first + "\n"
        for line in lines:
            yield line + "\n"
            if time.monotonic() >= deadline:
                lines.close()
                break
        return
    if run.ended_at is not None:
        try:
            yield from log_read(target=LogTarget(target.job, run, target.worker, target.workers),
                                tail=tail).text.splitlines(keepends=True)
        except LogNotFound as missing:
            yield f"({missing.message})\n"
