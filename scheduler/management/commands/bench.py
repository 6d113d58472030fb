"""`python manage.py bench scheduler --nodes 5000 --pending 10000 --json out.json`"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandParser
from tqdm import tqdm

from django.conf import settings

from scheduler.bench import bench_scheduler


class Command(BaseCommand):
    help = "Benchmark a Tidal component and print its figures."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("target", choices=["scheduler"])
        parser.add_argument("--nodes", type=int, default=5000)
        parser.add_argument("--pending", type=int, default=10000)
        parser.add_argument("--cycles", type=int, default=6)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--profile", default="tidal")
        parser.add_argument("--node-csv", default=str(settings.TRACES_DIR / "alibaba-gpu-2023/openb_node_list_all_node.csv"),
                            help="node shapes to draw from (built-in Alibaba shapes when the file is missing)")
        parser.add_argument("--json", dest="json_path", help="also write the figures to this file")

    def handle(self, *args: object, **opts: object) -> None:
        with tqdm(total=opts["cycles"], desc="scheduling cycles", disable=None) as bar:
            figures = bench_scheduler(nodes=opts["nodes"], pending=opts["pending"], cycles=opts["cycles"],
                                      seed=opts["seed"], node_csv=opts["node_csv"], profile=opts["profile"],
                                      progress=lambda _cycle: bar.update())
        for name, value in figures.items():
            self.stdout.write(f"{name}: {value:.3f}" if isinstance(value, float) else f"{name}: {value}")
        if opts["json_path"]:
            with open(opts["json_path"], "w") as f:
                json.dump(figures, f, indent=2)
