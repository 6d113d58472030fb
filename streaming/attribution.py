"""A shared GPU's activity split among its pods (docs/reference/gpu-metrics.md#shared-gpus).

dcgm-exporter measures SM active, occupancy, tensor and DRAM activity per GPU: on a GPU that several pods share
(time-slicing, MPS), each pod's series carries the whole GPU's ratio. Only GPU util is per pod (virtual-GPU mode:
NVML's per-process utilisation). Under time-slicing that per-pod util follows the share of time slices each
context holds, and SM activity happens in those slices, so a pod is given the GPU's ratios in proportion to its
GPU util. Under MPS every client reads 0 (all is booked to the MPS server): the pods split the GPU evenly. Either
way the figure is an estimate, and the sample says so. Pure: no I/O.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Pod = tuple[str, str]  # (namespace, pod)
SHARE_BY = "gpu_util"  # the per-pod figure a shared GPU is split by
OWN_FIELDS = frozenset({"gpu_util", "gpu_util_peak"})  # per pod as read, never split


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One pod's readings of one GPU at one step."""

    pod: Pod
    device: str  # the GPU's UUID; "" (no UUID label) counts as a GPU of the pod's own
    values: Mapping[str, float]  # field -> value; OWN_FIELDS are the pod's own, the rest the whole GPU's


@dataclass(frozen=True, slots=True)
class PodFigures:
    values: dict[str, float]  # each field's mean over the pod's GPUs
    estimated: bool  # some of it was attributed from a GPU shared with other pods


def shares(utils: Mapping[Pod, float | None]) -> dict[Pod, float]:
    """Each pod's part of one GPU: its GPU util over the pods' sum, or an even split when none reads any."""
    total = sum(u for u in utils.values() if u is not None and u > 0)
    if total <= 0:
        return {pod: 1 / len(utils) for pod in utils}
    return {pod: max(0.0, u or 0.0) / total for pod, u in utils.items()}


def attribute(readings: Iterable[DeviceReading]) -> dict[Pod, PodFigures]:
    """Per pod, the mean over its GPUs of each field; on a GPU shared with other pods, every field but OWN_FIELDS
    is the GPU's value (the largest its pods read) times the pod's share (by SHARE_BY)."""
    by_device: dict[str, list[DeviceReading]] = defaultdict(list)
    own: list[DeviceReading] = []
    for r in readings:
        (by_device[r.device] if r.device else own).append(r)
    per_pod: dict[Pod, list[dict[str, float]]] = defaultdict(list)
    estimated: set[Pod] = set()
    for r in own:
        per_pod[r.pod].append(dict(r.values))
    for group in by_device.values():
        if len({r.pod for r in group}) == 1:
            per_pod[group[0].pod].extend(dict(r.values) for r in group)
            continue
        part = shares({r.pod: r.values.get(SHARE_BY) for r in group})
        device = {f: max(r.values[f] for r in group if f in r.values)
                  for f in {f for r in group for f in r.values} - OWN_FIELDS}
        for r in group:
            values = {f: v * part[r.pod] for f, v in device.items()}
            per_pod[r.pod].append(values | {f: v for f, v in r.values.items() if f in OWN_FIELDS})
            estimated.add(r.pod)
    return {pod: PodFigures(_means(rows), pod in estimated) for pod, rows in per_pod.items()}


def _means(rows: list[dict[str, float]]) -> dict[str, float]:
    fields = {f for row in rows for f in row}
    return {f: sum(vals) / len(vals) for f in fields if (vals := [row[f] for row in rows if f in row])}
