"""Kubernetes objects (raw JSON dicts, as the API serves them) to Tidal's views and back. No API calls here.

Reads work on raw dicts rather than the client's model classes: a list of thousands of pods deserializes many
times faster, and the same functions serve lists and watch events.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from kubernetes.utils import parse_quantity

from cluster.backend import (
    INFERENCE, JOB_LABEL, KIND_LABEL, REPLICASET_LABEL, RESOURCE_GROUP_LABEL, TRAINING, PendingPodView, PodSpec,
    PodView, ReplicaSetView,
)
from cluster.fit import first_fit, free_gpus
from cluster.kubernetes import conventions
from cluster.types import GPU_EPS, GpuShare, NodeState, NodeView, Pool

TERMINAL = ("Succeeded", "Failed")
GPU_REQUEST_ANNOTATION = "tidal.io/gpu-request"  # a ReplicaSet template's GPUs per pod (indices come at placement)


@dataclass(frozen=True)
class Labels:
    """Which node labels carry Tidal's node facts (configurable: clusters already label their nodes)."""

    resource_group: str = RESOURCE_GROUP_LABEL
    pool: str = conventions.POOL_LABEL
    state: str = conventions.STATE_LABEL
    gpu_model: tuple[str, ...] = (conventions.GPU_MODEL_LABEL, conventions.GFD_PRODUCT_LABEL)


def meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def labels_of(obj: Mapping) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Mapping) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def timestamp(text: str | None) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else 0.0


def milli(value) -> int:
    return int(parse_quantity(value) * 1000) if value is not None else 0


def mib(value) -> int:
    return int(parse_quantity(value) / 2**20) if value is not None else 0


# --- nodes -----------------------------------------------------------------------------------------------


def is_tidal_node(node: Mapping, names: Labels) -> bool:
    """Only nodes labelled with a resource group are Tidal's (the control plane and system nodes are not)."""
    return bool(labels_of(node).get(names.resource_group))


def node_state(node: Mapping, names: Labels) -> NodeState:
    """Tidal's state label; a node someone cordoned (spec.unschedulable) is unnormal whatever the label says."""
    labels = labels_of(node)
    pool = Pool(labels.get(names.pool, Pool.FIXED.value))
    default = NodeState.OFFLINE_NORMAL if pool is Pool.FIXED else NodeState.ONLINE_NORMAL
    state = NodeState(labels.get(names.state, default.value))
    if (node.get("spec") or {}).get("unschedulable") and state.normal:
        state = NodeState.ONLINE_UNNORMAL if not state.offline else NodeState.OFFLINE_UNNORMAL
    return state


def node_gpu_model(node: Mapping, names: Labels) -> str | None:
    labels = labels_of(node)
    return next((labels[k] for k in names.gpu_model if labels.get(k)), None)


def allocatable(node: Mapping) -> Mapping[str, str]:
    return (node.get("status") or {}).get("allocatable") or {}


def gpu_count(node: Mapping) -> int:
    alloc = allocatable(node)
    return int(parse_quantity(alloc.get(conventions.NVIDIA_GPU) or alloc.get(conventions.GPUSHARE_COUNT) or 0))


def node_view(node: Mapping, names: Labels, pods: Iterable[PodView], other_usage: tuple[int, int] = (0, 0)) -> NodeView:
    """The node with its usage: Tidal's pods on it (their GPU shares) plus what other pods there request."""
    alloc = allocatable(node)
    count = gpu_count(node)
    model = node_gpu_model(node, names) if count else None
    used = [0.0] * count
    cpu, memory, names_on = other_usage[0], other_usage[1], []
    for pod in pods:
        names_on.append(pod.spec.name)
        cpu += pod.spec.cpu_milli
        memory += pod.spec.memory_mib
        for share in pod.spec.gpu_shares:
            if 0 <= share.index < count:
                used[share.index] = min(1.0, used[share.index] + share.share)
    labels = labels_of(node)
    return NodeView(
        name=meta(node)["name"], resource_group=labels[names.resource_group], gpu_model=model, gpu_count=count,
        cpu_milli=milli(alloc.get("cpu")), memory_mib=mib(alloc.get("memory")),
        pool=Pool(labels.get(names.pool, Pool.FIXED.value)), state=node_state(node, names), labels=labels,
        gpu_used=tuple(used), cpu_used=cpu, memory_used=memory, pods=tuple(names_on))


# --- pods ------------------------------------------------------------------------------------------------


def requests_of(pod_spec: Mapping) -> tuple[int, int, Mapping[str, str]]:
    """CPU millicores and memory MiB requested by all containers, and the first container's limits."""
    cpu = memory = 0
    limits: Mapping[str, str] = {}
    for i, container in enumerate(pod_spec.get("containers") or ()):
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        cpu += milli(requests.get("cpu"))
        memory += mib(requests.get("memory"))
        if i == 0:
            limits = resources.get("limits") or {}
    return cpu, memory, limits


def gpu_amount(annotations: Mapping[str, str], limits: Mapping[str, str], device_gib: int | None) -> float:
    """GPUs a pod (or template) asks for: Tidal's annotation, else whole devices, else a gpushare memory share."""
    if GPU_REQUEST_ANNOTATION in annotations:
        return float(annotations[GPU_REQUEST_ANNOTATION])
    if limits.get(conventions.NVIDIA_GPU):
        return float(parse_quantity(limits[conventions.NVIDIA_GPU]))
    if limits.get(conventions.GPUSHARE_MEM) and device_gib:
        return min(1.0, float(parse_quantity(limits[conventions.GPUSHARE_MEM])) / device_gib)
    return 0.0


def shares_of(annotations: Mapping[str, str], amount: float) -> tuple[tuple[GpuShare, ...], bool]:
    """The pod's GPU shares and whether their indices are known. Tidal's own record first, then the gpushare
    extender's index; whole GPUs placed by someone else get their indices from node_shares()."""
    if conventions.SHARES_ANNOTATION in annotations:
        return conventions.decode_shares(annotations[conventions.SHARES_ANNOTATION]), True
    if amount <= 0:
        return (), True
    if amount <= 1 and conventions.GPUSHARE_IDX in annotations:
        return (GpuShare(int(annotations[conventions.GPUSHARE_IDX]), amount),), True
    shape = (GpuShare(0, amount),) if amount <= 1 else tuple(GpuShare(i, 1.0) for i in range(int(amount)))
    return shape, False


def pod_spec(obj: Mapping, device_gib: int | None = None) -> tuple[PodSpec, bool]:
    """A pod (or a ReplicaSet's template: no name needed) as a PodSpec, and whether its GPU indices are known."""
    labels, annotations = labels_of(obj), annotations_of(obj)
    spec = obj.get("spec") or {}
    cpu, memory, limits = requests_of(spec)
    shares, known = shares_of(annotations, gpu_amount(annotations, limits, device_gib))
    job = labels.get(JOB_LABEL, "")
    containers = spec.get("containers") or [{}]
    command = containers[0].get("command") or []
    env = {e["name"]: e.get("value", "") for e in containers[0].get("env") or () if "name" in e}
    return PodSpec(
        name=meta(obj).get("name", ""), job_id=int(job) if job.isdigit() else None,
        gpu_model=annotations.get(conventions.GPU_MODEL_ANNOTATION) if shares else None, gpu_shares=shares,
        cpu_milli=cpu, memory_mib=memory, labels=labels, image=containers[0].get("image", ""),
        command=command[-1] if command else "", env=env, subdomain=spec.get("subdomain") or ""), known


def is_ready(pod: Mapping) -> bool:
    status = pod.get("status") or {}
    if labels_of(pod).get(KIND_LABEL) == TRAINING:
        return phase(pod) not in TERMINAL  # bound is started, for training (as the scheduler records it)
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def phase(pod: Mapping) -> str:
    return (pod.get("status") or {}).get("phase", "Pending")


def node_name(pod: Mapping) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


def terminating(pod: Mapping) -> bool:
    return bool(meta(pod).get("deletionTimestamp"))


def pod_view(pod: Mapping, spec: PodSpec) -> PodView:
    status = pod.get("status") or {}
    started = timestamp(status.get("startTime") or meta(pod).get("creationTimestamp"))
    restarts = sum(c.get("restartCount") or 0 for c in status.get("containerStatuses") or ())
    return PodView(spec, node_name(pod), started, is_ready(pod), terminating(pod), restarts)


def place_unknown(spec: PodSpec, used: list[float]) -> PodSpec:
    """GPUs whose devices another scheduler chose (kube-scheduler counts `nvidia.com/gpu` and `aliyun.com/gpu-mem`
    per node, not per device): count them where they fit first, a fraction as a fraction; on the lowest free devices
    when nothing fits (the node is over-committed)."""
    placed = first_fit([s.share for s in spec.gpu_shares], used)
    if placed is None:
        placed = tuple(GpuShare(i, 1.0) for i in free_gpus(used)[:len(spec.gpu_shares)])
    return replace(spec, gpu_shares=placed)


def pending_view(pod: Mapping, spec: PodSpec) -> PendingPodView:
    return PendingPodView(spec, labels_of(pod).get(REPLICASET_LABEL, ""), timestamp(meta(pod).get("creationTimestamp")))


def replicaset_view(rs: Mapping, template: PodSpec, bound: list[PodView], pending: int,
                    names: Labels) -> ReplicaSetView:
    spec = rs.get("spec") or {}
    node_selector = dict(((spec.get("template") or {}).get("spec") or {}).get("nodeSelector") or {})
    node_selector.pop(names.state, None)  # ours, added by replicaset(): not part of what was asked
    bound = sorted(bound, key=lambda p: p.started_at)
    return ReplicaSetView(meta(rs)["name"], template, int(spec.get("replicas") or 0), tuple(p.spec.name for p in bound),
                          sum(1 for p in bound if p.ready), pending, dict(node_selector))


# --- manifests -------------------------------------------------------------------------------------------
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def label_value(text: str) -> str:
    """`text` as the API server accepts a label value (at most 63 of [A-Za-z0-9-_.], alphanumeric at both ends): a
    task key's '/' becomes '.' ("ml-search/resnet50" -> "ml-search.resnet50"); anything else that does not fit is
    cleaned and cut, and ends with a hash of the whole text, so that two texts stay two."""
    for value in (text, text.replace("/", ".")):
        if len(value) <= 63 and LABEL_VALUE.fullmatch(value):
            return value
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", ".", text)[:54].strip("-_.")
    return f"{cleaned}-{hashlib.sha256(text.encode()).hexdigest()[:8]}".lstrip("-")


def pod_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: label_value(v) for k, v in labels.items()}



def container(spec: PodSpec, image: str, name: str, gpu_limits: Mapping[str, str]) -> dict:
    resources = {"cpu": f"{spec.cpu_milli}m", "memory": f"{spec.memory_mib}Mi"}
    body = {"name": name, "image": spec.image or image,
            "resources": {"requests": dict(resources), "limits": {**resources, **gpu_limits}}}
    if spec.command:
        body["command"] = ["/bin/sh", "-c", spec.command]
    if spec.env:  # a gang worker's rendezvous environment
        body["env"] = [{"name": k, "value": v} for k, v in sorted(spec.env.items())]
    return body


def gpu_limits(spec: PodSpec, device_gib: int | None) -> dict[str, str]:
    """What the device plugins read: whole GPUs for the NVIDIA plugin, GiB of one device for gpushare."""
    gpus = spec.gpus
    if gpus <= 0:
        return {}
    if gpus > 1 or (len(spec.gpu_shares) == 1 and spec.gpu_shares[0].share >= 1 - GPU_EPS):
        return {conventions.NVIDIA_GPU: str(round(gpus))}
    if device_gib is None:
        raise ValueError("the node has no GPU sharing device plugin (aliyun.com/gpu-mem) for a fractional GPU")
    return {conventions.GPUSHARE_MEM: str(conventions.gpushare_gib(gpus, device_gib))}


def gpushare_annotations(spec: PodSpec, device_gib: int | None, now_ns: int) -> dict[str, str]:
    """The scheduler extender's annotations for a fractional pod placed on one device."""
    if device_gib is None or not spec.gpu_shares or spec.gpus >= 1 - GPU_EPS or len(spec.gpu_shares) != 1:
        return {}
    return {conventions.GPUSHARE_IDX: str(spec.gpu_shares[0].index),
            conventions.GPUSHARE_POD: str(conventions.gpushare_gib(spec.gpus, device_gib)),
            conventions.GPUSHARE_DEV: str(device_gib), conventions.GPUSHARE_ASSIGNED: "false",
            conventions.GPUSHARE_ASSUME_TIME: str(now_ns)}


def bound_pod(spec: PodSpec, node: str, namespace: str, image: str, device_gib: int | None, grace_s: int,
              now_ns: int) -> dict:
    labels = pod_labels({KIND_LABEL: TRAINING, **spec.labels})
    annotations = {conventions.SHARES_ANNOTATION: conventions.encode_shares(spec.gpu_shares),
                   **gpushare_annotations(spec, device_gib, now_ns)}
    if spec.gpu_model and spec.gpu_shares:
        annotations[conventions.GPU_MODEL_ANNOTATION] = spec.gpu_model
    # No API credentials mounted: a training job does not call the API server, and without the projected token volume
    # every pod is a smaller object to admit, store and send to every watcher.
    # A training pod that fails ends its run; a serving engine's container is restarted in place by its kubelet (as a
    # ReplicaSet's or LeaderWorkerSet's pod is), and its group's restart policy decides what that does to the group.
    restart = "Always" if labels.get(KIND_LABEL) == INFERENCE else "Never"
    pod = {"nodeName": node, "restartPolicy": restart, "terminationGracePeriodSeconds": grace_s,
           "automountServiceAccountToken": False,
           "containers": [container(spec, image, "main", gpu_limits(spec, device_gib))]}
    if spec.subdomain:  # a gang worker: reachable as <hostname>.<subdomain> through the gang's headless Service
        pod.update(hostname=spec.name, subdomain=spec.subdomain)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": pod,
    }


def headless_service(name: str, namespace: str, selector: Mapping[str, str]) -> dict:
    """A gang's headless Service (clusterIP None: DNS records per pod, no virtual IP), selecting its workers. Not-ready
    workers are published too: the workers look each other up while they start, before any is Ready."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {KIND_LABEL: TRAINING}},
        "spec": {"clusterIP": "None", "selector": dict(selector), "publishNotReadyAddresses": True},
    }


def replicaset(name: str, template: PodSpec, replicas: int, namespace: str, image: str,
               node_selector: Mapping[str, str] | None, device_gib: int | None, names: Labels) -> dict:
    """An apps/v1 ReplicaSet whose selector is Tidal's replicaset label (relabelling a pod takes it out). Its pods
    go only to online-normal nodes (the state label in the node selector), as inference does in the simulator."""
    labels = pod_labels({**template.labels, KIND_LABEL: INFERENCE, REPLICASET_LABEL: name})
    annotations = {GPU_REQUEST_ANNOTATION: f"{template.gpus:g}"}
    if template.gpu_model and template.gpu_shares:
        annotations[conventions.GPU_MODEL_ANNOTATION] = template.gpu_model
    pod_spec_: dict = {"containers": [container(template, image, "server", gpu_limits(template, device_gib))]}
    pod_spec_["nodeSelector"] = {**(node_selector or {}), names.state: NodeState.ONLINE_NORMAL.value}
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": pod_labels({KIND_LABEL: INFERENCE, **template.labels})},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {REPLICASET_LABEL: name}},
                 "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec_}},
    }
