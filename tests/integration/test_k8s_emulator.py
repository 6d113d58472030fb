"""The Kubernetes API emulator (cluster/emulator), through the official `kubernetes` client over real HTTP: the API
semantics the Kubernetes backend relies on, and the cluster actors standing in for scheduler, controller and kubelet."""
from __future__ import annotations

import time

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from cluster.emulator import Emulator
from cluster.types import NodeState, NodeView, Pool

NS = "tidal-workloads"
T4 = NodeView("t4-0", "t4", "T4", 2, 32000, 131072, Pool.FIXED, NodeState.OFFLINE_NORMAL)
CPU = NodeView("cpu-0", "cpu", None, 0, 8000, 16384, Pool.FIXED, NodeState.ONLINE_NORMAL)
DRAINED = NodeView("t4-9", "t4", "T4", 2, 32000, 131072, Pool.FIXED, NodeState.OFFLINE_UNNORMAL)


@pytest.fixture
def emu():
    with Emulator(nodes=[T4, CPU, DRAINED], namespace=NS, startup_s=0.1, termination_s=0.05, history=20) as e:
        yield e


@pytest.fixture
def core(emu) -> client.CoreV1Api:
    return client.CoreV1Api(emu.api_client())


@pytest.fixture
def apps(emu) -> client.AppsV1Api:
    return client.AppsV1Api(emu.api_client())


def pod(name: str, labels: dict | None = None, node: str | None = None, **resources: str) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": resources}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def replicaset(name: str, replicas: int, **resources: str) -> dict:
    template = pod("", {"app": name}, **resources)
    template["metadata"].pop("name")
    return {"metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                                                "template": template}}


def names(items) -> set[str]:
    return {i.metadata.name for i in items}


def test_create_stamps_identity_and_lists_carry_the_version(emu, core):
    created = core.create_namespaced_pod(NS, pod("a"))
    meta = created.metadata
    assert meta.uid and meta.namespace == NS and meta.creation_timestamp.tzinfo is not None
    listed = core.list_namespaced_pod(NS)
    assert listed.kind == "PodList" and int(listed.metadata.resource_version) == int(meta.resource_version)
    generated = core.create_namespaced_pod(NS, {"metadata": {"generateName": "rs-"}, "spec": pod("x")["spec"]})
    assert generated.metadata.name.startswith("rs-") and len(generated.metadata.name) == 8
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, pod("a"))
    assert err.value.status == 409 and "AlreadyExists" in err.value.body
    assert client.CoreV1Api(emu.api_client()).list_node().kind == "NodeList"


def test_label_and_field_selectors(emu, core):
    core.create_namespaced_pod(NS, pod("a", {"tier": "web", "canary": "1"}, node="t4-0"))
    core.create_namespaced_pod(NS, pod("b", {"tier": "db"}))
    core.create_namespaced_pod(NS, pod("c", {"tier": "web"}))
    assert names(core.list_namespaced_pod(NS, label_selector="tier=web").items) == {"a", "c"}
    assert names(core.list_namespaced_pod(NS, label_selector="tier==web,!canary").items) == {"c"}
    assert names(core.list_namespaced_pod(NS, label_selector="tier!=web").items) == {"b"}
    assert names(core.list_namespaced_pod(NS, label_selector="tier in (db,cache),canary notin (1)").items) == {"b"}
    assert names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=t4-0").items) == {"a"}
    assert names(core.list_namespaced_pod(NS, field_selector="metadata.name!=a,spec.nodeName=").items) == {"b", "c"}
    assert names(core.list_node(label_selector="tidal.io/state=offline-normal").items) == {"t4-0"}


def events(core, **kwargs) -> list[tuple[str, str]]:
    stream = watch.Watch().stream(core.list_namespaced_pod, NS, timeout_seconds=1, **kwargs)
    return [(e["type"], e["raw_object"]["metadata"]["name"]) for e in stream]


def test_watch_replays_from_a_version_then_expires_when_too_old(emu, core):
    emu.pause_actors()
    start = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod("a"))
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"x": "1"}}})
    core.delete_namespaced_pod("a", NS)
    assert events(core, resource_version=start) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    for i in range(25):  # more than the emulator's kept history (20)
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    with pytest.raises(ApiException) as err:
        events(core, resource_version=start)
    assert err.value.status == 410
    assert len(events(core)) == 25  # no version: ADDED for every pod, then live


def test_watch_with_a_selector_sees_objects_move_in_and_out(emu, core):
    emu.pause_actors()
    start = core.list_namespaced_pod(NS).metadata.resource_version
    core.create_namespaced_pod(NS, pod("a", {"app": "x"}))
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"app": "y"}}})
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"app": "x"}}})
    assert events(core, resource_version=start, label_selector="app=x") == [
        ("ADDED", "a"), ("DELETED", "a"), ("ADDED", "a")]


def test_watch_ends_at_its_timeout_with_a_bookmark(emu, core):
    version = core.list_namespaced_pod(NS).metadata.resource_version
    began = time.monotonic()
    stream = watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=version, timeout_seconds=1,
                                  allow_watch_bookmarks=True)
    got = [(e["type"], int(e["raw_object"]["metadata"]["resourceVersion"])) for e in stream]
    assert 0.9 < time.monotonic() - began < 3
    assert [t for t, _ in got] == ["BOOKMARK"] and got[0][1] >= int(version)  # the actors also write


def test_patch_merges_and_put_replaces_with_optimistic_concurrency(emu, core):
    core.create_namespaced_pod(NS, {**pod("a"), "metadata": {"name": "a", "labels": {"k": "v", "gone": "1"},
                                                            "annotations": {"list": "x"}}})
    patched = core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"gone": None, "new": "2"}}})
    assert patched.metadata.labels == {"k": "v", "new": "2"}
    stale = {"metadata": {"resourceVersion": "1", "labels": {"k": "w"}}}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("a", NS, stale)
    assert err.value.status == 409 and "Conflict" in err.value.body
    body = core.read_namespaced_pod("a", NS).to_dict()
    body["metadata"]["labels"] = {"only": "this"}
    replaced = core.replace_namespaced_pod("a", NS, api_client_dict(emu, body))
    assert replaced.metadata.labels == {"only": "this"}
    assert int(replaced.metadata.resource_version) > int(patched.metadata.resource_version)
    unchanged = core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"only": "this"}}})
    assert unchanged.metadata.resource_version == replaced.metadata.resource_version  # no-op: no new version
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("nope", NS, {"metadata": {"labels": {}}})
    assert err.value.status == 404


def api_client_dict(emu, model: dict) -> dict:
    """A model's to_dict() in the API's camelCase, as PUT sends it."""
    return emu.api_client().sanitize_for_serialization(client.V1Pod(**model))


def test_status_scale_and_binding_subresources(emu, core, apps):
    emu.pause_actors()
    core.create_namespaced_pod(NS, pod("a"))
    core.patch_namespaced_pod_status("a", NS, {"status": {"phase": "Running"}, "metadata": {"labels": {"x": "1"}}})
    core.patch_namespaced_pod("a", NS, {"status": {"phase": "Failed"}})  # the main resource ignores status
    read = core.read_namespaced_pod("a", NS)
    assert read.status.phase == "Running" and read.metadata.labels == {}
    binding = {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "t4-0"}}
    core.create_namespaced_pod_binding("a", NS, binding, _preload_content=False)  # answers a Status
    assert core.read_namespaced_pod("a", NS).spec.node_name == "t4-0"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("a", NS, binding, _preload_content=False)
    assert err.value.status == 409
    apps.create_namespaced_replica_set(NS, replicaset("web", 1))
    assert apps.patch_namespaced_replica_set_scale("web", NS, {"spec": {"replicas": 3}}).spec.replicas == 3
    assert apps.read_namespaced_replica_set("web", NS).spec.replicas == 3


def test_pods_terminate_gracefully_and_the_kubelet_removes_them(emu, core):
    emu.pause_actors()
    core.create_namespaced_pod(NS, pod("bound", node="t4-0"))
    core.create_namespaced_pod(NS, pod("now", node="t4-0"))
    core.create_namespaced_pod(NS, pod("unbound"))
    deleted = core.delete_namespaced_pod("bound", NS)
    assert deleted.metadata.deletion_timestamp and deleted.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("now", NS, grace_period_seconds=0)
    core.delete_namespaced_pod("unbound", NS)
    assert names(core.list_namespaced_pod(NS).items) == {"bound"}
    emu.resume_actors()
    emu.settle()
    assert core.list_namespaced_pod(NS).items == []


def test_eviction_respects_disruption_budgets(emu, core):
    policy = client.PolicyV1Api(emu.api_client())
    for name in ("a", "b"):
        core.create_namespaced_pod(NS, pod(name, {"app": "web"}, cpu="1"))
    emu.settle()
    policy.create_namespaced_pod_disruption_budget(NS, {"metadata": {"name": "web"}, "spec": {
        "minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    eviction = {"metadata": {"name": "a"}, "deleteOptions": {"gracePeriodSeconds": 0}}
    core.create_namespaced_pod_eviction("a", NS, eviction)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("b", NS, {"metadata": {"name": "b"}})
    assert err.value.status == 429 and "disruption budget" in err.value.body
    assert names(core.list_namespaced_pod(NS).items) == {"b"}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("zz", NS, {"metadata": {"name": "zz"}})
    assert err.value.status == 404


def test_scripted_faults_delays_and_restarts_on_the_same_port(emu, core):
    emu.fail("POST", r"/pods$", 500, times=1)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, pod("a"))
    assert err.value.status == 500
    core.create_namespaced_pod(NS, pod("a"))
    emu.fail("POST", r"/pods$", 429)  # (urllib3 itself retries a GET answered 429 with Retry-After)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, pod("b"))
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "1"
    emu.clear_faults()
    emu.fail("GET", r"/pods", 503, delay_s=1)
    with pytest.raises(urllib3.exceptions.MaxRetryError) as timeout:  # urllib3 retries a GET that timed out
        core.list_namespaced_pod(NS, _request_timeout=0.2)
    assert isinstance(timeout.value.reason, urllib3.exceptions.ReadTimeoutError)
    emu.clear_faults()
    url = emu.url
    emu.stop()
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        client.CoreV1Api(emu.api_client()).list_namespaced_pod(NS, _request_timeout=1)
    emu.start()
    assert emu.url == url and names(core.list_namespaced_pod(NS).items) == {"a"}


def test_discovery_health_and_other_kinds(emu):
    api = emu.api_client()
    assert {g.name for g in client.ApisApi(api).get_api_versions().groups} == {
        "apps", "policy", "coordination.k8s.io"}
    assert "pods/eviction" in {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    assert api.call_api(*api.param_serialize("GET", "/healthz")).read() == b"ok"
    leases = client.CoordinationV1Api(api)
    leases.create_namespaced_lease(NS, {"metadata": {"name": "tidal-controller"}, "spec": {"holderIdentity": "w1"}})
    assert leases.read_namespaced_lease("tidal-controller", NS).spec.holder_identity == "w1"


def test_replicaset_controller_replaces_pods_relabelled_out(emu, core, apps):
    apps.create_namespaced_replica_set(NS, replicaset("web", 2, cpu="500m"))
    emu.settle()
    pods = core.list_namespaced_pod(NS, label_selector="app=web").items
    assert len(pods) == 2 and all(p.metadata.owner_references[0].controller for p in pods)
    status = apps.read_namespaced_replica_set("web", NS).status
    assert (status.replicas, status.ready_replicas) == (2, 2)
    detached = pods[0].metadata.name
    core.patch_namespaced_pod(detached, NS, {"metadata": {"labels": {"app": "detached"}}})
    emu.settle()
    assert len(core.list_namespaced_pod(NS, label_selector="app=web").items) == 2
    assert not core.read_namespaced_pod(detached, NS).metadata.owner_references  # released
    apps.patch_namespaced_replica_set_scale("web", NS, {"spec": {"replicas": 0}})
    emu.settle()
    assert names(core.list_namespaced_pod(NS).items) == {detached}


def test_scheduler_shares_gpus_like_the_extender(emu, core):
    core.create_namespaced_pod(NS, pod("half", **{"aliyun.com/gpu-mem": "8"}))
    core.create_namespaced_pod(NS, pod("whole", **{"nvidia.com/gpu": "1"}))
    core.create_namespaced_pod(NS, pod("quarter", **{"aliyun.com/gpu-mem": "4"}))
    core.create_namespaced_pod(NS, pod("too-big", **{"nvidia.com/gpu": "1"}))
    core.create_namespaced_pod(NS, {**pod("cpu"), "spec": {**pod("cpu", cpu="4")["spec"],
                                                          "nodeSelector": {"tidal.io/resource-group": "cpu"}}})
    emu.settle()
    pods = {p["metadata"]["name"]: p for p in emu.objects("pods", NS)}
    assert pods["half"]["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == "0"
    assert pods["quarter"]["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == "0"
    assert pods["half"]["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_DEV"] == "16"
    assert {n: p["spec"].get("nodeName") for n, p in pods.items()} == {
        "half": "t4-0", "whole": "t4-0", "quarter": "t4-0", "too-big": None, "cpu": "cpu-0"}
    assert pods["too-big"]["status"]["conditions"][0]["reason"] == "Unschedulable"


def test_kubelet_starts_readies_and_finishes_pods():
    emu = Emulator(nodes=[T4], namespace=NS, startup_s=1)
    with emu:
        kubelet_lifecycle(emu, client.CoreV1Api(emu.api_client()))


def kubelet_lifecycle(emu: Emulator, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("train", {"tidal.io/kind": "training", "tidal.io/sim-runtime-s": "0.8"}))
    core.create_namespaced_pod(NS, pod("serve", {"tidal.io/kind": "inference"}))
    emu.settle(timeout_s=0.5)  # bound and started; training is Ready at once, serving only after startup_s
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(NS).items}
    ready = {n: next(c.status for c in p.status.conditions if c.type == "Ready") for n, p in pods.items()}
    assert ready == {"train": "True", "serve": "False"} and pods["serve"].status.phase == "Running"
    emu.settle()
    phases = {p.metadata.name: p.status.phase for p in core.list_namespaced_pod(NS).items}
    assert phases == {"train": "Succeeded", "serve": "Running"}
    assert all(c.status == "True" for n in core.list_node().items for c in n.status.conditions)


def test_paused_actors_leave_the_cluster_still(emu, core):
    emu.pause_actors()
    core.create_namespaced_pod(NS, pod("a"))
    emu.settle()
    time.sleep(0.2)
    assert core.read_namespaced_pod("a", NS).spec.node_name is None
    emu.resume_actors()
    emu.settle()
    assert core.read_namespaced_pod("a", NS).status.phase == "Running"
