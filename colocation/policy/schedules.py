"""Scheduled scaling windows: cron day-of-week syntax and local wall-clock times (SPEC §3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time

from colocation.policy.windows import in_window, local

WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True, slots=True)
class Schedule:
    """Inside [start, end) on `weekdays` (0 = Sunday, as cron) the service keeps at least `min_replicas`."""

    weekdays: frozenset[int]
    start: time
    end: time
    min_replicas: int


def _day(token: str) -> int:
    token = token.strip().lower()
    if token in WEEKDAY_NAMES:
        return WEEKDAY_NAMES.index(token)
    if not token.isdigit() or int(token) > 7:
        raise ValueError(f"{token!r} is not a day of the week (0-7, 0 and 7 = Sunday, or sun..sat)")
    return int(token) % 7


def parse_weekdays(text: str) -> frozenset[int]:
    """Cron's day-of-week field: "*", "1-5", "0,6", "mon-fri", "*/2"; ValueError naming the bad part."""
    text = text.strip()
    if not text:
        raise ValueError("empty: use * for every day")
    days: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"{part!r}: the step after / must be a positive whole number")
        if base.strip() == "*":
            first, last = 0, 6
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _day(a), _day(b)
            if b.strip() in ("7",):
                last = 7
            if last < first:
                raise ValueError(f"{part!r}: the range runs backwards")
        else:
            first = last = _day(base)
        days.update(d % 7 for d in range(first, last + 1, step or 1))
    return frozenset(days)


def cron_weekday(now: float, tz: str) -> int:
    """Day of the week of `now` in `tz`, 0 = Sunday."""
    return local(now, tz).isoweekday() % 7


def scheduled_minimum(schedules: tuple[Schedule, ...], now: float, tz: str) -> int:
    """The largest minimum of the schedules active at `now` (0 when none is)."""
    t, day = local(now, tz).time(), cron_weekday(now, tz)
    return max((s.min_replicas for s in schedules if day in s.weekdays and in_window(t, s.start, s.end)), default=0)
