"""The pure load forecaster (profiling/policy/forecast.py) on synthetic diurnal series."""
import math

import numpy as np
import pytest

from profiling.policy import forecast as fc

START = 1_700_006_400.0  # a UTC midnight


def diurnal(days: int, replicas: int = 4, noise: float = 0.03, seed: int = 0) -> list[fc.Minute]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(days * fc.DAY):
        work = replicas * (0.5 + 0.3 * math.sin(2 * math.pi * i / fc.DAY)) + rng.normal(0, noise * replicas)
        out.append(fc.Minute(START + 60 * i, replicas, max(0.0, work) / replicas, None, qps=max(0.0, work) * 10))
    return out


@pytest.fixture(scope="module")
def trained():
    series = diurnal(10)
    split = 8 * fc.DAY
    return series, split, fc.train({"web": series[:split]}, "gpu", rounds=60)


def test_xgboost_beats_both_naive_baselines_at_five_minutes(trained):
    series, split, model = trained
    ev = fc.evaluate(model, {"web": series}, since=series[split].at)
    assert ev.seasonal_lag == fc.WEEK and ev.minutes > fc.DAY
    assert ev.mae["xgboost"][-1] < ev.mae["last_value"][-1]
    assert ev.mae["xgboost"][-1] < ev.mae["seasonal"][-1]
    assert fc.usable(ev) and fc.why_not(ev) == ""


def test_seasonal_baseline_falls_back_to_a_day_without_a_week_of_history(trained):
    series, _, model = trained
    ev = fc.evaluate(model, {"web": series}, since=series[3 * fc.DAY].at)
    assert ev.seasonal_lag == fc.DAY


def test_predict_gives_five_utilizations_and_survives_serialization(trained):
    series, _, model = trained
    values = fc.predict(model, "web", series[-2 * fc.DAY:])
    assert values is not None and len(values) == fc.HORIZONS and all(0 <= v <= 2 for v in values)
    again = fc.Model.from_bytes(model.to_bytes())
    assert fc.predict(again, "web", series[-2 * fc.DAY:]) == values


def test_the_same_work_at_twice_the_replicas_is_half_the_utilization(trained):
    series, _, model = trained
    recent = series[-fc.DAY:]
    grid = fc.predict_series(model, "web", recent)
    doubled = [fc.Minute(m.at, 8, m.gpu / 2, None, qps=m.qps) for m in recent]
    # replicas is a feature too, so compare through the model's own work forecast: work = utilization x replicas
    assert np.allclose(fc.predict_series(model, "web", doubled)[-1] * 8 / 4, grid[-1], rtol=0.3)


def test_no_forecast_without_a_measured_last_minute(trained):
    _, _, model = trained
    assert fc.predict(model, "web", []) is None
    assert fc.predict(model, "web", [fc.Minute(START, 2, None, None)]) is None


def test_a_model_worse_than_the_seasonal_baseline_is_not_used():
    ev = fc.Evaluation({"xgboost": [0.1] * 5, "last_value": [0.2] * 5, "seasonal": [0.05] * 5}, 100, fc.DAY)
    assert not fc.usable(ev)
    assert "not below the seasonal baseline" in fc.why_not(ev)


def test_too_little_history_and_a_bad_target_are_refused():
    with pytest.raises(ValueError, match="too little history"):
        fc.train({"web": diurnal(1)[:30]}, "gpu")
    with pytest.raises(ValueError, match="target"):
        fc.train({"web": diurnal(1)}, "memory")
