"""Scheduled scaling (colocation/policy/schedules.py): cron's day-of-week field, and which schedules hold when
(wall-clock windows on their weekdays, across midnight, in the policy's time zone)."""

from datetime import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colocation.policy.schedules import Schedule, cron_weekday, parse_weekdays, scheduled_minimum
from experiments.builders.colocation import at

WEEK = frozenset(range(7))


def _id(value) -> str | None:
    """Readable test ids: the text as written, schedules as "days start-end>=min"."""
    if isinstance(value, str):
        return value or "empty"
    if isinstance(value, tuple) and all(isinstance(s, Schedule) for s in value):
        return "+".join(f"{''.join(map(str, sorted(s.weekdays)))} {s.start:%H}-{s.end:%H}>={s.min_replicas}"
                        for s in value) or "none"
    return None


@pytest.mark.parametrize("text, days", [
    ("*", WEEK),
    ("1-5", {1, 2, 3, 4, 5}),
    ("mon-fri", {1, 2, 3, 4, 5}),
    ("Mon-FRI", {1, 2, 3, 4, 5}),
    ("0,6", {0, 6}),
    ("sat,sun", {0, 6}),
    (" 1 , 3 ", {1, 3}),
    ("7", {0}),  # 7 is Sunday too
    ("5-7", {5, 6, 0}),
    ("7-7", {0}),
    ("mon-sun", WEEK),
    ("*/2", {0, 2, 4, 6}),
    ("1-5/2", {1, 3, 5}),
    ("1/2", {1, 3, 5}),  # from Monday, every other day to the week's end
    ("mon-wed,fri", {1, 2, 3, 5}),
    ("sun", {0}),
    ("sat-sun", {6, 0}),  # Sunday closes the week
    ("5-sun", {5, 6, 0}),
    ("0-7", WEEK),
    ("*/1", WEEK),
    ("*/7", {0}),
    ("7/2", {0}),  # from Sunday written as 7: nothing after it in the week
    ("SUN-sat/3", {0, 3, 6}),
    ("1-5/2,0", {0, 1, 3, 5}),
], ids=_id)
def test_parse_weekdays(text, days):
    assert parse_weekdays(text) == frozenset(days)


@pytest.mark.parametrize("text, says", [
    ("", "empty"),
    ("  ", "empty"),
    ("8", "'8': '8' is not a day"),
    ("mon,funday", "'funday'"),
    ("1-x", "'1-x': 'x' is not a day"),
    ("5-1", "'5-1': the range runs backwards"),
    ("fri-mon", "'fri-mon': the range runs backwards"),
    ("*/0", "'*/0': the step"),
    ("*/x", "'*/x': the step"),
    ("1-5/", "'1-5/': the step"),
    ("-1", "'-1'"),
    ("1,,2", "'1,,2': an empty part between commas"),
    ("mon,", "an empty part"),
    ("sun-sat-mon", "'sat-mon' is not a day"),
    ("1/2/3", "'1/2/3': the step"),
], ids=_id)
def test_parse_weekdays_names_the_bad_part(text, says):
    with pytest.raises(ValueError) as e:
        parse_weekdays(text)
    assert says in str(e.value)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 7), st.integers(0, 7))
def test_numeric_ranges(a, b):
    if a > b:
        with pytest.raises(ValueError):
            parse_weekdays(f"{a}-{b}")
    else:
        assert parse_weekdays(f"{a}-{b}") == frozenset(d % 7 for d in range(a, b + 1))
    assert parse_weekdays(str(a)) == {a % 7}


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(0, 7), st.integers(0, 7), st.integers(1, 8))
def test_stepped_ranges_as_cron(a, b, step):
    """"a-b/n" is every n-th day from a to b, and "a/n" every n-th from a to the week's end, 7 counting as 0."""
    if a <= b:
        assert parse_weekdays(f"{a}-{b}/{step}") == frozenset(d % 7 for d in range(a, b + 1, step))
    assert parse_weekdays(f"{a}/{step}") == frozenset(d % 7 for d in range(a, max(a, 6) + 1, step))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.sets(st.integers(0, 6), min_size=1), st.integers(0, 22), st.integers(1, 23), st.integers(0, 7 * 24 - 1),
       st.integers(1, 9))
def test_a_schedule_holds_inside_its_window_on_its_days_only(days, start, length, hour_of_week, least):
    """A same-day window [start, end) on its weekdays: its minimum inside, 0 outside; 2024-03-03 is a Sunday, so
    the hour of the week counts from Sunday 00:00."""
    end = min(start + length, 23)
    schedule = Schedule(frozenset(days), time(start), time(end), least)
    day, hour = divmod(hour_of_week, 24)
    now = at(f"{hour:02d}:30", day=f"2024-03-{3 + day:02d}")
    assert cron_weekday(now, "UTC") == day
    assert scheduled_minimum((schedule,), now, "UTC") == (least if day in days and start <= hour < end else 0)


def test_cron_weekday():
    assert cron_weekday(at("14:00"), "UTC") == 2  # 2024-03-05 is a Tuesday
    assert cron_weekday(at("14:00", day="2024-03-03"), "UTC") == 0  # Sunday
    assert cron_weekday(at("23:30"), "UTC") == 2
    assert cron_weekday(at("23:30"), "Europe/Berlin") == 3  # already Wednesday there


TUE, MON = frozenset({2}), frozenset({1})


@pytest.mark.parametrize("schedules, hhmm, tz, want", [
    ((), "14:00", "UTC", 0),
    ((Schedule(TUE, time(12), time(16), 5),), "14:00", "UTC", 5),
    ((Schedule(TUE, time(12), time(16), 5),), "12:00", "UTC", 5),  # start inside
    ((Schedule(TUE, time(12), time(16), 5),), "16:00", "UTC", 0),  # end outside
    ((Schedule(TUE, time(12), time(16), 5),), "11:59", "UTC", 0),
    ((Schedule(MON, time(12), time(16), 5),), "14:00", "UTC", 0),  # another weekday
    ((Schedule(TUE, time(12), time(16), 5), Schedule(WEEK, time(0), time(23), 3)), "14:00", "UTC", 5),  # largest
    ((Schedule(TUE, time(12), time(16), 5), Schedule(WEEK, time(0), time(23), 3)), "17:00", "UTC", 3),
    ((Schedule(WEEK, time(0), time(0), 4),), "03:00", "UTC", 4),  # start == end: the whole day
    ((Schedule(MON, time(22), time(2), 6),), "01:00", "UTC", 6),  # Monday night runs into Tuesday
    ((Schedule(TUE, time(22), time(2), 6),), "01:00", "UTC", 0),  # Tuesday night has not started
    ((Schedule(TUE, time(22), time(2), 6),), "23:00", "UTC", 6),
    ((Schedule(MON, time(22), time(2), 6),), "02:00", "UTC", 0),
    ((Schedule(TUE, time(15), time(16), 5),), "14:00", "Europe/Berlin", 5),  # 15:00 in Berlin
    ((Schedule(TUE, time(15), time(16), 5),), "14:00", "UTC", 0),
], ids=_id)
def test_scheduled_minimum(schedules, hhmm, tz, want):
    assert scheduled_minimum(schedules, at(hhmm, tz="UTC"), tz) == want
