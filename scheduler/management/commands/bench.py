"""`python manage.py bench scheduler --nodes 5000 --pending 10000 --json out.json`
`python manage.py bench streaming --samples 600000 --pods 1000 --json out.json`
`python manage.py bench console --jobs 10000 --departments 200 --json out.json`"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandParser
from tqdm import tqdm

from django.conf import settings

from scheduler.bench import bench_scheduler


class Command(BaseCommand):
    help = ("Benchmark a Tidal component and print its figures. `streaming` migrates the configured database "
            "(DATABASE_URL) first, since its sink writes there, and removes its rows afterwards; `console` uses a "
            "throwaway database of its own; `scheduler` uses none.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("target", choices=["scheduler", "streaming", "console"])
        parser.add_argument("--nodes", type=int, default=None,
                            help="scheduler: 5000; console: 1523 (every node of the Alibaba GPU trace)")
        parser.add_argument("--pending", type=int, default=10000)
        parser.add_argument("--cycles", type=int, default=6)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--profile", default="tidal")
        parser.add_argument("--node-csv", default=str(settings.TRACES_DIR / "alibaba-gpu-2023/openb_node_list_all_node.csv"),
                            help="node shapes to draw from (built-in Alibaba shapes when the file is missing)")
        parser.add_argument("--samples", type=int, default=600_000, help="streaming: pod samples to push")
        parser.add_argument("--pods", type=int, default=1000, help="streaming: pods (one training run each)")
        parser.add_argument("--jobs", type=int, default=10_000, help="console: training jobs in the database")
        parser.add_argument("--departments", type=int, default=200, help="console: departments")
        parser.add_argument("--repeat", type=int, default=40, help="console: timed requests per page")
        parser.add_argument("--json", dest="json_path", help="also write the figures to this file")

    def handle(self, *args: object, **opts: object) -> None:
        run = {"scheduler": self._scheduler, "streaming": self._streaming, "console": self._console}[opts["target"]]
        figures = run(opts)
        for name, value in figures.items():
            self.stdout.write(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
        if opts["json_path"]:
            with open(opts["json_path"], "w") as f:
                json.dump(figures, f, indent=2)

    @staticmethod
    def _scheduler(opts: dict) -> dict:
        with tqdm(total=opts["cycles"], desc="scheduling cycles", disable=None) as bar:
            figures = bench_scheduler(nodes=(opts["nodes"] or 5000), pending=opts["pending"], cycles=opts["cycles"],
                                      seed=opts["seed"], node_csv=opts["node_csv"], profile=opts["profile"],
                                      progress=lambda _cycle: bar.update())
        return figures

    @staticmethod
    def _streaming(opts: dict) -> dict:
        from django.core.management import call_command

        from streaming.bench import bench_streaming

        call_command("migrate", verbosity=0)  # its sink writes the configured database: a fresh clone has no tables

        bars: dict[str, tqdm] = {}

        def progress(stage: str, done: int, total: int) -> None:
            bar = bars.setdefault(stage, tqdm(total=total, desc=stage, disable=None))
            bar.update(done - bar.n)

        try:
            return bench_streaming(samples=opts["samples"], pods=opts["pods"], progress=progress)
        finally:
            for bar in bars.values():
                bar.close()

    @staticmethod
    def _console(opts: dict) -> dict:
        from frontend.bench import PAGES, bench_console

        with tqdm(total=len(PAGES), desc="console pages", disable=None) as bar:
            return bench_console(jobs=opts["jobs"], departments=opts["departments"], nodes=opts["nodes"] or 1523,
                                 repeat=opts["repeat"],
                                 progress=lambda _page: bar.update())
