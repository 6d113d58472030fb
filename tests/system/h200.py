"""The H200 workload traces (../shared/traces/h200-workloads, its README) for the pipeline tests: backfilling
their OpenMetrics into the test Prometheus with promtool, and the per-minute figures computed straight from
their CSV, the way Prometheus and the profile job should see them.

Backfill. Each series is shifted by a whole number of minutes to end more than 3 hours ago (the head block
must not be backfilled; the stack keeps 2 days), its namespace renamed to the test's own, and a
`kube_pod_labels` series added per pod naming its job. Each pod's series get a GPU `UUID` of its own: the solo
run's workloads ran one after another on one GPU, and the 5-s step in which one ends and the next begins would
otherwise read as a GPU two pods share (streaming/attribution.py). The publisher reads DCGM gauges over each step
(avg_over_time, max_over_time), so a series that stops has no value one step later: no staleness marker is
needed. Blocks are written straight into Prometheus' data folder (promtool renames each finished block into
place), which loads them at its next block reload (~1 min).
"""

from __future__ import annotations

import csv
import gzip
import math
import re
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import requests
from django.conf import settings

TRACES = Path(settings.TRACES_DIR) / "h200-workloads"
# PodSample field <- (metric, scale): the figures the profile job keeps per pod and minute
FIGURES = {"gpu_util": ("DCGM_FI_DEV_GPU_UTIL", 0.01), "sm_active": ("DCGM_FI_PROF_SM_ACTIVE", 1.0),
           "sm_occupancy": ("DCGM_FI_PROF_SM_OCCUPANCY", 1.0),
           "tensor_active": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1.0), "dram_active": ("DCGM_FI_PROF_DRAM_ACTIVE", 1.0)}
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][\w:]*)(?P<labels>\{.*\})? (?P<value>\S+) (?P<ts>\S+)$")


def workload_pods(run: str) -> list[str]:
    """The pods of one run's file that ran a workload (not `none`, not a pair)."""
    return sorted({row["pod"] for row in _rows(run) if row["pod"] != "none" and "+" not in row["pod"]
                   and not row["metric"].startswith("tidal_proc_")})


def time_range(run: str) -> tuple[float, float]:
    """The first and last sample time (epoch s) of the run."""
    times = [float(row["timestamp_s"]) for row in _rows(run)]
    return min(times), max(times)


def shifted_openmetrics(run: str, *, shift_s: int, namespace: str, jobs: Mapping[str, int]) -> str:
    """The run's OpenMetrics file with every timestamp moved by `shift_s`, the namespace renamed, a GPU UUID per
    pod, and kube_pod_labels{pod, label_tidal_io_job, label_tidal_io_run="1"} for the `jobs` pods."""
    out: list[str] = []
    label_times: dict[str, list[float]] = defaultdict(list)
    family: list[tuple[str, float, str]] = []  # (series, ts, value) of the family being read

    def flush() -> None:
        out.extend(f"{series} {value} {ts + shift_s:.3f}" for series, ts, value in family)
        family.clear()

    with gzip.open(TRACES / f"{run}_metrics.om.gz", "rt") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if line.startswith("#"):
                flush()
                if line != "# EOF":
                    out.append(line)
                continue
            m = _SAMPLE.match(line)
            pod = re.search(r'\bpod="([^"]*)"', m["labels"] or "")
            labels = m["labels"].replace('namespace="tidal-exp"', f'namespace="{namespace}"')
            if pod:
                labels = labels.replace('UUID="', f'UUID="{pod[1]}/', 1)
            family.append((m["name"] + labels, float(m["ts"]), m["value"]))
            if m["name"] == "DCGM_FI_DEV_GPU_UTIL" and pod and pod[1] in jobs:
                label_times[pod[1]].append(float(m["ts"]))
    flush()
    out += ["# HELP kube_pod_labels Kubernetes labels converted to Prometheus labels.", "# TYPE kube_pod_labels gauge"]
    for pod, times in sorted(label_times.items()):
        series = (f'kube_pod_labels{{namespace="{namespace}",pod="{pod}",label_tidal_io_job="{jobs[pod]}",'
                  'label_tidal_io_run="1"}')
        out.extend(f"{series} 1 {ts + shift_s:.3f}" for ts in times)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def backfill(prometheus_url: str, text: str, work: Path) -> None:
    """promtool the OpenMetrics `text` into the (local) Prometheus' data folder."""
    flags = requests.get(f"{prometheus_url}/api/v1/status/flags", timeout=10).json()["data"]
    data = Path(flags["storage.tsdb.path"])
    if not data.is_dir():
        raise RuntimeError(f"Prometheus at {prometheus_url} keeps its data in {data}, not on this machine")
    source = work / "backfill.om"
    source.write_text(text)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                   check=True, capture_output=True, text=True)


@dataclass(frozen=True, slots=True)
class Expected:
    """One pod's minute as the profile job should report it."""

    samples: int
    figures: dict[str, tuple[float | None, float | None]]  # mean, peak per FIGURES name and gpu_mem_util


def expected_minutes(run: str, *, pods: Iterable[str], shift_s: int, step_s: int,
                     window_s: int = 60) -> dict[tuple[str, int], Expected]:
    """{(pod, minute start epoch ms): Expected} from the run's CSV: at each step t of the publisher's grid a
    series' value is the mean of its samples in (t - step, t] (and their max for the step's peak); a step counts
    when the pod has a sample there. A minute's mean is the mean of its steps' means, its peak the largest
    step peak; GPU memory's is used / (used + free) of each step's means, its peak the largest of those."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    wanted = {metric for metric, _ in FIGURES.values()} | {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
    pods = set(pods)
    for row in _rows(run):
        if row["pod"] in pods and row["metric"] in wanted:
            series[(row["pod"], row["metric"])].append((float(row["timestamp_s"]) + shift_s, float(row["value"])))
    steps: dict[tuple[str, int], list[dict[str, tuple[float, float]]]] = defaultdict(list)
    for pod in pods:
        start = min(ts for (p, _), points in series.items() if p == pod for ts, _ in points)
        end = max(ts for (p, _), points in series.items() if p == pod for ts, _ in points)
        for t in range(math.ceil(start / step_s) * step_s, math.ceil(end / step_s) * step_s + 1, step_s):
            values = {metric: _within(series[(pod, metric)], t - step_s, t) for metric in wanted}
            if all(not v for v in values.values()):
                continue
            step = {name: (sum(v) / len(v) * scale, max(v) * scale) for name, (metric, scale) in FIGURES.items()
                    if (v := values[metric])}
            used, free = values["DCGM_FI_DEV_FB_USED"], values["DCGM_FI_DEV_FB_FREE"]
            if used and free and (u := sum(used) / len(used)) + (f := sum(free) / len(free)) > 0:
                step["gpu_mem_util"] = (u / (u + f), u / (u + f))
            steps[(pod, t * 1000 // (window_s * 1000) * window_s * 1000)].append(step)
    return {key: Expected(len(rows), {name: _mean_peak([r[name] for r in rows if name in r])
                                      for name in (*FIGURES, "gpu_mem_util")})
            for key, rows in steps.items()}


def _mean_peak(values: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    return (sum(m for m, _ in values) / len(values), max(p for _, p in values)) if values else (None, None)


def _within(points: list[tuple[float, float]], after: float, until: float) -> list[float]:
    """The series' values sampled in (after, until]."""
    return [v for ts, v in points if after < ts <= until]


def _rows(run: str) -> list[dict[str, str]]:
    with open(TRACES / f"{run}_metrics.csv", newline="") as f:
        return list(csv.DictReader(f))
