"""The scheduler's view of the world for a cycle: jobs, quotas and certifications from the database, nodes from the
cluster, turned into the frozen dataclasses the pure policy reads (colocation/observe.py is its sibling)."""
from cluster.backend import ClusterBackend
from cluster.types import (Allocation, GpuShare, JobStatus as JobViewStatus, JobView, Pool, QuotaKind, QuotaNodeView,
                           QuotaView, Snapshot, Topology)
from core.models import Department, GPUModel
from profiling.policy.aggregate import TaskHistory
from profiling.selectors import task_histories
from scheduler.models import Framework, JobRun, JobStatus, Quota, TrainingJob

LIVE = (JobStatus.PENDING, JobStatus.ADMITTED, JobStatus.RUNNING)


def _allocation(job: TrainingJob, node: str, shares: list[list[float]]) -> Allocation:
    """One worker's allocation: its node and GPUs; the rest is per worker and the same for all."""
    return Allocation(
        node=node,
        gpu_model=job.assigned_gpu_model.name if job.assigned_gpu_model else None,
        gpu_shares=tuple(GpuShare(int(i), float(s)) for i, s in shares),
        cpu_milli=job.alloc_cpu_milli or job.cpu_milli,
        memory_mib=job.alloc_memory_mib or job.memory_mib,
        quota_kind=QuotaKind(job.quota_kind) if job.quota_kind else None,
    )


def _allocations(job: TrainingJob, run: JobRun | None) -> tuple[Allocation | None, tuple[Allocation, ...]]:
    """Worker 0's allocation and the other workers' (a gang's, from its run), or none while not holding."""
    if job.status not in (JobStatus.ADMITTED, JobStatus.RUNNING) or run is None:
        return None, ()
    if not run.workers:
        return _allocation(job, job.node.name if job.node else "", run.gpu_shares), ()
    first, *peers = (_allocation(job, w["node"], w["gpu_shares"]) for w in run.workers)
    return first, tuple(peers)


def job_view(job: TrainingJob, run: JobRun | None, history: TaskHistory | None = None) -> JobView:
    allocation, peers = _allocations(job, run)
    return JobView(
        id=job.pk, name=job.name, task_key=job.task_key, department=job.department.name, framework=str(job.framework),
        gpu_model=job.gpu_model.name if job.gpu_model else None, gpus=float(job.gpus), cpu_milli=job.cpu_milli,
        memory_mib=job.memory_mib, status=JobViewStatus(job.status), submitted_at=job.submitted_at.timestamp(),
        started_at=job.started_at.timestamp() if job.started_at else None, allocation=allocation, peers=peers,
        workers=job.workers, topology=Topology(job.topology), expected_duration_s=job.expected_duration_s,
        preferred_pool=Pool(job.pool_preference) if job.pool_preference else None,
        history=history.runs if history else (), keep_request=job.keep_request,
        past_run_s=history.run_s if history else (), preemptible=job.preemptible,
    )


def snapshot_from_db(backend: ClusterBackend, now: float) -> Snapshot:
    jobs = list(
        TrainingJob.objects.filter(status__in=LIVE)
        .select_related("department", "framework", "gpu_model", "assigned_gpu_model", "node")
    )
    runs = {run.job_id: run for run in JobRun.objects.filter(job__in=jobs, ended_at__isnull=True)}
    # The tasks' past runs (profiles and run times) from the profiling app: one query for every job.
    histories = task_histories(task_keys={j.task_key for j in jobs})
    quotas = [
        QuotaView(q.department.name, q.resource, float(q.own), float(q.borrowed),
                  None if q.lend_limit is None else float(q.lend_limit))
        for q in Quota.objects.select_related("department", "gpu_model")
    ]
    certified: dict[str, frozenset[str]] = {}
    for framework in Framework.objects.prefetch_related("certified_on"):
        certified[str(framework)] = frozenset(m.name for m in framework.certified_on.all())
    return Snapshot(
        now=now, nodes=backend.nodes(), quotas=tuple(quotas),
        jobs=tuple(job_view(j, runs.get(j.pk), histories.get(j.task_key)) for j in jobs),
        certified=certified, gpu_models=tuple(GPUModel.objects.values_list("name", flat=True)),
        tree=quota_tree(),
    )


def quota_tree() -> tuple[QuotaNodeView, ...]:
    """The departments as quota-tree nodes; none while they are flat (no parents, default weights and run times, no
    fence): then the flat ledger decides."""
    rows = list(Department.objects.values_list("name", "parent__name", "weight", "reclaim_min_runtime_s", "fence"))
    if all(parent is None and weight == 1 and not runtime and not fence for _, parent, weight, runtime, fence in rows):
        return ()
    return tuple(QuotaNodeView(name, parent, float(weight), runtime, fence)
                 for name, parent, weight, runtime, fence in rows)
