"""Tidal's look-ahead in the LLM evaluation: the gateway's request rate over the coming minutes, online (nothing
trained: ServeGen holds 14 days, every one evaluated), as a cautious quantile rather than a mean.

Measured on ServeGen m-large, no point forecast beats the recent level at 10-20 minutes (neither the recent slope
nor the day-before change: a 10-minute window's rate moves ±10-20 % against the last one, unpredictably), so the
look-ahead says how far the rate may rise instead: the level (the mean of the last LEVEL_MIN minutes) times
1 + z·σ·√(h/H), σ the root-mean-square relative change from a level to the rate H minutes later over the last
VOLATILITY_MIN minutes, H the horizon. Calm hours keep little margin, jumpy ones more; z is the service's setting.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

LEVEL_MIN = 5
VOLATILITY_MIN = 360


class RateLookahead:
    """The look-ahead of one service, fed a minute at a time (O(1) a minute: the evaluation replays weeks)."""

    def __init__(self, horizon: int, z: float) -> None:
        self.horizon, self.z = horizon, z
        self._rates: deque[float] = deque(maxlen=LEVEL_MIN + horizon)
        self._levels: deque[float] = deque(maxlen=horizon + 1)  # the level at each of the last minutes
        self._changes: deque[float] = deque(maxlen=VOLATILITY_MIN)  # squared relative changes, level -> H later
        self._sum = 0.0

    def add(self, rate: float) -> None:
        self._rates.append(rate)
        recent = list(self._rates)[-LEVEL_MIN:]
        self._levels.append(sum(recent) / len(recent))
        if len(self._levels) == self._levels.maxlen and self._levels[0] > 0:
            if len(self._changes) == self._changes.maxlen:
                self._sum -= self._changes[0]
            change = ((rate - self._levels[0]) / self._levels[0]) ** 2
            self._changes.append(change)
            self._sum += change

    @property
    def volatility(self) -> float:
        """σ over the changes seen (0 before the first)."""
        return math.sqrt(max(0.0, self._sum) / len(self._changes)) if self._changes else 0.0

    def values(self) -> np.ndarray:
        """Requests/s for the `horizon` minutes to come."""
        if not self._levels:
            return np.zeros(self.horizon)
        h = np.arange(1, self.horizon + 1)
        return self._levels[-1] * (1.0 + self.z * self.volatility * np.sqrt(h / self.horizon))
