"""Write the Grafana dashboard of the overview's panels (frontend/dashboards/grafana.py)."""
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from frontend.dashboards.grafana import render

DEFAULT = Path(settings.BASE_DIR) / "platform" / "grafana" / "tidal-overview.json"


class Command(BaseCommand):
    help = "Write the Grafana dashboard JSON of the operators' overview (same PromQL as the console)."

    def add_arguments(self, parser):
        parser.add_argument("--out", default=str(DEFAULT), help="file to write ('-': standard output)")

    def handle(self, *args, out: str, **options):
        text = render()
        if out == "-":
            self.stdout.write(text, ending="")
            return
        Path(out).write_text(text)
        self.stdout.write(f"wrote {out}")
