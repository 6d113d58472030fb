"""platform/grafana/tidal-overview.json is the console overview's PromQL, and the real Prometheus accepts every query."""
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect

from frontend.dashboards.grafana import render
from tests.integration.services import PROMETHEUS_URL

FILE = Path(__file__).resolve().parents[2] / "platform" / "grafana" / "tidal-overview.json"


def test_the_committed_dashboard_is_the_generated_one(capsys):
    call_command("grafana_dashboard", "--out", "-")
    assert capsys.readouterr().out == render() == FILE.read_text(), "run: python manage.py grafana_dashboard"


def test_every_panel_query_parses_on_the_real_prometheus():
    prom = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True)
    panels = json.loads(FILE.read_text())["panels"]
    assert len(panels) >= 7
    for panel in panels:
        for target in panel["targets"]:
            # Grafana's variables as Grafana would substitute them; a query Prometheus cannot parse raises
            expr = target["expr"].replace("$service", "tidal-web-test").replace("$__rate_interval", "1m")
            assert isinstance(prom.custom_query(expr), list), (panel["title"], expr)
    with pytest.raises(PrometheusApiClientException):  # the check itself can fail
        prom.custom_query("sum by (group (x")
