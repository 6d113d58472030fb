"""Load forecasting over the service-load profiles: `manage.py forecast`, the live forecast, the API."""
import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from django.core.management import CommandError, call_command

from profiling import forecasting
from profiling.models import Forecast, ForecastModel, ServiceMinute

pytestmark = pytest.mark.django_db

UNTIL = datetime(2026, 11, 20, 0, 0, tzinfo=timezone.utc)
DAYS = 4


def diurnal(service, *, days: int = DAYS, until: datetime = UNTIL, replicas: int = 4) -> None:
    """`days` of per-minute load before `until`: a daily sine of work plus noise, at `replicas`."""
    rng = np.random.default_rng(1)
    start = until - timedelta(days=days)
    rows = []
    for i in range(days * 1440):
        work = replicas * (0.5 + 0.3 * math.sin(2 * math.pi * i / 1440)) + rng.normal(0, 0.1)
        minute = start + timedelta(minutes=i)
        rows.append(ServiceMinute(service=service, minute=minute, samples=12, replicas=replicas,
                                  gpu_util_mean=max(0.0, work) / replicas, cpu_util_mean=max(0.0, work) / replicas / 2,
                                  qps=work * 25, emitted_at=minute))
    ServiceMinute.objects.bulk_create(rows)


def test_train_stores_versioned_models_scored_against_the_baselines(world, capsys):
    diurnal(world.service())
    call_command("forecast", "train", "--days", str(DAYS), "--until", UNTIL.isoformat())
    call_command("forecast", "train", "--days", str(DAYS), "--until", UNTIL.isoformat())
    gpu = list(ForecastModel.objects.filter(target="gpu").order_by("version"))
    assert [m.version for m in gpu] == [1, 2] and ForecastModel.objects.filter(target="cpu").count() == 2
    model = gpu[-1]
    assert set(model.mae) == {"xgboost", "last_value", "seasonal"} and all(len(v) == 5 for v in model.mae.values())
    assert model.trained_to <= UNTIL and model.evaluated_minutes > 0 and model.seasonal_lag_min == 1440
    assert model.usable == (model.mae["xgboost"][-1] < model.mae["seasonal"][-1])
    assert model.usable and model.note == ""
    out = capsys.readouterr().out
    assert "gpu forecaster v2" in out and "last_value" in out


def test_too_little_history_is_a_clear_error_and_stores_nothing(world):
    diurnal(world.service(), days=1)
    with pytest.raises(CommandError, match="too little history"):
        call_command("forecast", "train", "--days", "1", "--until", (UNTIL - timedelta(hours=23)).isoformat())
    with pytest.raises(CommandError, match="not an ISO date-time"):
        call_command("forecast", "train", "--until", "yesterday")
    with pytest.raises(CommandError, match="no forecast model yet"):
        call_command("forecast", "evaluate")
    assert not ForecastModel.objects.exists()


def test_the_live_forecast_uses_only_a_usable_model_and_keeps_what_it_said(world):
    service = world.service()
    diurnal(service)
    assert forecasting.forecast_service(service=service, now=UNTIL) == (
        (), "no forecast model trained yet (manage.py forecast train); reactive only")
    forecasting.forecast_train(until=UNTIL, days=DAYS)
    forecast, note = forecasting.forecast_service(service=service, now=UNTIL)
    assert note == "" and [m for m, _ in forecast] == ["gpu", "cpu"]
    assert all(len(values) == 5 and all(0 <= v <= 1.5 for v in values) for _, values in forecast)
    made = Forecast.objects.filter(service=service, target="gpu").order_by("horizon")
    assert [f.horizon for f in made] == [1, 2, 3, 4, 5]
    assert made[0].minute == UNTIL and made[0].made_at == UNTIL - timedelta(minutes=1)
    ForecastModel.objects.filter(target="gpu").update(usable=False, note="worse than the seasonal baseline")
    forecast, note = forecasting.forecast_service(service=service, now=UNTIL)
    assert [m for m, _ in forecast] == ["cpu"] and note == "worse than the seasonal baseline"


def test_forecast_api_registry_and_forecast_vs_actual(world):
    service = world.service()
    diurnal(service)
    forecasting.forecast_train(until=UNTIL - timedelta(minutes=5), days=DAYS)
    for minute in range(5, 0, -1):  # forecasts made as the live loop would, minute by minute
        forecasting.forecast_service(service=service, now=UNTIL - timedelta(minutes=minute))
    client = world.client("member")
    models = client.get("/api/forecast-models/").json()
    assert models["count"] == 2 and "blob" not in models["results"][0]
    body = client.get(f"/api/inference-services/{service.pk}/forecasts/",
                      {"since": (UNTIL - timedelta(minutes=10)).isoformat(), "until": UNTIL.isoformat(),
                       "horizon": 1}).json()
    assert body["service"] == service.name and body["horizon"] == 1
    points = [p for p in body["minutes"] if p["forecast"] is not None]
    assert len(points) == 5 and all(p["actual"] is not None for p in points)
    assert all(abs(p["forecast"] - p["actual"]) < 0.3 for p in points)


@pytest.mark.parametrize("params, field", [
    ({"horizon": 6}, "horizon"), ({"horizon": "x"}, "horizon"), ({"target": "memory"}, "target"),
    ({"since": "2024-01-02T00:00:00Z", "until": "2024-01-01T00:00:00Z"}, "until"),
])
def test_bad_forecast_query_is_a_400_with_field_messages(world, params, field):
    service = world.service()
    response = world.client("member").get(f"/api/inference-services/{service.pk}/forecasts/", params)
    assert response.status_code == 400 and field in response.json()["extra"]["fields"]


def test_forecasts_of_another_departments_service_are_404(world):
    service = world.service(department="ml-search")
    assert world.client("outsider").get(f"/api/inference-services/{service.pk}/forecasts/").status_code == 404
    assert world.client("anonymous").get("/api/forecast-models/").status_code == 401
