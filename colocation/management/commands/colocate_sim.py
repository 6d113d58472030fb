"""`python manage.py colocate_sim --days 7 [--out DIR] [--json PATH] [--seed N] [--queue-window N]
[--processes 1|2]`: thin; the work is in colocation/sim/ (no Django there)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from colocation.sim import SimConfig
from colocation.sim.report import simulate, write_json


class Command(BaseCommand):
    help = "Simulate online/offline co-location (lending whole machines) against a static split."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=7)
        parser.add_argument("--out", help="report folder (default: out/colocate-sim)")
        parser.add_argument("--json", dest="json_path", help="write the headline figures here")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--small", action="store_true", help="a small cluster (tests)")
        parser.add_argument("--training-load", type=float, default=None)
        parser.add_argument("--fixed-share", type=float, default=None)
        parser.add_argument("--queue-window", type=int, default=None,
                            help="pending jobs per GPU model and pool (lent nodes allowed / fixed pool only) a "
                                 "scheduling cycle sees, oldest first (default 32; 0: the whole queue)")
        parser.add_argument("--processes", type=int, default=2, choices=(1, 2),
                            help="2 (default): the lending run and the static split side by side; "
                                 "1: one after the other")

    def handle(self, *args: object, **opts: object) -> None:
        if opts["days"] < 1:
            raise CommandError("--days must be >= 1")
        if opts["queue_window"] is not None and opts["queue_window"] < 0:
            raise CommandError("--queue-window must be >= 0")
        cfg = SimConfig(Path(settings.TRACES_DIR), days=opts["days"], seed=opts["seed"])
        if opts["small"]:
            cfg = cfg.small()
        if opts["training_load"] is not None:
            cfg = cfg.with_(training_load=opts["training_load"])
        if opts["fixed_share"] is not None:
            cfg = cfg.with_(fixed_share=opts["fixed_share"])
        if opts["queue_window"] is not None:
            cfg = cfg.with_(queue_window=opts["queue_window"] or None)
        out = Path(opts["out"]) if opts["out"] else Path(settings.BASE_DIR) / "out" / "colocate-sim"
        command = "python manage.py colocate_sim " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else "colocate_sim"
        bars: list[tqdm] = []

        def bar(label: str, total: int):
            b = tqdm(total=total, desc=label, unit="min", file=self.stderr, mininterval=0.5)
            bars.append(b)
            return lambda _minute: b.update(1)

        try:
            figures, wall = simulate(cfg, out, command, bar, processes=opts["processes"])
        finally:
            for b in bars:
                b.close()
        if opts["json_path"]:
            write_json(figures, Path(opts["json_path"]))
        self.stdout.write(f"{out}/report.md: " + ", ".join(f"{k}={v:.3g}" for k, v in figures.items())
                          + f" ({wall:.1f} s)")
