"""The forecast tidal uses, from the project's XGBoost forecaster (profiling/policy/forecast.py): the trace's
minutes become one service's load rows at a fixed notional replica count, so the model forecasts the work
(utilization × replicas); the policy side scales it to the current replica count. Trained on the days before
the evaluated ones only."""

from __future__ import annotations

import numpy as np

from experiments.autoscale_eval.forecasting import Forecast
from experiments.autoscale_eval.policies import SERVICE
from profiling.policy import forecast as fc

TZ = "UTC"  # the trace's clock is local wall time labelled UTC (see trace.Trace)
DAY = 1440


def rows(demand: np.ndarray, start: float, notional: int, capacity: float) -> list[fc.Minute]:
    per_replica = notional * capacity
    return [fc.Minute(start + 60.0 * i, notional, float(d) / per_replica, None, qps=float(d) / 60.0)
            for i, d in enumerate(demand)]


def forecast(demand: np.ndarray, start: float, split: int, notional: int, capacity: float, seed: int = 0,
             train_days: int = 0) -> Forecast:
    """Train on the `train_days` before minute `split` (0: every earlier day), forecast and score minutes
    [split, end). On World Cup 98 every earlier day forecasts better than the last month: the month before the
    evaluated days is the tournament, at 5-10× their traffic level."""
    first = max(0, split - train_days * DAY) if train_days else 0
    since = start + 60.0 * split
    series = rows(demand[first:], start + 60.0 * first, notional, capacity)
    split -= first
    model = fc.train({SERVICE: series[:split]}, "gpu", tz=TZ, holidays=frozenset(), seed=seed)
    values = np.asarray(fc.predict_series(model, SERVICE, series, tz=TZ, holidays=frozenset()))[split:]
    ev = fc.evaluate(model, {SERVICE: series}, tz=TZ, holidays=frozenset(), since=since)
    mae = {k: [round(float(v), 6) for v in ev.mae[k]] for k in ("xgboost", "last_value", "seasonal")}
    return Forecast(values, mae, int(ev.minutes), int(ev.seasonal_lag), bool(fc.usable(ev)), notional, split)
