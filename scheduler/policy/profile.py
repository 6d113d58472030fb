"""Policy profiles: which plugins run, with which weights and thresholds.

One Profile object is loaded by the live loop, the embedded demo and trace replay, so
baselines are configurations of the same code, never separate code paths.
"""

from __future__ import annotations

from types import MappingProxyType
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum

from scheduler.policy.interference import DEFAULT_P99_BOUND, MIN_COMBINED, TIME_SLICING


class QueueOrder(str, Enum):
    SCORE = "score"  # priority score, then submit time
    FIFO = "fifo"  # submit time only


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    order: QueueOrder = QueueOrder.SCORE
    head_of_line_blocking: bool = False  # strict FCFS: nothing passes a job that cannot start
    # quotas
    quotas: bool = True
    borrowing: bool = True
    preemption: bool = True  # own-quota reclaim and higher-score-preempts-lower
    min_runtime_s: float = 300.0  # younger jobs are protected, except from own-quota reclaim
    # Kueue's fairSharing: the queue in a weighted dominant-resource-share tournament between subtrees of the quota
    # tree, and borrowed work preempting another subtree's while its share after stays at or below the victim's
    fair_sharing: bool = False
    preemption_max_nodes: int = 8  # nodes whose exact victim set is computed per preemptor
    # gangs that cannot start hold the nodes that free soonest (backfill; an own-quota gang's stay open to borrowed
    # work, which it reclaims when it starts)
    reservations: bool = True
    reservation_depth: int = 8  # the first this many waiting gangs each get a reservation (Slurm's bf_max_job_test)
    # priority score
    own_base: int = 1_000_000
    borrowed_base: int = 1_000
    utilization_term: bool = True
    utilization_points: int = 20
    utilization_target: float = 0.5
    aging: bool = True
    aging_after_s: float = 600.0
    aging_step_s: float = 600.0
    aging_cap: int = 5
    # Aging orders the queue (and a waiting gang's reservation); with this off it does not also let a job evict
    # running work: a victim requeued with its submit time would have aged the most and evict back, round after
    # round (Kueue and Volcano preempt by priority class, never by time waited). Off: preemption compares base +
    # utilization.
    aging_preempts: bool = False
    # right-sizing
    rightsizing: bool = True
    rightsizing_runs: int = 3
    gpu_util_target: float = 0.9
    cpu_util_target: float = 0.5
    cpu_floor_milli: int = 100
    # placement: extra filters and weighted scorers by registry name (see placement.py);
    # fitting on an offline-normal node is always required; no scorer means first fit by node name
    model_fallback: bool = True  # other certified model with most idle capacity
    filters: tuple[str, ...] = ("pool",)
    # colocation-first outweighs the placement score (0..1): the pool comes first, then the least GPU loss
    scorers: tuple[tuple[str, float], ...] = (("colocation-first", 10.0), ("least-gpu-loss", 1.0))
    # GPU sharing (scheduler/policy/interference.py): a share never joins a GPU where it and a job there are predicted
    # to do less together than one after the other, nor where a latency-sensitive job's p99 is predicted to grow
    # past the bound; among the least-GPU-loss GPUs it takes the highest predicted combined throughput
    sharing_min_combined: float = MIN_COMBINED
    sharing_p99_bound: float = DEFAULT_P99_BOUND
    sharing_mode: str = TIME_SLICING  # the measured table the predictions come from: TIME_SLICING or MPS

    def with_(self, **overrides: object) -> Profile:
        return replace(self, **overrides)


TIDAL = Profile(name="tidal")

FIFO = Profile(
    name="fifo", order=QueueOrder.FIFO, head_of_line_blocking=True, quotas=False, borrowing=False,
    preemption=False, utilization_term=False, aging=False, rightsizing=False, model_fallback=False,
    scorers=(),
)

# Kueue-like quotas and borrowing with the classic bin-packing placement: shares on the fullest GPU (outweighing)
# most-allocated nodes
QUOTA_BORROWING = Profile(
    name="quota-borrowing", utilization_term=False, aging=False, rightsizing=False, model_fallback=False,
    scorers=(("colocation-first", 10.0), ("gpu-share-best-fit", 2.0), ("most-allocated", 1.0)),
)

PROFILES: Mapping[str, Profile] = MappingProxyType({p.name: p for p in (TIDAL, FIFO, QUOTA_BORROWING)})


def get_profile(name: str, **overrides: object) -> Profile:
    """A named profile, optionally with some fields overridden (e.g. from settings)."""
    try:
        return PROFILES[name].with_(**overrides)
    except KeyError:
        raise ValueError(f"unknown scheduling profile {name!r}; known: {', '.join(PROFILES)}") from None
