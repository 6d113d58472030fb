"""Serve the live simulated cluster's per-pod metrics (cluster/simulated/metrics.py) for Prometheus.

Read-only: each scrape loads the cluster the control loops keep in Redis (store.load, without the cluster
lock), so a scrape never delays a tick and never writes; until a tick has stored a cluster there are no pod
series. The exporter registers itself through a Prometheus file_sd target file."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from wsgiref.simple_server import WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer, _SilentHandler

from cluster.simulated import store
from cluster.simulated.metrics import ClusterState, PodMetricsCollector, ServingLoad, TraceShapes

TARGET_NAME = "cluster-exporter"  # <sd dir>/cluster-exporter.json


def target_name(namespace: str) -> str:
    """The exporter's file_sd target (and its `service` label) for the demo cluster stored under `namespace`:
    two demos on one machine neither replace each other's target nor read each other's pods."""
    return f"{TARGET_NAME}-{namespace}"


def redis_source(redis, namespace: str) -> Callable[[], ClusterState | None]:
    """The pods and nodes of the cluster stored under `namespace`, read afresh on every call."""
    def read() -> ClusterState | None:
        cluster = store.load(redis, namespace)
        return None if cluster is None else (cluster.pods(), cluster.nodes())
    return read


def serve(source: Callable[[], ClusterState | None], shapes: TraceShapes, port: int,
          addr: str = "127.0.0.1", load: ServingLoad | None = None,
          namespace: str | None = None) -> tuple[WSGIServer, threading.Thread]:
    """Start serving /metrics in a daemon thread (port 0: any free port, see server.server_port); inference pods of
    the services `load` serves follow it (the live demo's traffic). The pods' series carry `namespace` (the kwok
    pods' own); None: the simulated cluster's (metrics.pod_families)."""
    registry = CollectorRegistry()
    registry.register(PodMetricsCollector(source, shapes, load=load, namespace=namespace))
    server = make_server(addr, port, text_format(make_wsgi_app(registry)), ThreadingWSGIServer,
                         handler_class=_SilentHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def text_format(app):
    """`app` answering in Prometheus's text format whatever the scraper accepts: in OpenMetrics, prometheus_client
    writes the colons of a sample's name as underscores (prometheus/client_python#1177), so vLLM's `vllm:` series
    would reach Prometheus as `vllm_`."""
    def serve(environ, start_response):
        return app({**environ, "HTTP_ACCEPT": "text/plain; version=0.0.4"}, start_response)
    return serve


def target_file(sd_dir: str | Path, name: str = TARGET_NAME) -> Path:
    return Path(sd_dir) / f"{name}.json"


def register_target(sd_dir: str | Path, port: int, name: str = TARGET_NAME, host: str = "127.0.0.1") -> Path:
    """Write the file_sd target file atomically: Prometheus never reads a half-written one."""
    path = target_file(sd_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps([{"targets": [f"{host}:{port}"], "labels": {"service": name}}]))
    os.replace(tmp, path)
    return path
