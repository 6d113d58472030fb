"""Clocks: the only source of `now` for loops; policies receive `now` explicitly."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


def utc(ts: float) -> datetime:
    """Epoch seconds as an aware UTC datetime (what the database stores)."""
    return datetime.fromtimestamp(ts, tz=UTC)


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


class VirtualClock:
    """Clock for tests and trace replay; time only moves when told to, never backwards."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a virtual clock cannot go backwards")
        self._now += seconds
        return self._now

    def set(self, now: float) -> float:
        return self.advance(now - self._now)
