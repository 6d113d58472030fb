"""The benchmark's cluster builder (experiments/builders/cluster.py): gangs in the generated workload, nodes in blocks."""

import random

from cluster.simulated.traces import GANG_WORKERS
from cluster.types import BLOCK_LABEL
from experiments.builders.cluster import BUILTIN_SHAPES, build_nodes, queued_cluster


def test_a_share_of_the_generated_jobs_are_gangs_of_whole_gpus():
    sim, _, _ = queued_cluster(40, BUILTIN_SHAPES, random.Random(3), 2000, gang_share=0.2)
    jobs = list(sim.jobs.values())
    gangs = [j for j in jobs if j.gang]
    assert 0.15 < len(gangs) / len(jobs) < 0.25
    assert all(GANG_WORKERS[0] <= j.workers <= GANG_WORKERS[1] and j.gpus >= 1 and j.gpus.is_integer()
               for j in gangs)
    assert not any(j.gang for j in queued_cluster(40, BUILTIN_SHAPES, random.Random(3), 200)[0].jobs.values())


def test_bench_nodes_come_in_blocks_of_one_model():
    nodes = build_nodes(100, BUILTIN_SHAPES, random.Random(1))
    blocks: dict[str, set[str | None]] = {}
    for n in nodes:
        blocks.setdefault(n.labels[BLOCK_LABEL], set()).add(n.gpu_model)
    assert all(len(models) == 1 for models in blocks.values())
    assert max(sum(1 for n in nodes if n.labels[BLOCK_LABEL] == b) for b in blocks) == 16
