"""Tidal's look-ahead in the LLM evaluation: the gateway's request rate over the coming minutes, online (nothing
trained: ServeGen holds 14 days, every one evaluated), as a cautious quantile rather than a mean.

Measured on ServeGen m-large, no fixed point forecast beats the recent level at 10-20 minutes (neither the recent
slope nor the day-before change: a 10-minute window's rate moves ±10-20 % against the last one), so the look-ahead
learns, online, how much of the level's own change over the last H minutes carries on over the next H (H the
horizon), and says how far the rate may rise beyond that:

    level × (1 + β·x·h/H + z·σ·√(h/H))

- level: the mean of the last LEVEL_MIN rates; x: its relative change over the last H minutes;
- β: the least-squares slope (through 0, clamped to [-1, 1]: at most a trend that carries on whole, at most a full
  return) of the next H minutes' relative change (the rate H minutes later over the level) on the H minutes' before,
  over the last VOLATILITY_MIN minutes: a ramp the traffic keeps (a morning's rise) gives β near 1, jumps that
  revert a negative β, noise 0, where the look-ahead is the level with a margin;
- σ: the root-mean-square of what β·x left unexplained over the same minutes; z is the service's setting.

Calm hours keep little margin, jumpy ones more; a rise the traffic has kept for as long as a start-up is met by
groups asked for where the rise will be when they are ready, not where it is now.
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
        self._rates: deque[float] = deque(maxlen=LEVEL_MIN)
        self._levels: deque[float] = deque(maxlen=2 * horizon + 1)  # the level at each of the last minutes
        self._pairs: deque[tuple[float, float]] = deque(maxlen=VOLATILITY_MIN)  # (change before, change after)
        self._xx = self._xy = self._yy = 0.0  # Σx², Σxy, Σy² over the pairs

    def add(self, rate: float) -> None:
        self._rates.append(rate)
        self._levels.append(sum(self._rates) / len(self._rates))
        h = self.horizon
        if len(self._levels) == self._levels.maxlen and self._levels[0] > 0 and self._levels[h] > 0:
            if len(self._pairs) == self._pairs.maxlen:
                self._count(*self._pairs[0], sign=-1.0)
            pair = (self._levels[h] / self._levels[0] - 1.0, rate / self._levels[h] - 1.0)
            self._pairs.append(pair)
            self._count(*pair)

    def _count(self, x: float, y: float, sign: float = 1.0) -> None:
        self._xx += sign * x * x
        self._xy += sign * x * y
        self._yy += sign * y * y

    @property
    def level(self) -> float:
        """The mean of the last LEVEL_MIN rates (0 before the first)."""
        return self._levels[-1] if self._levels else 0.0

    @property
    def beta(self) -> float:
        """How much of the last H minutes' change the next H minutes keep (0 before the first pair)."""
        return min(1.0, max(-1.0, self._xy / self._xx)) if self._xx > 1e-12 else 0.0

    @property
    def volatility(self) -> float:
        """σ: the root-mean-square change β·x leaves unexplained (0 before the first pair)."""
        if not self._pairs:
            return 0.0
        b = self.beta
        return math.sqrt(max(0.0, self._yy - 2 * b * self._xy + b * b * self._xx) / len(self._pairs))

    @property
    def trend(self) -> float:
        """x: the level's relative change over the last H minutes (0 until H minutes are seen)."""
        h = self.horizon
        if len(self._levels) <= h or self._levels[-1 - h] <= 0:
            return 0.0
        return self._levels[-1] / self._levels[-1 - h] - 1.0

    def values(self) -> np.ndarray:
        """Requests/s for the `horizon` minutes to come (0 before the first rate)."""
        f = np.arange(1, self.horizon + 1) / self.horizon
        ahead = self.level * (1.0 + self.beta * self.trend * f + self.z * self.volatility * np.sqrt(f))
        return np.maximum(0.0, ahead)
