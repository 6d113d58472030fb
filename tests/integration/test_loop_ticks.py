"""Every control loop acts on each of its ticks unless the cluster is genuinely unavailable (issue 22): a tick
that finds the cluster lock held waits for it, for most of its interval, instead of giving up; a tick that still
cannot act is counted by outcome, and a loop that skips several ticks in a row raises an alert, and another when
it acts again."""
import threading
import time
import uuid

import pytest
from redis import Redis

from cluster.simulated import store
from colocation.live_backend import LOCK_WAIT_SHARE
from core import telemetry
from core.models import Decision
from scheduler import live
from scheduler.policy.profile import get_profile

pytestmark = pytest.mark.django_db
INTERVAL_S = 1.0  # the scheduler's interval in these tests: a tick waits at most 0.8 s for the lock


@pytest.fixture
def loop(settings):
    """(redis, namespace, run one scheduler tick) on a namespace of its own, emptied after."""
    settings.TIDAL_SCHEDULER_INTERVAL_S, settings.TIDAL_LOOP_SKIP_ALERT_AFTER = INTERVAL_S, 3
    redis, namespace = Redis.from_url(settings.REDIS_URL), f"test-ticks-{uuid.uuid4().hex[:8]}"
    yield redis, namespace, lambda: live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal"))
    for key in redis.scan_iter(f"{namespace}:*"):
        redis.delete(key)


def held(redis, namespace: str, for_s: float) -> threading.Thread:
    """Another loop's tick: it holds the cluster lock for `for_s`."""
    lock = redis.lock(f"{namespace}:{store.LOCK}", timeout=30, thread_local=False)  # released by another thread
    assert lock.acquire(blocking=False)

    def release():
        time.sleep(for_s)
        lock.release()

    holder = threading.Thread(target=release)
    holder.start()
    return holder


def test_a_tick_that_finds_the_lock_held_waits_for_it_and_acts(world, loop):
    redis, namespace, tick = loop
    world.submit(gpus="1")
    holder = held(redis, namespace, for_s=0.4)  # shorter than the wait: the sibling loop's tick ends first
    started = time.monotonic()
    report = tick()
    waited = time.monotonic() - started
    holder.join()
    assert report is not None and report.admitted == 1
    assert waited >= 0.4  # it did wait for the lock (no upper bound asserted: timing goes in benchmarks)
    assert telemetry.ticks(redis, namespace) == {("scheduler", "acted"): 1}


def test_a_loop_skipping_ticks_in_a_row_is_counted_and_alerted_once_then_recovers(world, loop):
    redis, namespace, tick = loop
    holder = held(redis, namespace, for_s=4 * LOCK_WAIT_SHARE * INTERVAL_S + 0.5)  # longer than four waits
    for _ in range(4):
        assert tick() is None
    holder.join()
    assert tick() is not None
    assert telemetry.ticks(redis, namespace) == {("scheduler", "busy"): 4, ("scheduler", "acted"): 1}
    alerts = list(Decision.objects.filter(subject="loop:scheduler").order_by("id"))
    assert [(a.kind, a.reason) for a in alerts] == [("alert", "loop-skipping"), ("alert", "loop-acting")]
    assert alerts[0].message == ("the scheduler loop has not acted on its last 3 ticks (the last: another tick "
                                 "held the cluster lock for longer than 0.8 s); its decisions wait until it acts again")
    assert alerts[1].message == "the scheduler loop acts again after 4 skipped ticks"


def test_ticks_in_backoff_are_counted_but_leave_the_alert_to_the_cluster_outage(world, loop, settings):
    redis, namespace, tick = loop
    redis.set(f"{namespace}:cluster:retry-at", time.time() + 60)
    for _ in range(4):
        assert tick() is None
    assert telemetry.ticks(redis, namespace) == {("scheduler", "backoff"): 4}
    assert not Decision.objects.filter(subject="loop:scheduler").exists()
