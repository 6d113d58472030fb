"""The cluster actors: what a bare API server lacks to behave like a cluster — stand-ins for the kube-scheduler with
the GPU sharing scheduler extender, the ReplicaSet controller (and its garbage collection) and the kubelet.

They work only through the API, like the real components, so every change shows in watches. One background thread
runs a pass every PERIOD_S; tests call settle() to run passes until the cluster is quiet instead of sleeping.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from cluster.backend import KIND_LABEL, RUNTIME_LABEL, TRAINING
from cluster.fit import first_fit, free_gpus, gpu_fits
from cluster.kubernetes import conventions
from cluster.kubernetes.objects import TERMINAL, annotations_of, labels_of, meta, phase, terminating, timestamp

log = logging.getLogger(__name__)
Obj = dict[str, Any]
PERIOD_S = 0.05


def terminal(pod: Obj) -> bool:
    return phase(pod) in TERMINAL


def condition(obj: Obj, type_: str) -> Obj | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == type_), None)


def ready(pod: Obj) -> bool:
    return (condition(pod, "Ready") or {}).get("status") == "True"


def selects(selector: Mapping[str, str], obj: Obj) -> bool:
    return all(labels_of(obj).get(k) == v for k, v in selector.items())


def controller_uid(pod: Obj) -> str | None:
    refs = pod["metadata"].get("ownerReferences") or []
    return next((r["uid"] for r in refs if r.get("controller") and r.get("kind") == "ReplicaSet"), None)


def created(obj: Obj) -> float:
    return timestamp(meta(obj).get("creationTimestamp"))


def requests(pod: Obj) -> dict[str, Decimal]:
    """What a pod asks for, summed over its containers (limits stand in for missing requests, as in Kubernetes)."""
    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        for name, value in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            total[name] += parse_quantity(value)
    return total


def pod_status(phase: str, is_ready: bool, reason: str | None = None, **extra: str) -> Obj:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready_condition = {"type": "Ready", "status": str(is_ready), "lastTransitionTime": now}
    if reason:
        ready_condition["reason"] = reason
    conditions = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}, ready_condition]
    return {"status": {"phase": phase, "conditions": conditions, **extra}}


@dataclass(frozen=True)
class Placement:
    devices: dict[int, float]  # GPU index -> share
    annotations: dict[str, str]  # the GPU sharing extender's, for a fractional pod


@dataclass
class NodeRoom:
    """What is still free on a node, per resource and per GPU device."""

    node: Obj
    cpu: Decimal
    memory: Decimal
    pods: int
    used: list[float]  # share of each GPU already taken
    device_gib: int | None

    @classmethod
    def of(cls, node: Obj, bound: list[Obj]) -> NodeRoom:
        alloc = node.get("status", {}).get("allocatable") or {}
        count = int(alloc.get(conventions.NVIDIA_GPU) or alloc.get(conventions.GPUSHARE_COUNT) or 0)
        room = cls(node, parse_quantity(alloc.get("cpu", "0")), parse_quantity(alloc.get("memory", "0")),
                   int(alloc.get("pods", 110)), [0.0] * count, conventions.device_gib(alloc))
        # Pods with known devices first: whole-GPU pods then take the lowest devices still free.
        for pod in sorted(bound, key=lambda p: conventions.SHARES_ANNOTATION not in annotations_of(p)
                          and conventions.GPUSHARE_IDX not in annotations_of(p)):
            room.take(pod, room.devices_of(pod))
        return room

    def devices_of(self, pod: Obj) -> dict[int, float]:
        ann = annotations_of(pod)
        if conventions.SHARES_ANNOTATION in ann:
            return {s.index: s.share for s in conventions.decode_shares(ann[conventions.SHARES_ANNOTATION])}
        if conventions.GPUSHARE_IDX in ann and conventions.GPUSHARE_POD in ann and self.device_gib:
            return {int(ann[conventions.GPUSHARE_IDX]): int(ann[conventions.GPUSHARE_POD]) / self.device_gib}
        return dict.fromkeys(free_gpus(self.used)[:int(requests(pod).get(conventions.NVIDIA_GPU, 0))], 1.0)

    def take(self, pod: Obj, devices: Mapping[int, float]) -> None:
        asks = requests(pod)
        self.cpu -= asks.get("cpu", Decimal(0))
        self.memory -= asks.get("memory", Decimal(0))
        self.pods -= 1
        for index, share in devices.items():
            if index < len(self.used):
                self.used[index] += share

    def place(self, pod: Obj) -> Placement | None:
        asks = requests(pod)
        if asks.get("cpu", 0) > self.cpu or asks.get("memory", 0) > self.memory or self.pods < 1:
            return None
        gib = int(asks.get(conventions.GPUSHARE_MEM, 0))
        devices = self._devices_for(pod, gib, int(asks.get(conventions.NVIDIA_GPU, 0)))
        if devices is None:
            return None
        if not gib:
            return Placement(devices, {})
        return Placement(devices, {conventions.GPUSHARE_IDX: str(min(devices)), conventions.GPUSHARE_POD: str(gib),
                                   conventions.GPUSHARE_DEV: str(self.device_gib),
                                   conventions.GPUSHARE_ASSIGNED: "false",
                                   conventions.GPUSHARE_ASSUME_TIME: str(time.time_ns())})

    def _devices_for(self, pod: Obj, gib: int, whole: int) -> dict[int, float] | None:
        """The GPUs Tidal chose (when each has room), else first fit: gpushare's GiB on one device or whole GPUs."""
        if conventions.SHARES_ANNOTATION in annotations_of(pod):
            devices = self.devices_of(pod)
            room = all(i < len(self.used) and gpu_fits(self.used[i], s) for i, s in devices.items())
            return devices if room else None
        if gib and not self.device_gib:
            return None
        placed = first_fit([gib / self.device_gib] if gib else [1.0] * whole, self.used)
        return None if placed is None else {s.index: s.share for s in placed}


@dataclass
class Snapshot:
    nodes: list[Obj]
    pods: list[Obj]
    replicasets: list[Obj]


@dataclass
class Actors:
    api: client.ApiClient
    startup_s: float = 0.5  # a bound pod is Ready this long after it starts (training pods at once)
    termination_s: float = 0.2  # a terminating pod is removed this long after its deletion
    period_s: float = PERIOD_S
    _core: client.CoreV1Api = field(init=False)
    _apps: client.AppsV1Api = field(init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)  # one pass at a time
    _paused: threading.Event = field(default_factory=threading.Event, init=False)
    _closed: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _started: dict[str, float] = field(default_factory=dict, init=False)  # pod uid -> monotonic start
    _deleted: dict[str, float] = field(default_factory=dict, init=False)  # pod uid -> monotonic deletion seen

    def __post_init__(self) -> None:
        self._core, self._apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="k8s-emulator-actors", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.api.close()

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def settle(self, timeout_s: float = 10.0) -> None:
        """Run passes until one changes nothing and no timed transition (Ready after startup_s, removal after
        termination_s, a labelled run time ending) falls due within timeout_s. Paused actors do nothing."""
        deadline = time.monotonic() + timeout_s
        while not self._paused.is_set():
            changes, due = self.run_pass()
            left = deadline - time.monotonic()
            if not changes and (due is None or due > left):
                return
            if left <= 0:
                raise TimeoutError(f"the emulator's cluster did not settle in {timeout_s} s")
            if not changes:
                time.sleep(min(due or 0, 0.02))

    def _run(self) -> None:
        while not self._closed.wait(self.period_s):
            if self._paused.is_set():
                continue
            try:
                self.run_pass()
            except (ApiException, urllib3.exceptions.HTTPError) as e:  # stopped or failing on purpose: retry
                log.debug("emulator actors pass failed: %s", e)
            except Exception:  # a bug: say so, and keep the cluster going
                log.exception("emulator actors pass failed")

    def run_pass(self) -> tuple[int, float | None]:
        """One pass of every actor: (changes made, seconds until the next timed transition or None)."""
        with self._lock:
            snap = Snapshot(self._list(self._core.list_node), self._list(self._core.list_pod_for_all_namespaces),
                            self._list(self._apps.list_replica_set_for_all_namespaces))
            changes = self._replicasets(snap) + self._schedule(snap)
            kubelet_changes, due = self._kubelet(snap)
            return changes + kubelet_changes, due

    @staticmethod
    def _list(fn: Callable[..., Any]) -> list[Obj]:
        return json.loads(fn(_preload_content=False).data)["items"]

    def _quietly(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
        """One write; 1 if it happened, 0 if someone else got there first (404 gone, 409 changed)."""
        try:
            fn(*args, _preload_content=False, **kwargs).data
            return 1
        except ApiException as e:
            if e.status in (404, 409):
                return 0
            raise

    # --- ReplicaSet controller and garbage collector ------------------------------------------------------

    def _replicasets(self, snap: Snapshot) -> int:
        owners = {rs["metadata"]["uid"] for rs in snap.replicasets}
        changes = sum(self._reconcile(rs, snap.pods) for rs in snap.replicasets)
        for pod in snap.pods:  # garbage collection: the owner is gone (background propagation)
            if controller_uid(pod) not in (None, *owners) and not terminating(pod):
                changes += self._quietly(self._core.delete_namespaced_pod, pod["metadata"]["name"],
                                         pod["metadata"]["namespace"])
        return changes

    def _reconcile(self, rs: Obj, pods: list[Obj]) -> int:
        meta, spec = rs["metadata"], rs["spec"]
        selector = (spec.get("selector") or {}).get("matchLabels") or {}
        if not selector:
            return 0
        ours = [p for p in pods if p["metadata"]["namespace"] == meta["namespace"]]
        mine = [p for p in ours if selects(selector, p) and not terminating(p) and not terminal(p)]
        want = int(spec.get("replicas", 1))
        changes = sum(self._quietly(self._core.create_namespaced_pod, meta["namespace"], self._pod_for(rs))
                      for _ in range(want - len(mine)))
        # Extras go unbound first, then not Ready, then newest (as the real controller ranks them).
        extras = sorted(mine, key=lambda p: (bool(p["spec"].get("nodeName")), ready(p), -created(p)))
        for pod in extras[:max(0, len(mine) - want)]:
            changes += self._quietly(self._core.delete_namespaced_pod, pod["metadata"]["name"], meta["namespace"])
        for pod in ours:  # a pod relabelled out of the selector is released
            if controller_uid(pod) == meta["uid"] and not selects(selector, pod):
                refs = [r for r in pod["metadata"]["ownerReferences"] if r["uid"] != meta["uid"]]
                changes += self._quietly(self._core.patch_namespaced_pod, pod["metadata"]["name"],
                                         meta["namespace"], {"metadata": {"ownerReferences": refs}})
        n_ready = sum(map(ready, mine))
        status = {"replicas": len(mine), "readyReplicas": n_ready, "availableReplicas": n_ready,
                  "observedGeneration": meta.get("generation", 1)}
        if any((rs.get("status") or {}).get(k) != v for k, v in status.items()):
            changes += self._quietly(self._apps.patch_namespaced_replica_set_status, meta["name"],
                                     meta["namespace"], {"status": status})
        return changes

    @staticmethod
    def _pod_for(rs: Obj) -> Obj:
        meta, template = rs["metadata"], rs["spec"].get("template") or {}
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": meta["name"], "uid": meta["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        tmeta = template.get("metadata") or {}
        return {"apiVersion": "v1", "kind": "Pod", "spec": template.get("spec") or {},
                "metadata": {"generateName": f"{meta['name']}-", "labels": tmeta.get("labels") or {},
                             "annotations": tmeta.get("annotations") or {}, "ownerReferences": [owner]}}

    # --- scheduler with the GPU sharing extender ----------------------------------------------------------

    def _schedule(self, snap: Snapshot) -> int:
        bound: dict[str, list[Obj]] = defaultdict(list)
        for pod in snap.pods:
            if pod["spec"].get("nodeName") and not terminal(pod):
                bound[pod["spec"]["nodeName"]].append(pod)
        rooms = [NodeRoom.of(n, bound[n["metadata"]["name"]])
                 for n in sorted(snap.nodes, key=lambda n: n["metadata"]["name"]) if not n["spec"].get("unschedulable")]
        pending = [p for p in snap.pods if not p["spec"].get("nodeName") and not terminating(p) and not terminal(p)]
        # Queue order: creation time, then resourceVersion (timestamps have whole seconds; a pending pod's version
        # is almost always the one its creation got).
        queue = sorted(pending, key=lambda p: (created(p), int(p["metadata"]["resourceVersion"])))
        return sum(self._place(pod, rooms, len(snap.nodes)) for pod in queue)

    def _place(self, pod: Obj, rooms: list[NodeRoom], n_nodes: int) -> int:
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        selector = pod["spec"].get("nodeSelector") or {}
        for room in rooms:
            placement = selects(selector, room.node) and room.place(pod)
            if placement:
                annotate = {"metadata": {"annotations": placement.annotations}}  # the extender's, before it binds
                if placement.annotations and not self._quietly(self._core.patch_namespaced_pod, name, ns, annotate):
                    return 0
                binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": room.node["metadata"]["name"]}}
                room.take(pod, placement.devices)
                return self._quietly(self._core.create_namespaced_pod_binding, name, ns, binding)
        if (condition(pod, "PodScheduled") or {}).get("reason") == "Unschedulable":
            return 0
        unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                         "message": f"0/{n_nodes} nodes are available: none matches and fits the pod."}
        return self._quietly(self._core.patch_namespaced_pod_status, name, ns,
                             {"status": {"conditions": [unschedulable]}})

    # --- kubelet ------------------------------------------------------------------------------------------

    def _kubelet(self, snap: Snapshot) -> tuple[int, float | None]:
        now, changes, due = time.monotonic(), 0, []
        for node in snap.nodes:
            if condition(node, "Ready") is None:
                conditions = [*(node.get("status", {}).get("conditions") or []),
                              {"type": "Ready", "status": "True", "reason": "KubeletReady"}]
                changes += self._quietly(self._core.patch_node_status, node["metadata"]["name"],
                                         {"status": {"conditions": conditions}})
        for pod in snap.pods:
            made, left = self._tend(pod, now)
            changes += made
            if left is not None:
                due.append(left)
        alive = {p["metadata"]["uid"] for p in snap.pods}
        for timers in (self._started, self._deleted):
            for uid in set(timers) - alive:
                del timers[uid]
        return changes, min(due, default=None)

    def _tend(self, pod: Obj, now: float) -> tuple[int, float | None]:
        """Move one pod along: start it, make it Ready, finish its run, remove it after termination."""
        uid, name, ns = pod["metadata"]["uid"], pod["metadata"]["name"], pod["metadata"]["namespace"]
        if terminating(pod):
            left = self._deleted.setdefault(uid, now) + self.termination_s - now
            if left > 0:
                return 0, left
            return self._quietly(self._core.delete_namespaced_pod, name, ns, grace_period_seconds=0), None
        if not pod["spec"].get("nodeName") or terminal(pod):
            return 0, None
        training = labels_of(pod).get(KIND_LABEL) == TRAINING
        if pod.get("status", {}).get("phase") != "Running":
            self._started[uid] = now
            start = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            made = self._patch_status(pod, pod_status("Running", training, startTime=start))
            return made, None if training else self.startup_s
        started = self._started.setdefault(uid, now)
        runtime = labels_of(pod).get(RUNTIME_LABEL)
        if runtime is not None:
            left = started + float(runtime) - now
            if left <= 0:
                return self._patch_status(pod, pod_status("Succeeded", False, "PodCompleted")), None
        if not ready(pod):
            left = 0 if training else started + self.startup_s - now
            if left <= 0:
                return self._patch_status(pod, pod_status("Running", True)), None
            return 0, left
        return 0, None if runtime is None else max(0.0, started + float(runtime) - now)

    def _patch_status(self, pod: Obj, status: Obj) -> int:
        return self._quietly(self._core.patch_namespaced_pod_status, pod["metadata"]["name"],
                             pod["metadata"]["namespace"], status)
