"""What a cycle remembers of attempts that failed, to skip those no easier: capacity only shrinks as a cycle admits,
and victim sets only shrink as it preempts, until an eviction frees room (which clears a model's lists)."""

from __future__ import annotations

from cluster.types import Topology
from scheduler.policy.nodes import no_less_restricted


def known_gang_failure(failed: list[tuple], attempt: tuple) -> bool:
    """A gang no easier than one that already failed: no fewer workers, none smaller, same pool, ending no sooner, and
    packed if the failed one was packed (spread needs more nodes than pack)."""
    w2, g2, c2, m2, pool2, top2, e2 = attempt
    for w, g, c, m, pool, top, e in failed:
        if (w2 >= w and g2 >= g and c2 >= c and m2 >= m and (pool is None or pool == pool2)
                and (top == top2 or top is Topology.PACK) and no_less_restricted(e2, e)):
            return True
    return False


def known_gang_preempt_failure(failed: list[tuple], attempt: tuple) -> bool:
    """A gang's preemption no easier than one that already failed (as known_failure, with workers and topology)."""
    w2, g2, c2, m2, pool2, top2, total2, own2 = attempt
    for w, g, c, m, pool, top, total, own in failed:
        if (w2 >= w and g2 >= g and c2 >= c and m2 >= m and (pool is None or pool == pool2)
                and (top == top2 or top is Topology.PACK) and total2 <= total and (own == own2 or not own2)):
            return True
    return False


def known_failure(failed: list[tuple], attempt: tuple) -> bool:
    """An attempt no easier than one that already failed: not smaller, same pool, no higher score,
    no more reclaim rights (victim sets only shrink as the cycle goes on): none, or the same (own quota's, or on a quota
    tree a leaf's)."""
    g2, c2, m2, pool2, total2, own2 = attempt
    for g, c, m, pool, total, own in failed:
        if (g2 >= g and c2 >= c and m2 >= m and (pool is None or pool == pool2)
                and total2 <= total and (own == own2 or not own2)):
            return True
    return False
