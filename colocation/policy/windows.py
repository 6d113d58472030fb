"""Local wall-clock helpers: busy windows and "time until next 08:00", DST-aware via zoneinfo."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from colocation.policy.profile import BusyWindow, LendingProfile


def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)  # (ZoneInfo keeps one instance per name itself)


def local(now: float, tz: str) -> datetime:
    return datetime.fromtimestamp(now, zone(tz))


def in_window(t: time, start: time, end: time) -> bool:
    """t in [start, end); a window with end <= start wraps past midnight (18:00-08:00)."""
    return start <= t < end if start < end else (t >= start or t < end)


def busy_window(now: float, profile: LendingProfile) -> BusyWindow | None:
    """The busy window `now` falls in, if any."""
    t = local(now, profile.tz).time()
    return next((w for w in profile.busy_windows if in_window(t, w.start, w.end)), None)


def seconds_until(now: float, at: time, tz: str) -> float:
    """Seconds from `now` to the next local wall-clock `at` (0 < result, a day at most)."""
    here = local(now, tz)
    day = here.date()
    for _ in range(3):  # today, tomorrow, or (DST gap edge) the day after
        target = datetime.combine(day, at, tzinfo=zone(tz))
        if target.timestamp() > now:
            return target.timestamp() - now
        day += timedelta(days=1)
    raise AssertionError("unreachable: a wall-clock time recurs within two days")
