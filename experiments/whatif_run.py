"""The body of the what-if Celery task: run a queued trace replay, co-location simulation or FGD experiment over the
same code as `manage.py replay`, `colocate_sim` and `fragmentation`, save its progress, keep its report
(experiments/whatif.py queues it)."""
from __future__ import annotations

import time
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from cluster.simulated.alibaba import TraceError
from experiments.colocation_sim import SimConfig
from experiments.colocation_sim.report import simulate
from experiments.fragmentation import experiment as fragmentation
from experiments.fragmentation.report import write_report
from experiments.replay import Options, load, replay
from experiments.replay.report import summary_json
from experiments.traces import ALIBABA
from scheduler import interference_tables
from scheduler.models import ReplayRun



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
        figures = {ReplayRun.Kind.COLOCATION: _simulate, ReplayRun.Kind.FRAGMENTATION: _fragmentation}.get(
            run.kind, _replay)(run, out)
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
                 Path(settings.TRACES_DIR) / "helios" / "Earth_gpu_number.csv", options, tree=run.tree)
    outcome = replay(setup, run.policies, out, f"console replay {run.pk}", workers=1, bar=_progress(run))
    return summary_json(outcome.runs)


def _fragmentation(run: ReplayRun, out: Path) -> dict:
    """Seeds 42-51, one run after the other in this worker; figures: unallocated GPU % at arrived = 100 % and the
    fragmentation at 60/80/90 % per policy."""
    model = interference_tables.cached(str(Path(settings.TRACES_DIR) / interference_tables.TRACE))
    setup = fragmentation.load(Path(settings.TRACES_DIR) / ALIBABA / "openb_node_list_gpu_node.csv", run.pods_path,
                               interference=model)
    progress = _progress(run)
    outcome = fragmentation.run(setup, run.policies, bar=lambda total: _adding(progress, "pods placed", total))
    write_report(out, outcome, f"console FGD experiment {run.pk}")
    return {name: {**f["at100"], "frag_pct": f["frag_pct"]}
            for name, f in fragmentation.summary(outcome)["policies"].items()}


def _simulate(run: ReplayRun, out: Path) -> dict:
    cfg = SimConfig(Path(settings.TRACES_DIR), days=run.days)
    cfg = cfg.small() if run.small else cfg
    if "forecast" in run.policies:  # the same simulation, its lending forecast-driven
        cfg = cfg.with_(lending=cfg.lending.with_(forecast=True))
    progress = _progress(run)

    def bar(label: str, total: int):
        add = _adding(progress, label, total)
        return lambda _minute: add(1)
    figures, _wall = simulate(cfg, out, f"console co-location simulation {run.pk}", bar)
    return figures


def _adding(progress, label: str, total: int):
    """A callback adding n steps done (pods placed, minutes simulated) to the run's progress of `label`."""
    update, done = progress(label, total), [0]

    def add(n: int) -> None:
        done[0] += n
        update(done[0])
    return add


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
