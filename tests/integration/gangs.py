"""Gang jobs for the integration tests: four T4 nodes lent to training, a gang job on the database, and its admission
built by hand (the pure cycle's own gang admissions are tested in tests/unit; here the acting layer is)."""
from __future__ import annotations

from cluster.backend import RUNTIME_LABEL
from cluster.types import GpuShare, QuotaKind
from scheduler.policy.decisions import Admit, Reason, Worker
from scheduler.policy.priority import ScoreBreakdown
from scheduler.policy.rightsizing import Request

GANG_NODES = ("g-0", "g-1", "g-2", "g-3")
WHOLE_NODE = (GpuShare(0, 1.0), GpuShare(1, 1.0))  # both T4s of a gang node


def add_gang_nodes(world, names: tuple[str, ...] = GANG_NODES, *, online: bool = False) -> None:
    """T4 nodes of two GPUs in the co-location pool, lent to training (offline-normal: a take-back may claim them)
    or `online` serving. Lending automation is turned off, so only a test opens transitions."""
    from cluster.types import Pool
    from colocation.models import Node, NodeState

    state = NodeState.ONLINE_NORMAL if online else NodeState.OFFLINE_NORMAL
    for name in names:
        Node.objects.create(name=name, resource_group=world.groups["t4"], gpu_model=world.gpu_models["T4"],
                            gpu_count=2, cpu_milli=32000, memory_mib=131072, pool=Pool.COLOCATION, state=state)
    for group in world.groups.values():
        group.lending = False
        group.save()


def gang_job(world, *, workers: int = 4, gpus: str = "2", runtime_s: int | None = None, **overrides):
    """A pending pytorch gang of `workers` x `gpus` T4 (8 T4 is above ml-search's T4 quota: the real cycle never
    admits it, so a scheduler tick acts only on what the test set up)."""
    job = world.submit(gpus=gpus, gpu_model="T4", **overrides)
    job.workers = workers
    if runtime_s is not None:
        job.annotations = {RUNTIME_LABEL: str(runtime_s)}
    job.save()
    return job


def gang_admit(job, nodes: tuple[str, ...] = GANG_NODES, shares: tuple[GpuShare, ...] = WHOLE_NODE) -> Admit:
    """The cycle's admission of `job`: worker r on nodes[r], each on `shares`."""
    request = Request(float(job.gpus), job.cpu_milli, job.cpu_milli, job.memory_mib)
    return Admit(job_id=job.pk, job_name=job.name, node=nodes[0], gpu_model="T4", gpu_shares=shares,
                 quota_kind=QuotaKind.OWN, requested=request, rightsized=request,
                 score=ScoreBreakdown(1_000_000, 0, 0), preempting=(), reason=Reason.ADMITTED_OWN,
                 message=f"admitted on own quota: {len(nodes)} workers on {', '.join(nodes)}",
                 peers=tuple(Worker(node, shares) for node in nodes[1:]))


def gang_pods(job, attempt: int = 1) -> list[str]:
    return [f"job-{job.pk}-{attempt}-{rank}" for rank in range(job.workers)]
