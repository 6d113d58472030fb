from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from demo.data import DEMO_PASSWORD, OPERATOR, USERS, demo_load


class Command(BaseCommand):
    help = "Load the demo cluster (Alibaba 2023 node list), departments, quotas, frameworks and accounts."

    def add_arguments(self, parser):
        parser.add_argument("--traces", type=Path, default=settings.TRACES_DIR, help="the shared traces folder")
        parser.add_argument("--every", type=int, default=10, help="load 1 node in EVERY (default 10)")
        parser.add_argument("--all-nodes", action="store_true", help="load every node of the trace")

    def handle(self, *args, traces: Path, every: int, all_nodes: bool, **options):
        summary = demo_load(traces_dir=traces, every=1 if all_nodes else max(every, 1))
        self.stdout.write(f"demo cluster from {summary.source}: {summary.nodes} nodes, {summary.gpus} GPUs, "
                          f"{summary.departments} departments")
        self.stdout.write(f"operator login: {OPERATOR[0]} / {OPERATOR[1]}; users "
                          f"{', '.join(u for u, _, _ in USERS)} / {DEMO_PASSWORD}")
