"""The simulation's pending training queue: kept in order as jobs come and go, so a cycle takes its head.

A production queue manager hands the scheduler the head of each queue rather than everything that ever waited
(Kueue takes the head of every ClusterQueue per cycle; kube-scheduler pops the head of its active queue). Here
one lane per GPU model (None: CPU-only): the simulation certifies no framework on another model, so a job only
ever runs on its own model and lanes never compete. A lane is in submit order (submit time, then id), which is
the policy's own order for this workload: every job has the same department, base (own quota) and no run
history, so its score differs only by aging, which grows with the wait; a preempted or killed job keeps its
submit time and goes back to its place. The cycle itself (scheduler.policy.schedule) still orders and decides.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import defaultdict
from collections.abc import Iterator

from cluster.types import JobView

Key = tuple[float, int]  # (submitted_at, id): the order of a lane


class PendingQueue:
    def __init__(self) -> None:
        self._lanes: dict[str | None, list[Key]] = defaultdict(list)

    def add(self, job: JobView) -> None:
        """A job that arrived or came back to the queue (preempted, killed by a take-back)."""
        insort(self._lanes[job.gpu_model], (job.submitted_at, job.id))

    def remove(self, job: JobView) -> None:
        """A job that started."""
        lane = self._lanes[job.gpu_model]
        key = (job.submitted_at, job.id)
        i = bisect_left(lane, key)
        if i == len(lane) or lane[i] != key:
            raise KeyError(f"job {job.id} is not pending")
        del lane[i]

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    def head(self, per_lane: int | None) -> list[int]:
        """Ids of the first `per_lane` jobs of every lane (None: all of them)."""
        return [job_id for lane in self._lanes.values() for _, job_id in lane[:per_lane]]

    def lane(self, gpu_model: str | None) -> Iterator[int]:
        """Ids of one lane's jobs, in order."""
        return (job_id for _, job_id in self._lanes.get(gpu_model, ()))
