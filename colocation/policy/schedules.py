"""Scheduled scaling windows: cron day-of-week syntax and local wall-clock times (docs/concepts/autoscaling.md#the-policy)."""

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


def _day(token: str, part: str) -> int:
    """A day as written, 0..7 (7 stays 7 so that "5-7" runs to Sunday); names are 0 (sun) .. 6 (sat)."""
    token = token.strip().lower()
    if token in WEEKDAY_NAMES:
        return WEEKDAY_NAMES.index(token)
    if not (token.isascii() and token.isdigit()) or int(token) > 7:
        raise ValueError(f"{part.strip()!r}: {token!r} is not a day of the week (0-7, 0 and 7 = Sunday, or sun..sat)")
    return int(token)


def _step(step_text: str, part: str) -> int:
    step_text = step_text.strip()
    if not (step_text.isascii() and step_text.isdigit()) or int(step_text) == 0:
        raise ValueError(f"{part.strip()!r}: the step after / must be a positive whole number")
    return int(step_text)


def _span(base: str, part: str, stepped: bool) -> tuple[int, int]:
    """First and last day of one comma-separated part before its step; "a/n" runs from a to Saturday, as cron."""
    if base.strip() == "*":
        return 0, 6
    if "-" not in base:
        first = _day(base, part)
        return first, (6 if first < 7 else 7) if stepped else first
    a, _, b = base.partition("-")
    first, last = _day(a, part), _day(b, part)
    if last == 0 and first > 0 and b.strip().lower() == "sun":
        last = 7  # "mon-sun": Sunday closes the week
    if last < first:
        raise ValueError(f"{part.strip()!r}: the range runs backwards")
    return first, last


def parse_weekdays(text: str) -> frozenset[int]:
    """Cron's day-of-week field: "*", "1-5", "0,6", "mon-fri", "*/2", "1/2"; 0 and 7 are Sunday.
    ValueError naming the bad part."""
    text = text.strip()
    if not text:
        raise ValueError("empty: use * for every day")
    days: set[int] = set()
    for part in text.split(","):
        if not part.strip():
            raise ValueError(f"{text!r}: an empty part between commas")
        base, slash, step_text = part.partition("/")
        step = _step(step_text, part) if slash else 1
        first, last = _span(base, part, bool(slash))
        days.update(d % 7 for d in range(first, last + 1, step))
    return frozenset(days)


def cron_weekday(now: float, tz: str) -> int:
    """Day of the week of `now` in `tz`, 0 = Sunday."""
    return local(now, tz).isoweekday() % 7


def active(schedule: Schedule, now: float, tz: str) -> bool:
    """Inside the schedule's window on one of its days; a window across midnight belongs to the day it starts on
    (Friday 22:00-02:00 holds until Saturday 02:00, not on Friday before 02:00)."""
    t, day = local(now, tz).time(), cron_weekday(now, tz)
    if not in_window(t, schedule.start, schedule.end):
        return False
    after_midnight = schedule.end < schedule.start and t < schedule.end
    return ((day - 1) % 7 if after_midnight else day) in schedule.weekdays


def scheduled_minimum(schedules: tuple[Schedule, ...], now: float, tz: str) -> int:
    """The largest minimum of the schedules active at `now` (0 when none is)."""
    return max((s.min_replicas for s in schedules if active(s, now, tz)), default=0)
