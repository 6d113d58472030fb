"""Replay's quota marks (issue 41): Jain's index, fair shares, reclaim counting, the Helios-derived tree."""
import math
from collections import defaultdict

import pytest

from cluster.simulated.alibaba import read_nodes, read_pods
from cluster.types import QuotaKind
from experiments.replay import Options, mapping as mp
from experiments.replay.engine import build_setup, replicate, run_policy
from experiments.replay.metrics import JobRecord, Recorder, fair_shares, headline, jain, mean_spread
from experiments.replay.tree import DIVISIONS, POOL_KEPT_BY_VC, division_of, helios_hierarchy, whole_machines
from scheduler.policy.quotatree import QuotaTree
from tests.unit.replay_fixtures import POD_HEADER, cluster, pod, setup_for, write

HELIOS = {"vcA": 216, "vcB": 96, "vcC": 64, "vcD": 40, "vcE": 32, "vcF": 16, "vcG": 8}


@pytest.mark.parametrize("values, index", [
    ([1.0, 1.0, 1.0], 1.0),  # all equally served
    ([3.0, 0.0, 0.0], 1 / 3),  # one has everything: 1/n
    ([1.0, 2.0], 0.9),  # 3^2 / (2 x 5)
    ([0.5, 0.5, 2.0, 1.0], 16 / 22),  # 4^2 / (4 x 5.5)
])
def test_jains_index_on_known_inputs(values, index):
    assert jain(values) == pytest.approx(index)


def test_jains_index_is_undefined_without_anyone_served():
    assert jain([]) is None and jain([0.0, 0.0]) is None


def test_fair_share_is_the_quota_wanted_then_the_rest_by_quota():
    # issue 41's scenario 9: A owns 2, B owns 4 (weights by quota), both want everything -> A 4, B 8
    assert fair_shares(12, {"A": 2, "B": 4, "C": 6}, {"A": 12, "B": 12}) == {"A": 4, "B": 8, "C": 0}
    # A wants only 3: B gets what A leaves, C's unused quota included
    assert fair_shares(12, {"A": 2, "B": 4, "C": 6}, {"A": 3, "B": 12}) == {"A": 3, "B": 9, "C": 0}
    # nobody wants more than its quota: each gets what it wants
    assert fair_shares(10, {"A": 5, "B": 5}, {"A": 1, "B": 4}) == {"A": 1, "B": 4}


def _job(job_id, department, gpus, at):
    return JobRecord(job_id, f"j{job_id}", job_id, True, gpus, None, at, at, department=department)


def test_the_recorder_measures_usage_over_fair_share_and_counts_reclaims():
    """4 T4 GPUs, a and b own half each. 0: a1 (4 GPUs) runs on borrowed quota, b1 (2 GPUs) waits. 100: a1 is
    reclaimed for b1, a2 (1 GPU) starts on own quota. The window ends at 200."""
    rec = Recorder({"T4": 4}, 0.0, window_end=200.0, shares={"a": 0.5, "b": 0.5})
    for job in (_job(1, "a", 4, 0.0), _job(2, "b", 2, 0.0)):
        rec.submitted(job)
    rec.admitted(1, 0.0, "T4", QuotaKind.BORROWED)
    rec.preempted(1, 100.0, "preempted-reclaim")
    rec.admitted(2, 100.0, "T4", QuotaKind.OWN)
    rec.submitted(_job(3, "a", 1, 100.0))
    rec.admitted(3, 100.0, "T4", QuotaKind.OWN)
    f = rec.summary(200.0, "timeline")
    # [0, 100): fair shares 2 / 2 (each wants more than its quota); a holds 4 -> 2.0, b 0 -> 0.0: index 0.5.
    # [100, 200): a holds 1 of its 2 -> 0.5, b 2 of 2 -> 1.0: index 1.5^2 / (2 x 1.25) = 0.9.
    assert f["fairness"]["jain_mean"] == pytest.approx(0.7)
    # both want more than the 4 GPUs all along (6, then 7): the whole window is contended
    assert f["fairness"]["jain_contended_mean"] == pytest.approx(0.7) and f["fairness"]["contended_s"] == 200.0
    assert f["fairness"]["usage_over_fair_share"] == pytest.approx({"a": 1.25, "b": 0.5})
    assert f["reclaims"] == {"preemptions": 1, "borrowed_admissions": 1, "borrowed_jobs": 1,
                             "per_borrowed_admission": 1.0, "gpu_hours_lost": round(400 / 3600, 3),
                             "victim_run_p50_s": 100.0, "young_share": 1.0, "gang_share": 0.0}
    # a1 waits again since its reclaim (100 s, its last admission borrowed); b1 waited 100 s for own quota
    assert f["longest_wait_by_kind"][">8"] == {"own": None, "borrowed": None, "never started": None}
    assert f["longest_wait_by_kind"]["2-8"] == {"own": 100.0, "borrowed": 100.0, "never started": None}
    assert f["longest_wait_by_kind"]["<=1"] == {"own": 0.0, "borrowed": None, "never started": None}
    assert headline(f)["reclaims_per_borrowed_admission"] == 1.0


def test_a_replay_counts_each_borrowed_admission_and_the_work_reclaims_threw_away(tmp_path):
    """b1 (BE, 2 GPUs) borrows the whole T4 node at 0; l1 (LS) reclaims it at 100 and ends at 150; b1 starts again."""
    pods = write(tmp_path / "pods.csv", POD_HEADER, [pod("b1", 2, 0, 1000, qos="BE"), pod("l1", 1, 100, 50)])
    f = run_policy(setup_for(cluster(tmp_path), pods), "tidal").figures
    assert f["reclaims"] == {"preemptions": 1, "borrowed_admissions": 2, "borrowed_jobs": 1,
                             "per_borrowed_admission": 0.5, "gpu_hours_lost": round(200 / 3600, 3),
                             "victim_run_p50_s": 100.0, "young_share": 1.0, "gang_share": 0.0}
    assert f["small_wait_p95_s"] == 0.0  # l1 started at once


def test_mean_spread_of_replicates():
    assert mean_spread([1.0, 2.0, 3.0]) == {"mean": 2.0, "sd": 1.0, "min": 1.0, "max": 3.0, "values": [1.0, 2.0, 3.0]}
    assert mean_spread([None, 4.0])["mean"] == 4.0 and mean_spread([None])["mean"] is None


def test_divisions_by_helios_size():
    assert [division_of(g) for g in (216, 128, 127, 64, 63, 32, 31, 8)] == [
        "div-xl", "div-xl", "div-l", "div-l", "div-m", "div-m", "div-s", "div-s"]
    assert [name for name, _ in DIVISIONS] == ["div-xl", "div-l", "div-m", "div-s"]


def test_the_helios_tree_keeps_every_vc_as_a_leaf_and_its_quotas_add_up():
    h = helios_hierarchy({**HELIOS, "vcEmpty": 0})
    assert h.divisions == {"div-xl": ("vcA",), "div-l": ("vcB", "vcC"), "div-m": ("vcD", "vcE"),
                           "div-s": ("vcF", "vcG")}
    nodes = {n.name: n for n in h.nodes()}
    capacity = {"T4": 100.0, "cpu": 8000.0}
    quotas = h.quotas(capacity, borrow_ratio=1.0)
    tree = QuotaTree.build(quotas, h.nodes(), (), capacity)
    leaves = {tree.names[i] for i in range(1, len(tree.names)) if tree.is_leaf(i)}
    assert leaves == set(HELIOS) | {vc + "/be" for vc in HELIOS}  # nothing lost, nothing empty
    for vc, gpus in HELIOS.items():
        assert nodes[vc].parent == division_of(gpus) == nodes[vc + "/be"].parent
    assert all(nodes[d].parent is None for d in h.divisions)
    own = defaultdict(float)
    for q in quotas:
        own[q.resource] += q.own
    assert own == pytest.approx(capacity)  # VCs and division pools together own the cluster
    by = {(q.department, q.resource): q for q in quotas}
    share_a = 216 / sum(HELIOS.values())
    assert by[("vcA", "T4")].own == pytest.approx(100 * share_a * POOL_KEPT_BY_VC)
    pool = by[("div-xl", "T4")]
    assert pool.own == pytest.approx(100 * share_a * (1 - POOL_KEPT_BY_VC))
    assert pool.lend_limit == pytest.approx(100 * share_a - pool.own)  # lends its VC's quota, keeps its pool
    assert pool.borrowed == 100.0
    assert by[("vcA/be", "T4")].own == 0.0 and by[("vcA/be", "T4")].borrowed == 100.0
    # weights by size, mean 1 over the VCs; a division's the sum of its VCs'
    assert sum(h.weights[vc] for vc in HELIOS) == pytest.approx(len(HELIOS))
    assert h.weights["vcA"] / h.weights["vcG"] == pytest.approx(27)
    assert h.weights["div-l"] == pytest.approx(h.weights["vcB"] + h.weights["vcC"])
    assert nodes["div-s"].reclaim_min_runtime_s > 0


def test_a_division_keeps_its_pool_in_whole_machines_and_lends_a_pool_smaller_than_one():
    h = helios_hierarchy(HELIOS)
    share_a = 216 / sum(HELIOS.values())
    capacity = {"G2": 440.0, "G3": 32.0}
    by = {(q.department, q.resource): q for q in h.quotas(capacity, 1.0, machine={"G2": 8.0, "G3": 8.0})}
    pool = 440 * share_a * (1 - POOL_KEPT_BY_VC)  # 40.3 GPUs: five 8-GPU machines kept
    assert by[("div-xl", "G2")].own == pytest.approx(pool)
    assert by[("div-xl", "G2")].lend_limit == pytest.approx(440 * share_a - 40)
    # a G3 pool of 2.9 GPUs keeps no machine: all of it is lent, so one subtree may borrow every G3 GPU
    assert all(by[(d, "G3")].lend_limit is None for d in h.divisions)
    assert [whole_machines(x, 8) for x in (7.99, 8.0, 23.9)] == [0, 8, 16] and whole_machines(5.5, None) == 5.5


def test_a_replay_on_the_helios_tree_runs_fair_sharing(tmp_path):
    pods = write(tmp_path / "pods.csv", POD_HEADER, [pod(f"p{i}", 1, 10 * i, 100) for i in range(8)])
    nodes = cluster(tmp_path, ["t4-0,8000,16384,4,T4", "cpu-0,4000,8192,0,"])
    shares = {vc: g / sum(HELIOS.values()) for vc, g in HELIOS.items()}
    setup = build_setup(read_pods(pods), read_nodes(nodes), mp.Mapping(shares, 1.0, helios_hierarchy(HELIOS)),
                        Options())
    assert {n.name for n in setup.mapping.tree()} >= {"div-xl", "vcA", "vcA/be"}
    f = run_policy(setup, "tidal-fair").figures
    assert f["jobs_finished"] == 8 and not math.isnan(f["fairness"]["jain_mean"])


def test_a_replicate_draws_departments_with_another_seed(tmp_path):
    pods = write(tmp_path / "pods.csv", POD_HEADER, [pod(f"p{i}", 1, 10 * i, 100) for i in range(40)])
    setup = build_setup(read_pods(pods), read_nodes(cluster(tmp_path)), mp.Mapping({"a": 0.5, "b": 0.5}),
                        Options(seed=7))
    again = replicate(setup, 2)
    assert again.mapping.seed == 9 and again.options.min_cycle_s == pytest.approx(setup.options.min_cycle_s + 0.2)
    names = [p.name for p in setup.pods]
    assert [setup.mapping.department(n) for n in names] != [again.mapping.department(n) for n in names]


def test_reclaims_say_how_long_their_victims_ran_and_how_many_were_gangs():
    rec = Recorder({"T4": 8}, 0.0, window_end=1000.0, shares={"a": 1.0})
    gang = JobRecord(1, "g", 1, False, 4, None, 0.0, 0.0, workers=2, department="a")
    for job in (gang, _job(2, "a", 1, 0.0)):
        rec.submitted(job)
        rec.admitted(job.id, 0.0, "T4", QuotaKind.BORROWED)
    rec.preempted(1, 60.0, "preempted-reclaim")  # the gang after 60 s: young
    rec.preempted(2, 900.0, "preempted-reclaim")  # the single job after 900 s
    f = rec.summary(1000.0, "timeline")
    r = f["reclaims"]
    assert f["fairness"]["jain_contended_mean"] is None  # 5 of 8 GPUs wanted: never contended
    assert (r["victim_run_p50_s"], r["young_share"], r["gang_share"]) == (480.0, 0.5, 0.5)
    assert r["gpu_hours_lost"] == round((4 * 60 + 900) / 3600, 3)
