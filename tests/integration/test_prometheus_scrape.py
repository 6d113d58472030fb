"""The real Prometheus scrapes a target registered through file_sd, and the Pushgateway."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from prometheus_api_client import PrometheusConnect
from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, start_http_server
from prometheus_client.exposition import delete_from_gateway

from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL, PUSHGATEWAY_URL

SCRAPE_TIMEOUT = 30  # seconds; the stack scrapes these jobs every 2 s


@pytest.fixture
def prometheus() -> PrometheusConnect:
    prom = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True)
    assert prom.check_prometheus_connection(), f"no Prometheus at {PROMETHEUS_URL}"
    return prom


def _wait_for_series(prom: PrometheusConnect, query: str) -> list[dict]:
    deadline = time.monotonic() + SCRAPE_TIMEOUT
    while time.monotonic() < deadline:
        result = prom.custom_query(query=query)
        if result:
            return result
        time.sleep(0.25)
    pytest.fail(f"Prometheus at {PROMETHEUS_URL} returned nothing for {query} in {SCRAPE_TIMEOUT}s")


def _write_atomically(path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_scrapes_a_target_added_through_file_sd(prometheus):
    run = uuid.uuid4().hex[:12]
    metric, value = f"tidal_it_probe_{run}", 1234.5
    registry = CollectorRegistry()
    Gauge(metric, "integration-test probe", registry=registry).set(value)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    target = f"127.0.0.1:{server.server_port}"
    sd_file = PROMETHEUS_SD_DIR / f"it-{run}.json"
    try:
        PROMETHEUS_SD_DIR.mkdir(parents=True, exist_ok=True)
        _write_atomically(sd_file, json.dumps([{"targets": [target], "labels": {"run": run}}]))

        (series,) = _wait_for_series(prometheus, metric)

        assert series["metric"] == {
            "__name__": metric, "instance": target, "job": "tidal", "run": run,
        }
        assert float(series["value"][1]) == value
    finally:
        sd_file.unlink(missing_ok=True)
        server.shutdown()
        thread.join(timeout=5)


def test_reads_a_pushed_metric_back_through_prometheus(prometheus):
    run = uuid.uuid4().hex[:12]
    metric, value, job = f"tidal_it_pushed_{run}", 77.25, f"tidal-it-{run}"
    registry = CollectorRegistry()
    Gauge(metric, "integration-test pushed probe", registry=registry).set(value)
    push_to_gateway(PUSHGATEWAY_URL, job=job, registry=registry)
    try:
        (series,) = _wait_for_series(prometheus, f'{metric}{{job="{job}"}}')

        # honor_labels keeps the pushed job label instead of the scrape job's.
        assert series["metric"]["job"] == job
        assert float(series["value"][1]) == value
    finally:
        delete_from_gateway(PUSHGATEWAY_URL, job=job)
