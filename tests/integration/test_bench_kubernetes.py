"""`bench kubernetes` at a tiny size on the real control plane: both schedulers bind the same pods, each its own."""

import json

import pytest
from django.core.management import CommandError, call_command
from kubernetes import client

from benchmarks.kubernetes import KUBE_NAMESPACE, NODE_PREFIX, TIDAL_NAMESPACE
from tests.integration.kubecluster import admin_client, items

PHASE = {"scheduler", "pods", "bound", "checked", "refused", "seconds", "first_bound_s", "bound_per_s", "p50_s", "p99_s",
         "apiserver_cpu_s", "scheduler_cpu_s", "load_before", "load_after"}


def test_tidal_then_kube_scheduler_bind_the_same_pods_and_leave_nothing(tmp_path):
    admin = admin_client()  # fails with how to start the control plane when there is none
    out = tmp_path / "bench.json"
    call_command("bench", "kubernetes", nodes=5, pods=20, json_path=str(out))
    f = json.loads(out.read_text())
    tidal, kube = f["tidal"], f["kube"]
    assert set(tidal) == set(kube) == PHASE
    assert (tidal["scheduler"], kube["scheduler"]) == ("Tidal", "kube-scheduler")
    assert f["nodes"] == 5 and f["pods"] == tidal["pods"] == 20
    # Tidal bound what its quotas allowed, through its own creates; kube-scheduler got exactly that set, and its log
    # names every pod on the node the API server shows (none was bound by the stack's own kube-scheduler)
    assert 0 < tidal["bound"] <= 20 and tidal["checked"] == tidal["bound"]
    assert kube["pods"] == kube["bound"] == kube["checked"] == tidal["bound"]
    assert kube["refused"] == 0
    for phase in (tidal, kube):
        assert 0 <= phase["first_bound_s"] <= phase["p50_s"] <= phase["p99_s"] <= phase["seconds"]
        assert phase["bound_per_s"] == pytest.approx(phase["bound"] / phase["seconds"])
        assert phase["apiserver_cpu_s"] > 0 and phase["scheduler_cpu_s"] > 0
    assert f["ratio"] == pytest.approx(tidal["bound_per_s"] / kube["bound_per_s"])
    assert f["client_limits"] == "no client-side rate limit"
    core = client.CoreV1Api(admin)
    assert not [n for n in items(core.list_node(_preload_content=False))
                if n["metadata"]["name"].startswith(NODE_PREFIX)]
    for namespace in (TIDAL_NAMESPACE, KUBE_NAMESPACE):
        assert not items(core.list_namespaced_pod(namespace, _preload_content=False))
    admin.close()


def test_sizes_must_be_positive_and_the_control_plane_known(settings):
    with pytest.raises(CommandError, match="--nodes and --pods"):
        call_command("bench", "kubernetes", nodes=5, pods=-1)
    settings.TIDAL_KUBECONFIG = ""
    with pytest.raises(CommandError, match="platform/stack.sh"):
        call_command("bench", "kubernetes", nodes=5, pods=5)
