"""Load forecasting over the service-load profiles: train and store models, forecast a service for the live
autoscaler, and keep what was forecast. The model itself is pure (profiling/policy/forecast.py)."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from cluster.clock import utc
from colocation.models import InferenceService
from core.errors import ApplicationError
from profiling.models import Forecast, ForecastModel, ServiceMinute
from profiling.policy import forecast as fc

HELD_OUT = 0.2  # the newest share of the window scores the model; training sees only the minutes before it
RECENT = timedelta(days=8)  # what a live forecast reads: a week for the seasonal feature, and a day more
METRICS = {"gpu": "gpu", "cpu": "cpu"}  # forecast target -> the autoscaling policy's metric name


def _minute(row: ServiceMinute) -> fc.Minute:
    return fc.Minute(row.minute.timestamp(), row.replicas, row.gpu_util_mean, row.cpu_util_mean, qps=row.qps,
                     errors=row.errors_per_s, latency_ms=row.latency_mean_ms)


def load_series(*, since: datetime, until: datetime, service: InferenceService | None = None
                ) -> dict[str, list[fc.Minute]]:
    """Every service's minutes in [since, until), oldest first, by service name."""
    rows = ServiceMinute.objects.filter(minute__gte=since, minute__lt=until).select_related("service")
    if service is not None:
        rows = rows.filter(service=service)
    out: dict[str, list[fc.Minute]] = defaultdict(list)
    for row in rows.order_by("service_id", "minute"):
        out[row.service.name].append(_minute(row))
    return dict(out)


@transaction.atomic
def forecast_train(*, until: datetime, days: int = 30) -> list[ForecastModel]:
    """One model per target on the `days` before `until`: trained on the first 80 % of the window by time, scored
    on the rest against the naive baselines. ApplicationError (nothing stored) when there is too little history."""
    since = until - timedelta(days=days)
    series = load_series(since=since, until=until)
    if not series:
        raise ApplicationError(f"no service-load minutes between {since:%Y-%m-%d %H:%M} and {until:%Y-%m-%d %H:%M}")
    first = min(s[0].at for s in series.values())
    cut = first + (until.timestamp() - first) * (1 - HELD_OUT)
    train = {name: [m for m in s if m.at < cut] for name, s in series.items()}
    models = []
    for target in fc.TARGETS:
        try:
            model = fc.train({n: s for n, s in train.items() if s}, target, tz=settings.TIME_ZONE)
        except ValueError as error:
            raise ApplicationError(f"cannot train the {target} forecaster: {error}") from error
        ev = fc.evaluate(model, series, tz=settings.TIME_ZONE, since=cut)
        models.append(_store(model, ev, series))
    return models


def _store(model: fc.Model, ev: fc.Evaluation, series: dict) -> ForecastModel:
    last = ForecastModel.objects.filter(target=model.target).aggregate(v=Max("version"))["v"] or 0
    return ForecastModel.objects.create(
        target=model.target, version=last + 1, trained_from=utc(model.trained_from),
        trained_to=utc(model.trained_to), minutes=model.minutes, services=sorted(series),
        mae={k: [round(v, 6) for v in vs] for k, vs in ev.mae.items()}, evaluated_minutes=ev.minutes,
        seasonal_lag_min=ev.seasonal_lag, usable=fc.usable(ev), note=fc.why_not(ev), blob=model.to_bytes())


def forecast_evaluate(*, model: ForecastModel, until: datetime, days: float = 1.0) -> fc.Evaluation:
    """The stored model against the baselines on the `days` before `until` (history before them feeds the lags)."""
    since = until - timedelta(days=days)
    series = load_series(since=since - RECENT, until=until)
    return fc.evaluate(fc.Model.from_bytes(bytes(model.blob)), series, tz=settings.TIME_ZONE, since=since.timestamp())


def newest_models() -> dict[str, ForecastModel]:
    out = {}
    for target in fc.TARGETS:
        model = ForecastModel.objects.filter(target=target).order_by("-version").first()
        if model is not None:
            out[target] = model
    return out


def forecast_service(*, service: InferenceService, now: datetime) -> tuple[tuple[tuple[str, tuple[float, ...]], ...], str]:
    """The next 5 minutes of each target's newest usable model, as utilization at the service's current replica
    count ((metric, values), ...), stored as Forecast rows; and a note saying why a target has none."""
    models = newest_models()
    if not models:
        return (), "no forecast model trained yet (manage.py forecast train); reactive only"
    series = load_series(since=now - RECENT, until=now, service=service).get(service.name, [])
    out, notes = [], []
    for target, row in models.items():
        if not row.usable:
            notes.append(row.note)
            continue
        values = fc.predict(fc.Model.from_bytes(bytes(row.blob)), service.name, series, tz=settings.TIME_ZONE)
        if values is None:
            notes.append(f"no {target} forecast: no measured minute of {service.name} yet")
            continue
        _keep(service, row, series[-1], values)
        out.append((METRICS[target], values))
    return tuple(out), "; ".join(notes)


def _keep(service: InferenceService, model: ForecastModel, last: fc.Minute, values: tuple[float, ...]) -> None:
    made_at = utc(last.at)
    for h, value in enumerate(values, start=1):
        Forecast.objects.update_or_create(
            service=service, target=model.target, made_at=made_at, horizon=h,
            defaults={"model": model, "minute": made_at + timedelta(minutes=h), "value": value,
                      "replicas": last.replicas})
