"""Sizing an LLM service to its request SLO (colocation/policy/slo_sizing.py) and its rule in the autoscaling
policy: the latencies fitted from the engine's signals, the utilization kept, and the decision it moves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from colocation.policy.autoscaling import LoadMinute, Rates, ScaleReason, ScalingPolicy, ServiceView, decide_service
from colocation.policy.serving import ServingTargets
from colocation.policy.slo_sizing import GRID, LatencyModel, expected_within, fit, size_to_slo, spread
from experiments.autoscale_eval.llm.replica import GroupModel
from experiments.builders.colocation import at

NOW = at("14:00")
STEP, OWN_PREFILL = 0.015, 0.06  # a decode step and a prompt's own prefill, seconds
TTFT, TPOT = 1.0, 0.05


def engine_minutes(u: float, w: float, k: int = 20, n: int = 4, qps: float = 50.0,
                   rates: list[float] | None = None) -> tuple[LoadMinute, ...]:
    """`k` minutes of an engine at utilization `u` whose prefill wait has the scale `w` (the model's signals)."""
    tpot = STEP / (1 - u)
    wait = w * u / (1 - u)
    p99_wait = w / (1 - u) * math.log(100 * u)
    rates = rates or [qps] * k
    return tuple(LoadMinute(NOW - 60 * (k - i), n, gpu=u, qps=rates[i], queue=rates[i] * wait,
                            ttft_p99=OWN_PREFILL + tpot + p99_wait, tpot_p50=tpot, tpot_p99=tpot)
                 for i in range(k))


def test_fit_recovers_the_latencies_the_engine_showed():
    m = fit(engine_minutes(0.5, 0.03))
    assert m is not None
    assert m.step == pytest.approx(STEP) and m.w == pytest.approx(0.03)
    assert m.own == pytest.approx(OWN_PREFILL + STEP / 0.5)


def test_fit_needs_the_signals():
    bare = tuple(LoadMinute(NOW - 60 * (5 - i), 4, gpu=0.5, qps=10.0) for i in range(5))
    assert fit(bare) is None
    assert size_to_slo(TTFT, TPOT, 0.1, bare, 10) is None


def test_within_matches_the_evaluation_replica_model():
    """The policy's latency model has the evaluation's form (replica.py): fitted at one utilization, it predicts the
    share within the SLO at every other."""
    g = GroupModel()
    tin, tout, cv = 928.0, 141.0, 2.0
    per_rps = g.utilization(1.0, tin, tout)
    u0 = 0.5
    seen = g.serve(u0 / per_rps, tin, tout, cv, TTFT)
    wait = seen.queue / (u0 / per_rps)  # Little's law
    model = LatencyModel(g.step_s, seen.ttft_p99_s - wait / u0 * math.log(100 * u0), u0, wait * (1 - u0) / u0)
    for u in (0.2, 0.4, 0.6, 0.68):
        m = g.serve(u / per_rps, tin, tout, cv, TTFT)
        want = m.ttft_ok if m.tpot_s <= TPOT else 0.0
        assert model.within(np.array([u]), TTFT, TPOT)[0] == pytest.approx(want, abs=1e-6), u


def test_past_the_tpot_cliff_no_request_is_within():
    model = LatencyModel(STEP, OWN_PREFILL + STEP / 0.5, 0.5, 0.001)
    cliff = 1 - STEP / TPOT
    got = model.within(np.array([cliff - 0.01, cliff + 0.01, 1.2]), TTFT, TPOT)
    assert got[0] > 0.99 and got[1] == 0 and got[2] == 0


def test_calm_traffic_runs_near_the_cliff_and_bursty_traffic_keeps_headroom():
    cliff = 1 - STEP / TPOT
    calm = size_to_slo(TTFT, TPOT, 0.1, engine_minutes(0.5, 0.002), 10)
    bursty = size_to_slo(TTFT, TPOT, 0.1, engine_minutes(0.5, 0.3), 10)
    assert cliff - 0.1 < calm.utilization < cliff
    assert bursty.utilization < calm.utilization - 0.1
    assert calm.attainment > bursty.attainment


def test_a_dearer_replica_keeps_less_headroom():
    loads = engine_minutes(0.5, 0.1)
    kept = [size_to_slo(TTFT, TPOT, g, loads, 10).utilization for g in (0.02, 0.1, 0.5)]
    assert kept[0] < kept[1] < kept[2]


def test_a_jumpy_load_keeps_more_headroom():
    k = 60
    steady = engine_minutes(0.5, 0.002, k=k)
    jumpy = engine_minutes(0.5, 0.002, k=k, rates=[50.0 * (1.3 if i % 20 < 10 else 0.7) for i in range(k)])
    assert spread(steady, 10) == 0 and spread(jumpy, 10) > 0.2
    assert size_to_slo(TTFT, TPOT, 0.1, jumpy, 10).utilization < size_to_slo(TTFT, TPOT, 0.1, steady, 10).utilization


def test_expected_within_weighs_each_draw_by_its_requests():
    model = LatencyModel(STEP, OWN_PREFILL + STEP / 0.5, 0.5, 0.001)
    plain = expected_within(model, GRID, 0.0, TTFT, TPOT)
    spread_out = expected_within(model, GRID, 0.3, TTFT, TPOT)
    near_cliff = int(np.searchsorted(GRID, 0.65))
    assert spread_out[near_cliff] < plain[near_cliff]  # a spread load crosses the cliff in some draws


@pytest.mark.parametrize("kw", [{"min_gain": 0.1}, {"min_gain": 0.1, "slo_ttft_s": 1.0},
                                {"min_gain": 0, "slo_ttft_s": 1.0, "slo_tpot_s": 0.05},
                                {"min_gain": 1.5, "slo_ttft_s": 1.0, "slo_tpot_s": 0.05}, {"slo_tpot_s": 0}])
def test_bad_sizing_settings_are_refused(kw):
    with pytest.raises(ValueError):
        ServingTargets(**kw)


def policy(min_gain: float) -> ScalingPolicy:
    return ScalingPolicy(thresholds=(("gpu", Rates(0.57, 0.6, 0.6)),), min_replicas=2, max_replicas=40,
                         serving=ServingTargets(slo_ttft_s=TTFT, slo_tpot_s=TPOT, min_gain=min_gain), startup_min=10)


def test_bursty_traffic_scales_out_where_the_owners_band_would_hold():
    loads = engine_minutes(0.55, 0.3)
    sized = decide_service(ServiceView("llm", policy(0.1), 4, 4, loads), NOW)
    assert sized.target > 4 and "sized to the SLO (TTFT 1 s, TPOT 50 ms)" in sized.message, sized.message
    assert "over maxRate 46% (owner's 60%, sized to the SLO) for 2 minutes" in sized.message, sized.message
    assert sized.data["bands"]["gpu"]["max_rate"] == pytest.approx(0.46, abs=0.005)
    assert sized.data["owner_bands"]["gpu"]["max_rate"] == 0.6 and sized.data["band_note"] == "sized to the SLO"
    plain = ScalingPolicy(thresholds=(("gpu", Rates(0.57, 0.6, 0.6)),), min_replicas=2, max_replicas=40)
    assert decide_service(ServiceView("llm", plain, 4, 4, loads), NOW).target == 4


def test_calm_traffic_scales_in_where_the_owners_band_would_hold():
    loads = engine_minutes(0.45, 0.002)
    d = decide_service(ServiceView("llm", policy(0.1), 8, 8, loads), NOW)
    assert d.reason is ScaleReason.SCALE_IN and d.target < 8, d.message
