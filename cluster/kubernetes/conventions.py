"""How Tidal's vocabulary is written on Kubernetes objects: node labels, pod labels and annotations, GPU resources.

GPU sharing follows Alibaba's GPU sharing scheduler extender and device plugin (AliyunContainerService
gpushare-scheduler-extender / gpushare-device-plugin): a node advertises `aliyun.com/gpu-mem` (GiB over all its
GPUs) and `aliyun.com/gpu-count`; a fractional pod asks for `aliyun.com/gpu-mem` GiB, and the scheduler that places
it writes the chosen GPU index in `ALIYUN_COM_GPU_MEM_IDX`, which the device plugin reads at start. Tidal binds
pods itself (spec.nodeName), so it plays that extender's part. We chose it because it is the one widely used
convention that carries a GPU *index* the scheduler picks (HAMi and Volcano vGPU name devices by UUIDs their own
scheduler reads off node annotations), and because the trace Tidal replays comes from the same clusters.
Whole GPUs are plain `nvidia.com/gpu` (the NVIDIA device plugin picks the devices).
Tidal also writes its own record of the shares, `tidal.io/gpu-shares`, which it reads back first.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

from cluster.types import GpuShare

# Node labels (names configurable through KubeSettings; these are the defaults).
STATE_LABEL = "tidal.io/state"  # online-normal | online-unnormal | offline-normal | offline-unnormal
POOL_LABEL = "tidal.io/pool"  # fixed | colocation
GPU_MODEL_LABEL = "tidal.io/gpu-model"  # Tidal's GPU model name; else NVIDIA GPU feature discovery's product
GFD_PRODUCT_LABEL = "nvidia.com/gpu.product"
# (tidal.io/resource-group is cluster.backend.RESOURCE_GROUP_LABEL)

# Extended resources.
NVIDIA_GPU = "nvidia.com/gpu"
GPUSHARE_MEM = "aliyun.com/gpu-mem"  # GiB
GPUSHARE_COUNT = "aliyun.com/gpu-count"

# Pod annotations.
SHARES_ANNOTATION = "tidal.io/gpu-shares"  # "0:0.5,1:1" — Tidal's record of what it bound
GPU_MODEL_ANNOTATION = "tidal.io/gpu-model"  # the GPU model the pod was sized for
GPUSHARE_IDX = "ALIYUN_COM_GPU_MEM_IDX"
GPUSHARE_POD = "ALIYUN_COM_GPU_MEM_POD"  # GiB the pod asked for
GPUSHARE_DEV = "ALIYUN_COM_GPU_MEM_DEV"  # GiB of the device
GPUSHARE_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"  # "false" until the device plugin has allocated it
GPUSHARE_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"  # ns since the epoch

LEASE_NAME = "tidal-controller"  # coordination.k8s.io/v1 Lease the acting worker holds


def encode_shares(shares: tuple[GpuShare, ...]) -> str:
    return ",".join(f"{s.index}:{s.share:g}" for s in shares)


def decode_shares(text: str) -> tuple[GpuShare, ...]:
    """The inverse of encode_shares; ValueError on anything else."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        index, share = part.split(":")
        out.append(GpuShare(int(index), float(share)))
    return tuple(out)


def gpushare_gib(share: float, device_gib: int) -> int:
    """GiB of one device a fractional share asks for (at least 1)."""
    return max(1, math.ceil(share * device_gib - 1e-9))


def device_gib(allocatable: Mapping[str, str]) -> int | None:
    """GiB of one GPU on a node with the GPU sharing device plugin, else None."""
    total, count = allocatable.get(GPUSHARE_MEM), allocatable.get(GPUSHARE_COUNT)
    if total is None or not count or int(count) == 0:
        return None
    return int(total) // int(count)
