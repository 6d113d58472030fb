"""One evaluation end to end: load the traffic, split it, train and score the forecast, replay the evaluated days
through the four policies (and, with a sweep, HPA's and tidal's fronts), write the report, plots and figures."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from cluster.simulated.inference import DAY_MIN
from cluster.simulated.traffic import Traffic
from experiments.autoscale_eval import report
from experiments.autoscale_eval.compare import POLICIES, Progress, replay
from experiments.autoscale_eval.forecasting import HORIZONS, Forecast
from experiments.autoscale_eval.run import Run
from experiments.autoscale_eval.service import CAPACITY, ServiceModel
from experiments.autoscale_eval.sweep import HPA_TARGETS, Front, grid, sweep
from experiments.autoscale_eval.trace import Span, load, span
from experiments.autoscale_eval.xgb import forecast

GPU_SECONDS_PER_MIN = 60.0  # one replica = one GPU: 60 GPU-seconds of work per minute at utilization 1.0
AUTO_PEAK_REPLICAS = 25  # a CSV without --capacity: its evaluated peak fills this many replicas at utilization 1.0


@dataclass(frozen=True)
class EvalConfig:
    traces_dir: Path
    trace: str | None = "worldcup98"
    traffic_csv: Path | None = None  # instead of the built-in trace
    days: int = 14
    start_day: int | None = None  # first evaluated day; None: the last `days` days
    seed: int = 0  # the forecast model's random seed
    train_days: int = 0  # 0: every day before the evaluated ones
    model: ServiceModel = ServiceModel()
    capacity_given: bool = False  # False: the capacity follows the traffic's unit (see capacity_for)
    sweep: bool = False


@dataclass
class Result:
    figures: dict
    runs: dict[str, Run]
    forecast: Forecast
    demand: np.ndarray
    front: Front | None = None


def capacity_for(t: Traffic, sp: Span) -> tuple[float, str]:
    """A replica's capacity when none is given, and why: 1,000 requests/min for the built-in request trace, one
    GPU (60 GPU-seconds/min) for GPU work, and for a CSV of unknown scale the evaluated peak over
    AUTO_PEAK_REPLICAS."""
    if t.unit == "GPU-seconds/min":
        return GPU_SECONDS_PER_MIN, "one GPU per replica (60 GPU-seconds of work per minute)"
    if t.name == "worldcup98":
        return CAPACITY, "1,000 requests/min per replica"
    peak = float(t.values[sp.at:sp.end].max()) or 1.0
    return peak / AUTO_PEAK_REPLICAS, f"the evaluated peak over {AUTO_PEAK_REPLICAS} replicas (no --capacity)"


def evaluate(cfg: EvalConfig, out: Path, command: str, progress: Progress | None = None) -> Result:
    began = time.monotonic()
    traffic = load(cfg.trace, cfg.traffic_csv, cfg.traces_dir)
    sp = span(traffic, cfg.days, cfg.start_day)
    model, capacity_note = cfg.model, f"{cfg.model.capacity:g} {traffic.unit} per replica (--capacity)"
    if not cfg.capacity_given:
        capacity, capacity_note = capacity_for(traffic, sp)
        model = replace(model, capacity=capacity)
    history = traffic.values[:sp.end]
    demand, start = history[sp.at:], traffic.start + 60.0 * sp.at
    notional = model.replicas_for(float(demand.max()))
    tick = progress("forecast", 1) if progress else None
    fc = forecast(history, traffic.start, sp.at, notional, model.capacity, cfg.seed, cfg.train_days)
    if tick:
        tick(1)
    runs, static, top = replay(demand, start, model, fc, progress)
    front = None
    if cfg.sweep:
        points = len(HPA_TARGETS) + len(grid(demand))
        front = sweep(demand, start, model, fc, top, progress("sweep", points * len(demand)) if progress else None)
    figures = _figures(cfg, traffic, sp, model, runs, fc, static, top, demand)
    figures["service"]["capacity_note"] = capacity_note
    if front is not None:
        figures["front"] = front.figures()
    out.mkdir(parents=True, exist_ok=True)
    _plots(out, traffic, sp, demand, runs, fc, model, figures["zoom_day"], front)
    (out / "report.md").write_text(report.markdown(figures, command, time.monotonic() - began, front))
    figures["wall_s"] = round(time.monotonic() - began, 1)
    return Result(figures, runs, fc, demand, front)


def _figures(cfg: EvalConfig, traffic: Traffic, sp: Span, m: ServiceModel, runs: dict[str, Run], fc: Forecast,
             static: int, top: int, demand: np.ndarray) -> dict:
    policies = {name: runs[name].figures(m, demand) for name in POLICIES}
    return {
        "trace": traffic.name,
        "unit": traffic.unit,
        "days": sp.days,
        "eval_days": [sp.first_day, sp.first_day + sp.days - 1],
        "trace_days": traffic.days,
        "train_days": fc.train_minutes // DAY_MIN,
        "service": {"capacity": m.capacity, "startup_min": m.startup_min, "min_rate": m.rates.min_rate,
                    "expect_rate": m.rates.expect_rate, "max_rate": m.rates.max_rate,
                    "min_replicas": m.min_replicas, "max_replicas": top, "static_replicas": static},
        "policies": policies,
        "forecast": {"mae": fc.mae, "minutes": fc.minutes, "seasonal_lag": fc.seasonal_lag, "usable": fc.usable,
                     "note": fc.note, "notional_replicas": fc.notional, "horizons": list(range(1, HORIZONS + 1)),
                     "train_minutes": fc.train_minutes},
        "acceptance": report.acceptance(policies, fc.mae),
        "zoom_day": sp.first_day + report.busiest_day(demand),
    }


def _plots(out: Path, traffic: Traffic, sp: Span, demand: np.ndarray, runs: dict[str, Run], fc: Forecast,
           model: ServiceModel, zoom_day: int, front: Front | None) -> None:
    first_day, name = sp.first_day, traffic.name
    replicas = {n: r.replicas for n, r in runs.items()}
    report.plot_load_replicas(out / report.PLOTS[0], f"{name}: load and replicas per policy", demand,
                              replicas, model.capacity, first_day)
    day = slice((zoom_day - first_day) * DAY_MIN, (zoom_day - first_day + 1) * DAY_MIN)
    report.plot_load_replicas(out / report.PLOTS[1], f"{name}: day {zoom_day}", demand, replicas,
                              model.capacity, first_day, day)
    actual = demand / (fc.notional * model.capacity)
    h5 = np.full(len(actual), np.nan)
    h5[HORIZONS:] = fc.values[: len(actual) - HORIZONS, HORIZONS - 1]  # the forecast made 5 minutes earlier
    report.plot_forecast(out / report.PLOTS[2], f"{name}: work 5 minutes ahead, day {zoom_day}",
                         actual[day], h5[day], zoom_day)
    if front is not None:
        report.plot_front(out / report.FRONT_PLOT, f"{name}: overloaded minutes against replica-hours, "
                          f"{sp.days} days, start-up {front.startup_min} min", front)
