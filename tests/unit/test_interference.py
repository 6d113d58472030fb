"""The interference model (scheduler/policy/interference.py) on the H200 measured pairs, its share rule, and the
FGD experiment's interference-aware placement and goodput (experiments/fragmentation/goodput.py)."""
import csv
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.fragmentation import experiment as ex
from experiments.fragmentation.goodput_report import main as goodput_report
from scheduler import interference_tables as h200
from experiments.fragmentation.goodput import RULE, GoodputState, Predictor, with_kinds
from experiments.fragmentation.measure import FragMeasure
from experiments.fragmentation.scorers import Context, make
from experiments.fragmentation.state import MILLI, ClusterState, PodRequest
from scheduler.policy.interference import (DEFAULT_KEPT, MPS, TIME_SLICING, Rule, Signature, Slowdown, choose,
                                           refusal, share)
from scheduler.policy.workload import TargetWorkload
from tests.unit.replay_fixtures import NODE_HEADER, POD_HEADER, write

MODEL = h200.load()
TS = MODEL.table(TIME_SLICING)
SIGS = dict(TS.signatures)
BERT, DECODE = SIGS["bert-server"], SIGS["gpt2m-decode"]


@pytest.mark.parametrize("mode", [TIME_SLICING, MPS])
def test_the_model_reproduces_every_measured_pair_exactly_both_ways(mode):
    table = MODEL.table(mode)
    assert table.pairs
    for p in table.pairs:
        a, b = table.signature(p.a), table.signature(p.b)
        forward, backward = MODEL.predict(a, b, mode), MODEL.predict(b, a, mode)
        assert (forward.a, forward.b) == (p.a_side, p.b_side)
        assert (backward.a, backward.b) == (p.b_side, p.a_side)
        assert forward.basis == f"measured {p.a} + {p.b}"


def test_the_tables_are_the_csv_figures_clamped():
    # gpt2s-train + dlrm-embed under time-slicing: 0.49 and 0.45, summing to 0.94 (the README's headline)
    p = MODEL.predict(SIGS["gpt2s-train"], SIGS["dlrm-embed"])
    assert (p.a.kept, p.b.kept) == (pytest.approx(0.4914), pytest.approx(0.453271))
    assert p.combined < 1.0
    # ts2 replaced ts's decode pairs (warm-up fixed); the ts alone window's stalls gave ratios above 1
    with open(h200.FOLDER / "ts2_interference.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if {r["workload_a"], r["workload_b"]} == {"gpt2m-decode",
                                                                                           "gpt2s-train"})
    p = MODEL.predict(SIGS["gpt2m-decode"], SIGS["gpt2s-train"])
    assert p.a == Slowdown(float(row["a_ratio"]), float(row["a_p99_ratio"]))
    mps = MODEL.table(MPS)
    assert all(0 < s.kept <= 1 and s.p99 >= 1 for t in (TS, mps) for p in t.pairs for s in (p.a_side, p.b_side))


def test_a_pair_not_measured_is_read_off_the_nearest_measured_pair_within_the_cutoff():
    p = MODEL.predict(SIGS["resnet50-bs256"], SIGS["gpt2s-train"])  # two saturating jobs, never measured together
    assert p.basis.startswith("nearest measured gpt2s-train + dlrm-embed")
    assert p.combined < 1.0
    far = MODEL.predict(SIGS["notebook-idle"], SIGS["resnet50-bs32"])
    assert far.basis == "no measured pair near: default" and far.combined == 2 * DEFAULT_KEPT


signatures = st.builds(Signature, *(st.floats(0, 1) for _ in range(4)), st.booleans())


@given(signatures, signatures)
def test_signatures_beyond_the_cutoff_or_unknown_get_the_conservative_default(a, b):
    nearest = min(a.distance(s) for s in SIGS.values())
    p = MODEL.predict(a, b)
    if nearest > MODEL.cutoff:
        assert (p.a.kept, p.b.kept) == (DEFAULT_KEPT, DEFAULT_KEPT) and p.basis.endswith("default")
        assert p.b.p99 == (TS.worst_p99 if b.latency_sensitive else 1.0)
    for unknown in (MODEL.predict(None, b), MODEL.predict(a, None)):
        assert unknown.combined == 2 * DEFAULT_KEPT and unknown.basis.endswith("default")
    assert MODEL.predict(None, BERT).b.p99 == TS.worst_p99 > Rule().p99_bound  # no unknown job joins a server


members = st.one_of(st.none(), st.sampled_from(list(SIGS.values())), signatures)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(members, max_size=3)), min_size=1, max_size=12), members,
       st.floats(1.0, 3.0))
def test_the_share_rule_never_pairs_below_one_combined_nor_past_a_latency_bound(gpus, new, bound):
    rule = Rule(p99_bound=bound)
    scores = np.array([score for score, _ in gpus])
    sharing = [share(MODEL, new, residents) if residents else None for _, residents in gpus]
    choice = choose(scores, lambda i: sharing[i], rule)
    allowed = [i for i, s in enumerate(sharing) if s is None or refusal(s, rule) is None]
    assert (choice is None) == (not allowed)
    if choice is None:
        return
    s = choice.sharing
    assert s is sharing[choice.index]
    if s is not None:
        assert all(p.combined >= 1.0 for p in s.pairs)
        assert all(g <= bound for m, g in zip(s.members, s.p99) if m is not None and m.latency_sensitive)
    # least GPU loss first: nothing allowed scores better; among equals, the highest combined, the first of those
    best = max(scores[i] for i in allowed)
    assert scores[choice.index] == best
    combined = [1.0 if sharing[i] is None else sharing[i].combined for i in allowed if scores[i] == best]
    assert (1.0 if s is None else s.combined) == max(combined)


def test_a_latency_pod_is_kept_off_a_gpu_where_its_p99_would_pass_the_bound():
    # BERT beside the bandwidth-bound copy: p99 x1.28 measured; a bound of 1.25 refuses it, the default 1.5 allows it
    s = share(MODEL, BERT, [SIGS["stream-copy"]])
    assert refusal(s, Rule(p99_bound=1.25)) is not None and refusal(s, Rule()) is None
    scores = np.array([50, 50])
    assert choose(scores, lambda i: s if i == 0 else None, Rule(p99_bound=1.25)).index == 1
    # the decode server's own p99 (x2.11 beside BERT) counts as much as BERT's
    assert "x2.11" in refusal(share(MODEL, BERT, [DECODE]), Rule(p99_bound=2.0))


def test_three_jobs_compose_their_pairs_as_time_slicing_does():
    unknown = share(MODEL, None, [None, None])  # pairs each keep 0.5: three keep a third each
    assert unknown.kept == pytest.approx((1 / 3,) * 3) and unknown.combined == pytest.approx(1.0)
    pair = share(MODEL, SIGS["resnet50-bs32"], [BERT])
    assert pair.kept == pytest.approx((0.990493, 0.915777))


# -- the FGD experiment ----------------------------------------------------------------------------------------
def run(policy, model, seed, pods):
    c = ClusterState([f"n{i}" for i in range(6)], ["A"] * 6, [2, 2, 4, 4, 8, 8], [64000] * 6, [1 << 20] * 6)
    w = TargetWorkload.from_pods(pods)
    predictor = Predictor(model)
    pods = with_kinds(pods, predictor.kinds, seed)
    goodput = GoodputState.attach(c, predictor)
    scorer = make(policy, Context(np.random.default_rng(seed), FragMeasure(w, c.model_names, c.max_gpus), predictor))
    for pod in pods:
        choice = scorer.choose(c, pod)
        if choice is not None:
            c.place(choice, pod)
    return c, goodput, scorer


pod_lists = st.lists(st.one_of(st.sampled_from([250, 300, 500, 700]).map(lambda m: PodRequest(2000, 0, 1, m)),
                               st.just(PodRequest(4000, 0, 1, MILLI))), min_size=2, max_size=60)


@settings(max_examples=40, deadline=None)
@given(pod_lists, st.integers(0, 1000))
def test_the_interference_aware_placement_never_places_a_refused_pair(pods, seed):
    c, goodput, _ = run("tidal-interference", MODEL, seed, pods)
    assert goodput.refused_total == 0
    for residents in c.shares.values():
        for i, a in enumerate(residents):
            for b in residents[i + 1:]:
                assert MODEL.predict(SIGS[a.kind], SIGS[b.kind]).combined >= 1.0
        if len(residents) > 1:  # the last to join was checked with every job there: each serving job's p99 bound
            s = share(MODEL, SIGS[residents[-1].kind], [SIGS[r.kind] for r in residents[:-1]])
            assert all(g <= RULE.p99_bound for m, g in zip(s.members, s.p99) if m.latency_sensitive)
    assert goodput.total <= c.allocated_milli + 1e-6


@settings(max_examples=25, deadline=None)
@given(pod_lists, st.integers(0, 1000))
def test_with_no_pairing_to_tell_apart_it_places_as_tidal_does(pods, seed):
    blind = replace(MODEL, cutoff=-1.0, tables=tuple(replace(t, signatures=tuple(
        (w, replace(s, latency_sensitive=False)) for w, s in t.signatures)) for t in MODEL.tables))
    a, _, _ = run("tidal", blind, seed, pods)
    b, _, scorer = run("tidal-interference", blind, seed, pods)
    assert np.array_equal(a.gpu_left, b.gpu_left) and a.shares == b.shares and scorer.overruled == 0


def test_goodput_counts_a_shared_gpus_work_by_what_each_share_keeps():
    predictor = Predictor(MODEL)
    c = ClusterState(["n0"], ["A"], [2], [64000], [1 << 20])
    goodput = GoodputState.attach(c, predictor)
    from experiments.fragmentation.state import Placement
    c.place(Placement(0, (0,)), PodRequest(0, 0, 1, 500, kind="gpt2s-train"))
    assert goodput.total == 500
    c.place(Placement(0, (0,)), PodRequest(0, 0, 1, 500, kind="dlrm-embed"))
    assert goodput.total == pytest.approx(500 * 0.4914 + 500 * 0.453271)
    assert goodput.refused_total == 1
    c.place(Placement(0, (1,)), PodRequest(0, 0, 1, MILLI))
    assert goodput.total == pytest.approx(500 * 0.4914 + 500 * 0.453271 + MILLI)
    assert math.isclose(sum(goodput.value), goodput.total)


def test_the_experiment_reports_goodput_and_the_pairings_forbidden(tmp_path):
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, [f"n{i},32000,65536,2,T4" for i in range(4)])
    pods = write(tmp_path / "pods.csv", POD_HEADER[:POD_HEADER.index(",qos")],
                 [f"p{i:02d},1000,1024,1,{(250, 500, 1000)[i % 3]}," for i in range(30)])
    setup = ex.load(nodes, pods, tune=1.0, seeds=[1, 2], interference=MODEL)
    summary = ex.summary(ex.run(setup, ["tidal", "tidal-interference"]))
    base, aware = (summary["policies"][p]["goodput"] for p in ("tidal", "tidal-interference"))
    assert aware["refused_pairs_at_end"] == 0 and base["overruled"] == 0
    assert 0 < base["at_end"]["mean"] <= 100 and 0 < aware["at_end"]["mean"] <= 100
    assert "goodput" not in ex.summary(ex.run(ex.load(nodes, pods, 1.2, [1]), ["tidal"]))["policies"]["tidal"]
    (tmp_path / "s.json").write_text(json.dumps(summary))
    goodput_report([str(tmp_path / "plot.png"), f"tiny={tmp_path / 's.json'}"])
    assert (tmp_path / "plot.png").stat().st_size > 0
