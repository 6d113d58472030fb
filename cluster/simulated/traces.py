"""Build simulated nodes, quotas and the gang workload from public traces (read in place, never copied into the repo).

Validated Alibaba node and pod lists: cluster/simulated/alibaba.py."""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from cluster.fit import workers_on
from cluster.types import BLOCK_LABEL, NodeState, NodeView, Pool

CPU_GROUP = "CPU"
BLOCK_SIZE = 16  # nodes per topology block (a rack, a leaf switch) in the simulated clusters
GANG_WORKERS = (2, 16)  # the fewest and the most workers of a gang drawn from a trace pod
# Share of GPUs held by jobs of >= 8 GPUs in Helios Earth, May 2020: sum of running_gpu_num_noless_8 over sum of
# running_gpu_num, every minute of the 16 per-VC files of HeliosArtifact (analysis/2_cluster characterization/
# Earth_vcs/<vc>/cluster_sequence_vc.csv, 22,189,904 of 25,486,357 GPU-minutes). `helios_gang_share` computes it
# from those files when the traces folder has them (helios/vcs/); this figure stands in only when it does not,
# as the built-in cluster stands in for a missing node list.
HELIOS_GANG_SHARE_MEASURED = 0.870658


def alibaba_node(row: dict[str, str], *, name: str | None = None,
                 state: NodeState = NodeState.OFFLINE_NORMAL, pool: Pool = Pool.COLOCATION) -> NodeView:
    model = row["model"].strip() or None
    gpus = int(row["gpu"]) if model else 0
    return NodeView(name=name or row["sn"], resource_group=model or CPU_GROUP, gpu_model=model,
                    gpu_count=gpus, cpu_milli=int(row["cpu_milli"]), memory_mib=int(row["memory_mib"]),
                    pool=pool, state=state)


def helios_gpus(path: str | Path) -> dict[str, float]:
    """GPU quotas of the Helios Earth virtual clusters on the last day of the file (VCs with a quota), largest
    first."""
    with open(path, newline="") as f:
        last = list(csv.DictReader(f))[-1]
    sizes = {k: float(v) for k, v in last.items() if k.startswith("vc") and v and float(v) > 0}
    return dict(sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])))


def helios_shares(path: str | Path) -> dict[str, float]:
    """The same quotas (helios_gpus) as shares summing to 1."""
    sizes = helios_gpus(path)
    total = sum(sizes.values())
    return {k: v / total for k, v in sizes.items()}


# -- topology blocks ------------------------------------------------------------------------------
def block_names(nodes: Iterable[NodeView], size: int = BLOCK_SIZE) -> dict[str, str]:
    """Node name -> its block: consecutive nodes (in the given order) of one GPU model, `size` to a block, named
    `<model>-b<k>` (`cpu-b<k>` for CPU-only nodes). A pure function of the order, so every builder of the same
    list gets the same blocks."""
    if size < 1:
        raise ValueError(f"block size must be >= 1, got {size}")
    seen: dict[str, int] = {}
    out: dict[str, str] = {}
    for node in nodes:
        group = (node.gpu_model or CPU_GROUP).lower()
        k = seen.get(group, 0)
        seen[group] = k + 1
        out[node.name] = f"{group}-b{k // size}"
    return out


def with_blocks(nodes: Sequence[NodeView], size: int = BLOCK_SIZE) -> list[NodeView]:
    """The nodes labelled with their block (cluster.types.BLOCK_LABEL); a label already set is kept (an operator's)."""
    blocks = block_names(nodes, size)
    return [n if BLOCK_LABEL in n.labels else replace(n, labels={**n.labels, BLOCK_LABEL: blocks[n.name]})
            for n in nodes]


# -- gangs in a pod trace -------------------------------------------------------------------------
def helios_gang_share(helios_dir: str | Path) -> float | None:
    """Share of the GPUs held by jobs of >= 8 GPUs (Helios' multi-node jobs) over every minute of the per-VC
    files `<helios_dir>/vcs/*.csv` (columns running_gpu_num, running_gpu_num_noless_8); None without them."""
    files = sorted(Path(helios_dir, "vcs").glob("*.csv"))
    big = held = 0.0
    for path in files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                big += float(row["running_gpu_num_noless_8"])
                held += float(row["running_gpu_num"])
    return big / held if held else None


def gang_share(helios_dir: str | Path) -> tuple[float, str]:
    """The share of GPUs the gangs of a workload should hold, and where it comes from."""
    measured = helios_gang_share(helios_dir)
    if measured is not None:
        return measured, f"{Path(helios_dir) / 'vcs'} (running_gpu_num_noless_8 / running_gpu_num)"
    return HELIOS_GANG_SHARE_MEASURED, "Helios Earth May 2020, measured once (helios/vcs/ not in the traces folder)"


class PodLike(Protocol):
    name: str
    gpus: float


class TimedPod(Protocol):
    scheduled: float | None
    deletion: float | None


# The demo's run times (demo/trace_jobs.py, replay --demo): the trace's sped up, kept within 2 min - 2 h of the
# demo's clock; a pod that never ran (or never ended) in the trace runs 5 min.
DEMO_MIN_RUN_S, DEMO_MAX_RUN_S, DEMO_NEVER_RAN_S = 120.0, 7200.0, 300.0


def demo_run_s(pod: TimedPod, speedup: float) -> float:
    ran = pod.deletion - pod.scheduled if pod.scheduled is not None and pod.deletion is not None else None
    return min(max(ran / speedup if ran is not None else DEMO_NEVER_RAN_S, DEMO_MIN_RUN_S), DEMO_MAX_RUN_S)


@dataclass(frozen=True, slots=True)
class GangPlan:
    """Which trace pods become gangs: `workers` maps a pod's name to its workers (pods absent run alone).
    `growth` = offered GPU-time with the gangs / without: arrivals spread by it keep the offered GPU load."""

    workers: dict[str, int]
    target_share: float
    share: float  # of the offered GPU-time held by gangs, as planned
    growth: float

    def of(self, pod: PodLike) -> int:
        return self.workers.get(pod.name, 1)


def _share(gang: float, rest: float) -> float:
    return gang / (gang + rest) if gang + rest else 0.0


def _unit(text: str) -> float:
    """A stable number in [0, 1) from a string (not Python's salted hash())."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


def gang_workers_of(name: str) -> int:
    """A pod's workers should it become a gang: uniform over GANG_WORKERS, by a hash of its name."""
    low, high = GANG_WORKERS
    return low + int(_unit(f"gang-workers:{name}") * (high - low + 1))


class NodeSize(Protocol):
    gpu_count: int
    cpu_milli: int
    memory_mib: int


def workers_room(gpus: float, cpu_milli: int, memory_mib: int, nodes: Iterable[NodeSize]) -> int:
    """How many workers of this shape the nodes hold when empty (a gang larger than that never starts)."""
    return sum(workers_on(gpus, cpu_milli, memory_mib, n.gpu_count, n.cpu_milli, n.memory_mib) for n in nodes)


def gang_plan(pods: Sequence[PodLike], share: float, run_s: Callable[[PodLike], float],
              max_workers: Callable[[PodLike], int] | None = None) -> GangPlan:
    """Turn pods of whole GPUs into gangs (each worker the pod's shape, 2-16 workers by a hash of the name, at most
    `max_workers(pod)`: what the cluster could ever hold), in the order of another hash of the name, until gangs
    hold `share` of the offered GPU-time (GPUs x workers x run time): the workload's share of GPUs held by gang
    jobs matches the measured one (Helios: jobs of >= 8 GPUs)."""
    def gpu_time(pod: PodLike) -> float:
        t = run_s(pod)
        return pod.gpus * t if math.isfinite(t) else 0.0

    base = sum(gpu_time(p) for p in pods)
    eligible = sorted((p for p in pods if p.gpus >= 1 and float(p.gpus).is_integer() and gpu_time(p) > 0),
                      key=lambda p: (_unit(f"gang:{p.name}"), p.name))
    workers: dict[str, int] = {}
    gang, rest = 0.0, base
    for pod in eligible:
        w = min(gang_workers_of(pod.name), max_workers(pod) if max_workers else GANG_WORKERS[1])
        if w < GANG_WORKERS[0]:
            continue
        after = (gang + w * gpu_time(pod), rest - gpu_time(pod))
        # a pod whose gang would pass the target is skipped: later (shorter, smaller) ones fill the gap
        if _share(*after) <= share:
            workers[pod.name] = w
            gang, rest = after
    total = gang + rest
    return GangPlan(workers, share, gang / total if total else 0.0, total / base if base else 1.0)
