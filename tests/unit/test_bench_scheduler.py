"""`bench scheduler` with gangs: the generated workload, and placements counted in workers placed."""

import json
import random

import pytest
from django.core.management import CommandError, call_command

from benchmarks.scheduler import BUILTIN_SHAPES, bench_scheduler, build_nodes, queued_cluster
from cluster.simulated.traces import GANG_WORKERS
from cluster.types import BLOCK_LABEL


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


def test_placements_count_every_worker_and_gangs_are_placed():
    f = bench_scheduler(nodes=120, pending=300, cycles=2, seed=5, gang_share=0.3)
    assert f["gang_placements"] > 0 and f["gang_workers_placed"] >= 2 * f["gang_placements"]
    assert f["placements"] > f["gang_workers_placed"]  # one-worker jobs too
    assert f["gang_share"] == 0.3 and f["placements_per_s"] > 0
    with pytest.raises(ValueError):
        bench_scheduler(nodes=10, pending=10, cycles=1, gang_share=1.5)


def test_the_command_takes_a_gang_share_and_writes_gang_placements(tmp_path):
    out = tmp_path / "bench.json"
    call_command("bench", "scheduler", nodes=60, pending=100, cycles=1, gang_share=0.2, json_path=str(out),
                 node_csv=str(tmp_path / "missing.csv"))
    figures = json.loads(out.read_text())
    assert {"placements", "gang_placements", "gang_workers_placed", "cycle_p99_s"} <= set(figures)
    with pytest.raises(CommandError, match="--gang-share"):
        call_command("bench", "scheduler", nodes=10, pending=10, cycles=1, gang_share=-0.1)
