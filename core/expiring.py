"""A value a live loop reads again only once it is old, owned by the loop that ticks (its task, one per worker
process) and handed to what it feeds: the policies stay functions of what they are given."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Expiring(Generic[T]):
    """The last value `read` returned, read again once `max_age_s` old on the caller's clock (or when the clock went
    back: a virtual one restarted)."""

    def __init__(self, max_age_s: float = 60.0) -> None:
        self.max_age_s = max_age_s
        self._read_at: float | None = None
        self._value: T | None = None
        self.reads = 0  # reads so far (what the cache saves shows here)

    def get(self, now: float, read: Callable[[], T]) -> T:
        if self._read_at is None or not 0 <= now - self._read_at < self.max_age_s:
            self._value, self._read_at = read(), now
            self.reads += 1
        return self._value  # type: ignore[return-value]  # read at least once above
