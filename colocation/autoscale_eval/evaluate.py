"""One evaluation end to end: load the trace, split it, train and score the forecast, replay the evaluated days
through the four policies, write the report, plots and figures."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cluster.simulated.inference import DAY_MIN
from colocation.autoscale_eval import report
from colocation.autoscale_eval.compare import POLICIES, Progress, replay
from colocation.autoscale_eval.forecasting import HORIZONS, Forecast
from colocation.autoscale_eval.run import Run
from colocation.autoscale_eval.service import ServiceModel
from colocation.autoscale_eval.trace import Trace, load, split
from colocation.autoscale_eval.xgb import forecast


@dataclass(frozen=True)
class EvalConfig:
    traces_dir: Path
    trace: str = "worldcup98"
    days: int = 14
    seed: int = 0  # the forecast model's random seed
    train_days: int = 0  # 0: every day before the evaluated ones
    model: ServiceModel = field(default_factory=ServiceModel)


@dataclass
class Result:
    figures: dict
    runs: dict[str, Run]
    forecast: Forecast
    demand: np.ndarray


def evaluate(cfg: EvalConfig, out: Path, command: str, progress: Progress | None = None) -> Result:
    began = time.monotonic()
    trace = load(cfg.trace, cfg.traces_dir)
    at = split(trace, cfg.days)
    demand, start = trace.demand[at:], trace.start + 60.0 * at
    notional = cfg.model.replicas_for(float(demand.max()))
    tick = progress("forecast", 1) if progress else None
    fc = forecast(trace.demand, trace.start, at, notional, cfg.model.capacity, cfg.seed,
                  cfg.train_days)
    if tick:
        tick(1)
    runs, static, top = replay(demand, start, cfg.model, fc, progress)
    figures = _figures(cfg, trace, at, runs, fc, static, top, demand)
    out.mkdir(parents=True, exist_ok=True)
    _plots(out, trace, at, demand, runs, fc, cfg.model, figures["zoom_day"])
    (out / "report.md").write_text(report.markdown(figures, command, time.monotonic() - began))
    figures["wall_s"] = round(time.monotonic() - began, 1)
    return Result(figures, runs, fc, demand)


def _figures(cfg: EvalConfig, trace: Trace, at: int, runs: dict[str, Run], fc: Forecast, static: int, top: int,
             demand: np.ndarray) -> dict:
    m = cfg.model
    policies = {name: runs[name].figures(m, demand) for name in POLICIES}
    first_day = at // DAY_MIN
    return {
        "trace": trace.name,
        "days": cfg.days,
        "eval_days": [first_day, first_day + cfg.days - 1],
        "train_days": fc.train_minutes // DAY_MIN,
        "service": {"capacity": m.capacity, "startup_min": m.startup_min, "min_rate": m.rates.min_rate,
                    "expect_rate": m.rates.expect_rate, "max_rate": m.rates.max_rate,
                    "min_replicas": m.min_replicas, "max_replicas": top, "static_replicas": static},
        "policies": policies,
        "forecast": {"mae": fc.mae, "minutes": fc.minutes, "seasonal_lag": fc.seasonal_lag, "usable": fc.usable,
                     "note": fc.note, "notional_replicas": fc.notional, "horizons": list(range(1, HORIZONS + 1)),
                     "train_minutes": fc.train_minutes},
        "acceptance": report.acceptance(policies, fc.mae),
        "zoom_day": first_day + report.busiest_day(demand),
    }


def _plots(out: Path, trace: Trace, at: int, demand: np.ndarray, runs: dict[str, Run], fc: Forecast,
           model: ServiceModel, zoom_day: int) -> None:
    first_day = at // DAY_MIN
    replicas = {name: r.replicas for name, r in runs.items()}
    report.plot_load_replicas(out / report.PLOTS[0], f"{trace.name}: load and replicas per policy", demand,
                              replicas, model.capacity, first_day)
    day = slice((zoom_day - first_day) * DAY_MIN, (zoom_day - first_day + 1) * DAY_MIN)
    report.plot_load_replicas(out / report.PLOTS[1], f"{trace.name}: day {zoom_day}", demand, replicas,
                              model.capacity, first_day, day)
    actual = demand / (fc.notional * model.capacity)
    h5 = np.full(len(actual), np.nan)
    h5[HORIZONS:] = fc.values[: len(actual) - HORIZONS, HORIZONS - 1]  # the forecast made 5 minutes earlier
    report.plot_forecast(out / report.PLOTS[2], f"{trace.name}: work 5 minutes ahead, day {zoom_day}",
                         actual[day], h5[day], zoom_day)
