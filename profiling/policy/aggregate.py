"""Combining per-minute profiles into run summaries, run summaries into task profiles
(docs/concepts/profiles.md#historical-profiles-and-their-use). Pure.

Minutes -> run: a resource's run mean is the sample-weighted mean of its minute means,
Σ(mean × samples) / Σ samples over the minutes that measured it (a minute whose mean is null,
e.g. GPU fields of a CPU-only pod, counts in neither sum), so combining minutes is exact: the
run mean equals the mean over every sample. The peak is the max of the minute peaks.

Runs -> task: the mean is the mean of the runs' means (each run counts once, whatever its length)
and the peak the max of their peaks, the rule `scheduler.policy.rightsizing` applies over the last
3 runs, so the task profile shows the numbers the scheduler right-sizes with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cluster.types import RunProfile

RESOURCES = ("gpu_util", "gpu_mem_util", "cpu_util", "mem_util", "cpu_cores",
             "sm_active", "sm_occupancy", "tensor_active", "dram_active")


@dataclass(frozen=True, slots=True)
class Stat:
    mean: float | None = None
    peak: float | None = None

    def as_dict(self) -> dict:
        return {"mean": self.mean, "peak": self.peak}


@dataclass(frozen=True, slots=True)
class Minute:
    """One minute of one run, as the pipeline measured it (means and peaks per resource)."""

    samples: int
    stats: dict[str, Stat]


@dataclass(frozen=True, slots=True)
class Usage:
    """Mean and peak of every resource over some samples (a run, or a task's runs)."""

    samples: int = 0
    minutes: int = 0
    stats: dict[str, Stat] = field(default_factory=dict)

    def stat(self, resource: str) -> Stat:
        return self.stats.get(resource, Stat())

    def as_dict(self) -> dict[str, dict]:
        return {resource: self.stat(resource).as_dict() for resource in RESOURCES}


def _max(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def combine_minutes(minutes: Iterable[Minute]) -> Usage:
    """A run's usage from its minutes: sample-weighted means, max peaks (exact, see the module doc)."""
    minutes = [m for m in minutes if m.samples and m.samples > 0]
    stats = {}
    for resource in RESOURCES:
        weighted, weight = 0.0, 0
        for m in minutes:
            mean = m.stats.get(resource, Stat()).mean
            if mean is not None:
                weighted += mean * m.samples
                weight += m.samples
        stats[resource] = Stat(mean=weighted / weight if weight else None,
                               peak=_max(m.stats.get(resource, Stat()).peak for m in minutes))
    return Usage(samples=sum(m.samples for m in minutes), minutes=len(minutes), stats=stats)


def combine_runs(runs: Sequence[Usage]) -> Usage:
    """A task's usage over some runs: mean of the run means, max of the run peaks."""
    stats = {}
    for resource in RESOURCES:
        means = [r.stat(resource).mean for r in runs if r.stat(resource).mean is not None]
        stats[resource] = Stat(mean=sum(means) / len(means) if means else None,
                               peak=_max(r.stat(resource).peak for r in runs))
    return Usage(samples=sum(r.samples for r in runs), minutes=sum(r.minutes for r in runs), stats=stats)


def mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def run_profile(usage: Usage, *, gpus: float) -> RunProfile | None:
    """What the scheduler's policies read of one past run; None when the run says nothing usable
    (no samples, no CPU figures, or a GPU job without GPU figures): no history beats a made-up one."""
    cpu = usage.stat("cpu_cores")
    if usage.samples <= 0 or cpu.mean is None or cpu.peak is None:
        return None
    gpu, gpu_mem = usage.stat("gpu_util"), usage.stat("gpu_mem_util")
    if gpus > 0 and (gpu.mean is None or gpu_mem.peak is None):
        return None
    return RunProfile(mean_gpu_util=gpu.mean or 0.0, peak_gpu_mem_util=gpu_mem.peak or 0.0,
                      mean_cpu_milli=cpu.mean * 1000, peak_cpu_milli=cpu.peak * 1000,
                      mean_sm_active=usage.stat("sm_active").mean if gpus > 0 else None,
                      mean_tensor_active=usage.stat("tensor_active").mean if gpus > 0 else None,
                      mean_dram_active=usage.stat("dram_active").mean if gpus > 0 else None)


@dataclass(frozen=True, slots=True)
class TaskHistory:
    """A task's past as the scheduler reads it (all runs of jobs with the same task key).

    `runs`: the profiles of its ended runs that measured something, in run-end order (oldest first,
    as `cluster.types.JobView.history`). `run_s`: durations of its succeeded runs in run-end order,
    for the long/short pool rule (a preempted or killed run's duration says nothing of the job's length).
    """

    task_key: str
    runs: tuple[RunProfile, ...] = ()
    run_s: tuple[float, ...] = ()
