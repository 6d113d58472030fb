"""`manage.py cluster_exporter` serves the simulated cluster stored in the real Redis, registers itself for the
real Prometheus, and Prometheus keeps every metric with the exporter's pod/namespace labels."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from prometheus_api_client import PrometheusConnect
from redis import Redis

from cluster.backend import INFERENCE, JOB_LABEL, KIND_LABEL, RUN_LABEL, SERVICE_LABEL, TASK_LABEL, PodSpec
from cluster.simulated import store
from cluster.types import GpuShare, NodeState
from experiments.builders.scheduling import NodeBuilder
from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL, REDIS_URL, ROOT

DEADLINE_S = 60  # Prometheus scrapes the tidal job every 2 s; the exporter reads a 20 MB trace first
EXPECTED = {  # metric name -> pods (suffix after it-<run>-) that must have it
    "DCGM_FI_DEV_GPU_UTIL": {"train", "web-0"}, "DCGM_FI_DEV_FB_USED": {"train", "web-0"},
    "DCGM_FI_DEV_FB_FREE": {"train", "web-0"},
    "container_cpu_usage_seconds_total": {"train", "web-0"}, "container_memory_working_set_bytes": {"train", "web-0"},
    "kube_pod_container_resource_requests": {"train", "web-0"}, "kube_pod_labels": {"train", "web-0"},
    "istio_requests_total": {"web-0"}, "istio_request_duration_milliseconds_bucket": {"web-0"},
    "istio_request_duration_milliseconds_sum": {"web-0"}, "istio_request_duration_milliseconds_count": {"web-0"},
}
NAMESPACE = {"train": "tidal-training", "web-0": "tidal-inference"}


def poll(what: str, check, deadline_s: float = DEADLINE_S):
    """check() until it returns something truthy, or fail after the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.25)
    pytest.fail(f"no {what} within {deadline_s}s")


def small_cluster(run: str):
    cluster = store.new_cluster([NodeBuilder(f"it-{run}-n1", gpus=2).build(),
                                 NodeBuilder(f"it-{run}-n2", gpus=2).state(NodeState.ONLINE_NORMAL).build()])
    cluster.bind(PodSpec(f"it-{run}-train", 1, "T4", (GpuShare(0, 1.0), GpuShare(1, 1.0)), 4000, 8192,
                         {JOB_LABEL: "1", RUN_LABEL: "1", TASK_LABEL: f"task-{run}"}), f"it-{run}-n1")
    web = PodSpec(f"it-{run}-web", None, "T4", (GpuShare(0, 0.5),), 1000, 2048,
                  {KIND_LABEL: INFERENCE, SERVICE_LABEL: f"it-{run}-web"})
    cluster.apply_replicaset(f"it-{run}-web", web, 1, startup_s=0)
    return cluster


@pytest.fixture
def exporter():
    yield from _exporter({})


@pytest.fixture
def exporter_without_traces(tmp_path):
    yield from _exporter({"TIDAL_TRACES_DIR": str(tmp_path)})


def _exporter(extra_env: dict[str, str]):
    """The command in a subprocess on a test-only Redis namespace and target file; stopped with SIGTERM."""
    run = uuid.uuid4().hex[:8]
    env = {**os.environ, "TIDAL_REDIS_NAMESPACE": f"test-exporter-{run}", "REDIS_URL": REDIS_URL,
           "PROMETHEUS_SD_DIR": str(PROMETHEUS_SD_DIR), **extra_env}
    command = [sys.executable, "manage.py", "cluster_exporter", "--port", "0", "--target-name", f"it-exporter-{run}"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    target = PROMETHEUS_SD_DIR / f"it-exporter-{run}.json"
    try:
        yield run, process, target
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=15)
        target.unlink(missing_ok=True)
        Redis.from_url(REDIS_URL).delete(f"test-exporter-{run}:{store.KEY}")


def read_target(process: subprocess.Popen, target) -> str | None:
    if process.poll() is not None:
        pytest.fail(f"the exporter exited: {process.stdout.read().decode()[-2000:]}")
    return json.loads(target.read_text())[0]["targets"][0] if target.exists() else None


def test_prometheus_scrapes_every_pod_metric_with_its_labels(exporter):
    run, process, target = exporter
    address = poll("target file", lambda: read_target(process, target))
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        assert response.read() == b""  # no cluster stored yet: no pod series

    store.save(Redis.from_url(REDIS_URL), f"test-exporter-{run}", small_cluster(run))
    prom = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True)
    query = f'{{pod=~"it-{run}-.*"}}'

    def complete() -> list[dict] | None:
        series = prom.custom_query(query=query)
        seen = {(s["metric"]["__name__"], s["metric"]["pod"].removeprefix(f"it-{run}-")) for s in series}
        return series if all((name, pod) in seen for name, pods in EXPECTED.items() for pod in pods) else None

    series = poll(f"series for every metric of pods it-{run}-*", complete)
    for s in series:
        labels = s["metric"]
        pod = labels["pod"].removeprefix(f"it-{run}-")
        assert labels["namespace"] == NAMESPACE[pod] and labels["job"] == "tidal", labels
        assert not [k for k in labels if k.startswith("exported_")], labels  # honor_labels not needed
    by_name = {(s["metric"]["__name__"], s["metric"]["pod"]): s["metric"] for s in series}
    assert by_name["kube_pod_labels", f"it-{run}-train"]["label_tidal_io_task"] == f"task-{run}"
    assert by_name["kube_pod_labels", f"it-{run}-web-0"]["label_tidal_io_service"] == f"it-{run}-web"
    assert by_name["istio_requests_total", f"it-{run}-web-0"]["destination_workload"] == f"it-{run}-web"
    assert by_name["DCGM_FI_DEV_GPU_UTIL", f"it-{run}-train"]["Hostname"] == f"it-{run}-n1"

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert not target.exists()  # deregistered on exit


def test_without_the_traces_folder_pods_follow_the_built_in_shapes(exporter_without_traces):
    """A clone without ../shared/traces: `make run` falls back to the built-in cluster, and the exporter to built-in
    pod shapes instead of exiting."""
    run, process, target = exporter_without_traces
    address = poll("target file", lambda: read_target(process, target))
    store.save(Redis.from_url(REDIS_URL), f"test-exporter-{run}", small_cluster(run))

    def utilization() -> list[float] | None:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
            lines = response.read().decode().splitlines()
        values = [float(line.rsplit(" ", 1)[1]) for line in lines
                  if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and f'pod="it-{run}-' in line]
        return values if len(values) == 3 else None  # two GPUs of the training pod, one of the web pod

    assert all(0 <= v <= 100 for v in poll("GPU utilization of every pod", utilization))
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert b"built-in shapes" in process.stdout.read()


def test_a_genai_trace_folder_that_cannot_be_read_is_an_error(tmp_path):
    (tmp_path / "alibaba-genai-2026").mkdir()  # there, but without its files
    env = {**os.environ, "TIDAL_TRACES_DIR": str(tmp_path), "REDIS_URL": REDIS_URL}
    done = subprocess.run([sys.executable, "manage.py", "cluster_exporter", "--port", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "cannot read the GenAI trace" in done.stderr and "pod_gpu_duty_cycle_anon.csv" in done.stderr
