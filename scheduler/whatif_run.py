"""The body of the what-if Celery task: run a queued trace replay or co-location simulation over the same code as
`manage.py replay` and `manage.py colocate_sim`, save its progress, keep its report (scheduler/whatif.py queues it)."""
from __future__ import annotations

import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from cluster.simulated.alibaba import TraceError
from colocation.sim import SimConfig
from colocation.sim.report import simulate
from scheduler.models import ReplayRun
from scheduler.replay import Options, load, replay
from scheduler.replay.report import summary_json

ALIBABA = "alibaba-gpu-2023"


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
