"""Kubernetes objects to Tidal's views and back (cluster/kubernetes/objects.py): no API server needed."""
import pytest

from cluster.backend import INFERENCE, JOB_LABEL, KIND_LABEL, PodSpec
from cluster.kubernetes import conventions
from cluster.kubernetes import objects
from cluster.types import GpuShare, NodeState, Pool

NAMES = objects.Labels()


def node(labels: dict, unschedulable: bool = False, **allocatable) -> dict:
    return {"metadata": {"name": "n1", "labels": labels}, "spec": {"unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", **allocatable}}}


@pytest.mark.parametrize("labels, unschedulable, state", [
    ({"tidal.io/pool": "colocation", "tidal.io/state": "offline-normal"}, False, NodeState.OFFLINE_NORMAL),
    ({"tidal.io/pool": "colocation", "tidal.io/state": "offline-normal"}, True, NodeState.OFFLINE_UNNORMAL),
    ({"tidal.io/pool": "colocation", "tidal.io/state": "online-normal"}, True, NodeState.ONLINE_UNNORMAL),
    ({"tidal.io/pool": "colocation"}, False, NodeState.ONLINE_NORMAL),  # no state label: a co-location node serves
    ({}, False, NodeState.OFFLINE_NORMAL),  # no labels: the fixed pool trains
], ids=["labelled", "cordoned-offline", "cordoned-online", "colocation-default", "fixed-default"])
def test_node_state_comes_from_the_label_and_a_cordon_makes_it_unnormal(labels, unschedulable, state):
    assert objects.node_state(node(labels, unschedulable), NAMES) is state


def test_node_view_reads_allocatable_and_the_gpu_feature_discovery_product():
    raw = node({"tidal.io/resource-group": "a100", "nvidia.com/gpu.product": "A100-SXM4-80GB"},
               **{"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"})
    view = objects.node_view(raw, NAMES, [], (500, 1024))
    assert (view.resource_group, view.gpu_model, view.gpu_count) == ("a100", "A100-SXM4-80GB", 8)
    assert (view.cpu_milli, view.memory_mib, view.pool) == (96000, 1024 * 1024, Pool.FIXED)
    assert (view.cpu_used, view.memory_used) == (500, 1024)  # what other pods on the node request
    assert objects.is_tidal_node(raw, NAMES) and not objects.is_tidal_node(node({}), NAMES)


def pod(annotations: dict, limits: dict | None = None, **labels) -> dict:
    return {"metadata": {"name": "p", "labels": {KIND_LABEL: "training", **labels}, "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": [{"image": "img", "command": ["/bin/sh", "-c", "train"],
                                                       "resources": {"requests": {"cpu": "500m", "memory": "2Gi"},
                                                                     "limits": limits or {}}}]}}


@pytest.mark.parametrize("annotations, limits, shares, known", [
    ({conventions.SHARES_ANNOTATION: "0:0.5,3:1"}, {}, (GpuShare(0, 0.5), GpuShare(3, 1.0)), True),
    ({conventions.GPUSHARE_IDX: "2"}, {conventions.GPUSHARE_MEM: "8"}, (GpuShare(2, 0.5),), True),  # 8 of 16 GiB
    ({}, {conventions.NVIDIA_GPU: "2"}, (GpuShare(0, 1.0), GpuShare(1, 1.0)), False),  # the device plugin chose
    ({}, {}, (), True),
], ids=["tidal-record", "gpushare-extender", "whole-gpus-elsewhere", "cpu-only"])
def test_pod_shares_are_read_from_whoever_placed_it(annotations, limits, shares, known):
    spec, got_known = objects.pod_spec(pod(annotations, limits, **{JOB_LABEL: "7"}), device_gib=16)
    assert (spec.gpu_shares, got_known) == (shares, known)
    assert (spec.job_id, spec.cpu_milli, spec.memory_mib, spec.image, spec.command) == (7, 500, 2048, "img", "train")


def test_a_bound_pod_round_trips_with_the_device_plugins_limits():
    spec = PodSpec("job-1-1", 1, "T4", (GpuShare(1, 0.25),), 1500, 4096, {JOB_LABEL: "1"}, "img", "train")
    body = objects.bound_pod(spec, "n1", "ns", "default", 16, 30, 123)
    annotations = body["metadata"]["annotations"]
    assert body["spec"]["containers"][0]["resources"]["limits"][conventions.GPUSHARE_MEM] == "4"
    assert annotations[conventions.GPUSHARE_IDX] == "1" and annotations[conventions.GPUSHARE_DEV] == "16"
    back, known = objects.pod_spec(body, 16)
    assert known and back.gpu_shares == spec.gpu_shares and back.gpu_model == "T4"
    whole = PodSpec("job-2-1", 2, "T4", (GpuShare(0, 1.0), GpuShare(1, 1.0)), 1000, 1024)
    assert objects.bound_pod(whole, "n1", "ns", "img", None, 30, 0)["spec"]["containers"][0]["resources"]["limits"][
        conventions.NVIDIA_GPU] == "2"
    with pytest.raises(ValueError, match="GPU sharing device plugin"):
        objects.bound_pod(spec, "n1", "ns", "img", None, 30, 0)  # a fraction needs gpushare on the node


def test_a_replicaset_keeps_its_pods_on_online_normal_nodes_and_shows_the_selector_asked():
    template = PodSpec("svc", None, "T4", (GpuShare(0, 0.5),), 2000, 4096, {"tidal.io/service": "svc"})
    rs = objects.replicaset("svc", template, 3, "ns", "img", {"tidal.io/resource-group": "t4"}, 16, NAMES)
    selector = rs["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"tidal.io/resource-group": "t4", "tidal.io/state": "online-normal"}
    assert rs["spec"]["selector"] == {"matchLabels": {"tidal.io/replicaset": "svc"}}
    rs["metadata"]["name"] = "svc"
    view = objects.replicaset_view(rs, template, [], 0, NAMES)
    assert dict(view.node_selector) == {"tidal.io/resource-group": "t4"} and view.replicas == 3


@pytest.mark.parametrize("text", ["0:0.5,x", "a:1", "0"])
def test_a_malformed_shares_annotation_is_refused(text):
    with pytest.raises(ValueError):
        conventions.decode_shares(text)


@pytest.mark.parametrize("status, kind, detail", [
    ({"phase": "Succeeded"}, "pod-finished", ""),
    ({"phase": "Failed", "reason": "Evicted", "message": "node low on memory"}, "pod-evicted",
     "Evicted: node low on memory"),
    ({"phase": "Failed", "message": "exit code 3"}, "pod-failed", "exit code 3"),
], ids=["succeeded", "evicted-by-kubelet", "failed"])
def test_a_terminal_pod_is_reported_as_how_it_ended(status, kind, detail):
    from cluster.kubernetes.backend import _terminal_events

    (event,) = _terminal_events({**pod({}, **{JOB_LABEL: "7"}), "status": status}, now=5.0)
    assert (event.kind.value, event.job_id, event.node, event.detail) == (kind, 7, "n1", detail)


@pytest.mark.parametrize("shares, used, placed", [
    ((GpuShare(0, 0.5),), [0.5, 0.0], (GpuShare(0, 0.5),)),  # a fraction fills the first GPU with room
    ((GpuShare(0, 0.5),), [0.75, 0.0], (GpuShare(1, 0.5),)),
    ((GpuShare(0, 1.0), GpuShare(1, 1.0)), [0.5, 0.0, 0.0], (GpuShare(1, 1.0), GpuShare(2, 1.0))),
    ((GpuShare(0, 1.0),), [1.0, 0.5], ()),  # over-committed: no free GPU to count it on
], ids=["fraction-shares-a-gpu", "fraction-moves-on", "whole-gpus-free-ones", "over-committed"])
def test_gpus_another_scheduler_placed_are_counted_where_they_fit(shares, used, placed):
    """kube-scheduler counts nvidia.com/gpu and aliyun.com/gpu-mem per node, not per device."""
    spec = PodSpec(name="p", job_id=None, gpu_model="T4", gpu_shares=shares, cpu_milli=1000, memory_mib=1024)
    assert objects.place_unknown(spec, used).gpu_shares == placed


@pytest.mark.parametrize("text, value", [
    ("ml-search/resnet50", "ml-search.resnet50"),  # a task key
    ("train-7", "train-7"),
    ("", ""),
    ("a" * 70, "a" * 54 + "-6bd5e503"),
    ("ml search/é", "ml.search-a8f8fbb0"),
])
def test_label_values_are_what_the_api_server_accepts(text, value):
    assert objects.label_value(text) == value
    assert len(value) <= 63 and objects.LABEL_VALUE.fullmatch(value)


def test_a_bound_pod_carries_a_task_key_as_a_valid_label():
    spec = PodSpec(name="job-1-1", job_id=1, gpu_model=None, gpu_shares=(), cpu_milli=1000, memory_mib=1024,
                   labels={JOB_LABEL: "1", "tidal.io/task": "ml-search/resnet50"})
    body = objects.bound_pod(spec, "n1", "ns", "img", None, 30, 0)
    assert body["metadata"]["labels"]["tidal.io/task"] == "ml-search.resnet50"


def test_a_serving_pod_restarts_in_place_and_a_training_pod_does_not():
    """docs/concepts/service-groups.md#lifecycle: a group's restart policy acts on the kubelet's in-place restarts."""
    spec = PodSpec(name="llm-0-1", job_id=None, gpu_model=None, gpu_shares=(), cpu_milli=1000, memory_mib=1024,
                   labels={KIND_LABEL: INFERENCE, "tidal.io/group": "0"})
    assert objects.bound_pod(spec, "n1", "ns", "img", None, 30, 0)["spec"]["restartPolicy"] == "Always"
    job = PodSpec(name="job-1-1", job_id=1, gpu_model=None, gpu_shares=(), cpu_milli=1000, memory_mib=1024,
                  labels={JOB_LABEL: "1"})
    assert objects.bound_pod(job, "n1", "ns", "img", None, 30, 0)["spec"]["restartPolicy"] == "Never"
