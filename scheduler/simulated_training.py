"""The acting layer on the simulated cluster that replay, the co-location simulation, the scheduler benchmark and
tests share: it keeps the jobs and applies a cycle's decisions to the simulated backend."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace

from cluster.backend import PodSpec
from cluster.clock import VirtualClock
from cluster.simulated import SimulatedCluster
from cluster.types import Allocation, JobStatus, JobView, NodeView, QuotaView, Snapshot
from scheduler.policy import Admit, CycleResult, Preempt, Profile, schedule


class SimulatedTraining:
    """Keeps the jobs and applies decisions to the simulated backend; the live loop does the same against the
    database and Kubernetes, with the same policy."""

    def __init__(self, nodes: Iterable[NodeView], quotas: Iterable[QuotaView],
                 certified: dict[str, frozenset[str]], clock: VirtualClock) -> None:
        self.clock = clock
        self.quotas = tuple(quotas)
        self.certified = certified
        self.jobs: dict[int, JobView] = {}  # pending, admitted and running
        self.done: dict[int, JobView] = {}
        self.run_time: dict[int, float] = {}  # simulated work length per job
        self.preemptions: Counter[int] = Counter()
        self.backend = SimulatedCluster(nodes, clock, lambda pod: self.run_time.get(pod.job_id))
        self.gpu_models = tuple(sorted({n.gpu_model for n in self.backend.nodes() if n.gpu_model}))

    def submit(self, job: JobView, run_time_s: float | None = None) -> None:
        self.jobs[job.id] = job
        if run_time_s is not None:
            self.run_time[job.id] = run_time_s

    def snapshot(self, jobs: Iterable[JobView] | None = None) -> Snapshot:
        """What a cycle sees now: every job, or only `jobs` (a caller bounding the pending queue it hands over)."""
        seen = tuple(self.jobs.values() if jobs is None else jobs)
        return Snapshot(self.clock.now(), self.backend.nodes(), seen, self.quotas, self.certified, self.gpu_models)

    def finish_elapsed(self) -> int:
        """Let the backend complete pods whose run time elapsed; returns how many."""
        finished = self.backend.advance()
        for event in finished:
            job = self.jobs.pop(event.job_id)
            self.done[job.id] = replace(job, status=JobStatus.SUCCEEDED)
        return len(finished)

    def apply(self, result: CycleResult) -> None:
        for decision in result.decisions:
            if isinstance(decision, Preempt):
                self._preempt(decision)
            elif isinstance(decision, Admit):
                self._admit(decision)

    def step(self, profile: Profile, schedule_fn: Callable = schedule) -> CycleResult:
        self.finish_elapsed()
        result = schedule_fn(self.snapshot(), profile)
        self.apply(result)
        return result

    def _preempt(self, d: Preempt) -> None:
        self.backend.evict(simulated_pod_name(d.job_id), d.reason.value)
        self.preemptions[d.job_id] += 1
        # Straight back to the queue: same submit time and history, nothing held.
        job = self.jobs[d.job_id]
        self.jobs[d.job_id] = replace(job, status=JobStatus.PENDING, started_at=None, allocation=None)

    def _admit(self, d: Admit) -> None:
        r = d.rightsized
        self.backend.bind(PodSpec(simulated_pod_name(d.job_id), d.job_id, d.gpu_model, d.gpu_shares,
                                  r.cpu_request_milli, r.memory_mib), d.node)
        alloc = Allocation(d.node, d.gpu_model, d.gpu_shares, r.cpu_request_milli, r.memory_mib, d.quota_kind)
        job = self.jobs[d.job_id]
        self.jobs[d.job_id] = replace(job, status=JobStatus.RUNNING, started_at=self.clock.now(),
                                      allocation=alloc)


def simulated_pod_name(job_id: int) -> str:
    """One pod per job, named again when a preempted job is bound anew (live pods are named per attempt:
    scheduler.services.run_pod_name)."""
    return f"job-{job_id}"
