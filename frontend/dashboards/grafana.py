"""The overview's charts as a Grafana dashboard, for operators who already run Grafana: the same PromQL as the
console (charts.OVERVIEW), with the scrape target and the rate window as Grafana variables.
`python manage.py grafana_dashboard` writes platform/grafana/tidal-overview.json; a test keeps the file equal to
this output and checks every query against the real Prometheus."""
import json

from frontend.dashboards.charts import OVERVIEW, Chart

SELECTOR = 'service=~"$service"'  # tidal-web-<namespace>: one Tidal, or several
WINDOW = "$__rate_interval"


def promql(template: str) -> str:
    return template.replace("SEL", SELECTOR).replace("WINDOW", WINDOW)


def _panel(chart: Chart, index: int) -> dict:
    targets = [{"refId": chr(ord("A") + i), "expr": promql(q.promql), "datasource": {"type": "prometheus",
                "uid": "${datasource}"}, "legendFormat": " ".join("{{" + k + "}}" for k in q.by) or q.label}
               for i, q in enumerate(chart.queries)]
    unit = "percentunit" if chart.percent else "s" if chart.y_label == "seconds" else "short"
    return {"id": index + 1, "type": "timeseries", "title": chart.title, "description": chart.note,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"x": (index % 3) * 8, "y": (index // 3) * 8, "w": 8, "h": 8},
            "fieldConfig": {"defaults": {"unit": unit, "min": 0,
                                         "custom": {"lineInterpolation": "stepAfter" if chart.stepped else "linear"}},
                            "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
            "targets": targets}


def dashboard() -> dict:
    return {
        "uid": "tidal-overview", "title": "Tidal — cluster overview", "tags": ["tidal"], "schemaVersion": 39,
        "editable": True, "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
            {"name": "service", "label": "Tidal", "type": "query", "multi": True, "includeAll": True,
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(tidal_nodes, service)", "refId": "service"}, "refresh": 2},
        ]},
        "panels": [_panel(chart, i) for i, chart in enumerate(OVERVIEW)],
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"
