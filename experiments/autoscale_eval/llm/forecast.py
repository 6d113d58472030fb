"""Tidal's look-ahead in the LLM evaluation: the gateway's request rate over the coming minutes, online (nothing
trained: ServeGen holds 14 days, every one evaluated), as a cautious quantile rather than a mean.

Measured on ServeGen m-large, no point forecast beats the recent level at 10-20 minutes (neither the recent slope
nor the day-before change: a 10-minute window's rate moves ±10-20 % against the last one, unpredictably), so the
look-ahead says how far the rate may rise instead: the level (the mean of the last LEVEL_MIN minutes) times
1 + z·σ·√(h/H), σ the root-mean-square relative change from a level to the rate H minutes later over the last
VOLATILITY_MIN minutes, H the horizon. Calm hours keep little margin, jumpy ones more; z is the service's setting.
"""

from __future__ import annotations

import numpy as np

LEVEL_MIN = 5
VOLATILITY_MIN = 360


def volatility(history: np.ndarray, horizon: int) -> float:
    """σ: the RMS relative change from a LEVEL_MIN-minute level to the rate `horizon` minutes later, over the last
    VOLATILITY_MIN minutes; 0 with too little history."""
    rec = np.asarray(history[-VOLATILITY_MIN:], dtype=float)
    if len(rec) < LEVEL_MIN + horizon + 10:
        return 0.0
    c = np.cumsum(np.insert(rec, 0, 0.0))
    levels = (c[LEVEL_MIN:] - c[:-LEVEL_MIN]) / LEVEL_MIN  # levels[j]: mean of rec[j .. j + LEVEL_MIN - 1]
    later = rec[LEVEL_MIN - 1 + horizon:]
    base = levels[:len(later)]
    ok = base > 0
    return float(np.sqrt(np.mean(((later[ok] - base[ok]) / base[ok]) ** 2))) if ok.any() else 0.0


def rate_forecast(history: np.ndarray, horizon: int, z: float) -> np.ndarray:
    """Requests/s for the `horizon` minutes after the last of `history` (oldest first), at z standard changes."""
    if len(history) == 0:
        return np.zeros(horizon)
    level = float(np.mean(history[-LEVEL_MIN:]))
    h = np.arange(1, horizon + 1)
    return level * (1.0 + z * volatility(history, horizon) * np.sqrt(h / horizon))
