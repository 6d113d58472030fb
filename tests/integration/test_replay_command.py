"""`manage.py replay` end to end on a tiny hand-made trace: report files, JSON keys, bad input."""
import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.unit.replay_fixtures import POD_HEADER, cluster, pod, write

KEYS = {"gpu_alloc_share", "unallocated_gpu_hours", "wait_p95_s", "wait_p95_own_s", "preemptions", "events_per_s",
        "wall_s"}


@pytest.fixture
def trace(tmp_path):
    nodes = cluster(tmp_path)
    pods = write(tmp_path / "openb_pod_list_tiny.csv", POD_HEADER, [
        pod("b1", 2, 0, 1000, qos="BE"), pod("l1", 1, 100, 50), pod("c1", 0, 200, 30), pod("f1", 0.5, 300, 60)])
    return nodes, pods


def test_replay_writes_report_plots_and_json(trace, tmp_path):
    nodes, pods = trace
    out, summary = tmp_path / "out", tmp_path / "figures.json"
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), json_path=str(summary),
                 quotas="equal", workers=1)
    for name in ("report.md", "report.json", "alloc_share.png", "unallocated_at_first_failure.png",
                 "queue_wait.png", "preemptions_fallbacks.png", "util_by_gpu_model.png"):
        assert (out / name).stat().st_size > 0, name
    figures = json.loads(summary.read_text())
    assert set(figures) == {"tidal", "fifo", "quota-borrowing"}
    for policy, f in figures.items():
        assert KEYS <= set(f), policy
    assert figures["fifo"]["preemptions"] == 0
    report = (out / "report.md").read_text()
    assert "## Mapping" in report and "events/s" in report and "queue_wait.png" in report
    data = json.loads((out / "report.json").read_text())
    assert data["trace"] == "tiny" and data["pods_replayed"] == 4


def test_replay_policies_can_be_chosen_and_inflate(trace, tmp_path):
    nodes, pods = trace
    summary = tmp_path / "inflate.json"
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "inf"), json_path=str(summary),
                 policies=["fifo", "tidal"], inflate=True, quotas="equal", workers=2)
    figures = json.loads(summary.read_text())
    assert list(figures) == ["fifo", "tidal"]
    assert all(f["mode"] == "inflate" and f["unallocated_gpus_at_first_failure"] is not None
               for f in figures.values())


def test_bad_row_stops_before_anything_runs(trace, tmp_path):
    nodes, _ = trace
    pods = write(tmp_path / "bad.csv", POD_HEADER, [pod("ok", 1, 0, 10), "neg,1000,-5,1,1000,,LS,Running,0,10,0"])
    out = tmp_path / "never"
    with pytest.raises(CommandError, match=r"bad\.csv:3: memory_mib is negative \(-5\)"):
        call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), quotas="equal", workers=1)
    assert not out.exists()
    with pytest.raises(CommandError, match="--load-factor must be > 0"):
        call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), load_factor=0)


def test_replay_with_gangs_reports_waits_and_jct_per_job_size(trace, tmp_path):
    nodes, pods = trace
    out, summary = tmp_path / "gangs", tmp_path / "gangs.json"
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), json_path=str(summary),
                 quotas="equal", workers=1, gang_share=0.5)
    figures = json.loads(summary.read_text())
    assert list(figures) == ["tidal", "fifo", "tidal-no-reservations"]  # the default policies with gangs
    for f in figures.values():
        assert set(f["by_size"]) == {"<=1", "2-8", ">8"}
        assert sum(c["n"] for c in f["by_size"].values()) == 4  # one record per job, gangs included
    data = json.loads((out / "report.json").read_text())
    assert data["gangs"]["jobs"] == 1 and data["gangs"]["source"] == "--gang-share"  # l1 becomes 2 x 1 GPU
    assert figures["tidal"]["by_size"]["2-8"]["n"] == 2  # the gang and b1
    report = (out / "report.md").read_text()
    assert "## Queueing time and job completion time per job size" in report
    assert "## What reservations buy (tidal vs tidal-no-reservations)" in report
    assert (out / "queue_wait_by_size.png").stat().st_size > 0


def test_several_load_factors_replay_each_and_say_what_reservations_change_in_the_median(trace, tmp_path):
    nodes, pods = trace
    out, summary, printed = tmp_path / "sweep", tmp_path / "sweep.json", io.StringIO()
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), json_path=str(summary), quotas="equal",
                 workers=1, gang_share=0.5, load_factor="1,2,2", stdout=printed)
    figures = json.loads(summary.read_text())
    assert list(figures["load_factors"]) == ["1", "2"]  # each factor once
    for lf in ("1", "2"):
        assert (out / f"lf{lf}" / "report.md").exists()
        assert set(figures["load_factors"][lf]) == {"tidal", "fifo", "tidal-no-reservations"}
        assert set(figures["reservations"][lf]) == {"p95 <=1", "p95 2-8", "max >8"}
    table = printed.getvalue()
    assert "| load factor | p95 <=1 | p95 2-8 | max >8 |" in table and "| median |" in table
    assert "noise_floor" not in figures and "Noise floor" not in table  # only when asked for
    for bad, said in (("2,x", "numbers separated by commas"), ("2,-1", "must be > 0, got -1")):
        with pytest.raises(CommandError, match=said):
            call_command("replay", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "never"), load_factor=bad)
    assert not (tmp_path / "never").exists()


def test_replay_demo_shaped_speeds_up_run_times_and_arrivals(trace, tmp_path, settings):
    nodes, pods = trace
    settings.TIDAL_DEMO_SPEEDUP = 10
    out = tmp_path / "demo"
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), quotas="equal", workers=1,
                 policies=["tidal"], demo=True, every=1)
    data = json.loads((out / "report.json").read_text())
    assert data["gangs"] is not None and "demo_run_s" in data["mapping"]["run_time"]
    # arrivals 10x faster (and spread by the gangs' growth): the last pod arrives at 300 x growth / 10
    assert data["policies"]["tidal"]["window_s"] == pytest.approx(300 * data["gangs"]["gpu_time_growth"] / 10, abs=1e-3)
    with pytest.raises(CommandError, match="--gang-share"):
        call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), gang_share=1.5)


def test_the_noise_floor_replays_the_variant_again_with_its_cycles_further_apart(trace, tmp_path):
    nodes, pods = trace
    out, summary, printed = tmp_path / "noise", tmp_path / "noise.json", io.StringIO()
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), json_path=str(summary), quotas="equal",
                 workers=1, gang_share=0.5, load_factor="1,2", policies=["tidal", "tidal-no-reservations"],
                 noise_floor=True, stdout=printed)
    figures = json.loads(summary.read_text())
    assert set(figures["noise_floor"]) == {"1", "2"}
    assert set(figures["noise_floor"]["1"]) == {"p95 <=1", "p95 2-8", "max >8"}
    said = printed.getvalue()
    assert ("Noise floor (tidal-no-reservations replayed again, its cycles 0.1 s further apart than in its last "
            "replay, against itself):") in said
    assert said.count("| median |") == 2  # what reservations change, and the noise floor
    data = json.loads((out / "lf1" / "report.json").read_text())["noise_floor"]
    assert data["policy"] == "tidal-no-reservations" and data["cycles_further_apart_s"] == 0.1
    assert set(data["by_size"]) == {"<=1", "2-8", ">8"}
    assert "- noise floor: tidal-no-reservations replayed again" in (out / "lf1" / "report.md").read_text()


def test_replicates_replay_each_policy_again_and_read_the_marks_over_them(trace, tmp_path):
    nodes, pods = trace
    out, summary, printed = tmp_path / "reps", tmp_path / "reps.json", io.StringIO()
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), json_path=str(summary), quotas="equal",
                 workers=1, gang_share=0.5, policies=["tidal", "tidal-no-reservations"], replicates=3,
                 noise_floor=True, stdout=printed)
    figures = json.loads(summary.read_text())
    for name in ("tidal", "tidal-no-reservations"):
        replicates = figures[name]["replicates"]
        assert replicates["n"] == 3 and replicates["cycles_further_apart_s"] == 0.1 and replicates["seeds"] == [0, 1, 2]
        marks = replicates["marks"]["reclaims_per_borrowed_admission"]
        assert len(marks["values"]) == 3 and marks["min"] <= marks["mean"] <= marks["max"]
        # every replay submits every job: three times the jobs of the first, each class
        assert {k: c["n"] for k, c in replicates["by_size"].items()} == {
            k: 3 * c["n"] for k, c in figures[name]["by_size"].items()}
    assert printed.getvalue().count("over 3 replays (max: the mean of their longest)") == 2
    assert printed.getvalue().count("marks over them, mean ± sd: jain_usage_over_fair_share") == 2
    data = json.loads((out / "report.json").read_text())
    assert data["policies"]["tidal"]["replicates"]["n"] == 3
    # the noise floor is replayed as many times, its cycles further apart than any replicate's
    assert data["noise_floor"]["by_size"]["<=1"]["n"] == figures["tidal"]["replicates"]["by_size"]["<=1"]["n"]
    report = (out / "report.md").read_text()
    assert "- over 3 replays of each, the k-th with seed + k and its cycles k x 0.1 s further apart" in report
    for bad in ({"replicates": 0}, {"replicates": 2, "inflate": True}):
        with pytest.raises(CommandError, match="--replicates must be >= 1"):
            call_command("replay", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "bad"), **bad)
    assert not (tmp_path / "bad").exists()


def test_the_noise_floor_needs_both_tidal_profiles(trace, tmp_path):
    nodes, pods = trace
    with pytest.raises(CommandError, match="--noise-floor reads what reservations change: replay both tidal and "
                                           r"tidal-no-reservations \(policies given: tidal, fifo\)"):
        call_command("replay", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "never"), quotas="equal",
                     policies=["tidal", "fifo"], noise_floor=True)
    assert not (tmp_path / "never").exists()


@pytest.fixture
def helios(tmp_path):
    return write(tmp_path / "earth.csv", "date,vcA,vcB,vcC,vcD,total", ["2020-09-28,160,64,16,0,240"])


def test_the_helios_tree_replays_fair_sharing_and_reports_the_quota_marks(trace, helios, tmp_path):
    nodes, pods = trace
    out, summary, printed = tmp_path / "tree", tmp_path / "tree.json", io.StringIO()
    call_command("replay", nodes=str(nodes), pods=str(pods), out=str(out), json_path=str(summary),
                 quotas=str(helios), tree="helios", policies=["tidal-fair", "tidal"], workers=1, seed=3,
                 replicates=2, stdout=printed)
    figures = json.loads(summary.read_text())
    for f in figures.values():
        assert 0 < f["fairness"]["jain_mean"] <= 1 and set(f["fairness"]["usage_over_fair_share"]) <= {
            "vcA", "vcB", "vcC"}
        assert set(f["reclaims"]) == {"preemptions", "borrowed_admissions", "borrowed_jobs", "per_borrowed_admission",
                                      "gpu_hours_lost", "victim_run_p50_s", "young_share", "gang_share"}
        assert set(f["longest_wait_by_kind"]["<=1"]) == {"own", "borrowed", "never started"}
        assert f["replicates"]["seeds"] == [3, 4]
    data = json.loads((out / "report.json").read_text())
    assert data["mapping"]["tree"] == {"div-xl": ["vcA"], "div-l": ["vcB"], "div-s": ["vcC"]}
    assert data["policies"]["tidal-fair"]["profile"]["fair_sharing"] is True
    report = (out / "report.md").read_text()
    assert "tidal-no-reservations = tidal with reservations=False, tidal-fair = tidal with fair_sharing=True" in report
    assert "## Fair shares and reclaims" in report and "- **tree**: div-xl: vcA; div-l: vcB; div-s: vcC" in report
    assert (out / "fairness.png").stat().st_size > 0
    assert "Jain's index of usage / fair share" in printed.getvalue()


def test_bad_tree_and_seed_flags_are_refused_before_anything_runs(trace, tmp_path):
    nodes, pods = trace
    with pytest.raises(CommandError, match="--tree helios: the helios quota tree is built from the Helios quota file"):
        call_command("replay", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "bad"), quotas="equal",
                     tree="helios")
    with pytest.raises(CommandError, match="--seed must be >= 0"):
        call_command("replay", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "bad"), seed=-1)
    with pytest.raises(CommandError, match="invalid choice: 'oak'"):
        call_command("replay", "--tree", "oak", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()
