"""`bench scheduler` with gangs: placements counted in workers placed."""

import json

import pytest
from django.core.management import CommandError, call_command

from benchmarks.scheduler import bench_scheduler


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
