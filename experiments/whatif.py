"""What-if runs requested from the console — trace replays, co-location simulations and the FGD placement experiment:
services to request one
(validated before anything is kept, then queued for the Celery task, whose body is experiments/whatif_run.py) and to
list a finished run's plots."""
from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction

from cluster.simulated.alibaba import TraceError, read_pods
from core.errors import ApplicationError
from experiments.fragmentation.scorers import SCORERS
from experiments.replay import TREES, VARIANTS
from experiments.tasks import replay_run
from experiments.traces import ALIBABA
from scheduler import interference_tables
from scheduler.models import ReplayRun
from scheduler.policy import PROFILES

PLOTS = (".png",)
MAX_DAYS = 7
REPLAY_POLICIES = (*PROFILES, *VARIANTS)  # the named profiles and replay's variants of tidal (tidal-fair, ...)


def pod_lists() -> list[str]:
    """The Alibaba pod lists in the traces folder, by name (default, gpuspec10, ...)."""
    folder = Path(settings.TRACES_DIR) / ALIBABA
    return sorted(p.stem.removeprefix("openb_pod_list_") for p in folder.glob("openb_pod_list_*.csv"))


def _uploads() -> Path:
    return Path(settings.RUN_DIR) / "replays" / "uploads"


def replay_request(*, actor, policies: list[str], load_factor: float, inflate: bool, trace: str = "",
                   upload=None, tree: str = "flat") -> ReplayRun:
    """Keep and enqueue a replay of a named pod list or of an uploaded CSV (same schema, checked line by line
    before anything is kept), on flat departments or the Helios-derived quota tree (`tree`, as `replay --tree`)."""
    if not actor.is_staff:
        raise PermissionDenied("only platform operators start replays")
    errors: dict[str, list[str]] = {}
    if not policies or set(policies) - set(REPLAY_POLICIES):
        errors["policies"] = [f"choose one or more of {', '.join(sorted(REPLAY_POLICIES))}"]
    if not load_factor > 0:
        errors["load_factor"] = [f"must be above 0, got {load_factor}"]
    if tree not in TREES:
        errors["tree"] = [f"one of {', '.join(TREES)}, got {tree!r}"]
    if bool(trace) == bool(upload):
        errors["trace"] = ["choose a trace or upload a pod list (one of them)"]
    elif trace and trace not in pod_lists():
        errors["trace"] = [f"no pod list named {trace!r} in {settings.TRACES_DIR / ALIBABA}"]
    if errors:
        raise ApplicationError("the replay was not started", fields=errors)
    path = Path(settings.TRACES_DIR) / ALIBABA / f"openb_pod_list_{trace}.csv" if trace else _keep(upload)
    return _enqueue(ReplayRun.objects.create(requested_by=actor, trace=trace or upload.name, pods_path=str(path),
                                             policies=policies, load_factor=load_factor, inflate=inflate,
                                             tree=tree))


def fragmentation_request(*, actor, trace: str, policies: list[str]) -> ReplayRun:
    """Keep and enqueue the FGD placement experiment (`manage.py fragmentation`, seeds 42-51) on a pod list of the
    traces folder."""
    if not actor.is_staff:
        raise PermissionDenied("only platform operators start experiments")
    errors: dict[str, list[str]] = {}
    if not policies or set(policies) - set(SCORERS):
        errors["policies"] = [f"choose one or more of {', '.join(SCORERS)}"]
    elif any(SCORERS[p].needs_interference for p in policies) and not (h200 := Path(settings.TRACES_DIR)
                                                                         / interference_tables.TRACE).is_dir():
        errors["policies"] = [f"tidal-interference needs the H200 measurements in {h200}"]
    if trace not in pod_lists():
        errors["trace"] = [f"no pod list named {trace!r} in {settings.TRACES_DIR / ALIBABA}"]
    if errors:
        raise ApplicationError("the experiment was not started", fields=errors)
    return _enqueue(ReplayRun.objects.create(
        kind=ReplayRun.Kind.FRAGMENTATION, requested_by=actor, trace=trace, policies=policies,
        pods_path=str(Path(settings.TRACES_DIR) / ALIBABA / f"openb_pod_list_{trace}.csv")))


LENDING = ("threshold", "forecast")  # a co-location run's lending rules, kept as its one "policy"


def colocation_request(*, actor, days: int, small: bool, lending: str = "threshold") -> ReplayRun:
    """Keep and enqueue a co-location simulation: lending (threshold-only or forecast-driven) against a static split
    over `days` (1-7) of the GenAI and World Cup traffic traces."""
    if not actor.is_staff:
        raise PermissionDenied("only platform operators start simulations")
    errors: dict[str, list[str]] = {}
    if not 1 <= days <= MAX_DAYS:
        errors["days"] = [f"1 to {MAX_DAYS}, got {days}"]
    if lending not in LENDING:
        errors["lending"] = [f"one of {', '.join(LENDING)}, got {lending!r}"]
    if errors:
        raise ApplicationError("the simulation was not started", fields=errors)
    return _enqueue(ReplayRun.objects.create(kind=ReplayRun.Kind.COLOCATION, requested_by=actor, days=days,
                                             small=small, policies=[lending],
                                             trace="small cluster" if small else "trace cluster"))


def _enqueue(run: ReplayRun) -> ReplayRun:
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


def report_files(run: ReplayRun) -> list[str]:
    """The plots of a finished run's report, by file name."""
    folder = Path(run.report_dir) if run.report_dir else None
    return sorted(p.name for p in folder.iterdir() if p.suffix in PLOTS) if folder and folder.is_dir() else []
