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
from experiments.autoscale_eval.llm import evaluate as llm
from experiments.autoscale_eval.llm.replica import GPUS, GroupModel, LlmModel
from experiments.autoscale_eval.llm.run import Slo
from experiments.autoscale_eval.llm.servegen import BUILTIN as SERVEGEN, ServeGenError, path_of
from experiments.autoscale_eval.llm.sweep import size
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
        parser.add_argument("--trace", choices=(*TRACES, *SERVEGEN),
                            help="a built-in trace (default worldcup98); servegen-*: the LLM evaluation")
        parser.add_argument("--trace-file", help="an LLM trace in ServeGen's CSV format (t_s,requests_per_s,"
                                                 "cv_weighted,mean_input_tokens,mean_output_tokens): the LLM evaluation")
        parser.add_argument("--traffic", help="a CSV with columns timestamp,value (ISO 8601 or epoch seconds, any "
                                              "step; value = requests or work units per minute)")
        parser.add_argument("--days", type=int, default=14,
                            help="whole days evaluated (an LLM trace holding fewer: all it holds)")
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
        parser.add_argument("--startup-min", type=int, action="append",
                            help=f"minutes before a new replica serves (default {STARTUP_MIN}; the LLM evaluation: "
                                 "3 and 10, and this flag may be repeated)")
        llm_args = parser.add_argument_group("LLM evaluation (servegen-* or --trace-file)")
        llm_args.add_argument("--model-b", type=float, default=LlmModel().params_b, help="billions of parameters")
        llm_args.add_argument("--gpu", choices=tuple(GPUS), default=GroupModel().gpu)
        llm_args.add_argument("--tp", type=int, default=GroupModel().tp, help="tensor parallelism (GPUs per node)")
        llm_args.add_argument("--pp", type=int, default=GroupModel().pp, help="pipeline parallelism (nodes)")
        llm_args.add_argument("--ttft-slo", type=float, default=Slo().ttft_s, help="seconds to the first token")
        llm_args.add_argument("--tpot-slo", type=float, default=Slo().tpot_s, help="seconds per output token")

    def handle(self, *args: object, **opts: object) -> None:
        if sum(bool(opts[k]) for k in ("trace", "traffic", "trace_file")) > 1:
            raise CommandError("give one of --trace, --traffic and --trace-file")
        startup = opts["startup_min"]  # a list from the command line (repeatable), an int from call_command
        opts["startup_min"] = [startup] if isinstance(startup, int) else list(startup or ())
        if opts["trace_file"] or opts["trace"] in SERVEGEN:
            return self._llm(opts)
        try:
            model = ServiceModel(capacity=opts["capacity"] or CAPACITY, startup_min=(opts["startup_min"] or
                                                                                     [STARTUP_MIN])[0])
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

    def _llm(self, opts: dict) -> None:
        """The LLM evaluation: tidal, HPA and the KPA swept on a ServeGen-format trace."""
        try:
            model = GroupModel(LlmModel(params_b=opts["model_b"]), gpu=opts["gpu"], tp=opts["tp"], pp=opts["pp"])
            slo = Slo(opts["ttft_slo"], opts["tpot_slo"])
            if slo.ttft_s <= 0 or slo.tpot_s <= 0 or any(s < 0 for s in opts["startup_min"] or ()):
                raise ValueError("--ttft-slo, --tpot-slo must be > 0 and --startup-min >= 0")
        except ValueError as e:
            raise CommandError(str(e)) from e
        path = Path(opts["trace_file"]) if opts["trace_file"] else path_of(opts["trace"], Path(settings.TRACES_DIR))
        startups = tuple(opts["startup_min"] or (3, 10))
        cfg = llm.LlmConfig(path, days=opts["days"], startups=startups, model=model, slo=slo, seed=opts["seed"])
        out = Path(opts["out"]) if opts["out"] else Path(settings.BASE_DIR) / "out" / "autoscale-eval-llm"
        command = "python manage.py autoscale_eval " + shlex.join(sys.argv[2:])
        bar = tqdm(total=size() * len(startups), desc="sweep", unit="run", file=self.stderr, mininterval=0.5)

        def tick() -> None:  # the runs at the baselines' costs come after the grid the bar was sized to
            bar.total = max(bar.total, bar.n + 1)
            bar.update(1)

        try:
            figures = llm.evaluate(cfg, out, command, tick)
        except ServeGenError as e:
            raise CommandError(str(e)) from e
        finally:
            bar.close()
        if opts["json_path"]:
            write_json(figures, Path(opts["json_path"]))
        self.stdout.write(f"{out}/report.md ({figures['wall_s']} s, {figures['days']} days)")
        for s in figures["sweeps"]:
            self.stdout.write(f"start-up {s['startup_min']} min: tidal dominates hpa: {s['tidal_dominates_hpa']}, "
                              f"kpa: {s['tidal_dominates_kpa']}")
