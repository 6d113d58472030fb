"""Load forecasting for predictive autoscaling (docs/concepts/autoscaling.md#forecasting), pure: XGBoost on per-minute service
loads.

A minute's utilization depends on how many replicas served it; the work (utilization × replicas) does not, so
the models forecast the work 1..5 minutes ahead and the caller divides by the replica count it cares about.
One booster per horizon learns the change from the last minute's work (trees cannot extrapolate a level).

Features (docs/concepts/autoscaling.md#forecasting): service, minute of day, weekday, holiday, node GPU/CPU utilization, replicas,
QPS, errors, mean latency; plus the recent work (lags, a short mean and slope) and the work at the forecast minute one
day and one week earlier. Baselines: the last value, and the seasonal naive (same minute a week earlier when the history
has it, else a day earlier). A model worse than the seasonal baseline at 5 minutes is not used.
"""

from __future__ import annotations

from types import MappingProxyType
import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from zoneinfo import ZoneInfo

import numpy as np
import xgboost as xgb

HORIZONS = 5
TARGETS = ("gpu", "cpu")
DAY, WEEK = 1440, 10080
LAGS = (1, 2, 3, 5, 10)  # minutes back of the work, besides the last minute's
MEAN_OF = 15  # minutes in the short rolling mean
ROUNDS = 150
# One thread: the forecaster shares a small machine with the control loops, and OpenMP's spinning threads slow
# to a crawl when another process holds a core (a 9 s training took 230 s beside a busy test run)
THREADS = 1
PARAMS = MappingProxyType({"tree_method": "hist", "max_depth": 6, "eta": 0.1, "subsample": 0.8, "min_child_weight": 5,
                           "objective": "reg:absoluteerror", "nthread": THREADS, "verbosity": 0})
BASE = ("service", "minute_of_day", "weekday", "holiday", "node_gpu", "node_cpu", "replicas", "qps", "errors",
        "latency_ms", "work", *(f"work_lag{k}" for k in LAGS), "work_mean", "work_slope")
FEATURES = (*BASE, "work_day_before", "work_week_before")


@dataclass(frozen=True, slots=True)
class Minute:
    """One service-minute, as ServiceMinute stores it."""

    at: float  # epoch seconds, start of the minute, UTC
    replicas: int
    gpu: float | None  # mean GPU utilization per replica, 0..1
    cpu: float | None
    qps: float | None = None
    errors: float | None = None  # errors/s
    latency_ms: float | None = None
    node_gpu: float | None = None  # mean utilization of the nodes it runs on
    node_cpu: float | None = None


@dataclass(frozen=True)
class Model:
    target: str
    boosters: tuple[xgb.Booster, ...]  # h = 1..HORIZONS
    services: Mapping[str, int]  # service name -> code (a feature)
    trained_from: float
    trained_to: float
    minutes: int  # training rows of the 1-minute horizon

    def to_bytes(self) -> bytes:
        meta = {"target": self.target, "services": dict(self.services), "trained_from": self.trained_from,
                "trained_to": self.trained_to, "minutes": self.minutes, "features": list(FEATURES),
                "boosters": [base64.b64encode(bytes(b.save_raw("ubj"))).decode() for b in self.boosters]}
        return json.dumps(meta).encode()

    @classmethod
    def from_bytes(cls, blob: bytes) -> Model:
        meta = json.loads(blob)
        if meta["features"] != list(FEATURES):
            raise ValueError("the model was trained on other features; train it again")
        boosters = []
        for raw in meta["boosters"]:
            b = xgb.Booster(params={"nthread": THREADS})
            b.load_model(bytearray(base64.b64decode(raw)))
            boosters.append(b)
        return cls(meta["target"], tuple(boosters), meta["services"], meta["trained_from"], meta["trained_to"],
                   meta["minutes"])


@dataclass(frozen=True)
class Evaluation:
    mae: dict[str, list[float]]  # "xgboost" | "last_value" | "seasonal" -> h1..h5, utilization units
    minutes: int  # forecast origins scored
    seasonal_lag: int  # minutes: WEEK or DAY


# --- series on a minute grid ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Grid:
    """One service's minutes on a gap-free grid (NaN where a minute is missing)."""

    start: float
    columns: dict[str, np.ndarray]  # work, replicas, qps, errors, latency_ms, node_gpu, node_cpu

    @property
    def work(self) -> np.ndarray:
        return self.columns["work"]

    @property
    def replicas(self) -> np.ndarray:
        return self.columns["replicas"]


def _grid(series: Sequence[Minute], target: str) -> _Grid:
    if not series:
        return _Grid(0.0, {k: np.empty(0) for k in ("work", "replicas", "qps", "errors", "latency_ms",
                                                    "node_gpu", "node_cpu")})
    start = series[0].at
    n = int(round((series[-1].at - start) / 60)) + 1
    cols = {k: np.full(n, np.nan) for k in ("work", "replicas", "qps", "errors", "latency_ms", "node_gpu",
                                            "node_cpu")}
    for m in series:
        i = int(round((m.at - start) / 60))
        util = getattr(m, target)
        cols["replicas"][i] = m.replicas
        cols["work"][i] = np.nan if util is None else util * m.replicas
        for k in ("qps", "errors", "latency_ms", "node_gpu", "node_cpu"):
            v = getattr(m, k)
            cols[k][i] = np.nan if v is None else v
    return _Grid(start, cols)


def _shift(a: np.ndarray, k: int) -> np.ndarray:
    """a[i - k] at i (NaN before the start); k < 0 looks ahead."""
    out = np.full(len(a), np.nan)
    if abs(k) >= len(a):
        return out
    if k >= 0:
        out[k:] = a[:len(a) - k] if k else a
    else:
        out[:k] = a[-k:]
    return out


def _calendar(start: float, n: int, tz: str, holidays: frozenset[date]) -> tuple[np.ndarray, ...]:
    """Minute of day, weekday and holiday flag of each grid minute, in local time (per local day, not minute)."""
    zone = ZoneInfo(tz)
    minute_of_day, weekday, holiday = np.empty(n), np.empty(n), np.empty(n)
    i = 0
    while i < n:
        local = datetime.fromtimestamp(start + 60 * i, zone)
        left = min(n - i, DAY - (local.hour * 60 + local.minute))  # minutes to local midnight
        minute_of_day[i:i + left] = local.hour * 60 + local.minute + np.arange(left)
        weekday[i:i + left] = local.weekday()
        holiday[i:i + left] = float(local.date() in holidays)
        i += left
    return minute_of_day, weekday, holiday


def _base(grid: _Grid, code: int, tz: str, holidays: frozenset[date]) -> np.ndarray:
    w, n = grid.work, len(grid.work)
    mean = np.convolve(np.nan_to_num(w), np.ones(MEAN_OF) / MEAN_OF, mode="full")[:n]
    mean[:MEAN_OF - 1] = np.nan
    cols = [np.full(n, float(code)), *_calendar(grid.start, n, tz, holidays),
            *(grid.columns[k] for k in ("node_gpu", "node_cpu", "replicas", "qps", "errors", "latency_ms")),
            w, *(_shift(w, k) for k in LAGS), mean, w - _shift(w, 5)]
    return np.column_stack(cols)


def _features(base: np.ndarray, work: np.ndarray, h: int) -> np.ndarray:
    """Base features plus the work at the forecast minute (i + h) one day and one week earlier."""
    return np.column_stack([base, _shift(work, DAY - h), _shift(work, WEEK - h)])


# --- train, predict, evaluate -----------------------------------------------------------------------


def train(series: Mapping[str, Sequence[Minute]], target: str, *, tz: str = "UTC",
          holidays: frozenset[date] = frozenset(), rounds: int = ROUNDS, seed: int = 0) -> Model:
    """One booster per horizon over every service's minutes; raises ValueError when there is nothing to learn."""
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
    services = {name: code for code, name in enumerate(sorted(series))}
    grids = {name: _grid(s, target) for name, s in series.items()}
    boosters, rows = [], 0
    for h in range(1, HORIZONS + 1):
        xs, ys = [], []
        for name, g in grids.items():
            x = _features(_base(g, services[name], tz, holidays), g.work, h)
            y = _shift(g.work, -h) - g.work
            ok = ~np.isnan(y)
            xs.append(x[ok])
            ys.append(y[ok])
        x, y = np.concatenate(xs), np.concatenate(ys)
        if len(y) < 2 * DAY // 24:
            raise ValueError(f"too little history to train on: {len(y)} usable minutes (need {2 * DAY // 24})")
        rows = rows or len(y)
        data = xgb.DMatrix(x, label=y, feature_names=list(FEATURES))
        boosters.append(xgb.train({**PARAMS, "seed": seed}, data, num_boost_round=rounds))
    starts = [s[0].at for s in series.values() if s]
    ends = [s[-1].at + 60 for s in series.values() if s]
    return Model(target, tuple(boosters), services, min(starts), max(ends), rows)


def _predict_grid(model: Model, service: str, grid: _Grid, tz: str, holidays: frozenset[date]) -> np.ndarray:
    """Forecast work at every grid minute, h = 1..5: shape (n, 5)."""
    base = _base(grid, model.services.get(service, -1), tz, holidays)
    out = np.empty((len(grid.work), HORIZONS))
    for h, booster in enumerate(model.boosters, start=1):
        x = xgb.DMatrix(_features(base, grid.work, h), feature_names=list(FEATURES))
        out[:, h - 1] = np.maximum(0.0, grid.work + booster.predict(x))
    return out


def predict_series(model: Model, service: str, series: Sequence[Minute], *, tz: str = "UTC",
                   holidays: frozenset[date] = frozenset()) -> np.ndarray:
    """Every minute's h1..h5 forecast, as utilization at that minute's replica count: shape (len(series), 5)."""
    grid = _grid(series, model.target)
    work = _predict_grid(model, service, grid, tz, holidays)
    index = [int(round((m.at - grid.start) / 60)) for m in series]
    replicas = np.array([max(1, m.replicas) for m in series], dtype=float)
    return work[index] / replicas[:, None]


def predict(model: Model, service: str, recent: Sequence[Minute], *, tz: str = "UTC",
            holidays: frozenset[date] = frozenset()) -> tuple[float, ...] | None:
    """Utilization at recent[-1].replicas, 1..5 minutes after recent[-1]; None without a measured last minute.
    `recent` should reach a week back for the seasonal features (a shorter history forecasts without them)."""
    if not recent or getattr(recent[-1], model.target) is None:
        return None
    values = predict_series(model, service, recent, tz=tz, holidays=holidays)[-1]
    return tuple(float(v) for v in values)


def evaluate(model: Model, series: Mapping[str, Sequence[Minute]], *, tz: str = "UTC",
             holidays: frozenset[date] = frozenset(), since: float | None = None) -> Evaluation:
    """MAE per horizon of the model and both naive baselines over forecast origins at or after `since`, in
    utilization at the replica count the forecast minute was served with."""
    lag = WEEK
    grids = {name: _grid(s, model.target) for name, s in series.items()}
    if since is not None and any(since - g.start < (WEEK + HORIZONS) * 60 for g in grids.values()):
        lag = DAY  # a week of history before the scored minutes is missing somewhere
    errors: dict[str, list[list[np.ndarray]]] = {k: [[] for _ in range(HORIZONS)]
                                                 for k in ("xgboost", "last_value", "seasonal")}
    origins = 0
    for name, g in grids.items():
        forecast = _predict_grid(model, name, g, tz, holidays)
        scored = np.ones(len(g.work), dtype=bool) if since is None else g.start + 60 * np.arange(len(g.work)) >= since
        for h in range(1, HORIZONS + 1):
            actual, served = _shift(g.work, -h), _shift(g.replicas, -h)
            guesses = {"xgboost": forecast[:, h - 1], "last_value": g.work, "seasonal": _shift(g.work, lag - h)}
            ok = scored & ~np.isnan(actual) & (served > 0)
            for guess in guesses.values():
                ok &= ~np.isnan(guess)
            for k, guess in guesses.items():
                errors[k][h - 1].append(np.abs(guess[ok] - actual[ok]) / served[ok])
            if h == 1:
                origins += int(ok.sum())
    mae = {k: [float(np.concatenate(e).mean()) if sum(map(len, e)) else float("nan") for e in per_h]
           for k, per_h in errors.items()}
    return Evaluation(mae, origins, lag)


def usable(ev: Evaluation) -> bool:
    """A model is used only if it beats the seasonal naive baseline at the longest horizon."""
    xgb_mae, seasonal = ev.mae["xgboost"][-1], ev.mae["seasonal"][-1]
    return ev.minutes > 0 and not np.isnan(xgb_mae) and (np.isnan(seasonal) or xgb_mae < seasonal)


def why_not(ev: Evaluation) -> str:
    """The sentence a decision shows when the model is not used ("" when it is)."""
    if usable(ev):
        return ""
    if ev.minutes == 0:
        return "the forecast model has no held-out minutes to prove itself on; reactive only"
    return (f"the forecast model is not used: its MAE at {HORIZONS} min ({ev.mae['xgboost'][-1]:.3f}) is not below "
            f"the seasonal baseline's ({ev.mae['seasonal'][-1]:.3f}); reactive only")
