"""Nodes for a kwok cluster: a Node object per NodeView, as a kubelet with NVIDIA GPU feature discovery and the GPU
sharing device plugin would register it, annotated for kwok (platform/stack.sh runs kwok as the kubelet of every
node annotated kwok.x-k8s.io/node=fake). For the control plane of tests, benchmarks and the demo on Kubernetes."""
from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster.backend import RESOURCE_GROUP_LABEL, BackendError, BackendUnavailable
from cluster.kubernetes import conventions
from cluster.types import NodeView

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# Node creates in flight: one by one, the demo's 153 nodes took 4.7 s of a control plane on two shared cores, 8 at
# once 1.1-1.5 s.
PARALLELISM = 8
DEVICE_GIB = (("A100", 80), ("H100", 80), ("H200", 141), ("H800", 80), ("A10", 24), ("T4", 16), ("V100", 32),
              ("P100", 16), ("P40", 24), ("RTX3090", 24))


def gpu_device_gib(model: str) -> int:
    """GiB of one GPU of `model` (32 for a model not listed)."""
    return next((gib for name, gib in DEVICE_GIB if name in model.upper()), 32)


def node_object(view: NodeView) -> dict:
    """Tidal's labels, CPU and memory, GPUs as extended resources (whole: nvidia.com/gpu; shared: aliyun.com/gpu-mem
    GiB over all GPUs and aliyun.com/gpu-count); cordoned when the view's state is unnormal."""
    labels = {RESOURCE_GROUP_LABEL: view.resource_group, conventions.POOL_LABEL: view.pool.value,
              conventions.STATE_LABEL: view.state.value, **view.labels}
    capacity = {"cpu": f"{view.cpu_milli}m", "memory": f"{view.memory_mib}Mi", "pods": "110"}
    if view.gpu_model:
        labels.update({conventions.GPU_MODEL_LABEL: view.gpu_model, conventions.GFD_PRODUCT_LABEL: view.gpu_model})
        capacity.update({conventions.NVIDIA_GPU: str(view.gpu_count), conventions.GPUSHARE_COUNT: str(view.gpu_count),
                         conventions.GPUSHARE_MEM: str(view.gpu_count * gpu_device_gib(view.gpu_model))})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": view.name, "labels": labels, "annotations": dict(KWOK_ANNOTATION)},
            "spec": {"unschedulable": not view.state.normal},
            "status": {"capacity": capacity, "allocatable": dict(capacity)}}


@dataclass(frozen=True)
class Registered:
    created: int  # kwok nodes created now
    kept: int  # there already: kept as they are (the cluster's labels are the truth Tidal reads back)
    others: tuple[str, ...]  # Tidal nodes on the cluster that are not among the views


def register_nodes(api: client.ApiClient, views: Iterable[NodeView], namespaces: Iterable[str],
                   wait_s: float = 30) -> Registered:
    """Make `views` kwok nodes of the control plane `api` talks to, and the `namespaces` Tidal works in, ready for
    pods: a namespace takes none until the service-account controller has made its `default` account. BackendError
    when the API server refuses, BackendUnavailable when it does not answer."""
    try:
        return _register(client.CoreV1Api(api), list(views), set(namespaces), wait_s)
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise BackendUnavailable(f"the API server did not answer ({error})") from None


def _register(core: client.CoreV1Api, views: list[NodeView], namespaces: set[str], wait_s: float) -> Registered:
    for namespace in namespaces:
        _create(core.create_namespace, {"metadata": {"name": namespace}})
        _wait(lambda: core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items,
              wait_s, f"serviceaccount {namespace}/default")
    with ThreadPoolExecutor(PARALLELISM) as pool:
        kept = sum(pool.map(lambda view: _create(core.create_node, node_object(view)), views))
    wanted = {view.name for view in views}
    others = tuple(sorted(n.metadata.name for n in core.list_node(label_selector=RESOURCE_GROUP_LABEL).items
                          if n.metadata.name not in wanted))
    return Registered(created=len(views) - kept, kept=kept, others=others)


def _create(create, body: dict) -> bool:
    """Create; True when it exists already."""
    try:
        create(body)
    except ApiException as error:
        if error.status != 409:
            raise BackendError(f"{body['metadata']['name']}: {error.status} {error.reason}") from None
        return True
    return False


def _wait(found, wait_s: float, what: str) -> None:
    deadline = time.monotonic() + wait_s
    while not found():
        if time.monotonic() > deadline:
            raise BackendError(f"{what} did not appear within {wait_s:.0f} s (is kube-controller-manager running?)")
        time.sleep(0.2)
