"""Long/short jobs with the 12 h rule and the night rule, pool choice, requeue after a take-back."""

import pytest

from cluster.types import JobStatus, Pool
from colocation.policy import (DEFAULT, Direction, PoolReason, busy_window, is_long, long_bar_s, preferred_pool,
                               requeue_after_take_back)
from experiments.builders.colocation import at
from experiments.builders.scheduling import JobBuilder

H, M = 3600.0, 60.0


@pytest.mark.parametrize("hhmm,bar", [
    ("12:00", 12 * H),  # day: 12 h
    ("17:59", 12 * H),
    ("18:00", 14 * H + 1 * H),  # night: until 08:00 (14 h) + 1 h
    ("23:30", 8.5 * H + 1 * H),
    ("03:00", 5 * H + 1 * H),
    ("07:59", 1 * M + 1 * H),
    ("08:00", 12 * H),
])
def test_long_bar(hhmm, bar):
    assert long_bar_s(at(hhmm)) == pytest.approx(bar)


@pytest.mark.parametrize("hhmm,expected_s,long", [
    ("12:00", 12 * H, False),  # "> 12 h": exactly 12 h is short
    ("12:00", 12 * H + 1, True),
    ("17:59", 13 * H, True),  # day rule
    ("18:00", 13 * H, False),  # night rule: bar 15 h
    ("18:00", 15 * H, False),
    ("18:00", 15 * H + 1, True),
    ("03:00", 6 * H, False),
    ("03:00", 7 * H, True),  # would run into the morning take-back
    ("07:59", 1 * H, False),
    ("07:59", 2 * H, True),
    ("08:00", 2 * H, False),
])
def test_is_long(hhmm, expected_s, long):
    assert is_long(expected_s, at(hhmm)) is long


def test_night_rule_uses_local_time_of_the_configured_zone():
    shanghai = DEFAULT.with_(tz="Asia/Shanghai")
    # 10:00 UTC is 18:00 in Shanghai: the night bar applies there, the day bar in UTC.
    assert long_bar_s(at("10:00"), shanghai) == pytest.approx(15 * H)
    assert long_bar_s(at("10:00"), DEFAULT) == pytest.approx(12 * H)


def test_night_rule_counts_real_hours_across_a_dst_change():
    berlin = DEFAULT.with_(tz="Europe/Berlin")
    # Clocks spring forward in the night of 30-31 March 2024: 18:00 -> 08:00 is only 13 real hours.
    assert long_bar_s(at("18:00", "2024-03-30", "Europe/Berlin"), berlin) == pytest.approx(13 * H + 1 * H)


@pytest.mark.parametrize("stated,past,hhmm,pool,reason", [
    (2 * H, (), "12:00", Pool.COLOCATION, PoolReason.SHORT),  # stated duration when no history
    (20 * H, (), "12:00", Pool.FIXED, PoolReason.LONG),
    (2 * H, (20 * H, 16 * H), "12:00", Pool.FIXED, PoolReason.LONG),  # the profile (history) wins
    (20 * H, (1 * H, 3 * H), "12:00", Pool.COLOCATION, PoolReason.SHORT),
    (13 * H, (), "18:00", Pool.COLOCATION, PoolReason.SHORT),  # night rule
    (None, (), "12:00", Pool.COLOCATION, PoolReason.UNKNOWN),
])
def test_preferred_pool(stated, past, hhmm, pool, reason):
    job = JobBuilder(1)._set(expected_duration_s=stated, past_run_s=past).build()
    choice = preferred_pool(job, at(hhmm))
    assert (choice.preferred, choice.reason) == (pool, reason)
    assert choice.pools == ((Pool.FIXED,) if pool is Pool.FIXED else (Pool.COLOCATION, Pool.FIXED))


def test_preferred_pool_message_has_the_numbers():
    job = JobBuilder(1)._set(expected_duration_s=13 * H).build()
    assert preferred_pool(job, at("17:59")).message == \
        "job-1: expected 13.0 h (stated duration) > 12.0 h: long, fixed pool"


def test_unknown_run_time_can_be_configured_long():
    job = JobBuilder(1).build()
    assert preferred_pool(job, at("12:00"), DEFAULT.with_(unknown_is_long=True)).pools == (Pool.FIXED,)


def test_a_job_pinned_to_the_fixed_pool_stays_there_even_if_short():
    job = JobBuilder(1)._set(expected_duration_s=10 * M).pool(Pool.FIXED).build()
    choice = preferred_pool(job, at("12:00"))
    assert choice.pools == (Pool.FIXED,) and choice.reason is PoolReason.PINNED


def test_a_job_killed_by_a_take_back_is_pinned_to_the_fixed_pool():
    killed = requeue_after_take_back(JobBuilder(1)._set(expected_duration_s=10 * M).pool(Pool.COLOCATION)
                                     .running("t4-1", 0, ran=60).build())
    assert preferred_pool(killed, at("12:00")).reason is PoolReason.PINNED


def test_requeue_after_take_back_is_immediate_and_pinned_to_fixed_pool():
    running = JobBuilder(1).pool(Pool.COLOCATION).running("t4-1", 0, ran=1800).build()
    requeued = requeue_after_take_back(running)
    assert requeued.status is JobStatus.PENDING and requeued.allocation is None and requeued.started_at is None
    assert requeued.preferred_pool is Pool.FIXED
    assert requeued.submitted_at == running.submitted_at  # keeps its place in the queue


@pytest.mark.parametrize("hhmm,direction", [
    ("07:59", None), ("08:00", Direction.TAKE_BACK), ("10:59", Direction.TAKE_BACK), ("11:00", None),
    ("17:59", None), ("18:00", Direction.LEND), ("21:59", Direction.LEND), ("22:00", None), ("02:00", None),
])
def test_busy_windows(hhmm, direction):
    window = busy_window(at(hhmm), DEFAULT)
    assert (window.direction if window else None) is direction


def test_busy_windows_in_configured_zone():
    # 00:30 UTC = 08:30 in Shanghai
    assert busy_window(at("00:30"), DEFAULT.with_(tz="Asia/Shanghai")).direction is Direction.TAKE_BACK
