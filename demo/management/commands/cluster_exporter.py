"""Serve the simulated cluster's per-pod metrics (DCGM, cAdvisor, kube-state-metrics and Istio names) and
register the exporter as a Prometheus target (<PROMETHEUS_SD_DIR>/cluster-exporter-<TIDAL_REDIS_NAMESPACE>.json,
one file per demo cluster, so two demos on one machine do not replace each other's target) until stopped.

The pods are those of the cluster the loops act on: the simulated one in Redis, or, with TIDAL_CLUSTER_BACKEND=
kubernetes, the kwok pods of the control plane (`make run ARGS=--kubernetes`), which run nothing and so have no
metrics of their own: the exporter plays their DCGM exporter and cAdvisor, and kube-state-metrics in their namespace
(TIDAL_K8S_NAMESPACE), where the autoscaler reads their serving signals (colocation/serving_signals.py).

Under the demo's traffic (TIDAL_DEMO_TRAFFIC, set by `make run`) the inference pods of its services serve that
traffic, on the demo clock the autoscaler reads: the service-load profiles follow the curve it acts on."""
import signal
import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from redis import Redis

from cluster.simulated.alibaba import TraceError
from cluster.simulated.exporter import redis_source, register_target, serve, target_name
from cluster.simulated.metrics import ClusterState, ServingLoad, TraceShapes, builtin_shapes, load_traces
from cluster.simulated.traffic import DemoServing
from colocation.live_backend import kube_namespace, read_backend
from colocation.loads import demo_clock, demo_traffic

GENAI_TRACE = "alibaba-genai-2026"


class Command(BaseCommand):
    help = "Serve the demo cluster's pod metrics for Prometheus (read-only on the simulated or kwok cluster)."

    def add_arguments(self, parser):
        parser.add_argument("--port", type=int, default=settings.TIDAL_EXPORTER_PORT, help="0: any free port")
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--target-name", default=target_name(settings.TIDAL_REDIS_NAMESPACE),
                            help="name of the file_sd target file")

    def handle(self, *args, port, host, target_name, **options):
        shapes = self._shapes()
        redis = Redis.from_url(settings.REDIS_URL)
        source = self._source(redis)
        try:
            server, thread = serve(source, shapes, port, addr=host, load=self._demo_load(redis),
                                   namespace=kube_namespace())
        except OSError as error:
            raise CommandError(f"cannot listen on {host}:{port}: {error}") from error
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        target = register_target(settings.PROMETHEUS_SD_DIR, server.server_port, target_name)
        self.stdout.write(f"serving http://{host}:{server.server_port}/metrics; Prometheus target {target}",
                          ending="\n")
        self.stdout.flush()
        try:
            while not stop.wait(1.0):
                pass
        finally:
            target.unlink(missing_ok=True)
            server.shutdown()
            thread.join(timeout=5)

    @staticmethod
    def _source(redis) -> Callable[[], ClusterState | None]:
        if settings.TIDAL_CLUSTER_BACKEND == "kubernetes":
            return read_backend().snapshot  # read-only, no lock or lease: a scrape never delays a tick
        return redis_source(redis, settings.TIDAL_REDIS_NAMESPACE)

    def _shapes(self) -> TraceShapes:
        """The GenAI trace's pod shapes; without the trace (no traces folder), the built-in ones. A trace that is
        there but cannot be read is an error."""
        folder = settings.TRACES_DIR / GENAI_TRACE
        if not folder.is_dir():
            self.stdout.write(f"{folder} not found: pods follow the built-in shapes (made up, not measured)")
            return builtin_shapes()
        try:
            return load_traces(folder)
        except (OSError, TraceError, ValueError) as error:
            raise CommandError(f"cannot read the GenAI trace: {error}") from error

    def _demo_load(self, redis) -> ServingLoad | None:
        if not settings.TIDAL_DEMO_TRAFFIC:
            return None
        clock = demo_clock(redis=redis, namespace=settings.TIDAL_REDIS_NAMESPACE, now=time.time())
        traffic = demo_traffic(clock=clock)
        if traffic is None:
            self.stdout.write("no demo traffic (the World Cup or GenAI trace is missing): inference pods follow their "
                              "per-pod series")
            return None
        self.stdout.write(f"inference pods of {', '.join(sorted(traffic.services))} serve the demo's traffic")
        return DemoServing(traffic, clock)
