"""`manage.py up --kubernetes` — what `make run ARGS=--kubernetes` runs — on the real control plane platform/stack.sh
starts (tests/integration/kubecluster.py), on a database and Redis namespace of its own, without the profile pipeline,
for as long as it takes (--exit-after bounds it) to see, through the API server:
- every node of the demo's inventory registered as a kwok node, and no other Tidal node;
- training pods Tidal bound and inference pods kube-scheduler placed, all running on those nodes;
- the console answering, and its API listing as many nodes as the cluster has;
- a running training pod's log, which the kwok log writer `up` starts writes, read through the API server's pods/log
  and through Tidal's job-log API.
Then Ctrl-C stops everything it started. The control plane's nodes and pods are removed before and after."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from redis import Redis

from cluster.backend import GROUP_LABEL, INFERENCE, JOB_LABEL, KIND_LABEL, RUN_LABEL, TRAINING, WORKER_LABEL
from cluster.kubernetes.kwok import KWOK_ANNOTATION
from tests.integration.kubecluster import KwokCluster, kwok_cluster
from demo.data import OPERATOR
from tests.system.test_demo_running import _free_port, signed_in

ROOT = Path(__file__).resolve().parents[2]
NS = "tidal-workloads"


@pytest.fixture
def cluster():
    """The control plane, emptied of Tidal's nodes and pods before and after."""
    with kwok_cluster((), NS) as kwok:
        yield kwok


@pytest.fixture
def up(tmp_path, cluster):
    port = _free_port()
    namespace = f"test-up-k8s-{port}"
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}", "TIDAL_RUN_DIR": str(tmp_path),
           "TIDAL_REDIS_NAMESPACE": namespace, "TIDAL_K8S_NAMESPACE": NS, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "manage.py", "up", "--kubernetes", "--no-pipeline", "--port", str(port), "--exit-after", "900"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    process.base, process.db = f"http://127.0.0.1:{port}", tmp_path / "demo.sqlite3"
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=90)
        redis = Redis.from_url(settings.REDIS_URL)
        for key in redis.scan_iter(f"{namespace}:*"):
            redis.delete(key)


def _until(condition, what: str, process: subprocess.Popen, seconds: float = 600):
    """Poll `condition` while `up` runs (a machine shared with other work starts it slowly: no time is asserted)."""
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert process.poll() is None, f"up exited while waiting for {what}:\n{process.stdout.read()}"
        assert time.monotonic() < deadline, f"{what}: not seen"
        time.sleep(2)
    return found


def _running(cluster: KwokCluster, kind: str) -> list[dict]:
    return [p for p in cluster.pods() if p["metadata"]["labels"].get(KIND_LABEL) == kind
            and p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"]


def _replicaset_pods(cluster: KwokCluster) -> list[dict]:
    """The running pods of the inference ReplicaSets; llm-chat's groups are bare pods Tidal binds whole
    (tests/integration/test_demo_kubernetes.py)."""
    return [p for p in _running(cluster, INFERENCE) if GROUP_LABEL not in p["metadata"]["labels"]]


def test_up_kubernetes_binds_the_demo_on_kwok_nodes_and_serves_the_console(up, cluster):
    def answers() -> bool:
        try:
            return urllib.request.urlopen(f"{up.base}/login/", timeout=15).status == 200
        except OSError:
            return False

    _until(answers, "the console", up)
    with sqlite3.connect(f"file:{up.db}?mode=ro", uri=True) as db:
        inventory = {name for (name,) in db.execute("SELECT name FROM colocation_node")}
    nodes = {n["metadata"]["name"]: n for n in cluster.nodes()}
    assert set(nodes) == inventory and len(inventory) > 10
    assert all(n["metadata"]["annotations"].items() >= KWOK_ANNOTATION.items() for n in nodes.values())
    assert any(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes.values())

    _until(lambda: _running(cluster, TRAINING) and _replicaset_pods(cluster), "training and inference pods running",
           up)
    bound = [p for p in cluster.pods() if p["spec"].get("nodeName")]
    assert {p["spec"]["nodeName"] for p in bound} <= inventory
    inference = _replicaset_pods(cluster)
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in inference)
    assert all(p["spec"].get("schedulerName") == "default-scheduler" for p in inference)  # placed by kube-scheduler
    # kube-scheduler placed them by the state selector Tidal's ReplicaSets carry; a node read now may have been lent
    # since (a lend relabels the node first and moves its pods after), so the selector, not the node's label today.
    assert all(p["spec"]["nodeSelector"].get("tidal.io/state") == "online-normal" for p in inference)

    console = signed_in(up.base, *OPERATOR)
    assert console.open(f"{up.base}/ops/nodes/").status == 200
    listed = json.loads(console.open(f"{up.base}/api/nodes/?limit=1").read())
    assert listed["count"] == len(nodes)

    def logged() -> tuple[dict, str] | None:
        for pod in _running(cluster, TRAINING):
            text = cluster.core.read_namespaced_pod_log(pod["metadata"]["name"], NS)
            if text.strip():
                return pod, text
        return None

    pod, text = _until(logged, "a training pod's log through pods/log", up)
    labels = pod["metadata"]["labels"]
    through_tidal = console.open(f"{up.base}/api/jobs/{labels[JOB_LABEL]}/logs/?run={labels[RUN_LABEL]}"
                                 f"&worker={labels.get(WORKER_LABEL, 0)}").read().decode()
    assert text.splitlines()[0] in through_tidal.splitlines()

    assert up.poll() is None
    up.send_signal(signal.SIGINT)
    output, _ = up.communicate(timeout=90)
    assert up.returncode == 0, output
    assert f"{len(inventory)} kwok nodes registered" in output
    assert "stopped worker" in output
