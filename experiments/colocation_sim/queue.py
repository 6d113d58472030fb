"""The simulation's pending training queue: kept in order as jobs come and go, so a cycle takes its heads.

A production queue manager hands the scheduler the head of each queue rather than everything that ever waited
(Kueue takes the head of every ClusterQueue per cycle; kube-scheduler pops the head of its active queue). Here
the queues are per GPU model (None: CPU-only; the simulation certifies no framework on another model, so a job
only ever runs on its own model and models never compete) and, within a model, per pool a job may use
(docs/concepts/lending.md#pools): short jobs may run on lent nodes, long ones and those killed by a take-back only on
the fixed pool. A
cycle sees the head of both, so lent capacity always sees the jobs that can use it, however many long jobs wait for the
fixed pool. Which jobs are long changes with the time of day (`long_bar_s`: 12 h by day, down to 1 h before the morning
take-back), so a model's jobs are kept in lanes by expected run time (hour buckets) plus one lane of jobs pinned to the
fixed pool; a cycle merges the lanes below the bar and those above it, splitting only the lane the bar falls in.

A lane is in submit order (submit time, then id), which is the policy's own order for this workload: every job
has the same department, base (own quota) and no run history, so its score differs only by aging, which grows
with the wait; a preempted or killed job keeps its submit time and goes back to its place. The cycle itself
(scheduler.policy.schedule) still orders and decides, and each job's pool is still chosen by `preferred_pool`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import defaultdict
from collections.abc import Callable
from heapq import merge
from itertools import islice

from cluster.types import JobView

HOUR = 3600.0
EDGES = tuple(HOUR * h for h in range(1, 25))  # lane b holds run times in (EDGES[b-1], EDGES[b]]; b = 24: > 24 h
PINNED = -1  # the lane of jobs killed by a take-back: fixed pool only, whatever their run time

Entry = tuple[float, int, float]  # (submitted_at, id, expected run time s): a lane's order, then the bucket's key
LaneKey = tuple[str | None, int]  # (GPU model, bucket or PINNED)


def _bounds(bucket: int) -> tuple[float, float]:
    return (EDGES[bucket - 1] if bucket > 0 else 0.0), (EDGES[bucket] if bucket < len(EDGES) else float("inf"))


class PendingQueue:
    def __init__(self) -> None:
        self._lanes: dict[str | None, dict[int, list[Entry]]] = defaultdict(dict)
        self._runs: dict[LaneKey, list[float]] = defaultdict(list)  # a lane's run times, sorted (for counting)
        self._where: dict[int, tuple[LaneKey, Entry]] = {}

    def add(self, job: JobView, pinned: bool = False) -> None:
        """A job that arrived or came back to the queue (preempted, or killed by a take-back: `pinned`). The
        simulation's jobs all state their run time (the trace's)."""
        run = job.expected_duration_s
        if run is None:
            raise ValueError(f"job {job.id} states no run time")
        bucket = PINNED if pinned else bisect_left(EDGES, run)
        key, entry = (job.gpu_model, bucket), (job.submitted_at, job.id, run)
        insort(self._lanes[job.gpu_model].setdefault(bucket, []), entry)
        insort(self._runs[key], run)
        self._where[job.id] = (key, entry)

    def remove(self, job_id: int) -> None:
        """A job that started."""
        try:
            (model, bucket), entry = self._where.pop(job_id)
        except KeyError:
            raise KeyError(f"job {job_id} is not pending") from None
        lane = self._lanes[model][bucket]
        del lane[bisect_left(lane, entry)]
        runs = self._runs[model, bucket]
        del runs[bisect_left(runs, entry[2])]

    def __len__(self) -> int:
        return len(self._where)

    def short_count(self, gpu_model: str | None, bar: float) -> int:
        """Jobs of a model that may use lent nodes when the long-job bar is `bar` (`is_long`: run time > bar)."""
        n = 0
        for bucket, lane in self._lanes.get(gpu_model, {}).items():
            if bucket == PINNED or not lane:
                continue
            low, high = _bounds(bucket)
            if high <= bar:
                n += len(lane)
            elif low < bar:
                n += bisect_right(self._runs[gpu_model, bucket], bar)
        return n

    def head(self, per_lane: int | None, bar: float | Callable[[str | None], float]) -> list[int]:
        """Ids of the first `per_lane` short and the first `per_lane` fixed-pool-only jobs of every model at the
        long-job bar `bar` (per GPU model when a function: `lend_bar_s`; None: every pending job)."""
        if per_lane is None:
            return list(self._where)
        out: list[int] = []
        for model, lanes in self._lanes.items():
            bar_of = bar(model) if callable(bar) else bar
            short: list[list[Entry]] = []
            long: list[list[Entry]] = []
            for bucket, lane in lanes.items():
                low, high = _bounds(bucket)
                if bucket != PINNED and low < bar_of < high:  # the bar falls in this lane: split it
                    short.append([e for e in islice((e for e in lane if e[2] <= bar_of), per_lane)])
                    long.append([e for e in islice((e for e in lane if e[2] > bar_of), per_lane)])
                elif bucket != PINNED and high <= bar_of:
                    short.append(lane[:per_lane])
                else:
                    long.append(lane[:per_lane])
            for lists in (short, long):
                out.extend(e[1] for e in islice(merge(*lists), per_lane))
        return out
