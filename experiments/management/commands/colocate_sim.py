"""`python manage.py colocate_sim --days 7 [--llm] [--trace worldcup98|genai|servegen-* | --traffic CSV | --trace-file SERVEGEN_CSV] [--start DAY]
[--lending threshold|forecast|both] [--training-load F] [--out DIR] [--json PATH] [--seed N] [--queue-window N]
[--runtime-error S] [--processes 1|2|3]`: thin; the work is in experiments/colocation_sim/ (no Django there)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from cluster.simulated.traffic import BUILTIN, TrafficError, window
from experiments.autoscale_eval.llm.servegen import BUILTIN as SERVEGEN, ServeGenError
from experiments.colocation_sim import SimConfig
from experiments.colocation_sim.report import LENDING_MODES, simulate, write_json
from experiments.colocation_sim.world import load_traffic, servegen_source


class Command(BaseCommand):
    help = "Simulate online/offline co-location (lending whole machines) against a static split."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=7, help="simulated days (any span the traffic offers)")
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--trace", choices=(*BUILTIN, *SERVEGEN), default=None,
                            help="built-in traffic (default worldcup98; servegen-*: LLM requests)")
        source.add_argument("--traffic", help="a CSV of timestamp,value (ISO 8601 or epoch seconds; any step)")
        source.add_argument("--trace-file", help="LLM traffic in ServeGen's CSV format (t_s,requests_per_s,cv_weighted,"
                                                 "mean_input_tokens,mean_output_tokens), as autoscale_eval reads it")
        parser.add_argument("--start", type=int, default=None,
                            help="first simulated day of the traffic (default: its last --days days); the days "
                                 "before it warm the forecast")
        parser.add_argument("--lending", choices=LENDING_MODES, default="threshold",
                            help="threshold rules only, forecast-driven, or both side by side (one more run)")
        parser.add_argument("--out", help="report folder (default: out/colocate-sim)")
        parser.add_argument("--json", dest="json_path", help="write the headline figures here")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--small", action="store_true", help="a small cluster (tests)")
        parser.add_argument("--llm", action="store_true",
                            help="a multi-node LLM service (replica = a group of 2 nodes × 8 GPUs, 10-minute start-up) "
                                 "on ServeGen m-large traffic (unless --trace/--traffic/--trace-file says otherwise)")
        parser.add_argument("--training-load", type=float, default=None,
                            help="GPU-hours offered within the run over the training capacity (default 0.75, Helios)")
        parser.add_argument("--fixed-share", type=float, default=None,
                            help="fixed pool = this share of each group's nodes (default: the static split's "
                                 "training side, Lyra's comparison)")
        parser.add_argument("--runtime-error", type=float, default=None,
                            help="sigma of a lognormal factor on each job's runtime estimate (default 0: exact)")
        parser.add_argument("--queue-window", type=int, default=None,
                            help="pending jobs per GPU model and pool (lent nodes allowed / fixed pool only) a "
                                 "scheduling cycle sees, oldest first (default 32; 0: the whole queue)")
        parser.add_argument("--processes", type=int, default=2, choices=(1, 2, 3),
                            help="2 (default): the runs side by side, two at a time; 1: one after the other")

    def handle(self, *args: object, **opts: object) -> None:
        if opts["days"] < 1:
            raise CommandError("--days must be >= 1")
        if opts["queue_window"] is not None and opts["queue_window"] < 0:
            raise CommandError("--queue-window must be >= 0")
        if opts["start"] is not None and opts["start"] < 0:
            raise CommandError("--start must be >= 0")
        cfg = SimConfig(Path(settings.TRACES_DIR), days=opts["days"], seed=opts["seed"], start_day=opts["start"])
        if opts["llm"]:
            cfg = cfg.llm()
        if opts["trace_file"]:
            cfg = cfg.with_(traffic=servegen_source(Path(opts["trace_file"])))
        else:
            cfg = cfg.with_(traffic=opts["traffic"] or opts["trace"] or cfg.traffic)
        try:
            window(load_traffic(cfg), cfg.days, cfg.start_day)  # the run's days must be in the traffic
        except (TrafficError, ServeGenError) as e:
            raise CommandError(str(e)) from None
        if opts["small"] and not opts["llm"]:
            cfg = cfg.small()
        if opts["training_load"] is not None:
            cfg = cfg.with_(training_load=opts["training_load"])
        if opts["fixed_share"] is not None:
            cfg = cfg.with_(fixed_share=opts["fixed_share"], fixed_from_static=False)
        if opts["queue_window"] is not None:
            cfg = cfg.with_(queue_window=opts["queue_window"] or None)
        if opts["runtime_error"] is not None:
            if opts["runtime_error"] < 0:
                raise CommandError("--runtime-error must be >= 0")
            cfg = cfg.with_(runtime_error=opts["runtime_error"])
        out = Path(opts["out"]) if opts["out"] else Path(settings.BASE_DIR) / "out" / "colocate-sim"
        command = "python manage.py colocate_sim " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else "colocate_sim"
        bars: list[tqdm] = []

        def bar(label: str, total: int):
            b = tqdm(total=total, desc=label, unit="min", file=self.stderr, mininterval=0.5)
            bars.append(b)
            return lambda _minute: b.update(1)

        try:
            figures, wall = simulate(cfg, out, command, bar, processes=opts["processes"], lending=opts["lending"])
        finally:
            for b in bars:
                b.close()
        if opts["json_path"]:
            write_json(figures, Path(opts["json_path"]))
        self.stdout.write(f"{out}/report.md: " + ", ".join(f"{k}={v:.3g}" for k, v in figures.items()
                                                           if isinstance(v, (int, float)))
                          + f" ({wall:.1f} s)")
