"""Replay outcomes on tiny traces, computed by hand for each policy."""
import json

import numpy as np
import pytest

from experiments.replay import replay
from experiments.replay.engine import CLOCK_SHIFT_S, run_policies, run_policy, shifted
from experiments.replay.metrics import pooled_by_size
from experiments.replay.report import noise_change, reservations_across, reservations_change
from scheduler.policy import PROFILES, get_profile
from tests.unit.replay_fixtures import POD_HEADER, cluster, pod, setup_for, write

POLICIES = ("tidal", "fifo", "quota-borrowing")


@pytest.fixture
def blocking_trace(tmp_path):
    """2 T4 GPUs. p1 (1 GPU, 500 s) at 0; p2 (2 GPUs, 300 s) at 10; p3 (1 GPU, 1000 s) at 20;
    p4 (CPU only, 10 s) at 1000 closes the arrival window [0, 1000]."""
    pods = write(tmp_path / "pods.csv", POD_HEADER, [
        pod("p1", 1, 0, 500), pod("p2", 2, 10, 300), pod("p3", 1, 20, 1000), pod("p4", 0, 1000, 10)])
    return setup_for(cluster(tmp_path), pods)


def p95(values):
    return round(float(np.percentile(values, 95)), 3)


def test_fifo_blocks_behind_the_big_job(blocking_trace):
    run = run_policy(blocking_trace, "fifo")
    f = run.figures
    # 0: p1 starts. 10: p2 needs 2 GPUs, 1 free -> first failure, 1 GPU unallocated. 20: p3 blocked (FCFS).
    # 500: p1 ends, p2 starts. 800: p2 ends, p3 starts. 1000: p4 starts.
    assert f["first_failure"]["pod"] == "p2" and f["first_failure"]["at_s"] == 10
    assert f["unallocated_gpus_at_first_failure"] == 1.0
    # GPUs held over [0, 1000]: 1 x 500 + 2 x 300 + 1 x 200 = 1300 GPU-s of 2 x 1000
    assert f["gpu_alloc_share"] == pytest.approx(0.65)
    assert f["wait_p95_s"] == p95([0, 490, 780, 0])
    # a GPU pod was refused from 10 to 500 while GPUs sat idle: 1 GPU x 490 s
    assert f["unallocated_gpu_hours"] == pytest.approx(490 / 3600, abs=1e-3)
    assert f["preemptions"] == 0


@pytest.mark.parametrize("policy", ["tidal", "quota-borrowing"])
def test_quota_policies_backfill_past_the_big_job(blocking_trace, policy):
    f = run_policy(blocking_trace, policy).figures
    # 20: p3 starts next to p1 (no FCFS blocking). p2 only fits when p3 ends at 1020 (it cannot preempt:
    # with p3 on own quota, p2's 2 GPUs exceed 'd's own T4 quota of 2, so it asks on borrowed quota).
    assert f["first_failure"]["pod"] == "p2" and f["unallocated_gpus_at_first_failure"] == 1.0
    # GPUs held over [0, 1000]: 1 x 20 + 2 x 480 + 1 x 500 = 1480 GPU-s of 2000
    assert f["gpu_alloc_share"] == pytest.approx(0.74)
    assert f["wait_p95_s"] == p95([0, 1010, 0, 0])
    # p2 refused with 1 GPU idle over 10..20 and 500..1020
    assert f["unallocated_gpu_hours"] == pytest.approx((10 + 520) / 3600, abs=1e-3)
    assert f["preemptions"] == 0


@pytest.fixture
def reclaim_trace(tmp_path):
    """b1 (BE, 2 GPUs, 1000 s) at 0 takes the whole T4 node; l1 (LS, 1 GPU, 50 s) at 100."""
    pods = write(tmp_path / "pods.csv", POD_HEADER, [pod("b1", 2, 0, 1000, qos="BE"), pod("l1", 1, 100, 50)])
    return setup_for(cluster(tmp_path), pods)


def test_fifo_makes_own_quota_work_wait(reclaim_trace):
    f = run_policy(reclaim_trace, "fifo").figures
    assert f["preemptions"] == 0
    assert f["waits_by_class"]["own"] == {"n": 1, "p50": 900.0, "p95": 900.0, "p99": 900.0}  # l1: 100 -> 1000
    assert f["waits_by_class"]["best_effort"]["p95"] == 0.0


@pytest.mark.parametrize("policy", ["tidal", "quota-borrowing"])
def test_own_quota_reclaims_from_best_effort(reclaim_trace, policy):
    run = run_policy(reclaim_trace, policy)
    f = run.figures
    # 100: l1 is on 'd's own quota, b1 on 'd/be' borrowed quota -> b1 is preempted (reclaim), l1 starts.
    # 150: l1 ends, b1 starts again (from scratch): it waited 150 - 100 = 50 s.
    assert f["preemptions"] == 1 and f["preemptions_by_reason"] == {"preempted-reclaim": 1}
    assert f["jobs_preempted"] == 1
    assert f["preempted_gpu_hours_lost"] == pytest.approx(2 * 100 / 3600, abs=1e-3)
    assert f["waits_by_class"]["own"]["p95"] == 0.0
    assert f["waits_by_class"]["best_effort"]["p95"] == 50.0
    assert f["waits_by_quota_kind"]["borrowed"]["n"] == 1 and f["waits_by_quota_kind"]["own"]["n"] == 1


def test_gpu_spec_fallback_only_with_tidal(tmp_path):
    """A pod that chose V100M16 but also accepts V100M32: tidal falls back when V100M16 is busy."""
    nodes = cluster(tmp_path, ["v16-0,8000,16384,1,V100M16", "v32-0,8000,16384,1,V100M32"])
    pods = write(tmp_path / "pods.csv", POD_HEADER, [
        pod("a", 1, 0, 1000, spec="V100M16"), pod("b", 1, 10, 100, spec="V100M16|V100M32")])
    setup = setup_for(nodes, pods)
    tidal, fifo = run_policy(setup, "tidal").figures, run_policy(setup, "fifo").figures
    assert tidal["gpu_model_fallbacks"] == 1 and tidal["wait_p95_s"] == 0.0
    assert fifo["gpu_model_fallbacks"] == 0
    assert fifo["waits_by_class"]["own"]["p99"] == pytest.approx(np.percentile([0, 990], 99))  # b waits for a


def test_inflate_fills_until_the_first_pod_fails(tmp_path):
    pods = write(tmp_path / "pods.csv", POD_HEADER, [pod("g", 1, 0, 10), pod("c", 0, 0, 10)])
    setup = setup_for(cluster(tmp_path), pods, inflate=True)
    for policy in POLICIES:
        run = run_policy(setup, policy)
        # only GPU pods are sampled: two 1-GPU pods fill the 2 GPUs, the third cannot be placed
        assert run.extra["pods_submitted"] == 3
        assert run.figures["gpu_alloc_share"] == 1.0
        assert run.figures["unallocated_gpus_at_first_failure"] == 0.0
        assert run.figures["first_failure"]["pod"] == "g#3"


def test_replay_uses_the_live_loops_profile_objects(blocking_trace):
    """Replay gets its policies from get_profile(name), the call scheduler/tasks.py makes for the live
    loop with settings.TIDAL_SCHEDULER_PROFILE: the same objects, not a copy of any policy."""
    import inspect

    import scheduler.tasks as tasks
    assert "get_profile(settings.TIDAL_SCHEDULER_PROFILE)" in inspect.getsource(tasks)
    sequential = run_policies(blocking_trace, POLICIES, workers=1)
    forked = run_policies(blocking_trace, POLICIES, workers=2)
    for seq, frk, name in zip(sequential, forked, POLICIES):
        assert seq.profile == get_profile(name) == PROFILES[name] == frk.profile
        assert type(seq.profile) is type(PROFILES[name])
        assert seq.figures == frk.figures  # parallel workers change nothing


def test_same_inputs_give_identical_report_json(blocking_trace, tmp_path):
    a = replay(blocking_trace, POLICIES, tmp_path / "a", "test", workers=1)
    b = replay(blocking_trace, POLICIES, tmp_path / "b", "test", workers=2)
    assert (tmp_path / "a" / "report.json").read_bytes() == (tmp_path / "b" / "report.json").read_bytes()
    data = json.loads((tmp_path / "a" / "report.json").read_text())
    assert set(data["policies"]) == set(POLICIES)
    assert data["policies"]["tidal"]["profile"]["name"] == "tidal"
    assert a.files["report.md"].exists() and b.files["report.md"].exists()
    for name in ("alloc_share", "fragmentation", "waits", "preemptions", "util_by_model"):
        assert a.files[name].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- gangs: reservations, per-size figures ---------------------------------------------------------
@pytest.fixture
def gang_trace(tmp_path):
    """2 one-GPU T4 nodes (and a CPU node for `end`, which closes the arrival window at 1000); departments a and b each own the whole cluster (so nothing borrows or reclaims).
    a's small jobs (1 GPU, 100 s) keep coming; b's gang g (2 workers x 1 GPU, 300 s) arrives at 10."""
    from dataclasses import replace

    from cluster.simulated.alibaba import read_nodes, read_pods
    from cluster.simulated.traces import GangPlan
    from experiments.replay import Options, mapping as mp
    from experiments.replay.engine import build_setup

    nodes = write(tmp_path / "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model",
                  ["t4-0,8000,16384,1,T4", "t4-1,8000,16384,1,T4", "cpu-0,4000,8192,0,"])
    pods = write(tmp_path / "pods.csv", POD_HEADER, [
        pod("small-2", 1, 0, 100), pod("small-5", 1, 0, 150), pod("g", 1, 10, 300), pod("s3", 1, 20, 100),
        pod("s4", 1, 120, 100), pod("s5", 1, 170, 100), pod("s6", 1, 220, 100), pod("s7", 1, 270, 100),
        pod("end", 0, 1000, 10)])
    mapping = mp.Mapping({"a": 1.0, "b": 1.0})
    assert {mapping.department(n) for n in ("small-2", "small-5", "s3", "s7")} == {"a"} and mapping.department("g") == "b"
    setup = build_setup(read_pods(pods), read_nodes(nodes), mapping, Options())
    return replace(setup, gangs=GangPlan({"g": 2}, 0.5, 0.5, 1.0))


def test_a_reservation_keeps_small_jobs_from_starving_the_gang(gang_trace):
    f = run_policy(gang_trace, "tidal").figures
    # 10: g reserves both nodes from 150 (when small-5 ends); s3..s7 (100 s) would end after 150: no backfill.
    # 150: g starts (waited 140), ends 450; then the small jobs two at a time: s3 430, s4 330, s5 380, s6 330, s7 380
    assert f["gangs_submitted"] == 1 and f["gangs_reserved"] == 1 and f["preemptions"] == 0
    gang = f["by_size"]["2-8"]
    assert gang["n"] == 1 and gang["wait"] == {"p50": 140.0, "p95": 140.0, "max": 140.0}  # once per job
    assert gang["jct"] == {"n": 1, "p50": 440.0, "p95": 440.0, "max": 440.0}
    assert f["by_size"]["<=1"]["n"] == 8 and f["by_size"]["<=1"]["wait"]["max"] == 430.0
    assert f["by_size"][">8"] == {"n": 0, "wait": {"p50": None, "p95": None, "max": None},
                                  "jct": {"n": 0, "p50": None, "p95": None, "max": None}}
    # both workers' GPUs count: 100 + 150 + 2 x 300 + 5 x 100 GPU-s of 2 GPUs over [0, 1000]
    assert f["gpu_alloc_share"] == pytest.approx(1350 / 2000)


def test_without_reservations_the_stream_of_small_jobs_passes_the_gang(gang_trace):
    f = run_policy(gang_trace, "tidal-no-reservations").figures
    # each time one node frees, a waiting small job takes it: both are free together only at 400
    assert f["gangs_reserved"] == 0
    assert f["by_size"]["2-8"]["wait"]["max"] == 390.0 and f["by_size"]["<=1"]["wait"]["max"] == 80.0


def test_the_longest_waits_say_what_the_gang_waited_for_and_who_passed_it(gang_trace, tmp_path):
    gang = {"job": "g", "workers": 2, "gpus_per_worker": 1.0, "model": "T4", "kind": "own"}
    on = run_policy(gang_trace, "tidal").figures["longest_waits"]
    off = run_policy(gang_trace, "tidal-no-reservations").figures["longest_waits"]
    # with its reservation it waits 10 -> 150 holding both nodes, and nothing passes it
    assert on["2-8"] == [{**gang, "wait_s": 140.0, "waited_for": {"reserved": 1.0}, "passed_by": 0}]
    # without, the five small jobs after it in the queue take each node as it frees; it waits 10 -> 400 (no node
    # fits, and the small jobs are too young to preempt)
    assert off["2-8"] == [{**gang, "wait_s": 390.0, "waited_for": {"no-capacity": 1.0}, "passed_by": 5}]
    # every class lists its longest waiters first (at most LONGEST), each wait fully attributed
    assert [w["job"] for w in off["<=1"]] == ["s3", "s4", "s5"] and off["<=1"][0]["wait_s"] == 80.0
    assert all(sum(w["waited_for"].values()) == pytest.approx(1.0, abs=1e-3) for w in on["<=1"] + off["<=1"])
    assert on[">8"] == off[">8"] == []
    out = replay(gang_trace, ["tidal", "tidal-no-reservations"], tmp_path, "test")
    text = out.files["report.md"].read_text()
    assert "## The longest waits, and what they waited for" in text
    assert "| tidal-no-reservations | 2-8 | g | 2 × 1 T4 | own | 390 | no-capacity 100% | 5 |" in text


def test_the_variant_is_tidal_with_reservations_off():
    from experiments.replay import replay_profile

    variant = replay_profile("tidal-no-reservations")
    assert variant.reservations is False and variant.with_(name="tidal", reservations=True) == get_profile("tidal")
    assert replay_profile("fifo") == get_profile("fifo")


def test_what_reservations_change_is_relative_to_the_variant_and_its_median_is_per_mark():
    def figures(small: float, mid: float, big: float) -> dict:
        sizes = {"<=1": {"wait": {"p95": small, "max": 0.0}}, "2-8": {"wait": {"p95": mid, "max": 0.0}},
                 ">8": {"wait": {"p95": 0.0, "max": big}}}
        return {"by_size": sizes}

    off = figures(100, 200, 1000)
    changes = {lf: reservations_change({"tidal": figures(*on), "tidal-no-reservations": off})
               for lf, on in {16: (110, 200, 900), 18: (90, None, 1300), 20: (130, 100, 1000)}.items()}
    assert changes[16] == {"p95 <=1": pytest.approx(0.1), "p95 2-8": 0.0, "max >8": pytest.approx(-0.1)}
    assert changes[18]["p95 2-8"] is None  # no such jobs with reservations
    assert reservations_change({"tidal": off}) is None
    table = reservations_across(changes)
    assert table[2] == "| 16 | +10.0% | +0.0% | -10.0% |"
    assert table[-1] == "| median | +10.0% | -25.0% | +0.0% |"  # medians over the replays that have the class
    # the noise floor: the variant replayed again (its cycles further apart) against the variant itself
    floor = noise_change({"tidal": figures(1, 1, 1), "tidal-no-reservations": off}, figures(120, 150, 1000))
    assert floor == {"p95 <=1": pytest.approx(0.2), "p95 2-8": pytest.approx(-0.25), "max >8": 0.0}
    assert noise_change({"tidal": off}, off) is None


def test_the_noise_floor_replays_the_same_setup_with_its_cycles_further_apart(blocking_trace):
    setup, moved = blocking_trace, shifted(blocking_trace)
    assert moved.options.min_cycle_s == pytest.approx(setup.options.min_cycle_s + CLOCK_SHIFT_S)
    assert moved.pods is setup.pods and moved.options.load_factor == setup.options.load_factor


def test_replicates_pool_the_waits_and_average_the_longest():
    pooled = pooled_by_size([{"<=1": [0.0, 10.0], "2-8": [100.0], ">8": []},
                             {"<=1": [20.0, 30.0], "2-8": [300.0], ">8": []}])
    assert pooled["<=1"] == {"n": 4, "wait": {"p50": 15.0, "p95": 28.5, "max": 20.0}}  # max: mean of 10 and 30
    assert pooled["2-8"] == {"n": 2, "wait": {"p50": 200.0, "p95": 290.0, "max": 200.0}}
    assert pooled[">8"] == {"n": 0, "wait": {"p50": None, "p95": None, "max": None}}


def test_what_reservations_change_is_read_over_the_replicates_when_there_are_several():
    def sizes(small: float) -> dict:
        return {"<=1": {"wait": {"p95": small, "max": 0.0}}, "2-8": {"wait": {"p95": 1.0, "max": 0.0}},
                ">8": {"wait": {"p95": 0.0, "max": 1.0}}}

    on = {"by_size": sizes(500), "replicates": {"by_size": sizes(110)}}
    off = {"by_size": sizes(100), "replicates": {"by_size": sizes(100)}}
    assert reservations_change({"tidal": on, "tidal-no-reservations": off})["p95 <=1"] == pytest.approx(0.1)


def test_each_replicate_replays_the_policy_with_its_cycles_further_apart(gang_trace):
    from dataclasses import replace

    setup = replace(gang_trace, options=replace(gang_trace.options, replicates=3))
    assert setup.total == 3 * gang_trace.total  # the progress bar counts every replay
    figures = run_policy(setup, "tidal").figures
    alone = [run_policy(shifted(gang_trace, k), "tidal").figures["by_size"] for k in range(3)]
    assert figures["by_size"] == alone[0]  # the first is the plain replay
    assert figures["replicates"]["n"] == 3
    for key, c in figures["replicates"]["by_size"].items():
        assert c["n"] == sum(a[key]["n"] for a in alone)
        longest = [a[key]["wait"]["max"] for a in alone if a[key]["n"]]
        assert c["wait"]["max"] == (pytest.approx(sum(longest) / len(longest)) if longest else None)
    moved = shifted(gang_trace, 3).options.min_cycle_s
    assert moved == pytest.approx(gang_trace.options.min_cycle_s + 3 * CLOCK_SHIFT_S)
