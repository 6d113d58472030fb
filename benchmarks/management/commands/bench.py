"""`python manage.py bench scheduler --nodes 5000 --pending 10000 [--gang-share 0.2] --json out.json`
`python manage.py bench streaming --samples 600000 --pods 1000 --json out.json`
`python manage.py bench console --jobs 10000 --departments 200 --json out.json`
`python manage.py bench api --users 100 --duration 60 --json out.json`
`python manage.py bench kubernetes --nodes 5000 --pods 10000 --json out.json`
`python manage.py bench lending-profile --repeat 40 --json out.json`"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from django.conf import settings

from benchmarks.scheduler import bench_scheduler


class Command(BaseCommand):
    help = ("Benchmark a Tidal component and print its figures. `streaming` migrates the configured database "
            "(DATABASE_URL) first, since its sink writes there, and removes its rows afterwards; `console` uses a "
            "throwaway database of its own, and so does `api` (served by gunicorn, loaded by Locust); `scheduler` "
            "uses none; `kubernetes` uses the control plane of platform/stack.sh (TIDAL_KUBECONFIG): its nodes and pods "
            "are deleted afterwards; `lending-profile` reads the configured database and Redis (the demo's) and writes "
            "nothing.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("target", choices=["scheduler", "streaming", "console", "api", "kubernetes",
                                               "lending-profile"])
        parser.add_argument("--nodes", type=int, default=None,
                            help="scheduler, kubernetes: 5000; console: 1523 (every node of the Alibaba GPU trace)")
        parser.add_argument("--pending", type=int, default=10000)
        parser.add_argument("--cycles", type=int, default=6)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--profile", default="tidal")
        parser.add_argument("--gang-share", type=float, default=0.0,
                            help="scheduler: share of the jobs that are gangs of 2-16 workers of whole GPUs (0-1)")
        parser.add_argument("--tree-leaves", type=int, default=0,
                            help="scheduler: departments as this many leaves of a 3-level quota tree (0: 10 flat ones)")
        parser.add_argument("--fair-sharing", action="store_true",
                            help="scheduler: the profile's fair sharing between the tree's subtrees")
        parser.add_argument("--node-csv", default=str(settings.TRACES_DIR / "alibaba-gpu-2023/openb_node_list_all_node.csv"),
                            help="node shapes to draw from (built-in Alibaba shapes when the file is missing)")
        parser.add_argument("--samples", type=int, default=600_000, help="streaming: pod samples to push")
        parser.add_argument("--pods", type=int, default=None,
                            help="streaming: pods (one training run each), 1000; kubernetes: pods to place, 10000")
        parser.add_argument("--jobs", type=int, default=None,
                            help="training jobs in the database (console: 10,000; api: 5,000)")
        parser.add_argument("--departments", type=int, default=None, help="console: 200; api: 40")
        parser.add_argument("--repeat", type=int, default=40,
                            help="console: timed requests per page; lending-profile: timed reads of each kind")
        parser.add_argument("--users", type=int, default=100, help="api: concurrent Locust users")
        parser.add_argument("--duration", type=float, default=60, help="api: seconds measured once all users run")
        parser.add_argument("--settle", type=float, default=5.0,
                            help="api: seconds after all users run before the figures count")
        parser.add_argument("--wait", type=float, default=2.0,
                            help="api: mean seconds a user waits between requests (0.5-1.5 times it)")
        parser.add_argument("--workers", type=int, default=None, help="api: gunicorn workers (tidal/gunicorn.py's)")
        parser.add_argument("--threads", type=int, default=None,
                            help="api: threads per gunicorn worker (tidal/gunicorn.py's; 1: sync workers)")
        parser.add_argument("--json", dest="json_path", help="also write the figures to this file")

    def handle(self, *args: object, **opts: object) -> None:
        run = {"scheduler": self._scheduler, "streaming": self._streaming, "console": self._console,
               "api": self._api, "kubernetes": self._kubernetes,
               "lending-profile": self._lending_profile}[opts["target"]]
        figures = run(opts)
        for name, value in figures.items():
            self.stdout.write(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
        if opts["json_path"]:
            with open(opts["json_path"], "w") as f:
                json.dump(figures, f, indent=2)

    @staticmethod
    def _scheduler(opts: dict) -> dict:
        if not 0 <= opts["gang_share"] <= 1:
            raise CommandError(f"--gang-share must be between 0 and 1, got {opts['gang_share']}")
        with tqdm(total=opts["cycles"], desc="scheduling cycles", disable=None) as bar:
            figures = bench_scheduler(nodes=(opts["nodes"] or 5000), pending=opts["pending"], cycles=opts["cycles"],
                                      seed=opts["seed"], node_csv=opts["node_csv"], profile=opts["profile"],
                                      progress=lambda _cycle: bar.update(), gang_share=opts["gang_share"],
                                      tree_leaves=opts["tree_leaves"], fair_sharing=opts["fair_sharing"])
        return figures

    @staticmethod
    def _streaming(opts: dict) -> dict:
        from django.core.management import call_command

        from benchmarks.streaming import bench_streaming

        call_command("migrate", verbosity=0)  # its sink writes the configured database: a fresh clone has no tables

        bars: dict[str, tqdm] = {}

        def progress(stage: str, done: int, total: int) -> None:
            bar = bars.setdefault(stage, tqdm(total=total, desc=stage, disable=None))
            bar.update(done - bar.n)

        try:
            return bench_streaming(samples=opts["samples"], pods=opts["pods"] or 1000, progress=progress)
        finally:
            for bar in bars.values():
                bar.close()

    @staticmethod
    def _console(opts: dict) -> dict:
        from benchmarks.console import PAGES, bench_console

        with tqdm(total=len(PAGES), desc="console pages", disable=None) as bar:
            return bench_console(jobs=opts["jobs"] or 10_000, departments=opts["departments"] or 200,
                                 nodes=opts["nodes"] or 1523, repeat=opts["repeat"],
                                 progress=lambda _page: bar.update())

    @staticmethod
    def _api(opts: dict) -> dict:
        from rich.console import Console

        from benchmarks.api import LoadOptions, bench_api, render

        server = {name: opts[name] for name in ("workers", "threads") if opts[name] is not None}
        options = LoadOptions(users=opts["users"], duration_s=opts["duration"], wait_s=opts["wait"],
                              settle_s=opts["settle"], jobs=opts["jobs"] or 5000, departments=opts["departments"] or 40,
                              seed=opts["seed"], **server)
        with tqdm(total=options.duration_s, desc="API under load", unit="s", disable=None) as bar:
            def progress(event: dict) -> None:
                if event["event"] == "tick":
                    bar.update(event["elapsed_s"] - bar.n)
                    bar.set_postfix(requests=event["requests"], failures=event["failures"])

            report = bench_api(options, progress=progress)
        console = Console()
        console.width = max(console.width, 120)  # the table's nine columns, also when the output is a file
        console.print(*render(report), sep="\n")
        return report.figures()

    @staticmethod
    def _kubernetes(opts: dict) -> dict:
        from rich.console import Console

        from benchmarks.kubernetes import bench_kubernetes, render

        if not settings.TIDAL_KUBECONFIG:
            raise CommandError("no control plane: start it with platform/stack.sh start and export "
                               "`platform/stack.sh env` (TIDAL_KUBECONFIG)")
        nodes, pods = opts["nodes"] or 5000, opts["pods"] or 10_000
        if nodes < 1 or pods < 1:
            raise CommandError(f"--nodes and --pods must be positive, got {nodes} and {pods}")
        console = Console()
        console.width = max(console.width, 130)  # the table's ten columns, also when the output is a file
        report = bench_kubernetes(nodes=nodes, pods=pods, kubeconfig=settings.TIDAL_KUBECONFIG,
                                  run_dir=settings.RUN_DIR, seed=opts["seed"], node_csv=opts["node_csv"],
                                  progress=lambda what: console.log(what))
        console.print(*render(report), sep="\n")
        return report.figures()

    @staticmethod
    def _lending_profile(opts: dict) -> dict:
        from benchmarks.lending_profile import bench_lending_profile

        return bench_lending_profile(repeat=opts["repeat"])
