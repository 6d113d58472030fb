"""`manage.py k8s_emulator`: serve the Kubernetes API emulator, with its cluster actors, seeded with Tidal's nodes."""
from __future__ import annotations

import threading
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from cluster.emulator import Emulator
from colocation.selectors import node_views


class Command(BaseCommand):
    help = "Serve the Kubernetes API emulator (not Kubernetes) with one Node per inventory node, until Ctrl-C."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--port", type=int, default=16443)
        parser.add_argument("--kubeconfig", default=str(Path(settings.RUN_DIR) / "k8s-emulator.kubeconfig"))
        parser.add_argument("--startup-s", type=float, default=5.0, help="seconds before a started pod is Ready")
        parser.add_argument("--no-demo", action="store_true", help="seed the inventory as it is, without the demo")

    def handle(self, *args, port: int, kubeconfig: str, startup_s: float, no_demo: bool, **options) -> None:
        call_command("migrate", verbosity=0)  # as `make run` does, so both see the same inventory
        if not no_demo:
            call_command("load_demo", stdout=self.stdout)
        nodes = node_views()
        with Emulator(nodes=nodes, namespace=settings.TIDAL_K8S_NAMESPACE, startup_s=startup_s, port=port) as emu:
            path = emu.kubeconfig(Path(kubeconfig)).resolve()
            self.stdout.write(f"Kubernetes API emulator at {emu.url} with {len(nodes)} nodes; kubeconfig {path}")
            self.stdout.write("Run Tidal against it: "
                              f"TIDAL_CLUSTER_BACKEND=kubernetes TIDAL_KUBECONFIG={path} make run ARGS=--no-pipeline")
            try:
                threading.Event().wait()
            except KeyboardInterrupt:
                self.stdout.write("stopping the emulator")
