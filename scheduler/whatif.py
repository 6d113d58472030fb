"""What-if runs requested from the console — trace replays and co-location simulations: services to request
one (validated before anything is kept) and to execute it (the body of the Celery task), over the same code as
`manage.py replay` and `manage.py colocate_sim`."""
from __future__ import annotations

import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from cluster.simulated.alibaba import TraceError, read_pods
from colocation.sim import SimConfig
from colocation.sim.report import simulate
from scheduler.errors import ApplicationError
from scheduler.models import ReplayRun
from scheduler.policy import PROFILES
from scheduler.replay import Options, load, replay
from scheduler.replay.report import summary_json

ALIBABA = "alibaba-gpu-2023"
PLOTS = (".png",)
MAX_DAYS = 7


def pod_lists() -> list[str]:
    """The Alibaba pod lists in the traces folder, by name (default, gpuspec10, ...)."""
    folder = Path(settings.TRACES_DIR) / ALIBABA
    return sorted(p.stem.removeprefix("openb_pod_list_") for p in folder.glob("openb_pod_list_*.csv"))


def _uploads() -> Path:
    return Path(settings.RUN_DIR) / "replays" / "uploads"


def replay_request(*, actor, policies: list[str], load_factor: float, inflate: bool, trace: str = "",
                   upload=None) -> ReplayRun:
    """Keep and enqueue a replay of a named pod list or of an uploaded CSV (same schema, checked line by line
    before anything is kept)."""
    if not actor.is_staff:
        raise PermissionDenied("only platform operators start replays")
    errors: dict[str, list[str]] = {}
    if not policies or set(policies) - set(PROFILES):
        errors["policies"] = [f"choose one or more of {', '.join(sorted(PROFILES))}"]
    if not load_factor > 0:
        errors["load_factor"] = [f"must be above 0, got {load_factor}"]
    if bool(trace) == bool(upload):
        errors["trace"] = ["choose a trace or upload a pod list (one of them)"]
    elif trace and trace not in pod_lists():
        errors["trace"] = [f"no pod list named {trace!r} in {settings.TRACES_DIR / ALIBABA}"]
    if errors:
        raise ApplicationError("the replay was not started", fields=errors)
    path = Path(settings.TRACES_DIR) / ALIBABA / f"openb_pod_list_{trace}.csv" if trace else _keep(upload)
    return _enqueue(ReplayRun.objects.create(requested_by=actor, trace=trace or upload.name, pods_path=str(path),
                                             policies=policies, load_factor=load_factor, inflate=inflate))


def colocation_request(*, actor, days: int, small: bool) -> ReplayRun:
    """Keep and enqueue a co-location simulation: lending against a static split over `days` (1-7) of the
    GenAI and World Cup traffic traces."""
    if not actor.is_staff:
        raise PermissionDenied("only platform operators start simulations")
    if not 1 <= days <= MAX_DAYS:
        raise ApplicationError("the simulation was not started", fields={"days": [f"1 to {MAX_DAYS}, got {days}"]})
    return _enqueue(ReplayRun.objects.create(kind=ReplayRun.Kind.COLOCATION, requested_by=actor, days=days,
                                             small=small, trace="small cluster" if small else "trace cluster"))


def _enqueue(run: ReplayRun) -> ReplayRun:
    from scheduler.tasks import replay_run  # the task calls back into this module

    transaction.on_commit(lambda: replay_run.delay(run.pk))
    return run


def _keep(upload) -> Path:
    """Save the uploaded pod list and read it through: a bad row is an error naming its line; nothing kept."""
    _uploads().mkdir(parents=True, exist_ok=True)
    path = _uploads() / f"{uuid.uuid4().hex}.csv"
    with path.open("wb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    try:
        read_pods(path)
    except (TraceError, UnicodeDecodeError) as error:
        path.unlink(missing_ok=True)
        problem = f"line {error.line}: {error.problem}" if isinstance(error, TraceError) else "not UTF-8 text"
        raise ApplicationError("the uploaded pod list is not valid", fields={"upload": [problem]}) from None
    return path


def replay_execute(*, run_id: int) -> ReplayRun:
    """Run a queued replay (policies one after the other, progress saved about once a second) and keep its
    report; any failure is kept on the run with its message."""
    run = ReplayRun.objects.get(pk=run_id)
    if run.status != ReplayRun.Status.QUEUED:
        return run
    run.status = ReplayRun.Status.RUNNING
    run.save(update_fields=["status"])
    out = Path(settings.RUN_DIR) / "replays" / str(run.pk)
    try:
        figures = _simulate(run, out) if run.kind == ReplayRun.Kind.COLOCATION else _replay(run, out)
    except (TraceError, OSError, ValueError) as error:
        run.status, run.error = ReplayRun.Status.FAILED, str(error)
    else:
        run.status, run.figures, run.report_dir = ReplayRun.Status.DONE, figures, str(out)
    run.finished_at = timezone.now()
    run.save()
    return run


def _replay(run: ReplayRun, out: Path) -> dict:
    options = Options(load_factor=run.load_factor, inflate=run.inflate)
    setup = load(Path(settings.TRACES_DIR) / ALIBABA / "openb_node_list_all_node.csv", run.pods_path,
                 Path(settings.TRACES_DIR) / "helios" / "Earth_gpu_number.csv", options)
    outcome = replay(setup, run.policies, out, f"console replay {run.pk}", workers=1, bar=_progress(run))
    return summary_json(outcome.runs)


def _simulate(run: ReplayRun, out: Path) -> dict:
    cfg = SimConfig(Path(settings.TRACES_DIR), days=run.days)
    cfg = cfg.small() if run.small else cfg
    progress = _progress(run)

    def bar(label: str, total: int):
        update, minutes = progress(label, total), [0]

        def tick(_minute) -> None:
            minutes[0] += 1
            update(minutes[0])
        return tick
    figures, _wall = simulate(cfg, out, f"console co-location simulation {run.pk}", bar)
    return figures


def _progress(run: ReplayRun):
    last = [0.0]

    def bar(policy: str, total: float):
        def update(value: float) -> None:
            run.progress[policy] = [round(value), round(total)]
            if time.monotonic() - last[0] > 1 or value >= total:
                last[0] = time.monotonic()
                ReplayRun.objects.filter(pk=run.pk).update(progress=run.progress)
        return update
    return bar


def report_files(run: ReplayRun) -> list[str]:
    """The plots of a finished run's report, by file name."""
    folder = Path(run.report_dir) if run.report_dir else None
    return sorted(p.name for p in folder.iterdir() if p.suffix in PLOTS) if folder and folder.is_dir() else []
