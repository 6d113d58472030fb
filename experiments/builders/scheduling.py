"""Fluent builders of the scheduler policy's inputs (nodes, jobs, quotas, snapshots), as Kueue's testing wrappers."""

from __future__ import annotations

import math
from dataclasses import replace

from cluster.types import (BLOCK_LABEL, CPU_KEY, MEMORY_KEY, Allocation, GpuShare, JobStatus, JobView, NodeState,
                           NodeView, Pool, QuotaKind, QuotaNodeView, QuotaView, RunProfile, Snapshot, Topology)

NOW = 1_000_000.0
MIN = 60.0
BIG = 10**9  # effectively unlimited CPU/memory


class NodeBuilder:
    def __init__(self, name: str, model: str | None = "T4", gpus: int = 4) -> None:
        self._node = NodeView(name=name, resource_group=model or "CPU", gpu_model=model, gpu_count=gpus,
                              cpu_milli=64000, memory_mib=262144, pool=Pool.COLOCATION,
                              state=NodeState.OFFLINE_NORMAL)

    def cpu(self, milli: int) -> NodeBuilder:
        return self._set(cpu_milli=milli)

    def memory(self, mib: int) -> NodeBuilder:
        return self._set(memory_mib=mib)

    def state(self, state: NodeState) -> NodeBuilder:
        return self._set(state=state)

    def pool(self, pool: Pool) -> NodeBuilder:
        return self._set(pool=pool)

    def block(self, name: str) -> NodeBuilder:
        return self._set(labels={**self._node.labels, BLOCK_LABEL: name})

    def used(self, *shares: float) -> NodeBuilder:
        return self._set(gpu_used=tuple(shares) + (0.0,) * (self._node.gpu_count - len(shares)))

    def _set(self, **fields: object) -> NodeBuilder:
        self._node = replace(self._node, **fields)
        return self

    def build(self) -> NodeView:
        return self._node


class JobBuilder:
    _next_id = 1

    def __init__(self, job_id: int | None = None) -> None:
        if job_id is None:
            job_id, JobBuilder._next_id = JobBuilder._next_id, JobBuilder._next_id + 1
        self._job = JobView(id=job_id, name=f"job-{job_id}", task_key=f"task-{job_id}", department="a",
                            framework="pytorch", gpu_model="T4", gpus=1.0, cpu_milli=1000, memory_mib=1024,
                            status=JobStatus.PENDING, submitted_at=NOW)

    def dept(self, name: str) -> JobBuilder:
        return self._set(department=name)

    def gpus(self, n: float) -> JobBuilder:
        return self._set(gpus=float(n))

    def model(self, name: str | None) -> JobBuilder:
        return self._set(gpu_model=name)

    def framework(self, name: str) -> JobBuilder:
        return self._set(framework=name)

    def cpu(self, milli: int) -> JobBuilder:
        return self._set(cpu_milli=milli)

    def memory(self, mib: int) -> JobBuilder:
        return self._set(memory_mib=mib)

    def pool(self, pool: Pool) -> JobBuilder:
        return self._set(preferred_pool=pool)

    def workers(self, n: int, topology: Topology = Topology.PACK) -> JobBuilder:
        return self._set(workers=n, topology=topology)

    def duration(self, seconds: float) -> JobBuilder:
        """The run time the submitter stated."""
        return self._set(expected_duration_s=seconds)

    def waited(self, seconds: float) -> JobBuilder:
        return self._set(submitted_at=NOW - seconds)

    def submitted(self, at: float) -> JobBuilder:
        return self._set(submitted_at=at)

    def history(self, *runs: tuple[float, float, float, float]) -> JobBuilder:
        """Runs as (mean GPU util, peak GPU-mem util, mean CPU milli, peak CPU milli), oldest first."""
        return self._set(history=tuple(RunProfile(*r) for r in runs))

    def util(self, mean_gpu_util: float) -> JobBuilder:
        return self.history((mean_gpu_util, mean_gpu_util, 500, 500))

    def running(self, node: str, *gpu_indices: int, share: float = 1.0, kind: QuotaKind | None = QuotaKind.OWN,
                ran: float = 3600.0, model: str | None = None) -> JobBuilder:
        """Running on `node` for `ran` seconds, holding `share` of each GPU index."""
        job = self._job
        alloc = Allocation(node, model or job.gpu_model if job.gpus else None,
                           tuple(GpuShare(i, share) for i in gpu_indices), job.cpu_milli, job.memory_mib, kind)
        return self._set(status=JobStatus.RUNNING, allocation=alloc, started_at=NOW - ran,
                         submitted_at=min(job.submitted_at, NOW - ran))

    def running_gang(self, *workers: tuple[str, tuple[int, ...]], kind: QuotaKind | None = QuotaKind.OWN,
                     ran: float = 3600.0) -> JobBuilder:
        """A gang running with one worker per (node, GPU indices), whole GPUs."""
        job = self._job
        allocs = tuple(Allocation(node, job.gpu_model, tuple(GpuShare(i, 1.0) for i in gpus), job.cpu_milli,
                                  job.memory_mib, kind) for node, gpus in workers)
        return self._set(workers=len(allocs), status=JobStatus.RUNNING, allocation=allocs[0], peers=allocs[1:],
                         started_at=NOW - ran, submitted_at=min(job.submitted_at, NOW - ran))

    def not_preemptible(self) -> JobBuilder:
        return self._set(preemptible=False)

    def _set(self, **fields: object) -> JobBuilder:
        self._job = replace(self._job, **fields)
        return self

    def build(self) -> JobView:
        return self._job


class SnapshotBuilder:
    def __init__(self, now: float = NOW) -> None:
        self.now = now
        self.nodes: list[NodeView] = []
        self.jobs: list[JobView] = []
        self.quotas: list[QuotaView] = []
        self.certified: dict[str, frozenset[str]] = {}
        self.tree: list[QuotaNodeView] = []

    def node(self, *nodes: NodeBuilder | NodeView) -> SnapshotBuilder:
        self.nodes += [n.build() if isinstance(n, NodeBuilder) else n for n in nodes]
        return self

    def job(self, *jobs: JobBuilder | JobView) -> SnapshotBuilder:
        self.jobs += [j.build() if isinstance(j, JobBuilder) else j for j in jobs]
        return self

    def quota(self, dept: str, resource: str, own: float, borrowed: float = 0.0,
              unlimited_cpu_memory: bool = True) -> SnapshotBuilder:
        """GPU (or any) quota; by default also gives the department unlimited CPU and memory."""
        self.quotas.append(QuotaView(dept, resource, own, borrowed))
        if unlimited_cpu_memory and not any(q.department == dept and q.resource == CPU_KEY for q in self.quotas):
            self.quotas += [QuotaView(dept, CPU_KEY, BIG, BIG), QuotaView(dept, MEMORY_KEY, BIG, BIG)]
        return self

    def tree_node(self, name: str, parent: str | None = None, resource: str = "T4", own: float = 0.0,
                  borrow: float = math.inf, lend: float | None = None, weight: float = 1.0,
                  reclaim_min_runtime_s: float = 0.0, fence: bool = False) -> SnapshotBuilder:
        """A quota-tree node with its quota of `resource` (no borrow limit unless given) and unlimited CPU and
        memory."""
        self.tree.append(QuotaNodeView(name, parent, weight, reclaim_min_runtime_s, fence))
        self.quotas += [QuotaView(name, resource, own, borrow, lend), QuotaView(name, CPU_KEY, BIG, BIG),
                        QuotaView(name, MEMORY_KEY, BIG, BIG)]
        return self

    def certify(self, framework: str, *models: str) -> SnapshotBuilder:
        self.certified[framework] = frozenset(models)
        return self

    def build(self) -> Snapshot:
        """Node usage = what the node builder set + what the running jobs on it hold (as a backend reports)."""
        models = tuple(sorted({n.gpu_model for n in self.nodes if n.gpu_model}))
        nodes = tuple(with_jobs(n, self.jobs) for n in self.nodes)
        return Snapshot(self.now, nodes, tuple(self.jobs), tuple(self.quotas), self.certified, models, tuple(self.tree))


def with_jobs(node: NodeView, jobs: list[JobView]) -> NodeView:
    """The node with what the jobs' workers on it hold (each worker a pod)."""
    here = [(job, rank, a) for job in jobs for rank, a in enumerate(job.allocations) if a.node == node.name]
    used = list(node.used_shares())
    for _, _, a in here:
        for s in a.gpu_shares:
            used[s.index] += s.share
    return replace(node, gpu_used=tuple(used), cpu_used=node.cpu_used + sum(a.cpu_milli for _, _, a in here),
                   memory_used=node.memory_used + sum(a.memory_mib for _, _, a in here),
                   pods=node.pods + tuple(job.name if not job.gang else f"{job.name}-{rank}" for job, rank, _ in here))
