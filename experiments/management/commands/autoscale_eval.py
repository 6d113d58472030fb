"""`python manage.py autoscale_eval [--trace worldcup98|genai | --traffic CSV] [--days N] [--start DAY] [--sweep]
[--json PATH] [--out DIR] [--seed N]`: thin; the work is in experiments/autoscale_eval/ (no Django there)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from experiments.autoscale_eval.evaluate import EvalConfig, evaluate
from experiments.autoscale_eval.report import without_zero, write_json
from experiments.autoscale_eval.service import CAPACITY, STARTUP_MIN, ServiceModel
from experiments.autoscale_eval.trace import TRACES, TraceError


class Command(BaseCommand):
    help = ("Replay per-minute traffic through a service model with four autoscaling policies side by side "
            "(static, Kubernetes HPA, reactive, tidal = reactive + XGBoost predictive + system rules): "
            "overloaded minutes, replica-hours, scale events, forecast MAE, plots. Traffic: --trace worldcup98 "
            "(World Cup 98 requests/min, 87 days) or genai (the Alibaba GenAI request log as GPU work per minute, "
            "22 whole days), or --traffic CSV (timestamp,value). --days whole days are evaluated from --start "
            "(default: the last ones); every earlier day trains the forecast. --sweep adds the front: HPA at "
            "several targets and tidal at several thresholds, overloaded minutes against replica-hours.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--trace", choices=TRACES, help="a built-in trace (default worldcup98)")
        parser.add_argument("--traffic", help="a CSV with columns timestamp,value (ISO 8601 or epoch seconds, any "
                                              "step; value = requests or work units per minute)")
        parser.add_argument("--days", type=int, default=14, help="whole days evaluated")
        parser.add_argument("--start", type=int, default=None,
                            help="first evaluated day (0 = the trace's first whole day; default: the last --days)")
        parser.add_argument("--sweep", action="store_true", help="also sweep HPA targets and tidal thresholds: "
                                                                 "front.png, the front in report.md and the JSON")
        parser.add_argument("--json", dest="json_path", help="write the figures here")
        parser.add_argument("--out", help="report and plots folder (default: out/autoscale-eval)")
        parser.add_argument("--seed", type=int, default=0, help="the forecast model's random seed")
        parser.add_argument("--train-days", type=int, default=0,
                            help="train the forecast on this many days before the evaluated ones (0: all of them)")
        parser.add_argument("--capacity", type=float, default=None,
                            help=f"work one replica serves per minute at utilization 1.0 (default: {CAPACITY:g} "
                                 "requests/min for worldcup98, 60 GPU-seconds for genai, a CSV's evaluated peak "
                                 "over 25 replicas)")
        parser.add_argument("--startup-min", type=int, default=STARTUP_MIN,
                            help="minutes before a new replica serves")

    def handle(self, *args: object, **opts: object) -> None:
        if opts["trace"] and opts["traffic"]:
            raise CommandError("give either --trace or --traffic, not both")
        try:
            model = ServiceModel(capacity=opts["capacity"] or CAPACITY, startup_min=opts["startup_min"])
        except ValueError as e:
            raise CommandError(str(e)) from e
        cfg = EvalConfig(Path(settings.TRACES_DIR), trace=opts["trace"] or "worldcup98",
                         traffic_csv=Path(opts["traffic"]) if opts["traffic"] else None, days=opts["days"],
                         start_day=opts["start"], model=model, capacity_given=opts["capacity"] is not None,
                         seed=opts["seed"], train_days=max(0, opts["train_days"]), sweep=opts["sweep"])
        out = Path(opts["out"]) if opts["out"] else Path(settings.BASE_DIR) / "out" / "autoscale-eval"
        command = "python manage.py autoscale_eval " + shlex.join(sys.argv[2:]) if len(sys.argv) > 2 \
            else "python manage.py autoscale_eval"
        bars: list[tqdm] = []

        def progress(label: str, total: int):
            bar = tqdm(total=total, desc=f"{label:>9}", unit="min" if total > 1 else "step", file=self.stderr,
                       mininterval=0.5, leave=True)
            bars.append(bar)
            return bar.update

        try:
            result = evaluate(cfg, out, command, progress)
        except TraceError as e:
            raise CommandError(str(e)) from e
        finally:
            for bar in bars:
                bar.close()
        if opts["json_path"]:
            write_json(result.figures, Path(opts["json_path"]))
        p = result.figures["policies"]
        self.stdout.write(f"{out}/report.md ({result.figures['wall_s']} s): " + "; ".join(
            f"{name} overloaded {r['overloaded_min']} min, {r['replica_hours']:.0f} replica-h, "
            f"{r['scale_events']} events" for name, r in p.items()))
        mae = result.figures["forecast"]["mae"]
        self.stdout.write("forecast MAE h5: " + ", ".join(f"{k} {v[4]:.4f}" for k, v in mae.items()))
        if result.front is not None:
            verdict = "dominates" if result.front.dominates else "does NOT dominate"
            self.stdout.write(f"front (start-up {result.front.startup_min} min): tidal {verdict} hpa")
            for line in result.front.lines():
                self.stdout.write(f"  {line}")
            self.stdout.write(f"  {without_zero(result.front)}")
