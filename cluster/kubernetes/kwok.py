"""Nodes for a kwok cluster: a Node object per NodeView, as a kubelet with NVIDIA GPU feature discovery and the GPU
sharing device plugin would register it, annotated for kwok (platform/stack.sh runs kwok as the kubelet of every
node annotated kwok.x-k8s.io/node=fake). For the control plane of tests, benchmarks and the demo on Kubernetes."""
from __future__ import annotations

from cluster.backend import RESOURCE_GROUP_LABEL
from cluster.kubernetes import conventions
from cluster.types import NodeView

KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
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
