"""`python manage.py forecast train [--days 30] [--until ISO]` and `forecast evaluate [--model ID] [--days 1]`:
thin; the work is in profiling/forecasting.py."""
from __future__ import annotations

from datetime import datetime, timezone

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone as dj_timezone
from rich.console import Console
from rich.table import Table

from core.errors import ApplicationError
from profiling import forecasting
from profiling.models import ForecastModel
from profiling.policy.forecast import HORIZONS, Evaluation


class Command(BaseCommand):
    help = ("Load forecasts for predictive autoscaling. `train`: one XGBoost model per target (GPU, CPU) on the "
            "service-load profiles of the last --days, scored on the newest 20 %% against the naive baselines; "
            "`evaluate`: a stored model (the newest, or --model) on the last --days of data.")

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        train = sub.add_parser("train", help="train and store new models")
        train.add_argument("--days", type=int, default=30, help="history to train and score on (default 30)")
        train.add_argument("--until", help="end of the window, ISO date-time (default now)")
        evaluate = sub.add_parser("evaluate", help="score stored models against the naive baselines")
        evaluate.add_argument("--model", type=int, help="ForecastModel id (default: the newest of each target)")
        evaluate.add_argument("--days", type=float, default=1.0, help="days scored, up to now (default 1)")

    def handle(self, *args: object, **opts: object) -> None:
        if opts["days"] <= 0:
            raise CommandError(f"--days must be positive, not {opts['days']}")
        try:
            if opts["action"] == "train":
                self._train(opts)
            else:
                self._evaluate(opts)
        except ApplicationError as error:
            raise CommandError(error.message) from error

    def _train(self, opts: dict) -> None:
        until = _parse(opts["until"]) if opts["until"] else dj_timezone.now()
        for model in forecasting.forecast_train(until=until, days=opts["days"]):
            used = "used" if model.usable else f"NOT used: {model.note}"
            self.stdout.write(f"{model} (id {model.pk}): {model.minutes} training minutes, "
                              f"{model.evaluated_minutes} scored; {used}")
            _table(f"{model} held-out MAE", model.mae)

    def _evaluate(self, opts: dict) -> None:
        if opts["model"] is not None:
            model = ForecastModel.objects.filter(pk=opts["model"]).first()
            if model is None:
                raise CommandError(f"no forecast model with id {opts['model']}")
            models = [model]
        else:
            models = list(forecasting.newest_models().values())
            if not models:
                raise CommandError("no forecast model yet: run `manage.py forecast train` first")
        for model in models:
            ev: Evaluation = forecasting.forecast_evaluate(model=model, until=dj_timezone.now(), days=opts["days"])
            _table(f"{model} on the last {opts['days']:g} days ({ev.minutes} minutes)", ev.mae)


def _parse(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as error:
        raise CommandError(f"--until {text!r} is not an ISO date-time (e.g. 2026-11-20T04:00)") from error
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _table(title: str, mae: dict) -> None:
    table = Table(title=title)
    table.add_column("model")
    for h in range(1, HORIZONS + 1):
        table.add_column(f"{h} min", justify="right")
    for name in ("xgboost", "last_value", "seasonal"):
        table.add_row(name, *(f"{v:.4f}" for v in mae.get(name, [])))
    Console().print(table)
