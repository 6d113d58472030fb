"""Right-sizing a request from the task's last runs (docs/concepts/quotas-and-priority.md#right-sizing).

GPUs = ceil(req x max(mean GPU busy, peak GPU-mem util) / 0.9); CPU request = mean CPU / 0.5;
CPU limit = peak CPU / 0.5. GPU busy is SM active where the run measured it, else GPU util (GPU util counts
the time in which any kernel ran: 40 % for a launch-bound ResNet-50 whose SMs are 27 % active on an H200,
docs/reference/metrics.md). Over the last 3 runs the mean is the mean of the runs' means and
the peak the max of their peaks. Never above the request. Floors: a whole-GPU job keeps at
least 1 GPU, a fractional job keeps its fraction (sharing granularity is the user's choice),
CPU stays >= 100m (profile.cpu_floor_milli) and limit >= request. Memory is kept as asked.
A job whose admin chose to keep its request (`keep_request`) is never right-sized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from cluster.types import JobView, mean_gpu_activity
from scheduler.policy.profile import Profile


@dataclass(frozen=True, slots=True)
class Request:
    gpus: float
    cpu_request_milli: int
    cpu_limit_milli: int
    memory_mib: int
    # what the GPU count was sized on, e.g. "mean SM active 27%" (for the decision's sentence; not part of equality)
    basis: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        return (f"{self.gpus:g} GPU, {self.cpu_request_milli}m CPU (limit {self.cpu_limit_milli}m), "
                f"{self.memory_mib} MiB")


def requested(job: JobView) -> Request:
    return Request(job.gpus, job.cpu_milli, job.cpu_milli, job.memory_mib)


@dataclass(frozen=True, slots=True)
class RecentUse:
    """What right-sizing reads from the last runs (shown to users beside the advice)."""

    runs: int
    mean_gpu_busy: float  # mean of the runs' means of SM active, or GPU util where a run lacks it
    gpu_busy_source: str  # "SM active", "GPU util" or "SM active and GPU util"
    peak_gpu_mem_util: float  # max of the runs' peaks
    mean_cpu_milli: float
    peak_cpu_milli: float

    @property
    def gpu_util(self) -> float:
        return max(self.mean_gpu_busy, self.peak_gpu_mem_util)


def recent_use(job: JobView, profile: Profile) -> RecentUse | None:
    runs = job.history[-profile.rightsizing_runs:]
    if not runs:
        return None
    busy = mean_gpu_activity(runs)
    return RecentUse(len(runs), busy.value, busy.source, max(r.peak_gpu_mem_util for r in runs),
                     sum(r.mean_cpu_milli for r in runs) / len(runs), max(r.peak_cpu_milli for r in runs))


def rightsize(job: JobView, profile: Profile) -> Request:
    use = recent_use(job, profile) if profile.rightsizing and not job.keep_request else None
    if use is None:
        return requested(job)
    gpus = _clamp(_ceil(job.gpus * use.gpu_util / profile.gpu_util_target), min(job.gpus, 1.0), job.gpus)
    floor = min(profile.cpu_floor_milli, job.cpu_milli)
    cpu_request = int(_clamp(_ceil(use.mean_cpu_milli / profile.cpu_util_target), floor, job.cpu_milli))
    cpu_limit = int(_clamp(_ceil(use.peak_cpu_milli / profile.cpu_util_target), cpu_request, job.cpu_milli))
    basis = (f"mean {use.gpu_busy_source} {use.mean_gpu_busy:.0%}" if use.mean_gpu_busy >= use.peak_gpu_mem_util
             else f"peak GPU memory {use.peak_gpu_mem_util:.0%}")
    return Request(float(gpus), cpu_request, cpu_limit, job.memory_mib, basis=basis)


def _ceil(x: float) -> int:
    """ceil() that ignores float noise (4 x 0.45 / 0.9 is 2, not 3)."""
    return math.ceil(x - 1e-9)


def _clamp(x: float, low: float, high: float) -> float:
    return max(low, min(high, x))
