"""A heterogeneous cluster shaped like the Alibaba GPU 2023 node list (topology blocks of 16 nodes of a model) with a
queue of synthetic jobs, on the simulated training cluster and a virtual clock: what `bench scheduler` times and
the cycle's golden test replays (Kueue's pkg/util/testing builders serve its tests and its performance tools alike)."""

from __future__ import annotations

import csv
import random
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

from cluster.clock import VirtualClock
from cluster.simulated.traces import GANG_WORKERS, alibaba_node, with_blocks
from cluster.types import JobStatus, JobView, NodeView, QuotaNodeView, QuotaView, RunProfile, capacity_by_resource
from experiments.simulated_training import SimulatedTraining

# (model, gpus, cpu_milli, memory_mib): count — the most common shapes of the Alibaba 2023 list,
# used when the trace file is not available.
BUILTIN_SHAPES: dict[tuple[str, int, int, int], int] = {
    ("G2", 8, 96000, 393216): 549, ("T4", 2, 104000, 524288): 387, ("", 0, 32000, 262144): 129,
    ("P100", 2, 16000, 122880): 107, ("", 0, 96000, 524288): 59, ("G3", 8, 128000, 786432): 39,
    ("V100M16", 4, 32000, 131072): 28, ("P100", 2, 64000, 262144): 22, ("V100M32", 8, 96000, 786432): 21,
    ("T4", 4, 96000, 393216): 17, ("A10", 1, 128000, 1048576): 2,
}

FRAMEWORKS = {
    "pytorch-2.1": None,  # certified on every model
    "tensorflow-2.4": frozenset({"G2", "T4", "P100", "V100M16", "V100M32"}),
    "paddle-2.5": frozenset({"G2", "T4", "P100"}),
    "caffe-1.0": frozenset({"P100", "V100M16", "T4"}),
}
JOB_GPUS = (0.25, 0.5, 1, 1, 1, 2, 2, 4, 8)
GANG_GPUS = (1, 2, 4, 8, 8)  # GPUs per gang worker: whole GPUs, a full 8-GPU node the most common
DEPARTMENTS = tuple(f"dept-{i}" for i in range(10))


def node_shapes(csv_path: str | Path | None) -> dict[tuple[str, int, int, int], int]:
    """Node shape distribution from the Alibaba node list, or the built-in one."""
    if csv_path is None or not Path(csv_path).exists():
        return BUILTIN_SHAPES
    with open(csv_path, newline="") as f:
        return dict(Counter((r["model"].strip(), int(r["gpu"]), int(r["cpu_milli"]), int(r["memory_mib"]))
                            for r in csv.DictReader(f)))


def build_nodes(count: int, shapes: dict[tuple[str, int, int, int], int], rng: random.Random) -> list[NodeView]:
    drawn = rng.choices(list(shapes), weights=list(shapes.values()), k=count)
    return with_blocks([alibaba_node({"model": m, "gpu": str(g), "cpu_milli": str(c), "memory_mib": str(mem),
                                      "sn": ""}, name=f"node-{i:05d}") for i, (m, g, c, mem) in enumerate(drawn)])


def build_quotas(nodes: list[NodeView], departments: tuple[str, ...] = DEPARTMENTS,
                 borrow_ratio: float = 0.3) -> list[QuotaView]:
    """Own quotas split the cluster evenly; each department may borrow `borrow_ratio` of it."""
    capacity = capacity_by_resource(nodes)
    share = 1 / len(departments)
    return [QuotaView(d, key, total * share, total * borrow_ratio)
            for d in departments for key, total in sorted(capacity.items())]


def quota_tree(leaves: int, divisions: int = 4, groups: int = 10) -> tuple[tuple[QuotaNodeView, ...], tuple[str, ...]]:
    """A 3-level tree (divisions -> groups -> teams) with `leaves` teams spread evenly, the inner nodes without own
    quota or limits (the teams' quotas are build_quotas'), and the teams' names. Divisions protect borrowed work
    for 5 minutes (reclaim_min_runtime_s, as the Helios replay tree does), so the no-churn rules run too."""
    nodes = [QuotaNodeView(f"div-{d}", None, reclaim_min_runtime_s=300.0) for d in range(divisions)]
    nodes += [QuotaNodeView(f"grp-{d}-{g}", f"div-{d}") for d in range(divisions) for g in range(groups)]
    teams = tuple(f"team-{i}" for i in range(leaves))
    nodes += [QuotaNodeView(t, nodes[divisions + i % (divisions * groups)].name, 1.0 + i % 3) for i, t in
              enumerate(teams)]
    return tuple(nodes), teams


def certified_map(gpu_models: Iterable[str]) -> dict[str, frozenset[str]]:
    models = frozenset(gpu_models)
    return {fw: (models if only is None else only & models) for fw, only in FRAMEWORKS.items()}


def build_job(job_id: int, now: float, gpu_weights: dict[str, int], rng: random.Random,
              certified: dict[str, frozenset[str]], gang_share: float = 0.0,
              departments: tuple[str, ...] = DEPARTMENTS) -> JobView:
    # the gang draw only when gangs are asked for: without them the random stream (and the golden cycle) is unchanged
    workers = rng.randint(*GANG_WORKERS) if gang_share and rng.random() < gang_share else 1
    if workers > 1:
        gpus = rng.choice(GANG_GPUS)
    else:
        gpus = rng.choice(JOB_GPUS) if rng.random() > 0.1 else 0
    framework = rng.choice(sorted(certified))
    models = [m for m in gpu_weights if m in certified[framework]]
    model = rng.choices(models, weights=[gpu_weights[m] for m in models])[0] if gpus and models else None
    per_gpu = max(gpus, 0.5)
    history = tuple(RunProfile(rng.uniform(0.1, 1.0), rng.uniform(0.1, 1.0), 2000 * per_gpu * rng.random(),
                               4000 * per_gpu * rng.random())
                    for _ in range(3)) if rng.random() < 0.5 else ()
    return JobView(job_id, f"job-{job_id}", f"task-{job_id % 500}", rng.choice(departments), framework,
                   model, float(gpus), int(4000 * per_gpu), int(16384 * per_gpu), JobStatus.PENDING,
                   submitted_at=now - rng.uniform(0, 7200), history=history, workers=workers)


def queued_cluster(nodes: int, shapes, rng: random.Random, pending: int, *, borrow_ratio: float = 0.3,
                   runtime_s: tuple[float, float] = (600, 4 * 3600), batch: int = 100, gang_share: float = 0.0,
                   tree_leaves: int = 0) -> tuple[SimulatedTraining, VirtualClock, Callable[[int], float]]:
    """A cluster of `nodes` with enough jobs queued to fill every GPU plus `pending` more, and `arrive(n)`, which
    submits n more jobs (returning their GPUs, every worker's). Shared by the benchmark and the cycle's golden
    test. With `tree_leaves`, the departments are the leaves of a 3-level quota tree (quota_tree)."""
    cluster = build_nodes(nodes, shapes, rng)
    gpu_weights: Counter[str] = Counter()
    for n in cluster:
        if n.gpu_model:
            gpu_weights[n.gpu_model] += n.gpu_count
    clock = VirtualClock(start=1_700_000_000.0)
    certified = certified_map(gpu_weights)
    tree, departments = quota_tree(tree_leaves) if tree_leaves else ((), DEPARTMENTS)
    sim = SimulatedTraining(cluster, build_quotas(cluster, departments, borrow_ratio), certified, clock, tree)
    ids = iter(range(1, 10**9))

    def arrive(count: int) -> float:
        gpus = 0.0
        for _ in range(count):
            job = build_job(next(ids), clock.now(), gpu_weights, rng, certified, gang_share, departments)
            sim.submit(job, rng.uniform(*runtime_s))
            gpus += job.total_gpus
        return gpus

    capacity, queued = sum(gpu_weights.values()), 0.0
    while queued < capacity:
        queued += arrive(batch)
    arrive(pending)
    return sim, clock, arrive
