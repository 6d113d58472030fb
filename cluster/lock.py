"""The cluster lock: one control-loop tick (scheduler, lending controller, autoscaler) acts on the cluster at a
time, whichever worker process or host it runs in.

It is a Redis lock (redis-py's: a random token per holder, so only the holder extends or releases it) with a
short expiry that a thread of the holder renews every third of it for as long as the tick runs. So a tick may
take as long as it needs without a second one getting in, and a worker that dies holding the lock (SIGKILL, the
OOM killer, a lost host) blocks the loops only until the expiry runs out, not for the length of the longest
tick. If a renewal finds the lock gone (the holder stalled longer than the expiry), that is logged as an error:
another tick may act from then on.

A tick that finds the lock held waits for it, at most `wait_s` (the loops wait most of their interval): the
scheduler, the lending controller and the autoscaler are due at the same moments whenever their intervals line up,
and a tick lasts a fraction of a second, so each of them acts in turn instead of all but one giving up. A tick that
still cannot take it (another tick runs longer than the wait) is skipped (`TickSkipped`, outcome "busy").

Redis itself may go away. While it is unreachable no tick can take the lock (it skips, saying why). The holder's
backend (`Fenced`) asks Redis before every call whether the lock is still its own, and stops the tick (LockLost)
when it is not, or when Redis cannot say: a holder cut off by an outage, or whose lock a restarted Redis forgot
(the stack runs it unpersisted), stops at its next action instead of acting beside the next holder. What it did
before that is left as after any crash, which the loops' acting order makes safe.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from redis.exceptions import LockError, LockNotOwnedError, RedisError
from redis.lock import Lock

log = logging.getLogger(__name__)


class LockLost(Exception):
    """The holder can no longer be sure it holds the cluster lock: it must stop acting."""


class TickSkipped(Exception):
    """This tick must not act: `outcome` names why in a word (tidal_loop_ticks_total's label), `why` in a sentence."""

    def __init__(self, outcome: str, why: str) -> None:
        super().__init__(why)
        self.outcome, self.why = outcome, why


@dataclass
class Holding:
    """The holder's side of the lock."""

    lock: Lock

    def check(self) -> None:
        """LockLost unless Redis confirms the lock is still this holder's: one round trip, before every action."""
        try:
            owned = self.lock.owned()
        except RedisError as error:
            raise LockLost(f"cluster lock {self.lock.name}: Redis unreachable ({error})") from error
        if not owned:
            raise LockLost(f"cluster lock {self.lock.name} is no longer held (expired, or Redis restarted)")

    def valid(self) -> bool:
        try:
            self.check()
        except LockLost:
            return False
        return True


class Fenced:
    """`backend` for as long as the lock is surely held: each call checks the holding first."""

    def __init__(self, backend, holding: Holding):
        self._backend, self._holding = backend, holding

    def __getattr__(self, name: str):
        attr = getattr(self._backend, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self._holding.check()
            return attr(*args, **kwargs)

        return call


@contextmanager
def cluster_lock(redis, key: str, ttl_s: float, wait_s: float = 0.0) -> Iterator[Holding]:
    """Hold `key` for the block, renewed every ttl_s / 3, waiting at most `wait_s` for it; TickSkipped (holding
    nothing) if another still holds it then, or Redis is unreachable."""
    lock = redis.lock(key, timeout=ttl_s, thread_local=False)  # the renewing thread uses the holder's token
    try:
        acquired = lock.acquire(blocking=wait_s > 0, blocking_timeout=wait_s or None)
    except RedisError as error:
        log.warning("cluster lock %s not taken: Redis unreachable (%s): skipping this tick", key, error)
        raise TickSkipped("redis-unreachable", f"Redis is unreachable ({error})") from error
    if not acquired:
        log.warning("cluster lock %s still held by another tick after %.1f s: skipping this tick", key, wait_s)
        raise TickSkipped("busy", f"another tick held the cluster lock for longer than {wait_s:.1f} s")
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(lock, ttl_s / 3, stop), name=f"renew {key}", daemon=True)
    renewer.start()
    try:
        yield Holding(lock)
    finally:
        stop.set()
        renewer.join()
        try:
            lock.release()
        except LockError as error:  # it expired (a stall longer than ttl_s): another may hold it now
            log.error("cluster lock %s was lost before the tick ended: %s", key, error)
        except RedisError as error:  # unreachable: the key expires on its own
            log.warning("cluster lock %s not released: %s", key, error)


def _renew(lock, every_s: float, stop: threading.Event) -> None:
    while not stop.wait(every_s):
        try:
            lock.reacquire()  # back to the full expiry
        except LockNotOwnedError:
            log.error("cluster lock %s expired while its tick still ran: another tick may act", lock.name)
            return
        except RedisError as error:  # Redis unreachable: the lock expires unless a later renewal gets through
            log.warning("cluster lock %s not renewed: %s", lock.name, error)
