"""The demo's nodes on the real control plane (`up --kubernetes`): cluster.kubernetes.kwok.register_nodes makes them
kwok nodes and the namespace ready for pods, keeps what is there already, and names Tidal nodes it did not make;
KubernetesCluster.snapshot reads them back (what the metrics exporter does) without writing."""
from __future__ import annotations

import socket

import pytest
from kubernetes import client

from cluster.backend import STARTUP_LABEL, BackendUnavailable
from cluster.kubernetes.backend import KubernetesCluster, KubeSettings
from cluster.kubernetes.kwok import register_nodes
from cluster.kubernetes.objects import is_ready
from cluster.types import NodeState, NodeView, Pool
from tests.integration.kubecluster import kwok_cluster, wait_for

NS = "tidal-workloads"


def view(name: str, state: NodeState = NodeState.OFFLINE_NORMAL) -> NodeView:
    return NodeView(name=name, resource_group="t4", gpu_model="T4", gpu_count=4, cpu_milli=32000, memory_mib=131072,
                    pool=Pool.COLOCATION, state=state)


@pytest.fixture
def cluster():
    with kwok_cluster((), NS) as kwok:
        yield kwok


def test_nodes_are_registered_once_and_others_are_named(cluster):
    cluster.core.create_node({"metadata": {"name": "reg-other", "labels": {"tidal.io/resource-group": "t4"}}})
    views = [view("reg-0"), view("reg-1", NodeState.ONLINE_UNNORMAL)]

    first = register_nodes(cluster.api, views, [NS])
    second = register_nodes(cluster.api, views, [NS])

    assert (first.created, first.kept, first.others) == (2, 0, ("reg-other",))
    assert (second.created, second.kept) == (0, 2)
    nodes = {n["metadata"]["name"]: n for n in cluster.nodes()}
    assert nodes["reg-1"]["spec"]["unschedulable"] and nodes["reg-1"]["metadata"]["labels"]["tidal.io/state"] == \
        "online-unnormal"
    assert nodes["reg-0"]["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def test_snapshot_reads_the_nodes_without_writing(cluster):
    register_nodes(cluster.api, [view("snap-0")], [NS])
    backend = KubernetesCluster(cluster.api, KubeSettings(namespace=NS))
    try:
        pods, nodes = backend.snapshot()
    finally:
        backend.stop()
    assert [n.name for n in nodes] == ["snap-0"] and pods == ()


def test_an_api_server_that_does_not_answer_is_said_so():
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        configuration = client.Configuration()
        configuration.host = f"https://127.0.0.1:{closed.getsockname()[1]}"
    configuration.retries = 0
    with pytest.raises(BackendUnavailable, match="did not answer"):
        register_nodes(client.ApiClient(configuration), [view("gone-0")], [NS], wait_s=1)


def test_a_running_pod_made_unready_is_ready_again(cluster):
    """As the node lifecycle controller does when a node's heartbeat is late (platform/kube/kwok/stages.yaml)."""
    register_nodes(cluster.api, [view("ready-0")], [NS])
    cluster.core.create_namespaced_pod(NS, {"metadata": {"name": "ready-pod"}, "spec": {
        "nodeName": "ready-0", "containers": [{"name": "main", "image": "busybox:1.37"}]}})

    def ready() -> bool:
        pod = cluster.pod("ready-pod") or {}
        status = pod.get("status") or {}
        return status.get("phase") == "Running" and any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or ())

    wait_for(ready, what="the pod Running and Ready")
    patched = cluster.core.patch_namespaced_pod_status("ready-pod", NS, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "NodeNotReady"}]}})
    assert any(c.type == "Ready" and c.status == "False" for c in patched.status.conditions)
    wait_for(ready, what="the pod Ready again")


def test_a_pod_annotated_with_a_restart_count_has_its_container_restarted_in_place(cluster):
    """A crashed engine as its kubelet restarts it (platform/kube/kwok/stages.yaml: tidal-pod-container-restart, then
    tidal-pod-ready-after-restart after the pod's start-up): the same pod, its first container's restartCount one up,
    not ready, then ready; the other container and a pod without the annotation are left alone."""
    register_nodes(cluster.api, [view("restart-0")], [NS])
    for name in ("crashing", "steady"):
        cluster.core.create_namespaced_pod(NS, {"metadata": {"name": name, "labels": {STARTUP_LABEL: "3"}}, "spec": {
            "nodeName": "restart-0", "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"},
                                                    {"name": "sidecar", "image": "busybox:1.37"}]}})
    wait_for(lambda: all(is_ready(cluster.pod(name)) for name in ("crashing", "steady")), what="the pods Ready")
    before, steady = cluster.pod("crashing"), cluster.pod("steady")

    cluster.restart_container("crashing")
    pod = cluster.pod("crashing")
    engine, sidecar = pod["status"]["containerStatuses"]
    assert pod["metadata"]["uid"] == before["metadata"]["uid"] and pod["status"]["phase"] == "Running"
    assert not is_ready(pod) and (engine["restartCount"], engine["ready"]) == (1, False)
    assert engine["lastState"]["terminated"]["reason"] == "Error" and "running" in engine["state"]
    assert sidecar == before["status"]["containerStatuses"][1]

    wait_for(lambda: is_ready(cluster.pod("crashing")), what="the restarted pod Ready again")
    engine, sidecar = cluster.pod("crashing")["status"]["containerStatuses"]
    assert (engine["restartCount"], engine["ready"], sidecar["restartCount"]) == (1, True, 0)
    assert cluster.pod("steady")["metadata"]["resourceVersion"] == steady["metadata"]["resourceVersion"]
