"""The acting layer on the simulated cluster that replay, the co-location simulation, the scheduler benchmark and
tests share: it keeps the jobs and applies a cycle's decisions to the simulated backend.

A gang (a job of several workers) is acted on whole, as the live loop does
(docs/concepts/gangs-and-reservations.md#binding-a-gang): an Admit
binds every worker or none; a preemption evicts every worker; the job finishes when its last worker does (each
worker runs the job's run time, so they end together); a worker evicted by anyone else (a take-back) ends the run
of the whole gang, whose other workers are evicted at once, and the job goes back to the queue whole, once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import replace

from cluster.backend import WORKER_LABEL, BackendError, PodSpec
from cluster.clock import VirtualClock
from cluster.simulated import SimulatedCluster
from cluster.types import Allocation, JobStatus, JobView, NodeView, QuotaNodeView, QuotaView, Snapshot
from scheduler.policy import Admit, CycleResult, Preempt, Profile, Reserve, StillPending, schedule
from scheduler.policy.dispatch import dispatch

Requeue = Callable[[JobView], JobView]


def back_to_queue(job: JobView) -> JobView:
    """Straight back to the queue: same submit time and history, nothing held."""
    return replace(job, status=JobStatus.PENDING, started_at=None, allocation=None, peers=())


class SimulatedTraining:
    """Keeps the jobs and applies decisions to the simulated backend; the live loop does the same against the
    database and Kubernetes, with the same policy."""

    def __init__(self, nodes: Iterable[NodeView], quotas: Iterable[QuotaView],
                 certified: dict[str, frozenset[str]], clock: VirtualClock,
                 tree: Iterable[QuotaNodeView] = ()) -> None:
        self.clock = clock
        self.quotas = tuple(quotas)
        self.tree = tuple(tree)  # the quota tree's nodes (none: flat departments)
        self.certified = certified
        self.jobs: dict[int, JobView] = {}  # pending, admitted and running
        self.done: dict[int, JobView] = {}
        self.ended_at: dict[int, float] = {}  # when each done job's last worker really finished (between ticks)
        self.run_time: dict[int, float] = {}  # simulated work length per job (every worker of a gang runs it)
        self.preemptions: Counter[int] = Counter()
        self.requeues: Counter[int] = Counter()  # runs ended by a worker evicted by someone else
        self.bind_failures = 0  # admissions undone because one worker could not be bound
        self.running_pods: dict[int, set[str]] = {}  # job -> its workers' pods still running
        self.backend = SimulatedCluster(nodes, clock, lambda pod: self.run_time.get(pod.job_id))
        self.gpu_models = tuple(sorted({n.gpu_model for n in self.backend.nodes() if n.gpu_model}))

    def submit(self, job: JobView, run_time_s: float | None = None) -> None:
        self.jobs[job.id] = job
        if run_time_s is not None:
            self.run_time[job.id] = run_time_s

    def snapshot(self, jobs: Iterable[JobView] | None = None) -> Snapshot:
        """What a cycle sees now: every job, or only `jobs` (a caller bounding the pending queue it hands over)."""
        seen = tuple(self.jobs.values() if jobs is None else jobs)
        return Snapshot(self.clock.now(), self.backend.nodes(), seen, self.quotas, self.certified, self.gpu_models,
                        self.tree)

    def finish_elapsed(self) -> int:
        """Let the backend complete pods whose run time elapsed; returns how many jobs ended (a gang ends with its
        last worker)."""
        ended = 0
        for event in self.backend.advance():
            pods = self.running_pods.get(event.job_id)
            if pods is None:
                continue
            pods.discard(event.pod)
            if not pods:
                del self.running_pods[event.job_id]
                self._completed(self.jobs.pop(event.job_id), event.at)
                ended += 1
        return ended

    def _completed(self, job: JobView, at: float) -> None:
        self.done[job.id] = replace(job, status=JobStatus.SUCCEEDED)
        self.ended_at[job.id] = at

    def apply(self, result: CycleResult) -> None:
        dispatch(result, self)

    def step(self, profile: Profile, schedule_fn: Callable = schedule) -> CycleResult:
        self.finish_elapsed()
        result = schedule_fn(self.snapshot(), profile)
        self.apply(result)
        return result

    def pods_of(self, job_id: int) -> tuple[str, ...]:
        """The pods of a job's workers that still run, rank 0 first."""
        return tuple(sorted(self.running_pods.get(job_id, ()), key=_rank))

    def end_run(self, job_id: int, reason: str, requeue: Requeue = back_to_queue) -> JobView | None:
        """End a job's run: evict every worker still bound and put the job back in the queue whole (`requeue`
        gives its pending form). Returns the job as it was, or None when it held nothing (already ended: a gang
        whose workers are evicted one by one is requeued once)."""
        job = self.jobs.get(job_id)
        if job is None or not job.status.holds_resources:
            return None
        for pod in self.pods_of(job_id):
            self.backend.evict(pod, reason)
        self.running_pods.pop(job_id, None)
        self.jobs[job_id] = requeue(job)
        return job

    def worker_lost(self, pod: str, reason: str, requeue: Requeue = back_to_queue) -> JobView | None:
        """A worker's pod was evicted by someone else (a take-back): the gang's run ends, its other workers are
        evicted and the job is requeued whole, once. Returns the job as it was, or None (not a running worker)."""
        job_id = next((j for j, pods in self.running_pods.items() if pod in pods), None)
        if job_id is None:
            return None
        self.running_pods[job_id].discard(pod)
        job = self.end_run(job_id, reason, requeue)
        if job is not None:
            self.requeues[job_id] += 1
        return job

    # -- the effects of a cycle's decisions (scheduler.policy.dispatch.Effects) --------------------

    def preempt(self, d: Preempt) -> bool:
        """Every worker of a gang goes: a preemption never leaves part of a gang running. False: the simulated
        backend frees the room at once."""
        if self.end_run(d.job_id, d.reason.value) is not None:
            self.preemptions[d.job_id] += 1
        return False

    def wait_for_victims(self, d: Admit, victims: tuple[int, ...]) -> None:
        """Never asked: no victim's pod outlives its preemption here."""

    def reserve(self, d: Reserve) -> None:
        """Nothing to keep: the next cycle's snapshot decides again."""

    def pending(self, d: StillPending) -> None:
        """Nothing to keep: the job stays in `jobs` as it was."""

    def admit(self, d: Admit) -> bool:
        """Bind every worker or none (a refused bind undoes the others; the job stays pending)."""
        r = d.rightsized
        gang = len(d.workers) > 1
        bound: list[str] = []
        try:
            for rank, w in enumerate(d.workers):
                name = simulated_pod_name(d.job_id, rank)
                labels = {WORKER_LABEL: str(rank)} if gang else {}
                self.backend.bind(PodSpec(name, d.job_id, d.gpu_model, w.gpu_shares, r.cpu_request_milli,
                                          r.memory_mib, labels=labels), w.node)
                bound.append(name)
        except BackendError:
            for name in bound:
                self.backend.evict(name, "bind-failed")
            self.bind_failures += 1
            return False
        allocs = [Allocation(w.node, d.gpu_model, w.gpu_shares, r.cpu_request_milli, r.memory_mib, d.quota_kind)
                  for w in d.workers]
        self.running_pods[d.job_id] = set(bound)
        job = self.jobs[d.job_id]
        self.jobs[d.job_id] = replace(job, status=JobStatus.RUNNING, started_at=self.clock.now(),
                                      allocation=allocs[0], peers=tuple(allocs[1:]))
        return True


def simulated_pod_name(job_id: int, rank: int = 0) -> str:
    """A worker's pod, named again when a preempted job is bound anew (live pods are named per attempt:
    scheduler.runs.run_pod_name); rank 0 keeps the one-pod job's name."""
    return f"job-{job_id}" if rank == 0 else f"job-{job_id}-w{rank}"


def _rank(pod: str) -> int:
    _, sep, tail = pod.rpartition("-w")
    return int(tail) if sep and tail.isdigit() else 0
