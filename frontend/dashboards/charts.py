"""The cluster overview's charts: PromQL over Tidal's own metrics, drawn from the console's Chart.js specs.

In a query, SEL stands for the label matcher of this Tidal's scrape target (other Tidals may share the
Prometheus) and WINDOW for a rate window of a few steps of the chosen range."""
import time
from dataclasses import dataclass

from frontend.dashboards import prometheus


@dataclass(frozen=True)
class Query:
    promql: str
    by: tuple[str, ...] = ()  # labels naming each line
    label: str = ""  # the line's name when `by` is empty


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    queries: tuple[Query, ...]
    percent: bool = False
    y_label: str = ""
    stepped: bool = False
    note: str = ""


GPU_CAPACITY = 'sum by (group) (tidal_resource_group_capacity{SEL, resource="gpu"}) > 0'
QUANTILE = "histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{SEL}}[WINDOW])))"
OVERVIEW = (
    Chart("chart-allocated", "GPUs allocated / capacity, per resource group", percent=True, queries=(
        Query(f'sum by (group) (tidal_resource_group_allocated{{SEL, resource="gpu"}}) / {GPU_CAPACITY}', ("group",)),)),
    Chart("chart-used", "GPUs really busy / capacity, per resource group", percent=True,
          note="utilization × GPUs of every profiled pod; the gap to the chart beside is what right-sizing recovers",
          queries=(Query(f"sum by (group) (tidal_resource_group_gpus_used{{SEL}}) / {GPU_CAPACITY}", ("group",)),)),
    Chart("chart-fragmentation", "Idle GPUs fragmented, per resource group", percent=True,
          note="the share of idle GPUs the last week's typical jobs could not use (FGD's measure)",
          queries=(Query("max by (group) (tidal_gpu_fragmentation_ratio{SEL})", ("group",)),)),
    Chart("chart-nodes", "Nodes by state", stepped=True, queries=(
        Query("sum by (state) (tidal_nodes{SEL})", ("state",)),)),
    Chart("chart-pending", "Pending training jobs by reason", stepped=True, queries=(
        Query("sum by (reason) (tidal_jobs_pending{SEL})", ("reason",)),)),
    Chart("chart-wait", "Queue wait before the first run", y_label="seconds", queries=(
        Query(QUANTILE.format(q=0.5, metric="tidal_queue_wait_seconds"), label="p50"),
        Query(QUANTILE.format(q=0.95, metric="tidal_queue_wait_seconds"), label="p95"))),
    Chart("chart-disruption", "Preemptions and kills per hour", y_label="per hour", queries=(
        Query("sum by (reason) (rate(tidal_preemptions_total{SEL}[WINDOW])) * 3600", ("reason",)),
        Query("sum(rate(tidal_kills_total{SEL}[WINDOW])) * 3600", label="killed by take-backs"))),
    Chart("chart-loops", "Control loops, p95 duration", y_label="seconds", queries=(
        Query(QUANTILE.format(q=0.95, metric="tidal_scheduler_cycle_seconds"), label="scheduling cycle"),
        Query(QUANTILE.format(q=0.95, metric="tidal_lending_tick_seconds"), label="lending tick"))),
    Chart("chart-ticks", "Control-loop ticks that did not act, per hour", y_label="per hour",
          note="by loop and why: none while every tick acts", queries=(
              Query('sum by (loop, outcome) (rate(tidal_loop_ticks_total{SEL, outcome!="acted"}[WINDOW])) * 3600',
                    ("loop", "outcome")),)),
)


def spec(chart: Chart, *, selector: str, range_name: str, now: float | None = None) -> dict:
    """The chart's Chart.js spec over the range; raises prometheus.PrometheusDown."""
    span_s, step_s = prometheus.RANGES[range_name]
    now = time.time() if now is None else now
    series = []
    for query in chart.queries:
        promql = query.promql.replace("SEL", selector).replace("WINDOW", f"{max(4 * step_s, 60)}s")
        for line in prometheus.lines(promql, span_s=span_s, step_s=step_s, now=now, by=query.by, label=query.label):
            series.append({"label": line.label, "points": line.points, "stepped": chart.stepped})
    return {"id": chart.id, "title": chart.title, "percent": chart.percent, "y_label": chart.y_label,
            "note": chart.note, "series": series, "x_min": (now - span_s) * 1000, "x_max": now * 1000}
