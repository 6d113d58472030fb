"""Tidal's look-ahead in the LLM evaluation: the gateway's request rate forecast minute by minute, at least one
start-up time ahead, online (nothing trained: ServeGen holds 14 days, every one of them evaluated).

The forecast at h minutes is the recent level (the mean of the last LEVEL_MIN minutes) plus the change the same
minutes showed a day earlier (scaled to today's level) when a day of history is there, else the recent slope. A
day-old change sees a morning rise coming; a slope alone only continues one already under way.
"""

from __future__ import annotations

import numpy as np

DAY_MIN = 1440
LEVEL_MIN = 5
SLOPE_MIN = 20


def rate_forecast(history: np.ndarray, horizon: int) -> np.ndarray:
    """Requests/s for the `horizon` minutes after the last of `history` (oldest first)."""
    n = len(history)
    if n == 0:
        return np.zeros(horizon)
    level = float(history[-LEVEL_MIN:].mean())
    h = np.arange(1, horizon + 1)
    if n > DAY_MIN + horizon + LEVEL_MIN:
        then = history[n - DAY_MIN - LEVEL_MIN:n - DAY_MIN].mean()
        ahead = np.array([history[n - DAY_MIN + k - 2:n - DAY_MIN + k + 3].mean() for k in h - 1])
        change = (ahead - then) * (level / then if then > 0 else 1.0)
    else:
        recent = history[-SLOPE_MIN:]
        slope = np.polyfit(np.arange(len(recent)), recent, 1)[0] if len(recent) > 2 else 0.0
        change = slope * (h + (LEVEL_MIN - 1) / 2)
    return np.maximum(0.0, level + change)
