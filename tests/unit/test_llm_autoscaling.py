"""LLM serving signals in the autoscaling policy (colocation/policy/serving.py and its rules in autoscaling.py), the
KPA baseline (colocation/policy/kpa.py) and the LLM evaluation's pure parts (experiments/autoscale_eval/llm/): the
group replica model, the ServeGen reader, the look-ahead and the front's dominance."""

from __future__ import annotations

import math
import random
import re
from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from colocation.policy import kpa
from colocation.policy.autoscaling import (AHEAD, LoadMinute, Rates, ScaleReason, ScalingPolicy, ServiceView,
                                           decide_group, decide_service, lookahead)
from cluster.simulated import llm
from colocation.policy.serving import (FIT_MINUTES, REACH, TTFT_MINUTES, ServingTargets, breaches, bucket_bound,
                                      measured_within, replicas_for_breach, slo_utilization)
from experiments.autoscale_eval.llm.forecast import RateLookahead
from experiments.autoscale_eval.llm.front import Point, covering, dominates, pareto
from experiments.autoscale_eval.llm.replica import GroupModel, LlmModel
from experiments.autoscale_eval.llm.evaluate import evaluated
from experiments.autoscale_eval.llm.servegen import ServeGenError, read
from experiments.autoscale_eval.llm.sweep import at_baseline_costs, line
from experiments.builders.colocation import at

NOW = at("14:00")
SLO = ServingTargets(ttft_p99_s=0.5, tpot_p99_s=0.05, kv_cache=0.9, queue_per_replica=4)
POLICY = ScalingPolicy(thresholds=(("gpu", Rates(0.3, 0.6, 0.8)),), min_replicas=2, max_replicas=20, serving=SLO)


def minutes(n: int = 4, k: int = 5, **signals) -> tuple[LoadMinute, ...]:
    """`k` minutes at `n` replicas ending at NOW, GPU 0.6 unless given; each signal a value or a list (oldest first)."""
    base = {"gpu": 0.6, "ttft_p99": 0.2, "tpot_p99": 0.02, "kv_cache": 0.3, "queue": 0.0}
    base.update(signals)
    return tuple(LoadMinute(NOW - 60 * (k - i), n, qps=5.0, **{s: v[i] if isinstance(v, list) else v
                                                                 for s, v in base.items()}) for i in range(k))


def view(loads, n: int = 4, policy: ScalingPolicy = POLICY, **kw) -> ServiceView:
    return ServiceView("llm", policy, n, kw.pop("ready", n), loads, **kw)


# ---- serving targets ------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{"ttft_p99_s": 0}, {"tpot_p99_s": -1}, {"queue_per_replica": 0}, {"kv_cache": 1.5},
                                {"kv_cache": 0}])
def test_bad_targets_are_refused(kw):
    with pytest.raises(ValueError):
        ServingTargets(**kw)


@pytest.mark.parametrize("signals,named", [
    ({"ttft_p99": [0.2, 0.2, 0.2, 0.8, 0.9]}, "ttft_p99 0.8/0.9 s over its target 0.5 s"),
    ({"tpot_p99": [0.02, 0.02, 0.02, 0.06, 0.07]}, "tpot_p99 0.06/0.07 s over its target 0.05 s"),
    ({"kv_cache": [0.3, 0.3, 0.3, 0.95, 0.97]}, "kv_cache 95%/97% over its target 90%"),
    ({"queue": [0, 0, 0, 20, 24]}, "queue 5.0/6.0 over its target 4.0"),  # per replica: 20/4, 24/4
])
def test_a_missed_target_scales_out_and_names_the_signal_and_target(signals, named):
    d = decide_service(view(minutes(**signals)), NOW)
    assert d.reason is ScaleReason.SLO_OUT and d.target == 5 and named in d.message, d.message


@pytest.mark.parametrize("signals", [
    {"ttft_p99": [0.2, 0.2, 0.2, 0.2, 0.9]},  # one minute is not a breach
    {"ttft_p99": [0.9, 0.9, 0.9, 0.2, 0.9]},  # nor a broken run
    {"ttft_p99": [0.5] * 5},  # at the target is within it
])
def test_a_target_missed_only_briefly_does_not_scale(signals):
    assert decide_service(view(minutes(**signals)), NOW).reason is ScaleReason.HOLD


def test_a_breach_is_sized_by_utilization_and_at_most_doubles():
    # utilization 0.75 at expectRate 0.6 over 4 replicas: ceil(0.75/0.6×4) = 5
    assert replicas_for_breach(4, 0.75 / 0.6, 1.0) == 5
    assert replicas_for_breach(4, 0.1, 1.0) == 5  # one more at least
    assert replicas_for_breach(4, 10.0, 1.0) == 8  # at most twice
    assert replicas_for_breach(1, None, 1.0) == 2


def test_no_scale_in_while_a_latency_target_was_missed():
    low = minutes(gpu=0.2, ttft_p99=[0.2, 0.9, 0.2, 0.2, 0.2])
    kept = decide_service(view(low), NOW)
    assert kept.reason is ScaleReason.HOLD and kept.target == 4 and "ttft_p99" in kept.message
    free = decide_service(view(minutes(gpu=0.2)), NOW)
    assert free.reason is ScaleReason.SCALE_IN and free.target < 4


def test_without_serving_targets_the_signals_are_ignored():
    d = decide_service(view(minutes(ttft_p99=5.0), policy=replace(POLICY, serving=None)), NOW)
    assert d.reason is ScaleReason.HOLD


def test_breaches_need_every_minute_measured():
    ms = minutes(ttft_p99=[0.9, 0.9, 0.9, None, 0.9])
    assert [b.signal for b in breaches(SLO, ms, 4, 2)] == []
    assert [b.signal for b in breaches(SLO, ms, 4, 1)] == ["ttft_p99"]


# ---- deciding while groups start; the SLO's utilization ------------------------------------------

def measured(*at_ready: tuple[int, float], **signals) -> tuple[LoadMinute, ...]:
    """One minute per (ready replicas, GPU utilization of each), the newest ending at NOW."""
    k = len(at_ready)
    return tuple(LoadMinute(NOW - 60 * (k - i), n, gpu=u, qps=5.0, **signals) for i, (n, u) in enumerate(at_ready))


@pytest.mark.parametrize("name,loads,replicas,ready,changed_s,expected", [
    # 4 ready at 0.9 each while 2 more start: the work (3.6 replicas' worth) over 6 is 0.6: the starting ones suffice
    ("starting groups count as capacity", measured((4, 0.6), (4, 0.9)), 6, 4, 120, 6),
    # 4 ready at 1.1 then 1.2 each (a second rise): 4.4 and 4.8 over 6 are over maxRate 0.7: ceil(4.8 / 0.6) = 8
    ("a second rise inside the start-up", measured((4, 1.1), (4, 1.2)), 6, 4, 120, 8),
    # all ready, changed 1 minute ago: the stability wait does not hold a scale-out
    ("a rise inside the stability wait", measured((6, 0.75), (6, 0.8)), 6, 6, 60, 8),
    # the load falls while groups start: no scale-in before they are ready and the count stable
    ("no scale-in while starting", measured(*[(4, 0.1)] * 6), 6, 4, 400, 6),
    ("no scale-in inside the stability wait", measured(*[(6, 0.1)] * 6), 6, 6, 60, 6),
])
def test_an_llm_service_decides_upward_while_its_groups_start(name, loads, replicas, ready, changed_s, expected):
    policy = replace(POLICY, thresholds=(("gpu", Rates(0.3, 0.6, 0.7)),))
    d = decide_service(view(loads, n=replicas, ready=ready, policy=policy, replicas_changed_at=NOW - changed_s), NOW)
    assert d.target == expected, (name, d.message)
    if expected > replicas:
        assert d.reason is ScaleReason.SCALE_OUT, d.message
    if ready < replicas < expected:
        assert f"{ready} of {replicas} ready, the others counted as capacity" in d.message


def test_a_service_without_serving_targets_keeps_the_spec_filters():
    """The SPEC's rules for the others: no decision while replicas start or within 3 minutes of a change, and 2
    minutes over maxRate."""
    policy = replace(POLICY, serving=None, thresholds=(("gpu", Rates(0.3, 0.6, 0.7)),))
    starting = decide_service(view(measured((4, 0.9), (4, 1.2)), n=6, ready=4, policy=policy), NOW)
    assert starting.reason is ScaleReason.SKIP_SCALING
    once = decide_service(view(measured((6, 0.6), (6, 0.9)), n=6, policy=policy), NOW)
    assert once.reason is ScaleReason.HOLD
    twice = decide_service(view(measured((6, 0.9), (6, 0.9)), n=6, policy=policy), NOW)
    assert (twice.reason, twice.target) == (ScaleReason.SCALE_OUT, 9)


@pytest.mark.parametrize("targets,minute,limit", [
    # TPOT p99 30 ms at u 0.5, one minute: the cliff alone, 15 ms / (1 - u), within 50 ms up to 1 - 15/50
    (ServingTargets(tpot_p99_s=0.05), {"tpot_p99": 0.03}, 0.7),
    (ServingTargets(tpot_p99_s=0.015), {"tpot_p99": 0.03}, None),  # even an idle group misses it: no limit helps
    # a mean wait of 0.1 s (1 waiting at 10 requests/s) at u 0.5: the p99 wait W/u × ln(100u) is 0.78 s of the 1 s
    # TTFT p99, the prompt's own 0.22 s; within 1 s up to 0.5 (where it is), within 2 s up to 0.689
    (ServingTargets(ttft_p99_s=1.0), {"ttft_p99": 1.0, "queue": 1.0, "qps": 10.0}, 0.5),
    (ServingTargets(ttft_p99_s=2.0), {"ttft_p99": 1.0, "queue": 1.0, "qps": 10.0}, 0.757),
    (ServingTargets(ttft_p99_s=0.5), {"ttft_p99": 1.0, "queue": 0.0, "qps": 10.0}, None),  # the prompt alone: 1 s
    (ServingTargets(ttft_p99_s=1.0, tpot_p99_s=0.05), {"ttft_p99": 1.0, "queue": 1.0, "qps": 10.0,
                                                       "tpot_p99": 0.03}, 0.5),  # the lower of the two
])
def test_the_utilization_the_slo_allows(targets, minute, limit):
    """TTFT_MINUTES alike minutes: the median of their TTFT limits is each one's."""
    loads = tuple(LoadMinute(NOW - 60 * (TTFT_MINUTES - i), 4, **({"gpu": 0.5, "qps": 5.0} | minute))
                  for i in range(TTFT_MINUTES))
    got = slo_utilization(targets, loads)
    assert (got and got[0]) == (None if limit is None else pytest.approx(limit, abs=1e-3)), got


def ttft_minutes(*signals: dict) -> tuple[LoadMinute, ...]:
    """Minutes ending at NOW, at GPU 0.5 and 10 requests/s unless a minute's signals say otherwise."""
    k = len(signals)
    return tuple(LoadMinute(NOW - 60 * (k - i), 4, **({"gpu": 0.5, "qps": 10.0} | s)) for i, s in enumerate(signals))


# a mean wait of 0.1 s at u 0.5 and TTFT p99 1 s: within 2 s up to 0.757 (test_the_utilization_the_slo_allows)
TYPICAL = {"ttft_p99": 1.0, "queue": 1.0}
TTFT_2S = ServingTargets(ttft_p99_s=2.0)


def test_one_odd_minute_does_not_move_the_ttft_limit():
    """The newest minute alone used to set the limit: one at 20 % use whose TTFT p99 was as long as at 50 % (a burst)
    read a limit of 29 %; the median over TTFT_MINUTES minutes ignores it, and says so."""
    odd = {"gpu": 0.2, "ttft_p99": 1.6, "queue": 1.0}
    assert slo_utilization(TTFT_2S, ttft_minutes(*[odd] * 5))[0] < 0.45  # the odd minute's own limit
    for loads in (ttft_minutes(*[TYPICAL] * 4, odd), ttft_minutes(TYPICAL, TYPICAL, odd, TYPICAL, TYPICAL)):
        limit, why = slo_utilization(TTFT_2S, loads)
        assert limit == pytest.approx(0.757, abs=1e-3), limit
        assert why == ("the median TTFT limit over 5 minutes (5 fit: mean prefill waits 0.10 s at 20%–50% use) keeps "
                       "TTFT p99 within 2 s"), why


def test_the_ttft_limit_follows_a_change_the_most_minutes_show():
    """Three of five minutes at the longer wait: the median is theirs."""
    longer = {"ttft_p99": 1.7, "queue": 2.0}
    alone = slo_utilization(TTFT_2S, ttft_minutes(longer))
    assert alone is None  # one minute is too few to fit: no limit
    limit, _ = slo_utilization(TTFT_2S, ttft_minutes(TYPICAL, TYPICAL, longer, longer, longer))
    assert limit == pytest.approx(slo_utilization(TTFT_2S, ttft_minutes(*[longer] * 5))[0]) and limit < 0.7, limit


def test_a_ttft_limit_outlives_the_minutes_too_quiet_to_queue_for_up_to_an_hour():
    """Five minutes at a queue, then a quiet spell in which nothing queues (no minute fits): the limit the queue
    showed stays, said to be that old, so a scale-in in the quiet lands under it; an hour later it is gone. (Lifted,
    llm-chat scaled in to 65 % use, a minute's limit of 54 % then scaled it out again: make run, 2026-11-30.)"""
    quiet = {"gpu": 0.2, "ttft_p99": 0.3, "queue": 0.0}
    limit, why = slo_utilization(TTFT_2S, ttft_minutes(*[TYPICAL] * 5, *[quiet] * 10))
    assert limit == pytest.approx(0.757, abs=1e-3), limit
    # the newest 5 minutes in which 3 fit: 3 at the queue and 2 quiet, ending 8 minutes before the newest
    assert why.startswith("the median TTFT limit over 5 minutes up to 8 minutes ago (3 fit:"), why
    d = decide_service(view(ttft_minutes(*[TYPICAL] * 5, *[quiet] * 10), policy=replace(POLICY, serving=TTFT_2S)), NOW)
    assert d.data["band_note"] == "lowered for the SLO" and d.data["bands"]["gpu"]["max_rate"] == pytest.approx(
        0.757, abs=1e-3), d.message
    assert slo_utilization(TTFT_2S, ttft_minutes(*[TYPICAL] * 5, *[quiet] * FIT_MINUTES)) is None


@pytest.mark.parametrize("fitting", range(TTFT_MINUTES + 1))
def test_too_few_minutes_that_fit_set_no_ttft_limit(fitting):
    """A minute without the queue signal, or whose TTFT p99 is under the wait's (below the model), does not fit: under
    ceil(5/2) = 3 of them that do, no limit (the owner's band; the breach rule acts on a miss)."""
    unfit = [{"ttft_p99": 1.0, "queue": None}, {"ttft_p99": 0.1, "queue": 5.0}]
    loads = ttft_minutes(*[unfit[i % 2] for i in range(TTFT_MINUTES - fitting)], *[TYPICAL] * fitting)
    got = slo_utilization(TTFT_2S, loads)
    if fitting < math.ceil(TTFT_MINUTES / 2):
        assert got is None, got
    else:
        assert got[0] == pytest.approx(0.757, abs=1e-3) and f"({fitting} fit:" in got[1], got


@pytest.mark.parametrize("u", [0.02, 0.05, 0.1, 0.15, 0.2, 0.4, 0.6])
def test_the_demo_engines_ttft_limit_never_lies_over_its_true_crossing(u):
    """The demo's engine (cluster/simulated/llm.py): TTFT p99 = 3.2 × 50 ms / (1 − u) meets 0.5 s up to 68 %; its
    queue by Little's law. Its minutes fit the policy's model only at a low load, with a limit 13-25 points under
    that (the policy's exponential tail is longer than the engine's lognormal one); from 17 % use their TTFT p99 is
    under the p99 wait the model reads from the queue, and they set no limit (the owner's band)."""
    e = llm.engine_at(u, 2.0)
    p99 = e.ttft_median_s * math.exp(2.326 * llm.TTFT_SIGMA)
    loads = tuple(LoadMinute(NOW - 60 * (5 - i), 4, gpu=u, qps=2.0, ttft_p99=p99, queue=e.waiting) for i in range(5))
    true = 1 - llm.BASE_TTFT_S * math.exp(2.326 * llm.TTFT_SIGMA) / 0.5
    got = slo_utilization(ServingTargets(ttft_p99_s=0.5), loads)
    if u < 0.17:
        assert true - 0.26 < got[0] < true - 0.12, (got, true)
    else:
        assert got is None, got


def test_nothing_measured_short_of_saturation_sets_no_limit():
    assert slo_utilization(ServingTargets(tpot_p99_s=0.05), (LoadMinute(NOW - 60, 4, gpu=0.95, tpot_p99=1.0),)) is None
    assert slo_utilization(ServingTargets(), (LoadMinute(NOW - 60, 4, gpu=0.5, tpot_p99=0.03),)) is None


def test_thresholds_above_the_tpot_cliff_are_lowered_whole():
    """maxRate 0.8 over a 15 ms step and a 50 ms TPOT target (cliff at 0.7): every rate × 0.7/0.8, so 5 minutes at
    0.75 scale out (over 0.7) to what expectRate 0.6 × 0.875 = 0.525 asks: ceil(0.75/0.525 × 4) = 6."""
    policy = replace(POLICY, serving=ServingTargets(tpot_p99_s=0.05))
    d = decide_service(view(measured(*[(4, 0.75)] * 5, tpot_p99=0.06), policy=policy), NOW)  # 0.06 × 0.25 = 15 ms
    assert (d.reason, d.target) == (ScaleReason.SCALE_OUT, 6), d.message
    assert d.message.startswith("llm scales out to 6 replicas: gpu 75%/75% over maxRate 70% (owner's 80%, lowered for "
                                "the SLO) for 2 minutes: ceil(0.75/0.52×4) = 6; TPOT p99 × (1 − u) 15.0 ms over 5 "
                                "minutes at 75% use (too narrow a span to fit: the cliff alone) keeps TPOT p99 within "
                                "50 ms up to 70% use"), d.message
    loose = decide_service(view(measured(*[(4, 0.75)] * 5, tpot_p99=0.06), policy=replace(policy, serving=None)), NOW)
    assert loose.reason is ScaleReason.HOLD


# ---- every decision names the band it applied ----------------------------------------------------
# The owner's band 30%–80% (POLICY) under a TPOT p99 target of 50 ms with a 15 ms decode step measured: the cliff
# allows 70% use, so the band applied is ×0.875, 26%–70% (expectRate 52%).
CLIFF = replace(POLICY, serving=ServingTargets(tpot_p99_s=0.05))


def cliff_minutes(*at_ready: tuple[int, float]) -> tuple[LoadMinute, ...]:
    """Minutes whose TPOT p99 is a 15 ms step's cliff at their utilization."""
    return tuple(replace(m, tpot_p99=0.015 / (1 - m.gpu)) for m in measured(*at_ready))


def test_a_hold_under_a_lowered_band_names_it_beside_the_owners_and_stores_both():
    d = decide_service(view(cliff_minutes(*[(4, 0.5)] * 5), policy=CLIFF), NOW)
    assert d.reason is ScaleReason.HOLD
    assert d.message.startswith("llm stays at 4 replicas: gpu 50% within 30%–70% (owner's 30%–80%, lowered for the "
                                "SLO); "), d.message
    assert d.message.endswith("keeps TPOT p99 within 50 ms up to 70% use"), d.message
    assert d.data["bands"]["gpu"] == pytest.approx({"min_rate": 0.3, "expect_rate": 0.525, "max_rate": 0.7})
    assert d.data["owner_bands"]["gpu"] == {"min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}
    assert d.data["band_note"] == "lowered for the SLO"


def test_the_slo_lowers_max_and_expect_rate_and_keeps_the_owners_min_rate_for_scale_in():
    """The SLO is a ceiling: at 28 % the owner's minRate 30 % scales in, where a band lowered as a whole (26 %) held.
    The sentence names the lowered expectRate it sizes at, and no 'owner's' beside the minRate that is the owner's."""
    d = decide_service(view(cliff_minutes(*[(4, 0.28)] * 5), policy=CLIFF), NOW)
    assert d.reason is ScaleReason.SCALE_IN and d.target == 2, d.message
    assert "gpu under minRate 30% for 5 minutes (now 28%): floor(0.28/0.52×4) = 2" in d.message, d.message


def test_a_min_rate_the_lowered_expect_rate_would_reach_is_lowered_with_it():
    """A 25 ms TPOT target on a 15 ms step: maxRate 40 %, expectRate 30 % (the owner's 60 %/80 %), so the owner's
    minRate 30 % is lowered in proportion (15 %), keeping room between the two for a scale-in to land in."""
    tight = replace(CLIFF, serving=ServingTargets(tpot_p99_s=0.025))
    d = decide_service(view(cliff_minutes(*[(4, 0.2)] * 5), policy=tight), NOW)
    assert d.reason is ScaleReason.HOLD and "within 15%–40% (owner's 30%–80%, lowered for the SLO)" in d.message
    assert d.data["bands"]["gpu"] == pytest.approx({"min_rate": 0.15, "expect_rate": 0.3, "max_rate": 0.4})


def test_a_decision_on_the_owners_band_says_why_the_slo_did_not_lower_it_this_minute():
    """The limit is recomputed every minute from the newest latencies: TTFT's from the median over the newest
    minutes that fit, so one minute without the queue signal keeps the band lowered, while three of five (no prefill
    wait to fit: no limit) lift it. The decision on the owner's band says so, where it said only "within 30%–80%"."""
    ttft = replace(POLICY, serving=ServingTargets(ttft_p99_s=0.5))
    lowered = decide_service(view(minutes(gpu=0.45, ttft_p99=0.45, queue=0.25), policy=ttft), NOW)  # wait 0.05 s
    assert "gpu 45% within 30%–50% (owner's 30%–80%, lowered for the SLO)" in lowered.message, lowered.message
    assert "the median TTFT limit over 5 minutes (5 fit: mean prefill waits 0.05 s at 45% use)" in lowered.message
    one = decide_service(view(minutes(gpu=0.45, ttft_p99=0.45, queue=[0.25] * 4 + [None]), policy=ttft), NOW)
    assert "gpu 45% within 30%–50% (owner's 30%–80%, lowered for the SLO)" in one.message, one.message
    lifted = decide_service(view(minutes(gpu=0.45, ttft_p99=0.45, queue=[0.25] * 2 + [None] * 3), policy=ttft), NOW)
    assert lifted.message == ("llm stays at 4 replicas: gpu 45% within 30%–80% (the owner's: no SLO limit from these "
                              "minutes' latencies)"), lifted.message
    assert "owner_bands" not in lifted.data and lifted.data["bands"]["gpu"]["max_rate"] == 0.8
    allows = decide_service(view(cliff_minutes(*[(4, 0.5)] * 5), policy=replace(CLIFF, serving=ServingTargets(
        tpot_p99_s=0.2))), NOW)
    assert allows.message == "llm stays at 4 replicas: gpu 50% within 30%–80% (the owner's: the SLO allows 92%)"


def test_a_limit_a_hair_under_max_rate_keeps_the_owners_band():
    """A TTFT limit of 79.99 % against maxRate 80 %: the band is the owner's, not one 'lowered' to the same 30%–80%."""
    ttft = replace(POLICY, serving=ServingTargets(ttft_p99_s=0.5))
    loads = minutes(gpu=0.51, ttft_p99=0.3, queue=0.075)
    limit, _ = slo_utilization(ttft.serving, loads)
    assert 0.795 < limit < 0.8, limit
    d = decide_service(view(loads, policy=ttft), NOW)
    assert "within 30%–80% (the owner's: the SLO allows 80%)" in d.message and "owner_bands" not in d.data, d.message


def test_a_hold_past_the_band_says_so_and_for_how_many_of_the_minutes_its_rule_needs():
    """A hold used to say "within" whatever the value: 85% was "within 30%–80%"."""
    over = decide_service(view(cliff_minutes(*[(4, 0.5)] * 4, (4, 0.75)), policy=CLIFF), NOW)
    assert over.message.startswith("llm stays at 4 replicas: gpu 75% over maxRate 70% (owner's 80%, lowered for the "
                                   "SLO) for 1 of the 2 minutes a scale-out needs; "), over.message
    under = decide_service(view(minutes(gpu=[0.5] * 3 + [0.2] * 2), policy=replace(CLIFF, serving=None)), NOW)
    assert under.message == "llm stays at 4 replicas: gpu 20% under minRate 30% for 2 of the 5 minutes a scale-in needs"


def test_a_scale_out_while_groups_start_names_the_lowered_band():
    """4 of 5 groups ready at 88% and 89%: 70% and 71% of 5, over the lowered maxRate 70% (not the owner's 80%)."""
    d = decide_service(view(cliff_minutes((4, 0.88), (4, 0.89)), n=5, ready=4, policy=CLIFF), NOW)
    assert d.reason is ScaleReason.SCALE_OUT
    assert ("over maxRate 70% (owner's 80%, lowered for the SLO) for 2 minutes: ceil(0.71/0.52×5) = 7 (4 of 5 ready, "
            "the others counted as capacity); TPOT p99") in d.message, d.message


def test_a_priority_capped_decision_says_on_which_band_it_asked():
    hi = view(cliff_minutes(*[(4, 0.75)] * 5), policy=replace(CLIFF, priority=5), per_replica=16.0)
    lo = replace(view(cliff_minutes(*[(4, 0.75)] * 5), policy=CLIFF, per_replica=16.0), name="llm-b")
    capped = {d.service: d for d in decide_group([hi, lo], capacity=160.0, now=NOW)}["llm-b"]
    assert capped.reason is ScaleReason.PRIORITY
    assert "it asked 6 on gpu 75%/75% over maxRate 70% (owner's 80%, lowered for the SLO)" in capped.message
    assert capped.data["owner_bands"]["gpu"]["max_rate"] == 0.8


def test_the_predictive_rule_names_the_lowered_band():
    d = decide_service(view(cliff_minutes(*[(4, 0.5)] * 5), policy=CLIFF, forecast=(("gpu", (0.5, 0.72, 0.74, 0.5,
                                                                                           0.5)),)), NOW)
    assert d.reason is ScaleReason.PREDICTIVE_OUT
    assert "exceeds maxRate 70% (owner's 80%, lowered for the SLO) 2 times" in d.message, d.message


def test_a_missed_target_names_the_lowered_expect_rate_it_sizes_at():
    loads = tuple(replace(m, tpot_p99=0.06 if i >= 3 else m.tpot_p99) for i, m in enumerate(cliff_minutes(
        *[(4, 0.5)] * 5)))
    d = decide_service(view(loads, policy=CLIFF), NOW)
    assert d.reason is ScaleReason.SLO_OUT
    assert "(the utilization at expectRate" in d.message and "owner's 60%, lowered for the SLO" in d.message, d.message


# ---- look-ahead of a start-up; groups to and from zero -------------------------------------------

@pytest.mark.parametrize("serving,startup_min,ahead", [(SLO, 0, AHEAD), (SLO, 2, AHEAD), (SLO, 10, 10),
                                                       (None, 10, 20)])
def test_the_predictive_rule_looks_at_least_a_startup_ahead(serving, startup_min, ahead):
    """One start-up for a service that decides while its replicas start (an LLM service), two for one that waits."""
    assert lookahead(replace(POLICY, serving=serving, startup_min=startup_min)) == ahead >= startup_min


def test_a_rise_beyond_five_minutes_but_within_the_startup_scales_out_ahead():
    rise = (0.6,) * 7 + (0.95,) * 13  # over maxRate from minute 8 on
    for startup, reason in ((0, ScaleReason.HOLD), (10, ScaleReason.PREDICTIVE_OUT)):
        d = decide_service(view(minutes(), policy=replace(POLICY, startup_min=startup), forecast=(("gpu", rise),)),
                           NOW)
        assert d.reason is reason, d.message
    assert "over the next 10 minutes" in d.message and d.target == math.ceil(0.95 / 0.6 * 4)


def test_a_group_service_goes_to_zero_and_back_whole():
    """A replica of 16 GPUs (2 nodes × 8): scale to zero after the idle time, back on the first request, and the
    group's arbitration counts whole replicas."""
    policy = replace(POLICY, scale_to_zero_idle_min=3, min_replicas=2)
    idle = tuple(LoadMinute(NOW - 60 * (3 - i), 2, gpu=0.0, qps=0.0) for i in range(3))
    d = decide_service(view(idle, n=2, policy=policy, per_replica=16.0), NOW)
    assert (d.reason, d.target) == (ScaleReason.TO_ZERO, 0)
    woke = (LoadMinute(NOW - 60, 0, qps=0.5),)
    back = decide_service(view(woke, n=0, policy=policy, per_replica=16.0), NOW)
    assert (back.reason, back.target) == (ScaleReason.FROM_ZERO, 2)
    # 40 GPUs for two group services asking 2 groups each: the higher priority gets 2 groups, the other 0 extra
    hi = view(minutes(n=2, gpu=0.9), n=2, policy=replace(POLICY, priority=5), per_replica=16.0)
    lo = replace(view(minutes(n=2, gpu=0.9), n=2, per_replica=16.0), name="llm-b")
    got = {d.service: d.target for d in decide_group([hi, lo], capacity=80.0, now=NOW)}
    assert got["llm"] * 16 + got["llm-b"] * 16 <= 80 and got["llm"] >= got["llm-b"]


# ---- the KPA ---------------------------------------------------------------------------------------

SPEC = kpa.KpaSpec(target=0.5, min_replicas=1, max_replicas=50)


def samples(*totals: float, end: float = NOW) -> tuple[kpa.Sample, ...]:
    """One sample a minute, the newest at `end`."""
    return tuple(kpa.Sample(end - 60 * (len(totals) - 1 - i), v) for i, v in enumerate(totals))


def test_window_average_keeps_only_the_window():
    s = samples(10.0, 2.0, 4.0)
    assert kpa.window_average(s, NOW, 180) == pytest.approx(16 / 3)
    assert kpa.window_average(s, NOW, 60) == 4.0
    assert kpa.window_average(s, NOW + 600, 60) is None


def test_stable_mode_follows_the_stable_window():
    d = kpa.decide(SPEC, ready=4, samples=samples(2.0, 2.0, 2.6), state=kpa.KpaState(), now=NOW)
    assert not d.panic and d.desired == math.ceil((2.0 + 2.0 + 2.6) / 3 / 0.5)


def test_panic_at_twice_the_ready_count_never_goes_down_and_ends_after_the_stable_window():
    d = kpa.decide(SPEC, ready=4, samples=samples(2.0, 2.0, 4.0), state=kpa.KpaState(), now=NOW)
    assert d.panic and d.desired == 8  # the panic window asks 8 >= 2 × 4 ready
    d2 = kpa.decide(SPEC, ready=8, samples=samples(2.0, 4.0, 1.0, end=NOW + 60), state=d.state, now=NOW + 60)
    assert d2.panic and d2.desired == 8  # load fell but panic holds
    later = NOW + 60 + kpa.STABLE_S
    d3 = kpa.decide(SPEC, ready=8, samples=samples(1.0, 1.0, 1.0, end=later), state=d2.state, now=later)
    assert not d3.panic


def test_scale_down_waits_for_the_delay():
    state = kpa.KpaState()
    d = kpa.decide(SPEC, 8, samples(4.0, 4.0, 4.0), state, NOW)  # asks 8
    low = samples(1.0, 1.0, 1.0, end=NOW + 240)
    held = kpa.decide(SPEC, 8, low, d.state, NOW + 240)  # 240 s later: still inside the 300 s delay
    assert held.desired == 8 and "scale-down delay" in held.message
    free = kpa.decide(SPEC, 8, samples(1.0, 1.0, 1.0, end=NOW + 360), held.state, NOW + 360)
    assert free.desired == 2


def test_bad_kpa_specs_are_refused():
    with pytest.raises(ValueError):
        kpa.KpaSpec(target=0)
    with pytest.raises(ValueError):
        kpa.KpaSpec(target=0.5, panic_s=300)


# ---- the group replica model -------------------------------------------------------------------

def test_capacity_grows_with_the_gpus_and_prefill_is_compute_bound():
    one, two = GroupModel(tp=8, pp=1, model=LlmModel(params_b=70)), GroupModel(tp=8, pp=2, model=LlmModel(params_b=70))
    assert two.prefill_tokens_s == pytest.approx(2 * one.prefill_tokens_s)
    # 8 H200 at 1979 TFLOP/s × 0.4 over 2 × 70e9 FLOPs per token
    assert one.prefill_tokens_s == pytest.approx(8 * 1979e12 * 0.4 / 140e9)
    assert two.step_s == one.step_s  # pipeline stages do not shorten a token's weight read
    assert GroupModel(gpu="A100").prefill_tokens_s < GroupModel(gpu="H200").prefill_tokens_s


def test_decode_capacity_at_a_tpot_target():
    g = GroupModel()
    assert g.decode_tokens_s(g.step_s, 1000, 100) == 0.0  # the weight read alone takes the whole target
    rate = g.decode_tokens_s(0.05, 1000, 100)
    u = rate * g.per_sequence_s(1050)  # decode's share of the group's time at that rate
    assert g.step_s / (1 - u) == pytest.approx(0.05)  # at that rate the time per token is the target


def test_serving_a_minute():
    g = GroupModel()
    light, heavy = g.serve(2, 900, 150, 1.0, 1.0), g.serve(12, 900, 150, 1.0, 1.0)
    assert light.utilization < heavy.utilization < 1
    assert light.tpot_s < heavy.tpot_s and light.ttft_p99_s < heavy.ttft_p99_s and light.ttft_ok > heavy.ttft_ok
    assert g.serve(12, 900, 150, 4.0, 1.0).ttft_ok < heavy.ttft_ok  # burstier arrivals wait longer
    over = g.serve(100, 900, 150, 1.0, 1.0)
    assert over.utilization > 1 and over.ttft_ok == 0 and math.isinf(over.tpot_s)


def test_a_model_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="do not fit"):
        GroupModel(model=LlmModel(params_b=2000, bytes_per_param=2), tp=8, pp=1)
    with pytest.raises(ValueError):
        GroupModel(gpu="P40")


# ---- the ServeGen reader and the look-ahead -------------------------------------------------------

def write(tmp_path, rows: str):
    p = tmp_path / "t.csv"
    p.write_text("t_s,requests_per_s,cv_weighted,mean_input_tokens,mean_output_tokens\n" + rows)
    return p


def test_servegen_windows_become_minutes(tmp_path):
    w = read(write(tmp_path, "0,100,1.0,500,100\n600,0,1.0,,\n1200,200,1.0,700,\n"))
    assert w.minutes == 30 and w.days(None).minutes == 30
    assert w.rps[:5].mean() == pytest.approx(100, rel=0.05)  # before the first centre: its value
    assert w.tokens_in[10] == pytest.approx(500 + 200 * (10.5 * 60 - 300) / 1200, rel=1e-6)  # the empty cell bridged
    assert w.tokens_out[-1] == 100 and (w.rps > 0).all()  # 0 requests/s is missing data, not idle
    with pytest.raises(ServeGenError):
        w.days(1)
    assert evaluated(w, 14).minutes == evaluated(w, None).minutes == 30  # a trace shorter than asked: all of it
    two = read(write(tmp_path, "".join(f"{600 * i},100,1.0,500,100\n" for i in range(2 * 144 + 20))))
    assert evaluated(two, 1).minutes == 1440 and evaluated(two, 3).minutes == two.minutes


@pytest.mark.parametrize(("rows", "why"), [
    ("", "need the columns"), ("a,b\n1,2\n", "need the columns"),
    ("0,x,1,2,3\n", "line 2: requests_per_s must be a number >= 0, got 'x'"),
    ("0,5,1,2,3\n600,-5,1,2,3\n", "line 3: requests_per_s must be a number >= 0, got '-5'"),
    ("0,5,1,2,3\n600,5,inf,2,3\n", "line 3: cv_weighted must be a number >= 0, got 'inf'"),
    ("0,5,1,2,3\n,5,1,2,3\n", "line 3: t_s must be a number >= 0, got ''"),
    ("0,5,1,2,3\n0,6,1,2,3\n600,5,1,2,3\n", "line 3: t_s must increase"),
    ("1200,5,1,2,3\n600,5,1,2,3\n", "line 3: t_s must increase"),
])
def test_bad_servegen_files_say_why(tmp_path, rows, why):
    p = tmp_path / "bad.csv"
    p.write_text(rows if rows.startswith("a,b") else "t_s,requests_per_s,cv_weighted,mean_input_tokens,"
                 "mean_output_tokens\n" + rows)
    with pytest.raises(ServeGenError, match=re.escape(why)):
        read(p)


def look(rates, horizon: int = 10, z: float = 1.0) -> RateLookahead:
    ahead = RateLookahead(horizon, z)
    for r in rates:
        ahead.add(float(r))
    return ahead


def test_the_look_ahead_widens_with_volatility():
    calm = look([100.0] * 400)
    jumps = np.repeat(np.random.default_rng(5).choice([80.0, 120.0], 40), 10)
    jumpy, bare = look(jumps, z=1.0), look(jumps, z=0.0)
    assert calm.volatility == 0.0 and jumpy.volatility > 0.1
    assert np.allclose(calm.values(), 100.0)
    margin = jumpy.values() - bare.values()
    assert len(margin) == 10 and margin[0] > 0 and (np.diff(margin) > 0).all()
    assert (RateLookahead(3, 1.0).values() == 0).all()


def test_jumps_that_always_revert_are_expected_to_revert():
    """80 and 120 in turn, 10 minutes each: whatever the last 10 minutes did, the next 10 undo it."""
    ahead = look(np.tile(np.repeat([80.0, 120.0], 10), 20), horizon=10, z=0.0)
    assert ahead.beta < -0.8
    assert ahead.trend > 0.2 and ahead.values()[-1] < ahead.level  # just rose: expected to fall back


def test_the_look_ahead_regresses_the_next_change_on_the_last():
    """β and σ against a direct computation: level = mean of the last (up to) 5 rates; x = the level's change over
    the h minutes before, y = the rate h minutes later over the level, less 1; β = Σxy/Σx², σ the RMS of y − βx."""
    rates = [100.0, 120.0, 90.0, 130.0, 110.0, 95.0, 140.0, 100.0, 105.0, 125.0, 115.0, 98.0]
    h = 2
    ahead = look(rates, horizon=h)
    levels = [np.mean(rates[max(0, t - 4):t + 1]) for t in range(len(rates))]
    x = np.array([levels[t] / levels[t - h] - 1 for t in range(h, len(rates) - h)])
    y = np.array([rates[t + h] / levels[t] - 1 for t in range(h, len(rates) - h)])
    beta = float(np.clip((x * y).sum() / (x * x).sum(), -1, 1))
    assert ahead.beta == pytest.approx(beta)
    assert ahead.volatility == pytest.approx(np.sqrt(np.mean(np.square(y - beta * x))))
    trend = levels[-1] / levels[-1 - h] - 1
    assert ahead.values()[-1] == pytest.approx(levels[-1] * (1 + beta * trend + ahead.volatility))


def test_the_look_ahead_follows_a_kept_ramp_and_not_noise():
    """A rise the traffic keeps is projected over the horizon (β near 1, little margin left); noise around a level is
    not (β near 0, the level with its margin)."""
    ramp = look(100.0 + np.arange(400.0), horizon=10, z=0.0)
    assert ramp.beta == pytest.approx(1.0, abs=0.1) and ramp.volatility < 0.01
    f = ramp.values()
    assert f[0] > 497.0 and f[-1] == pytest.approx(507.0, abs=1.5)  # the level (497) and where the ramp goes
    rng = np.random.default_rng(3)
    noise = look(100.0 * (1 + 0.05 * rng.standard_normal(400)), horizon=10, z=1.0)
    assert abs(noise.beta) < 0.5
    g = noise.values()
    assert g[-1] > g[0] and g[-1] == pytest.approx(noise.level * (1 + noise.beta * noise.trend
                                                                        + noise.volatility))


# ---- the front -----------------------------------------------------------------------------------

def pts(policy: str, *pairs: tuple[float, float]) -> tuple[Point, ...]:
    return tuple(Point(policy, str(i), a, g) for i, (a, g) in enumerate(pairs))


@pytest.mark.parametrize("tidal,base,dominated", [
    (pts("tidal", (0.9, 0.5), (0.95, 0.6)), pts("hpa", (0.9, 0.5), (0.94, 0.65)), True),  # equal counts as covered
    (pts("tidal", (0.9, 0.5)), pts("hpa", (0.91, 0.6)), False),  # cheaper but worse attainment
    (pts("tidal", (0.95, 0.5)), pts("hpa", (0.9, 0.49)), False),  # better but dearer
    ((), pts("hpa", (0.5, 1.0)), False),
    (pts("tidal", (0.9, 0.5)), (), True),
])
def test_dominance(tidal, base, dominated):
    assert dominates(tidal, base) is dominated


def test_covering_picks_the_cheapest_and_pareto_drops_the_beaten():
    tidal = pts("tidal", (0.95, 0.7), (0.93, 0.6), (0.92, 0.65))
    assert covering(Point("hpa", "x", 0.92, 0.7), tidal).gpu_hours_per_mtok == 0.6
    assert [(p.attainment, p.gpu_hours_per_mtok) for p in pareto(tidal)] == [(0.93, 0.6), (0.95, 0.7)]


@pytest.mark.parametrize("base,tried", [
    ((0.62, 0.45), [0.375, 0.4375]),  # under the segment z 0.25-0.5 (0.67 at 0.45): z 0.375 gives 0.61, 0.4375 0.66
    ((0.53, 0.3), [0.375, 0.3125, 0.28125]),  # the first two dearer than 0.3: the knob halves toward the cheap side
    ((0.7, 0.5), []),  # covered by the grid's z 0.5
    ((0.68, 0.45), 2 * [0.375, 0.4375, 0.46875, 0.453125, 0.4453125]),  # above both lines: each bisected, in vain
])
def test_tidal_is_run_at_an_uncovered_baseline_points_cost(base, tried):
    """Two lines whose cost is the knob z and whose attainment is expect·√z: the higher is bisected first, until a
    value covers the baseline point, and the other only if it did not."""
    runs: list[tuple[float, float]] = []

    def run(e: float, z: float) -> Point:
        runs.append((e, z))
        return Point("tidal", f"expect {e:g} z {z:g}", e * math.sqrt(z), z)

    lines = [line(partial(run, e), (0.0, 0.25, 0.5, 1.0)) for e in (0.9, 1.0)]
    grid = [p for ln in lines for _, p in ln.grid]
    runs.clear()
    baseline = Point("kpa", "target", *base)
    added = at_baseline_costs([baseline, *grid], lines)
    assert [z for _, z in runs] == tried and [e for e, _ in runs] == sorted((e for e, _ in runs), reverse=True)
    assert dominates(grid + added, [baseline]) is (base != (0.68, 0.45))


def test_a_knob_whose_cost_falls_as_it_grows_is_bisected_the_same_way():
    """The SLO sizing's min_gain: the higher, the cheaper (here cost 1 − g, attainment √(1 − g)). A baseline point
    between g 0.25 and 0.5 is met from the dear side down."""
    ln = line(lambda g: Point("tidal", f"min_gain {g:g}", math.sqrt(1 - g), 1 - g), (0.0, 0.25, 0.5, 1.0))
    added = at_baseline_costs([Point("kpa", "target", 0.73, 0.55), *(p for _, p in ln.grid)], [ln])
    assert [p.setting for p in added] == ["min_gain 0.375", "min_gain 0.4375", "min_gain 0.46875", "min_gain 0.453125"]


P99 = 2.3263478740408408  # the normal's 99th percentile: a lognormal's p99 is its median × exp(P99 × σ)


def tpot_minutes(us, p99_of, noise: float = 0.0, seed: int = 0) -> tuple[LoadMinute, ...]:
    """One minute per utilization, TPOT p99 from `p99_of` (times 1 + noise × a standard normal draw)."""
    rng = random.Random(seed)
    return tuple(LoadMinute(NOW - 60 * (len(us) - i), 4, gpu=u, tpot_p99=p99_of(u) * (1 + noise * rng.gauss(0, 1)))
                 for i, u in enumerate(us))


def demo_engine_p99(u: float) -> float:
    return llm.engine_at(u).tpot_median_s * math.exp(P99 * llm.TPOT_SIGMA)


SPREAD_US = [0.3 + 0.3 * i / 59 for i in range(60)]  # an hour measured at 30-60 % use
TPOT_50MS = ServingTargets(tpot_p99_s=0.05)


def test_the_cliff_measured_over_a_span_is_recovered_exactly():
    """TPOT = step / (1 - u), no spread (the LLM evaluation's engine): the fit is the cliff, the limit today's."""
    limit, why = slo_utilization(TPOT_50MS, tpot_minutes(SPREAD_US, lambda u: 0.0151 / (1 - u)))
    assert limit == pytest.approx(1 - 0.0151 / 0.05, abs=1e-4)
    assert "TPOT p99 15.1 + 0.0·u + 15.1·u/(1 − u) ms fitted over 60 minutes at 30%–60% use" in why


def test_the_demo_engines_linear_growth_is_not_read_as_a_cliff():
    """The demo's engine (cluster/simulated/llm.py): median 20 ms × (1 + u), lognormal σ 0.15; its p99 reaches 50 ms
    at u = 0.05 / (0.02 × e^(2.326 × 0.15)) - 1 ≈ 0.76, which the fit finds from minutes measured up to 0.6."""
    true = 0.05 / (llm.BASE_TPOT_S * math.exp(P99 * llm.TPOT_SIGMA)) - 1
    limit, why = slo_utilization(TPOT_50MS, tpot_minutes(SPREAD_US, demo_engine_p99))
    assert true == pytest.approx(0.76, abs=0.01) and limit == pytest.approx(true, abs=0.01), why


def test_minutes_at_one_utilization_fall_back_to_the_cliff():
    limit, why = slo_utilization(TPOT_50MS, tpot_minutes([0.38] * 60, demo_engine_p99))
    assert limit == pytest.approx(1 - demo_engine_p99(0.38) * 0.62 / 0.05, abs=1e-6)
    assert "over 60 minutes at 38% use (too narrow a span to fit: the cliff alone)" in why


def test_a_fit_is_trusted_only_so_far_past_the_highest_use_measured():
    """A flat p99 of 40 ms measured at 20-40 % reaches 50 ms nowhere short of saturation, and the cliff through it
    at 40 % would allow only 52 %: the limit stays REACH past 40 %."""
    limit, why = slo_utilization(TPOT_50MS, tpot_minutes([0.2 + 0.2 * i / 59 for i in range(60)], lambda u: 0.04))
    assert limit == pytest.approx(0.4 + REACH, abs=1e-9) and "trusted to 20% past the highest" in why


@pytest.mark.parametrize("seed", range(5))
def test_noise_moves_the_limit_little(seed):
    """1 % noise on each minute's p99 (a few hundred requests a minute at the demo's σ) moves the limit by a few
    points, never up past the truth by more than one."""
    exact = slo_utilization(TPOT_50MS, tpot_minutes(SPREAD_US, demo_engine_p99))[0]
    noisy = slo_utilization(TPOT_50MS, tpot_minutes(SPREAD_US, demo_engine_p99, noise=0.01, seed=seed))[0]
    assert -0.05 < noisy - exact < 0.01


def test_a_utilization_measured_within_the_target_is_allowed():
    """The demo's engines at 29-31 % use: their TPOT p99 (39 ms) reads 49.7 ms through Prometheus's interpolation in
    vLLM's 25-50 ms bucket. The cliff through it would allow 30 %; 31 % was measured within 50 ms."""
    limit, why = slo_utilization(TPOT_50MS, tpot_minutes([0.29, 0.31, 0.30], lambda u: 0.0497))
    assert limit == pytest.approx(0.31)
    assert why.endswith("keeps TPOT p99 within 50 ms up to 30% use, but it was measured within it"), why
    missed_at_low = tpot_minutes([0.29, 0.31, 0.30], lambda u: 0.0497 if u > 0.3 else 0.051)
    assert slo_utilization(TPOT_50MS, missed_at_low)[0] < 0.3


# ---- TPOT p99 read through a histogram's buckets ---------------------------------------------------------------

def demo_engine_mean(u: float) -> float:
    return llm.engine_at(u).tpot_median_s * math.exp(llm.TPOT_SIGMA ** 2 / 2)


def through_buckets(u: float, q: float = 0.99) -> float:
    """The demo engine's TPOT quantile as Prometheus's histogram_quantile reads it from vLLM's buckets: linear inside
    the bucket the rank falls in."""
    median, lo, below = llm.engine_at(u).tpot_median_s, 0.0, 0.0
    for le in llm.TPOT_BUCKETS_S:
        share = llm.share_within(le, median, llm.TPOT_SIGMA)
        if share >= q:
            return lo + (le - lo) * (q - below) / (share - below)
        lo, below = le, share
    raise AssertionError("past the last bucket")


def bucketed_minutes(us, with_mean: bool = True, bounds: bool = False) -> tuple[LoadMinute, ...]:
    """The demo engine's minutes at `us` read through vLLM's buckets; with `bounds`, censored as the live reader does
    once it has read the buckets' `le` values."""
    return tuple(LoadMinute(NOW - 60 * (len(us) - i), 4, gpu=u, tpot_p99=(p99 := through_buckets(u)),
                            tpot_mean=demo_engine_mean(u) if with_mean else None,
                            tpot_p99_bound=bucket_bound(p99, llm.TPOT_BUCKETS_S) if bounds else None)
                 for i, u in enumerate(us))


NIGHT_US = [0.37 - 0.12 * i / 54 for i in range(55)] + [0.25] * 5  # an hour falling from 37 % to 25 % use
TRUE_LIMIT = 0.05 / (llm.BASE_TPOT_S * math.exp(P99 * llm.TPOT_SIGMA)) - 1  # the demo engine's p99 reaches 50 ms


def test_vllms_bucket_pins_the_p99_at_every_load_within_50ms():
    """The 25-50 ms bucket holds the p99 from 28 ms (idle) to 50 ms (76 % use): Prometheus reads 46-50 ms (48.7-50 ms
    from 10 % use), while the mean grows by a half."""
    readings = [through_buckets(u) for u in (0.1, 0.3, 0.6, 0.75)]
    assert all(0.0487 < r <= 0.05 for r in readings) and max(readings) - min(readings) < 0.0013
    assert demo_engine_mean(0.75) / demo_engine_mean(0.1) > 1.5
    assert through_buckets(0.8) > 0.05  # a p99 of 51 ms: the next bucket, read as 57 ms


def test_a_pinned_p99_sets_no_limit_so_the_night_scales_in():
    """Read alone, the pinned p99 held the band at the highest use measured within 50 ms (37 %), so the night's 25 %
    never fell under its minRate (30 % × 37/80): the ratchet that kept the demo's llm-chat from scaling in. Beside the
    exact mean it shows as pinned (it does not grow with the mean): no curve, the owner's band, and a scale-in."""
    policy = replace(POLICY, serving=TPOT_50MS)
    alone = slo_utilization(TPOT_50MS, bucketed_minutes(NIGHT_US, with_mean=False))
    assert alone[0] == pytest.approx(0.37, abs=0.01), alone
    held = decide_service(view(bucketed_minutes(NIGHT_US, with_mean=False), policy=policy), NOW)
    assert held.target == 4, held.message
    assert slo_utilization(TPOT_50MS, bucketed_minutes(NIGHT_US)) is None
    d = decide_service(view(bucketed_minutes(NIGHT_US), policy=policy), NOW)
    assert d.reason is ScaleReason.SCALE_IN and d.target == 2, d.message  # floor(0.25 / 0.6 × 4) = 1, at least 2


def test_a_miss_past_a_pinned_p99_limits_the_band_near_the_true_crossing():
    """The morning rise passes 76 %: the p99 leaves the bucket (50.2 ms at 77 %, read as 51.6) and the band is held at
    the highest use measured within 50 ms, next to where the engine truly crosses it, and the service scales out."""
    rise = [0.3 + 0.55 * i / 59 for i in range(60)]  # 30 % to 85 % over the hour
    limit, why = slo_utilization(TPOT_50MS, bucketed_minutes(rise))
    assert TRUE_LIMIT - 0.02 < limit <= TRUE_LIMIT, why
    assert why.startswith("TPOT p99 reads 49.7 ms at every load within 50 ms (pinned inside a histogram bucket: no "
                          "curve) and missed it at 77% use"), why
    d = decide_service(view(bucketed_minutes(rise), policy=replace(POLICY, serving=TPOT_50MS)), NOW)
    assert d.target == 6 and "maxRate 76% (owner's 80%, lowered for the SLO)" in d.message, d.message
    assert "; TPOT p99 reads 49.7 ms" in d.message, d.message


def test_a_p99_that_follows_the_mean_is_predicted_from_the_means_shape():
    """Finer buckets (or a target where the p99's bucket is narrow): the p99 reads 1.40 × the mean. The curve is
    fitted to the exact mean and scaled by that ratio, and finds the crossing at 76 % from minutes up to 60 %."""
    loads = tuple(replace(m, tpot_p99=demo_engine_p99(m.gpu)) for m in bucketed_minutes(SPREAD_US))
    limit, why = slo_utilization(TPOT_50MS, loads)
    assert limit == pytest.approx(TRUE_LIMIT, abs=0.005), why
    assert ("TPOT mean 20.2 + 20.2·u + 0.0·u/(1 − u) ms fitted over 60 minutes at 30%–60% use, × 1.40 (its p99/mean, "
            "the minutes' median), keeps TPOT p99 within 50 ms") == why


@pytest.mark.parametrize("gpu", [0.95, None], ids=["saturated", "no-utilization"])
def test_the_sentence_names_what_the_fitted_minutes_measured(gpu):
    """An engine without the histogram's mean: the curve is fitted to the p99 and the sentence says so, even when a
    minute the fit leaves out (saturated, or without a utilization) had a mean."""
    loads = list(tpot_minutes(SPREAD_US, lambda u: 0.0151 / (1 - u)))
    loads[30] = replace(loads[30], gpu=gpu, tpot_mean=0.02)
    limit, why = slo_utilization(TPOT_50MS, loads)
    assert why.startswith("TPOT p99 15.1 + 0.0·u + 15.1·u/(1 − u) ms fitted over 59 minutes") and "mean" not in why, \
        why


@pytest.mark.parametrize("seed", range(5))
def test_the_ratio_of_noisy_readings_moves_the_limit_little(seed):
    """2 % noise on each minute's p99 (fewer requests a minute), the mean exact: the median ratio keeps the limit
    within 2 points of the truth."""
    rng = random.Random(seed)
    loads = tuple(replace(m, tpot_p99=demo_engine_p99(m.gpu) * (1 + 0.02 * rng.gauss(0, 1)))
                  for m in bucketed_minutes(SPREAD_US))
    assert slo_utilization(TPOT_50MS, loads)[0] == pytest.approx(TRUE_LIMIT, abs=0.02)


# ---- TPOT p99 censored by its bucket's bounds ----------------------------------------------------------------

VLLM_LE = (*llm.TPOT_BUCKETS_S, math.inf)


@pytest.mark.parametrize("reading,bound", [
    (0.04975, 0.05),  # every request in 25-50 ms: the 99th percentile of the bucket
    (0.05, 0.05),  # at the bound itself
    (0.0495, 0.05),  # 98 % of the bucket, the lowest censored
    (0.0494, None),  # lower in the bucket: taken at its word
    (0.0099, 0.01),  # the lowest bucket starts at 0
    (0.0745, 0.075),
    (0.0556, None),  # the demo engine at 80 % use, past the 50 ms bucket
    (80.0, None),  # the highest finite bound: histogram_quantile's reading of the +Inf bucket, a lower bound
    (95.0, None),
])
def test_a_reading_in_the_top_2_percent_of_its_bucket_is_censored_at_its_bound(reading, bound):
    assert bucket_bound(reading, VLLM_LE) == bound
    assert bucket_bound(reading, ()) is None  # the bounds unknown


def test_the_demo_engines_p99_is_censored_from_25_percent_use_to_its_crossing():
    """At 25-76 % use the demo engine's p99 reads in the top 2 % of vLLM's 25-50 ms bucket; under 25 % the requests
    below 25 ms pull the reading lower (46-49.5 ms: pinned_at's, statistically); at 77 % it leaves the bucket."""
    us = (0.1, 0.2, 0.26, 0.38, 0.6, 0.76, 0.77)
    assert [u for u in us if bucketed_minutes([u], bounds=True)[0].tpot_p99_bound] == [0.26, 0.38, 0.6, 0.76]


FLAT_US = [0.38 - 0.04 * i / 59 for i in range(60)]  # an hour at 38-34 % use: the mean moves 3 %, under PIN_SPAN


def test_a_flat_hour_with_a_censored_p99_no_longer_lowers_the_band():
    """Statistically a flat hour cannot tell a pinned reading from a true one (the mean moves under 5 %): its 49.6 ms
    gave a cliff that lowered the band to the highest use measured, 38 %. Its bucket's bounds tell: every reading is
    at most 50 ms, within the target, and sets no curve, so no TPOT limit and the owner's band."""
    policy = replace(POLICY, serving=TPOT_50MS)
    unknown = decide_service(view(bucketed_minutes(FLAT_US), policy=policy), NOW)
    assert "gpu 34% within 14%–38% (owner's 30%–80%, lowered for the SLO)" in unknown.message, unknown.message
    assert slo_utilization(TPOT_50MS, bucketed_minutes(FLAT_US, bounds=True)) is None
    d = decide_service(view(bucketed_minutes(FLAT_US, bounds=True), policy=policy), NOW)
    assert d.message == "llm stays at 4 replicas: gpu 34% within 30%–80% (the owner's: no SLO limit from these " \
                        "minutes' latencies)", d.message
    assert "owner_bands" not in d.data
    # the bounds alone, without the mean: no longer a flat curve either
    assert slo_utilization(TPOT_50MS, bucketed_minutes(FLAT_US, with_mean=False, bounds=True)) is None


def test_censored_minutes_and_a_night_read_a_little_lower_show_pinned_together():
    """The flat hour, then the night's first minutes at 22 %: read at 49.4 ms (97.7 % of the bucket) they are not
    censored and, alone, set a cliff that held the band at 38 %; beside the censored readings they show pinned."""
    loads = bucketed_minutes(FLAT_US[5:] + [0.22] * 5, bounds=True)
    assert [m.tpot_p99_bound for m in loads[-6:]] == [0.05] + [None] * 5
    assert slo_utilization(TPOT_50MS, loads) is None


def test_a_miss_past_a_censored_p99_limits_the_band_near_the_true_crossing():
    """The morning rise with the bounds read: every reading within 50 ms is censored, the misses past 76 % read in the
    next bucket (51.6-57 ms, low in it) and set no curve alone; the band is held where the p99 crossed 50 ms."""
    rise = [0.3 + 0.55 * i / 59 for i in range(60)]
    limit, why = slo_utilization(TPOT_50MS, bucketed_minutes(rise, with_mean=False, bounds=True))
    assert TRUE_LIMIT - 0.02 < limit <= TRUE_LIMIT, why
    assert why.startswith("TPOT p99 reads at the top of its histogram bucket at every load within 50 ms (so only "
                          "≤ 50 ms: no curve) and missed it at 77% use, so it was measured within it"), why


def test_a_censored_reading_whose_bound_is_over_the_target_is_not_within_it():
    """A 49.8 ms target inside vLLM's 25-50 ms bucket: a reading of 49.75 ms there says only p99 <= 50 ms, not within
    49.8 ms. Taken at its word it held the band at the 50 % it was read at, over the curve's 44 % (a cliff of 20 ms ×
    1.4 measured at 20-30 %); censored, the curve's limit stands."""
    target = ServingTargets(tpot_p99_s=0.0498)
    low = [0.2 + 0.1 * i / 9 for i in range(10)]
    loads = tuple(LoadMinute(NOW - 60 * (11 - i), 4, gpu=u, tpot_mean=0.02 / (1 - u), tpot_p99=0.028 / (1 - u))
                  for i, u in enumerate(low)) + (LoadMinute(NOW - 60, 4, gpu=0.5, tpot_mean=0.04, tpot_p99=0.04975),)
    word = slo_utilization(target, loads)
    assert word[0] == 0.5 and word[1].endswith("but it was measured within it"), word
    censored = loads[:-1] + (replace(loads[-1], tpot_p99_bound=bucket_bound(0.04975, VLLM_LE)),)
    assert censored[-1].tpot_p99_bound == 0.05
    limit, why = slo_utilization(target, censored)
    assert limit == pytest.approx(1 - 0.028 / 0.0498, abs=0.01) and "measured within" not in why, why


def test_a_use_read_both_within_and_over_counts_as_measured_within():
    """Prometheus's readings lag a step of load by their window: minutes at the new use read within, then over."""
    assert measured_within([(0.3, True), (0.78, False), (0.78, True), (0.8, True)]) == 0.78
    assert measured_within([(0.3, False), (0.5, True)]) == 0.0
