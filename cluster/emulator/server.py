"""The Kubernetes API emulator: kmock's KubernetesEmulator with the API semantics Tidal's Kubernetes backend relies on.

kmock gives us the HTTP server, request parsing and API discovery; its object store has no resourceVersion, label
selectors, watch resumption, optimistic concurrency, graceful deletion or subresources, so every request for a
declared resource is served here instead. It is an emulator, not Kubernetes, left only for the job-log tests until
kwok serves pods/log (docs/how-to/kubernetes.md#trying-it-here-on-a-real-control-plane).
"""
from __future__ import annotations

import asyncio
import copy
import json
import random
import re
import string
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.test_utils
import aiohttp.web
import attrs
import kmock
import yaml
from kubernetes import client

from cluster.backend import RUNTIME_LABEL
from cluster.emulator.actors import Actors
from cluster.kubernetes import kwok, objects
from cluster.simulated import podlog
from cluster.types import NodeView

Obj = dict[str, Any]
T = TypeVar("T")
ACTOR_AGENT = "tidal-emulator-actors"  # requests with this User-Agent are exempt from scripted faults
REASONS = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict", 410: "Expired",
           415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable"}
TERMINAL = ("Succeeded", "Failed")
LOG_POLL_S = 0.2  # how often a followed log looks for new lines


@dataclass(frozen=True)
class Kind:
    api_version: str  # "v1", "apps/v1"
    plural: str
    kind: str
    namespaced: bool = True
    subresources: tuple[str, ...] = ()
    initial_status: Obj | None = None  # the status a create gets (None: as sent)

    @property
    def group_version(self) -> tuple[str, str]:
        group, _, version = self.api_version.rpartition("/")
        return group, version


KINDS = {k.plural: k for k in (
    Kind("v1", "pods", "Pod", subresources=("status", "binding", "eviction", "log"), initial_status={"phase": "Pending"}),
    Kind("v1", "nodes", "Node", namespaced=False, subresources=("status",)),
    Kind("v1", "namespaces", "Namespace", namespaced=False),
    Kind("apps/v1", "replicasets", "ReplicaSet", subresources=("status", "scale"),
         initial_status={"replicas": 0}),
    Kind("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", subresources=("status",),
         initial_status={"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}),
    Kind("coordination.k8s.io/v1", "leases", "Lease"),
    Kind("v1", "services", "Service"),  # gangs' headless Services (no endpoints or DNS are emulated)
)}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def group_info(group: str, version: str) -> Obj:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


class ApiError(Exception):
    def __init__(self, code: int, message: str, headers: Mapping[str, str] | None = None,
                 reason: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.headers, self.reason = code, message, dict(headers or {}), reason


@dataclass
class Fault:
    method: str
    path: re.Pattern[str]
    status: int
    times: int | None
    delay_s: float


@dataclass(frozen=True)
class Event:
    rv: int
    kind: Kind
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None  # before a MODIFIED: selector watches turn moves in/out into ADDED/DELETED


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, message: str = "", reason: str | None = None) -> Obj:
    failure = code >= 400
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if failure else "Success",
            "code": code, "reason": (reason or REASONS.get(code, "")) if failure else "", "message": message}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch (also what we do for strategic merge patches: lists replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def label_matcher(text: str) -> Callable[[Mapping[str, str]], bool]:
    """Equality- and set-based label selectors: k=v, k==v, k!=v, k, !k, k in (a,b), k notin (a,b)."""
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for term in filter(None, (t.strip() for t in re.split(r",(?![^()]*\))", text))):
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", term):
            key, op, values = m[1], m[2], {v.strip() for v in m[3].split(",")}
            checks.append(lambda ls, k=key, vs=values, neg=op == "notin": (ls.get(k) in vs) != neg)
        elif m := re.fullmatch(r"([^!=\s]+)\s*(!=|==|=)\s*(\S*)", term):
            key, op, value = m[1], m[2], m[3]
            checks.append(lambda ls, k=key, v=value, neg=op == "!=": (ls.get(k) == v) != neg)
        elif term.startswith("!"):
            checks.append(lambda ls, k=term[1:].strip(): k not in ls)
        else:
            checks.append(lambda ls, k=term: k in ls)
    return lambda labels: all(check(labels) for check in checks)


def field_matcher(text: str) -> Callable[[Obj], bool]:
    """Field selectors over dotted paths (metadata.name, metadata.namespace, spec.nodeName, ...); =, ==, !=."""
    checks = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if not (m := re.fullmatch(r"([^!=]+)(!=|==|=)(.*)", term)):
            raise ApiError(400, f"invalid field selector: {term}")
        checks.append((m[1].split("."), m[2] == "!=", m[3]))

    def lookup(obj: Any, keys: list[str]) -> str:
        for key in keys:
            obj = obj.get(key) if isinstance(obj, dict) else None
        return "" if obj is None else str(obj)

    return lambda obj: all((lookup(obj, keys) == value) != neg for keys, neg, value in checks)


def pdb_threshold(value: int | str, expected: int) -> int:
    """An int-or-percent PDB field as a pod count (percentages round up, as the disruption controller does)."""
    if isinstance(value, str) and value.endswith("%"):
        return -(-int(value[:-1]) * expected // 100)
    return int(value)


def pod_healthy(pod: Obj) -> bool:
    status = pod.get("status", {})
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions", []))
    return bool(pod.get("spec", {}).get("nodeName")) and status.get("phase") == "Running" and ready \
        and not pod["metadata"].get("deletionTimestamp")


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    """The emulator's API semantics; all state lives in (and is only touched from) the serving event loop."""

    history: int = 1000  # watch events kept for resumption; older resourceVersions get 410 Expired
    bookmark_s: float = 2.0
    request_log: int = 200  # kmock keeps every request for assertions; a long-running emulator keeps the last few
    _store: dict[tuple[str, str | None, str], Obj] = attrs.field(factory=dict, init=False)
    _log: deque[Event] = attrs.field(factory=deque, init=False)
    _rv: int = attrs.field(default=0, init=False)
    _floor: int = attrs.field(default=0, init=False)  # newest resourceVersion no longer in the log
    _changed: asyncio.Event = attrs.field(factory=asyncio.Event, init=False)
    _faults: list[Fault] = attrs.field(factory=list, init=False)
    closing: bool = attrs.field(default=False, init=False)

    # --- plumbing -----------------------------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        del self._requests[:-self.request_log]
        try:
            if fault := self._take_fault(request):
                await asyncio.sleep(fault.delay_s)
                headers = {"Retry-After": "1"} if fault.status == 429 else {}
                raise ApiError(fault.status, f"scripted fault of the emulator ({fault.status})", headers)
            if request.url.path in ("/healthz", "/readyz", "/livez"):
                return aiohttp.web.Response(text="ok")
            kind = self._kind(request)
            if kind is None:
                return aiohttp.web.json_response(await self._discover(request))
            if self._is_watch(request):
                return await self._watch(request, kind)
            if kind.plural == "pods" and request.subresource == "log" and request.method.value == "GET":
                return await self._pod_log(request)
            code, body = self._serve(request, kind)
            return aiohttp.web.json_response(body, status=code)
        except ApiError as e:
            return aiohttp.web.json_response(status_body(e.code, e.message, e.reason), status=e.code, headers=e.headers)

    async def _discover(self, request: kmock.Request) -> Obj:
        """API discovery of the emulated kinds (kmock's is too loose for the client's models) and /version."""
        path = request.url.path.rstrip("/")
        if path == "/version":
            return await self._serve_server_version(request)
        groups = sorted({k.group_version for k in KINDS.values() if k.group_version[0]})
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": request.url.host}]}
        if path == "/apis":
            return {"apiVersion": "v1", "kind": "APIGroupList", "groups": [group_info(*gv) for gv in groups]}
        if path.startswith("/apis/") and path.count("/") == 2 and (gv := dict(groups).get(path[6:])):
            return {"apiVersion": "v1", "kind": "APIGroup", **group_info(path[6:], gv)}
        api_version = path.removeprefix("/api/").removeprefix("/apis/")
        kinds = [k for k in KINDS.values() if k.api_version == api_version]
        if not kinds:
            raise ApiError(404, f"the emulator does not serve {path}")
        return {"apiVersion": "v1", "kind": "APIResourceList", "groupVersion": api_version, "resources": [
            {"name": f"{k.plural}/{sub}" if sub else k.plural, "singularName": "" if sub else k.kind.lower(),
             "namespaced": k.namespaced, "kind": k.kind, "verbs": VERBS}
            for k in kinds for sub in ("", *k.subresources)]}

    def _kind(self, request: kmock.Request) -> Kind | None:
        res = request.resource
        if res is None or not res.plural:
            return None
        kind = KINDS.get(res.plural)
        if kind is None or kind.group_version != (res.group, res.version):
            raise ApiError(404, "the server could not find the requested resource")
        return kind

    @staticmethod
    def _is_watch(request: kmock.Request) -> bool:
        return request.method.value == "GET" and request.params.get("watch") in ("true", "1")

    def _take_fault(self, request: kmock.Request) -> Fault | None:
        if request.headers.get("User-Agent") == ACTOR_AGENT:
            return None
        for fault in self._faults:
            if fault.method in (request.method.value, "*") and fault.path.search(request.url.path):
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times <= 0:
                        self._faults.remove(fault)
                return fault
        return None

    def fail(self, method: str, path_regex: str, status: int, times: int | None, delay_s: float) -> None:
        self._faults.append(Fault(method.upper(), re.compile(path_regex), status, times, delay_s))

    def clear_faults(self) -> None:
        self._faults.clear()

    def wake(self) -> None:
        """Wake every watch (new events, or closing)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _serve(self, request: kmock.Request, kind: Kind) -> tuple[int, Obj]:
        method, ns, name, sub = request.method.value, request.namespace, request.name, request.subresource
        body = request.data if isinstance(request.data, dict) else {}
        if sub is not None and sub not in kind.subresources:
            raise ApiError(404, f"{kind.plural} have no subresource {sub}")
        if method in ("PATCH", "PUT") and name:
            if method == "PATCH" and "json-patch" in request.headers.get("Content-Type", ""):
                raise ApiError(415, "the emulator serves merge and strategic merge patches only")
            if sub == "scale":
                return 200, self.scale(kind, ns, name, body)
            return 200, self.update(kind, ns, name, body, patch=method == "PATCH", status_only=sub == "status")
        if method == "GET" and name:
            obj = self.get(kind, ns, name)
            return 200, self._scale_of(obj) if sub == "scale" else obj
        if method == "GET":
            return 200, self.list(kind, ns, request.params)
        if method == "POST" and sub == "binding" and name:
            return 201, self.bind(ns, name, body)
        if method == "POST" and sub == "eviction" and name:
            return 201, self.evict(ns, name, body)
        if method == "POST" and not name:
            return 201, self.create(kind, ns, body)
        if method == "DELETE" and name:
            return 200, self.delete(kind, ns, name, {**body, **request.params})
        raise ApiError(405 if name else 404, f"the emulator does not serve {method} {request.url.path}")

    # --- the store ----------------------------------------------------------------------------------------

    def _commit(self, kind: Kind, type_: str, obj: Obj, old: Obj | None = None) -> Obj:
        """Stamp the next resourceVersion on a new state of an object, store it and log its watch event."""
        obj = copy.deepcopy(obj)
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        key = (kind.plural, meta.get("namespace"), meta["name"])
        if type_ == "DELETED":
            self._store.pop(key, None)
        else:
            self._store[key] = obj
        self._log.append(Event(self._rv, kind, type_, obj, old))
        while len(self._log) > self.history:
            self._floor = self._log.popleft().rv
        self.wake()
        return obj

    def get(self, kind: Kind, ns: str | None, name: str) -> Obj:
        obj = self._store.get((kind.plural, ns if kind.namespaced else None, name))
        if obj is None:
            raise ApiError(404, f'{kind.plural} "{name}" not found')
        return obj

    def _matcher(self, kind: Kind, ns: str | None, params: Mapping[str, str]) -> Callable[[Obj], bool]:
        labels = label_matcher(params.get("labelSelector", ""))
        fields = field_matcher(params.get("fieldSelector", ""))
        return lambda obj: (ns is None or obj["metadata"].get("namespace") == ns) and fields(obj) \
            and labels(obj["metadata"].get("labels") or {})

    def list(self, kind: Kind, ns: str | None, params: Mapping[str, str]) -> Obj:
        match = self._matcher(kind, ns, params)
        items = [obj for (plural, _, _), obj in sorted(self._store.items()) if plural == kind.plural and match(obj)]
        return {"apiVersion": kind.api_version, "kind": f"{kind.kind}List",
                "metadata": {"resourceVersion": str(self._rv)}, "items": items}

    def create(self, kind: Kind, ns: str | None, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            meta["namespace"] = ns or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(kind, meta)
        if not meta.get("name"):
            raise ApiError(422, "metadata.name or metadata.generateName is required")
        if (kind.plural, meta.get("namespace"), meta["name"]) in self._store:
            raise ApiError(409, f'{kind.plural} "{meta["name"]}" already exists', reason="AlreadyExists")
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
        obj.update(apiVersion=kind.api_version, kind=kind.kind)
        if kind.initial_status is not None:
            obj["status"] = copy.deepcopy(kind.initial_status)
        return self._commit(kind, "ADDED", obj)

    def _generate_name(self, kind: Kind, meta: Obj) -> str:
        while True:
            name = meta["generateName"] + "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
            if (kind.plural, meta.get("namespace"), name) not in self._store:
                return name

    def _check_version(self, kind: Kind, old: Obj, body: Obj) -> None:
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != old["metadata"]["resourceVersion"]:
            raise ApiError(409, f'Operation cannot be fulfilled on {kind.plural} "{old["metadata"]["name"]}": the '
                                f"object has been modified; please apply your changes to the latest version and try "
                                f"again")

    def update(self, kind: Kind, ns: str | None, name: str, body: Obj, *, patch: bool, status_only: bool) -> Obj:
        old = self.get(kind, ns, name)
        self._check_version(kind, old, body)
        new = merge_patch(old, body) if patch else copy.deepcopy(body)
        if status_only:
            new = {**old, "status": new.get("status", {})}
        elif "status" in kind.subresources:  # the main resource ignores status, as the real API does
            new["status"] = old.get("status", {})
        keep = ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp",
                "deletionGracePeriodSeconds", "resourceVersion")
        new["metadata"] = {**new.get("metadata", {}), **{k: old["metadata"][k] for k in keep if k in old["metadata"]}}
        new.update(apiVersion=kind.api_version, kind=kind.kind)
        if new == old:
            return old  # a no-op write changes nothing (no new resourceVersion, no event)
        if new.get("spec") != old.get("spec"):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        return self._commit(kind, "MODIFIED", new, old)

    def _scale_of(self, rs: Obj) -> Obj:
        meta = rs["metadata"]
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")},
                "spec": {"replicas": rs["spec"].get("replicas", 1)},
                "status": {"replicas": rs.get("status", {}).get("replicas", 0),
                           "selector": ",".join(f"{k}={v}" for k, v in
                                                rs["spec"]["selector"].get("matchLabels", {}).items())}}

    def scale(self, kind: Kind, ns: str | None, name: str, body: Obj) -> Obj:
        old = self.get(kind, ns, name)
        self._check_version(kind, old, body)
        replicas = (body.get("spec") or {}).get("replicas")
        if replicas is None:
            return self._scale_of(old)
        rs = self.update(kind, ns, name, {"spec": {"replicas": replicas}}, patch=True, status_only=False)
        return self._scale_of(rs)

    def delete(self, kind: Kind, ns: str | None, name: str, options: Mapping[str, Any]) -> Obj:
        obj = self.get(kind, ns, name)
        pre = options.get("preconditions") or {}
        if any(pre.get(k) not in (None, obj["metadata"].get(k)) for k in ("uid", "resourceVersion")):
            raise ApiError(409, f'Precondition failed for {kind.plural} "{name}"')
        grace = options.get("gracePeriodSeconds")
        if kind.plural == "pods" and not self._deletes_at_once(obj, grace):
            if obj["metadata"].get("deletionTimestamp"):
                return obj
            grace = int(grace if grace is not None else obj["spec"].get("terminationGracePeriodSeconds", 30))
            meta = {**obj["metadata"], "deletionTimestamp": now_rfc3339(), "deletionGracePeriodSeconds": grace}
            return self._commit(kind, "MODIFIED", {**obj, "metadata": meta}, obj)
        return self._commit(kind, "DELETED", obj)

    @staticmethod
    def _deletes_at_once(pod: Obj, grace: Any) -> bool:
        unbound = not pod.get("spec", {}).get("nodeName")
        return grace is not None and int(grace) == 0 or unbound or pod.get("status", {}).get("phase") in TERMINAL

    def bind(self, ns: str | None, name: str, body: Obj) -> Obj:
        pod = self.get(KINDS["pods"], ns, name)
        if pod["spec"].get("nodeName"):
            raise ApiError(409, f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        node = (body.get("target") or {}).get("name")
        if not node:
            raise ApiError(422, "binding target.name is required")
        self._commit(KINDS["pods"], "MODIFIED", {**pod, "spec": {**pod["spec"], "nodeName": node}}, pod)
        return status_body(201)

    def evict(self, ns: str | None, name: str, body: Obj) -> Obj:
        """policy/v1 Eviction: refuse (429) when a PodDisruptionBudget would be violated, else delete."""
        pod = self.get(KINDS["pods"], ns, name)
        phase = pod.get("status", {}).get("phase")
        if phase not in ("Pending", *TERMINAL) and not pod["metadata"].get("deletionTimestamp"):
            for pdb in self.list(KINDS["poddisruptionbudgets"], ns, {})["items"]:
                if self._violates(pdb, pod):
                    raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        self.delete(KINDS["pods"], ns, name, body.get("deleteOptions") or {})
        return status_body(201)

    def _violates(self, pdb: Obj, pod: Obj) -> bool:
        selector = (pdb.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
        labels = pod["metadata"].get("labels") or {}
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            return False
        pods = self.list(KINDS["pods"], pod["metadata"]["namespace"], {})["items"]
        matching = [p for p in pods if all((p["metadata"].get("labels") or {}).get(k) == v
                                           for k, v in selector.items())]
        healthy = sum(map(pod_healthy, matching))
        remaining = healthy - pod_healthy(pod)  # an unhealthy pod goes only if the budget holds now
        spec = pdb["spec"]
        if spec.get("minAvailable") is not None and remaining < pdb_threshold(spec["minAvailable"], len(matching)):
            return True
        max_unavailable = spec.get("maxUnavailable")
        return max_unavailable is not None and len(matching) - remaining > pdb_threshold(max_unavailable,
                                                                                         len(matching))

    # --- logs ---------------------------------------------------------------------------------------------
    # No containers run here: a training pod's log is made up by the simulated cluster's generator (podlog), from the
    # pod as stored — its framework label, image, command, GPUs, rank — its start, and its end: Succeeded after its
    # labelled run time, Failed, or deleted (an eviction: the SIGTERM lines, with the reason Tidal annotated).

    def log_source(self, pod: Obj) -> podlog.PodLogSource:
        status = pod.get("status") or {}
        if not pod["spec"].get("nodeName") or not status.get("startTime"):
            raise ApiError(400, f'container "main" in pod "{pod["metadata"]["name"]}" is waiting to start: '
                                f"ContainerCreating")
        spec, _ = objects.pod_spec(pod)
        started = objects.timestamp(status["startTime"])
        runtime = objects.labels_of(pod).get(RUNTIME_LABEL)
        if pod["metadata"].get("deletionTimestamp"):
            return podlog.source_of(spec, started, ended_at=objects.timestamp(pod["metadata"]["deletionTimestamp"]),
                                    end=podlog.EVICTED,
                                    reason=objects.annotations_of(pod).get("tidal.io/eviction-reason", ""))
        if status.get("phase") == "Succeeded":
            return podlog.source_of(spec, started, ended_at=started + float(runtime or 0), end=podlog.SUCCEEDED)
        if status.get("phase") == "Failed":
            return podlog.source_of(spec, started, ended_at=started, end=podlog.FAILED,
                                    reason=status.get("message", ""))
        return podlog.source_of(spec, started)

    async def _pod_log(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        """GET .../pods/{name}/log with tailLines, sinceSeconds and follow (kept open, a line as it is written,
        until the pod ends or is gone)."""
        params = request.params
        try:
            tail = int(params["tailLines"]) if "tailLines" in params else None
            since = int(params["sinceSeconds"]) if "sinceSeconds" in params else None
        except ValueError:
            raise ApiError(400, "tailLines and sinceSeconds are integers") from None
        if (tail is not None and tail < 0) or (since is not None and since < 1):
            raise ApiError(422, "tailLines must be >= 0 and sinceSeconds >= 1")
        pod = self.get(KINDS["pods"], request.namespace, request.name)
        source, now = self.log_source(pod), time.time()
        lines = podlog.pod_log_lines(source, now, since=None if since is None else now - since, tail=tail)
        if params.get("follow") not in ("true", "1"):
            return aiohttp.web.Response(text="".join(f"{line}\n" for line in lines), content_type="text/plain")
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "text/plain; charset=utf-8"})
        await response.prepare(request._raw_request)
        try:
            await response.write("".join(f"{line}\n" for line in lines).encode())
            written = podlog.pod_log_count(source, now)
            while source.ended_at is None and not self.closing:
                await asyncio.sleep(LOG_POLL_S)
                try:
                    source, now = self.log_source(self.get(KINDS["pods"], request.namespace, request.name)), time.time()
                except ApiError:
                    break  # deleted: the stream ends
                count = podlog.pod_log_count(source, now)
                if count > written:
                    new = podlog.pod_log_lines(source, now, tail=count - written)
                    await response.write("".join(f"{line}\n" for line in new).encode())
                    written = count
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away
        return response

    # --- watch --------------------------------------------------------------------------------------------

    async def _watch(self, request: kmock.Request, kind: Kind) -> aiohttp.web.StreamResponse:
        params = dict(request.params)
        if request.name:
            params["fieldSelector"] = ",".join(filter(None, (params.get("fieldSelector"),
                                                              f"metadata.name={request.name}")))
        match = self._matcher(kind, request.namespace, params)
        since = params.get("resourceVersion") or "0"
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request._raw_request)
        try:
            if since != "0" and int(since) < self._floor:
                await self._expired(response, int(since))
            else:
                await self._stream(response, kind, match, since, params)
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away
        return response

    async def _expired(self, response: aiohttp.web.StreamResponse, since: int) -> None:
        message = f"too old resource version: {since} ({self._floor + 1})"
        await self._send(response, "ERROR", status_body(410, message, "Expired"))

    async def _stream(self, response: aiohttp.web.StreamResponse, kind: Kind, match: Callable[[Obj], bool],
                      since: str, params: Mapping[str, str]) -> None:
        loop = asyncio.get_running_loop()
        timeout = params.get("timeoutSeconds")
        deadline = loop.time() + float(timeout) if timeout else None
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        seen = int(since)
        if since == "0":
            seen = self._rv
            for obj in self.list(kind, None, {})["items"]:
                if match(obj):
                    await self._send(response, "ADDED", obj)
        while not self.closing:
            changed = self._changed
            if seen < self._floor:  # fell behind the kept log
                return await self._expired(response, seen)
            for event in [e for e in self._log if e.rv > seen]:
                seen = event.rv
                if event.kind is kind and (type_ := self._visible(event, match)):
                    await self._send(response, type_, event.obj)
            wait = self.bookmark_s if deadline is None else min(self.bookmark_s, deadline - loop.time())
            try:
                await asyncio.wait_for(changed.wait(), max(wait, 0))
            except TimeoutError:
                if bookmarks:
                    await self._send(response, "BOOKMARK", {"kind": kind.kind, "apiVersion": kind.api_version,
                                                            "metadata": {"resourceVersion": str(seen)}})
                if deadline is not None and loop.time() >= deadline:
                    return None
        return None

    @staticmethod
    def _visible(event: Event, match: Callable[[Obj], bool]) -> str | None:
        """What a selector watch sees: an object moving into (out of) the selection is ADDED (DELETED)."""
        now_in, was_in = match(event.obj), event.old is not None and match(event.old)
        if event.type != "MODIFIED":
            return event.type if now_in else None
        return {(True, True): "MODIFIED", (True, False): "ADDED", (False, True): "DELETED"}.get((now_in, was_in))

    @staticmethod
    async def _send(response: aiohttp.web.StreamResponse, type_: str, obj: Obj) -> None:
        await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")


# --- the runner ---------------------------------------------------------------------------------------------

def node_object(view: NodeView) -> Obj:
    """The Node the kwok control plane registers (cluster/kubernetes/kwok.py), without kwok's annotation."""
    node = kwok.node_object(view)
    del node["metadata"]["annotations"]
    return node


class QuietServer(aiohttp.test_utils.RawTestServer):
    """Without an access log: the actors poll the API 60 times a second."""

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None, **kwargs: Any) -> None:
        await super().start_server(loop, access_log=None, **kwargs)


@dataclass
class Emulator:
    """The Kubernetes API emulator served on 127.0.0.1 from a background thread, with the cluster actors."""

    nodes: Iterable[NodeView] = ()
    namespace: str = "tidal-workloads"
    startup_s: float = 0.5
    termination_s: float = 0.2
    actors: bool = True
    port: int = 0  # 0: any free port (kept across stop()/start())
    history: int = 1000
    bookmark_s: float = 2.0
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop, init=False)
    _api: ApiServer | None = field(default=None, init=False)
    _server: kmock.Server | None = field(default=None, init=False)
    _actors: Actors | None = field(default=None, init=False)

    def __enter__(self) -> Emulator:
        threading.Thread(target=self._serve_forever, name="k8s-emulator", daemon=True).start()
        self._api = self._run(self._new_api())
        self.start()
        for name in ("default", self.namespace):
            self._call(self.api.create, KINDS["namespaces"], None, {"metadata": {"name": name}})
        for view in self.nodes:
            self.add_node(view)
        if self.actors:
            self._actors = Actors(self._actors_client(), self.startup_s, self.termination_s)
            self._actors.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._actors is not None:
            self._actors.close()
        self.stop()
        self._run(self._api_exit())
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve_forever(self) -> None:
        self._loop.run_forever()
        self._loop.close()

    @property
    def api(self) -> ApiServer:
        assert self._api is not None, "enter the Emulator first"
        return self._api

    async def _new_api(self) -> ApiServer:
        api = ApiServer(history=self.history, bookmark_s=self.bookmark_s)
        await api.__aenter__()
        return api

    async def _api_exit(self) -> None:
        await self.api.__aexit__(None, None, None)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run fn in the serving loop: the API's state is only ever touched from there."""
        async def call() -> T:
            return fn(*args)
        return self._run(call())

    def start(self) -> None:
        """Listen (again, on the same port)."""
        async def listen() -> kmock.Server:
            self.api.closing = False
            server = kmock.Server(self.api, host="127.0.0.1", port=self.port or None, server_cls=QuietServer)
            return await server.__aenter__()
        self._server = self._run(listen())
        self.port = self._server.port

    def stop(self) -> None:
        """Stop listening (connections refused; watches end); the objects are kept."""
        if self._server is None:
            return
        server, self._server = self._server, None

        async def close() -> None:
            self.api.closing = True
            self.api.wake()
            await server.__aexit__(None, None, None)
        self._run(close())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        name = "tidal-emulator"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
            "clusters": [{"name": name, "cluster": {"server": self.url}}],
            "users": [{"name": name, "user": {}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": self.namespace}}]}))
        return path

    def api_client(self) -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=self.url))

    def _actors_client(self) -> client.ApiClient:
        """Exempt from faults, and without urllib3's retries (each logs a warning while the emulator is stopped)."""
        config = client.Configuration(host=self.url)
        config.retries = 0
        api = client.ApiClient(config)
        api.user_agent = ACTOR_AGENT
        return api

    def add_node(self, view: NodeView) -> Obj:
        return self._call(self.api.create, KINDS["nodes"], None, node_object(view))

    def objects(self, plural: str, namespace: str | None = None) -> list[Obj]:
        return copy.deepcopy(self._call(self.api.list, KINDS[plural], namespace, {})["items"])

    def fail(self, method: str, path_regex: str, status: int, times: int | None = None, delay_s: float = 0) -> None:
        """Answer the next `times` (None: all until clear_faults) matching requests with an error, changing nothing."""
        self._call(self.api.fail, method, path_regex, status, times, delay_s)

    def clear_faults(self) -> None:
        self._call(self.api.clear_faults)

    def settle(self, timeout_s: float = 10.0) -> None:
        """Run actor passes until the cluster is quiet (see Actors.settle); nothing without actors."""
        if self._actors is not None:
            self._actors.settle(timeout_s)

    def pause_actors(self) -> None:
        if self._actors is not None:
            self._actors.pause()

    def resume_actors(self) -> None:
        if self._actors is not None:
            self._actors.resume()
