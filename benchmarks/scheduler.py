"""`bench scheduler`: full cycles of the real profile on a simulated cluster.

`bench_scheduler()` builds a heterogeneous cluster shaped like the Alibaba GPU 2023 node list
(experiments/builders/cluster.py), keeps `pending` jobs queued, and runs full cycles of the real profile on a virtual clock,
applying decisions to the simulated backend between cycles. Only `schedule()` is timed. With `gang_share`, that
share of the jobs are gangs of 2-16 workers of whole GPUs; a placement is a worker placed.
"""

from __future__ import annotations

import random
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.machine import reference_ms
from cluster.types import JobStatus
from experiments.builders.cluster import node_shapes, queued_cluster
from scheduler.gcfreeze import frozen_heap
from scheduler.policy import get_profile, schedule
from scheduler.policy.cache import CycleCache
from scheduler.policy.gpuloss import warm_up
from scheduler.policy.workload import jobs_workload


def bench_scheduler(nodes: int = 5000, pending: int = 10000, cycles: int = 6, seed: int = 7,
                    node_csv: str | Path | None = None, profile: str = "tidal",
                    cycle_s: float = 60.0, progress: Callable[[int], None] | None = None,
                    gang_share: float = 0.0, tree_leaves: int = 0, fair_sharing: bool = False) -> dict[str, float]:
    """Full cycles of the real profile on a heterogeneous cluster; only schedule() is timed.

    Cycle 1 starts from an empty cluster with enough jobs to fill every GPU plus `pending` more,
    so it is a placement burst and every later cycle still has about `pending` jobs queued on a
    full cluster (jobs finish, own-quota jobs reclaim from borrowers, arrivals top the queue up).
    `gang_share` of the jobs are gangs; placements count workers placed, gang_placements the gangs admitted.
    With `tree_leaves`, the departments are the leaves of a 3-level quota tree; `fair_sharing` turns the profile's on.
    """
    if not 0 <= gang_share <= 1:
        raise ValueError(f"gang_share must be in [0, 1], got {gang_share}")
    rng = random.Random(seed)
    reference = reference_ms()  # before the cluster exists: the machine, not the run's own memory
    sim, clock, arrive = queued_cluster(nodes, node_shapes(node_csv), rng, pending, gang_share=gang_share,
                                        tree_leaves=tree_leaves)
    chosen = get_profile(profile, fair_sharing=fair_sharing)
    # the target workload as the live loop learns it (from the submissions, refreshed hourly: once here)
    first = sim.snapshot()
    workload = jobs_workload(first.jobs, first.compatible_models)
    warm_up()  # as a worker's first tick does: numba's cache loads once per process
    cache = CycleCache()  # the loop's, as a live worker keeps one from tick to tick
    durations, placed, preempted, gangs, gang_workers = [], 0, 0, 0, 0
    for cycle in range(cycles):
        sim.finish_elapsed()
        snapshot = sim.snapshot()
        with frozen_heap():  # as the live tick runs it
            started = time.perf_counter()
            result = schedule(snapshot, chosen, workload=workload, cache=cache)
            durations.append(time.perf_counter() - started)
        for admit in result.admitted:
            placed += len(admit.workers)  # a gang places every worker
            if admit.peers:
                gangs += 1
                gang_workers += len(admit.workers)
        preempted += len(result.preempted)
        sim.apply(result)
        clock.advance(cycle_s)
        arrive(max(0, pending - sum(j.status is JobStatus.PENDING for j in sim.jobs.values())))
        if progress:
            progress(cycle)
    return {
        "placements_per_s": placed / sum(durations),
        "cycle_p50_s": statistics.median(durations),
        "cycle_p99_s": percentile(durations, 0.99),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "first_cycle_s": durations[0],
        "placements": placed,
        "gang_placements": gangs,
        "gang_workers_placed": gang_workers,
        "gang_share": gang_share,
        "tree_leaves": tree_leaves,
        "fair_sharing": fair_sharing,
        "preemptions": preempted,
        "cycles": cycles,
        "reference_ms": reference,  # this machine's speed just before the run (benchmarks/machine.py)
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
