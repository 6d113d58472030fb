"""What the evaluation knows of a forecast: per evaluated minute the utilization h1..h5 at a fixed notional
replica count (the work), and its held-out error against the naive baselines (made by xgb.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

HORIZONS = 5


@dataclass(frozen=True)
class Forecast:
    values: np.ndarray  # (evaluated minutes, 5): utilization at `notional` replicas, h1..h5
    mae: dict[str, list[float]]
    minutes: int
    seasonal_lag: int
    usable: bool
    notional: int
    train_minutes: int

    @property
    def note(self) -> str:
        return "" if self.usable else ("the XGBoost forecast is not better than the seasonal naive baseline on "
                                       "held-out minutes, so it is not used")
