"""What forecast-driven lending needs from Redis: each group's online demand per minute, recorded by the lending
tick (the largest it saw in the minute), and the predicted take-back time per GPU model it derived, read by the
scheduler loop through `colocation.selectors.lending_profile` (neither loop imports the other).

Demand lives in one hash per group and day (field: minute of the day), expiring after `KEEP_DAYS`, so the
history trims itself. Nothing here decides anything: the policy (colocation/policy/forecast.py) stays pure.
"""
from __future__ import annotations

import json
import math

from colocation.policy.forecast import DAY_MIN, MAX_DAYS

KEEP_DAYS = MAX_DAYS + 2  # the seasonal profile's days, today and a day of slack
MAX_GAP_MIN = 30  # a longer hole (the loop was down) is not bridged: the history starts after it


def _demand_key(namespace: str, group: str, day: int) -> str:
    return f"{namespace}:lending:demand:{group}:{day}"


def _take_back_key(namespace: str) -> str:
    return f"{namespace}:lending:take-back-by"


def record(redis, namespace: str, demands: dict[str, float], now: float) -> None:
    """This tick's online demand per group, kept as the minute's largest."""
    minute = int(now // 60)
    day, of_day = divmod(minute, DAY_MIN)
    keys = {g: _demand_key(namespace, g, day) for g in demands}
    pipe = redis.pipeline(transaction=False)
    for key in keys.values():
        pipe.hget(key, of_day)
    seen = pipe.execute()
    pipe = redis.pipeline(transaction=False)
    for (group, demand), old in zip(demands.items(), seen):
        value = max(demand, float(old)) if old is not None else demand
        pipe.hset(keys[group], of_day, repr(value))
        pipe.expire(keys[group], KEEP_DAYS * 86400)
    pipe.execute()


def history(redis, namespace: str, group: str, now: float, days: int = MAX_DAYS + 1) -> list[float]:
    """The group's demand per minute, oldest first, its last value the minute that ended at `now` (rounded down to
    the minute): up to `days` days from the first recorded minute. A minute not recorded (the loop was down) takes
    the same minute a day before, else the minute before. Empty when nothing was recorded in the last
    `MAX_GAP_MIN` minutes: an old history says nothing about now."""
    end = int(now // 60)  # the current minute is not over: the history stops before it
    first_day, last_day = (end - days * DAY_MIN) // DAY_MIN, (end - 1) // DAY_MIN
    pipe = redis.pipeline(transaction=False)
    for day in range(first_day, last_day + 1):
        pipe.hgetall(_demand_key(namespace, group, day))
    known: dict[int, float] = {}
    for day, fields in zip(range(first_day, last_day + 1), pipe.execute()):
        known.update({day * DAY_MIN + int(k): float(v) for k, v in fields.items()})
    recent = [m for m in known if end - MAX_GAP_MIN <= m < end]
    start = min((m for m in known if m >= end - days * DAY_MIN), default=None)
    if not recent or start is None:
        return []
    out: list[float] = []
    for minute in range(start, end):
        value = known.get(minute)
        if value is None:
            day_before = minute - DAY_MIN - start
            value = out[day_before] if day_before >= 0 else out[-1]
        out.append(value)
    return out


class HistoryCache:
    """`history` read from Redis at most once a minute per group (the lending tick runs several times a minute, and a
    week of minutes is 8 hashes of up to 1,440 fields): the history only gains a minute when a minute ends. Owned by
    the caller that ticks (the lending task keeps one per worker process)."""

    def __init__(self) -> None:
        self._by_group: dict[str, tuple[int, list[float]]] = {}
        self.reads = 0  # Redis reads so far (what the cache saves shows here)

    def history(self, redis, namespace: str, group: str, now: float) -> list[float]:
        minute = int(now // 60)
        cached = self._by_group.get(group)
        if cached is None or cached[0] != minute:
            self.reads += 1
            cached = self._by_group[group] = (minute, history(redis, namespace, group, now))
        return cached[1]


def put_take_back_by(redis, namespace: str, take_back_by: dict[str, float], ttl_s: float) -> None:
    """{GPU model, "" for CPU-only: predicted take-back epoch s}; gone after `ttl_s` unless written again, so a
    stalled lending loop's prediction is not used."""
    redis.set(_take_back_key(namespace), json.dumps(take_back_by), ex=max(1, math.ceil(ttl_s)))


def take_back_by(redis, namespace: str) -> tuple[tuple[str, float], ...]:
    """The stored predicted take-back times, by model; empty when none is stored (or it expired)."""
    raw = redis.get(_take_back_key(namespace))
    if raw is None:
        return ()
    return tuple(sorted((str(m), float(t)) for m, t in json.loads(raw).items()))
