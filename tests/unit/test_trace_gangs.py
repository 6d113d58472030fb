"""cluster/simulated/traces.py: topology blocks, the Helios share of GPUs held by big jobs, and the gang plan that
the demo and replay share."""

from dataclasses import dataclass

import pytest

from cluster.simulated.traces import (GANG_WORKERS, HELIOS_GANG_SHARE_MEASURED, block_names, demo_run_s,
                                      gang_plan, gang_share, gang_workers_of, helios_gang_share, with_blocks,
                                      workers_room)
from cluster.types import BLOCK_LABEL
from experiments.builders.scheduling import NodeBuilder

VCS_HEADER = "time,running_gpu_num,running_gpu_num_noless_8,running_gpu_num_less_8"


def test_blocks_group_consecutive_nodes_of_one_model():
    nodes = ([NodeBuilder(f"g{i}", "G2", 8).build() for i in range(5)] + [NodeBuilder("c0", None, 0).build()]
             + [NodeBuilder(f"t{i}", "T4", 2).build() for i in range(3)] + [NodeBuilder("g5", "G2", 8).build()])
    blocks = block_names(nodes, size=2)
    assert [blocks[f"g{i}"] for i in range(6)] == ["g2-b0", "g2-b0", "g2-b1", "g2-b1", "g2-b2", "g2-b2"]
    assert [blocks[f"t{i}"] for i in range(3)] == ["t4-b0", "t4-b0", "t4-b1"] and blocks["c0"] == "cpu-b0"
    labelled = with_blocks(nodes, size=2)
    assert [n.labels[BLOCK_LABEL] for n in labelled] == [blocks[n.name] for n in nodes]
    with pytest.raises(ValueError):
        block_names(nodes, size=0)


def test_a_block_label_already_set_is_kept():
    mine = NodeBuilder("g0", "G2", 8).block("rack-7").build()
    assert with_blocks([mine, NodeBuilder("g1", "G2", 8).build()])[0].labels[BLOCK_LABEL] == "rack-7"


def test_the_helios_share_is_read_from_the_per_vc_minutes(tmp_path):
    vcs = tmp_path / "vcs"
    vcs.mkdir()
    (vcs / "vcA.csv").write_text(f"{VCS_HEADER}\n2020-05-01 00:00:00,10,8,2\n2020-05-01 00:01:00,20,16,4\n")
    (vcs / "vcB.csv").write_text(f"{VCS_HEADER}\n2020-05-01 00:00:00,10,0,10\n")
    assert helios_gang_share(tmp_path) == pytest.approx(24 / 40)
    assert gang_share(tmp_path)[0] == pytest.approx(0.6) and "vcs" in gang_share(tmp_path)[1]
    # without the per-VC files: the figure measured once from them, and it says so
    share, source = gang_share(tmp_path / "missing")
    assert helios_gang_share(tmp_path / "missing") is None
    assert share == HELIOS_GANG_SHARE_MEASURED and "measured once" in source


@dataclass(frozen=True)
class Pod:
    name: str
    gpus: float
    run: float = 100.0


def test_the_plan_turns_whole_gpu_pods_into_gangs_until_they_hold_the_share():
    pods = [Pod(f"w{i}", 1 + i % 4) for i in range(300)] + [Pod(f"f{i}", 0.5) for i in range(300)]
    plan = gang_plan(pods, 0.6, lambda p: p.run)
    assert plan.share == pytest.approx(0.6, abs=0.01) and plan.share <= 0.6
    assert set(plan.workers) <= {p.name for p in pods if p.gpus >= 1}  # fractions never become gangs
    assert all(GANG_WORKERS[0] <= w <= GANG_WORKERS[1] for w in plan.workers.values())
    assert all(plan.workers[n] == gang_workers_of(n) for n in plan.workers)
    # growth = offered GPU-time with the gangs / without
    base = sum(p.gpus * p.run for p in pods)
    with_gangs = sum(p.gpus * p.run * plan.of(p) for p in pods)
    assert plan.growth == pytest.approx(with_gangs / base)
    assert gang_plan(list(reversed(pods)), 0.6, lambda p: p.run) == plan  # by name, not by list order


def test_the_plan_respects_the_room_and_a_zero_share():
    pods = [Pod(f"w{i}", 8) for i in range(50)]
    capped = gang_plan(pods, 0.9, lambda p: p.run, max_workers=lambda p: 3)
    assert capped.workers and max(capped.workers.values()) <= 3
    assert not gang_plan(pods, 0.9, lambda p: p.run, max_workers=lambda p: 1).workers  # no room for two
    none = gang_plan(pods, 0.0, lambda p: p.run)
    assert none.workers == {} and none.growth == 1.0 and none.of(pods[0]) == 1


def test_room_counts_workers_an_empty_cluster_holds():
    nodes = [NodeBuilder("a", "G2", 8).build(), NodeBuilder("b", "G2", 4).build()]
    assert workers_room(4, 1000, 1024, nodes) == 3  # 2 on a, 1 on b
    assert workers_room(4, 40000, 1024, nodes) == 2  # 64 cores a node: one 40-core worker each


@dataclass(frozen=True)
class Timed:
    scheduled: float | None
    deletion: float | None


def test_demo_run_times_are_sped_up_and_kept_within_two_minutes_and_two_hours():
    assert demo_run_s(Timed(0, 60_000), 60) == 1000
    assert demo_run_s(Timed(0, 100), 60) == 120 and demo_run_s(Timed(0, 10**9), 60) == 7200
    assert demo_run_s(Timed(None, None), 60) == 300 and demo_run_s(Timed(5, None), 60) == 300
