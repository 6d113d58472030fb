"""The ClusterBackend on a Kubernetes cluster, through the official client.

Reads: one consistent read per tick (nodes, every pod, Tidal's ReplicaSets) from the stores of list-then-watch
reflectors in background threads (watch.Reflector; client-go's listers read the same way), kept until this backend
writes or `refresh()` starts the next tick; a read after a write waits until the stores hold it. Events: what the pod
and node watches saw, plus terminal pods re-reported on every drain until they are cleaned up. Errors: 429 is
BackendBusy (try later), 404/409/422 BackendError (a refusal), 5xx, timeouts, refused connections and a watch that
cannot list BackendUnavailable (the tick stops; see colocation/live_backend.py). Gangs' headless Services are only
written (created before a gang's pods, deleted when its run ends), never read: nothing watches them.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster.backend import (
    DETACHED_FROM_LABEL, INFERENCE, KIND_LABEL, REPLACED_BY_LABEL, REPLACES_LABEL, REPLICASET_LABEL, TRAINING,
    BackendBusy, BackendError, BackendUnavailable, ClusterEvent, EventKind, PendingPodView, PodSpec, PodView,
    ReplicaSetView,
)
from cluster.fit import misfit
from cluster.kubernetes import conventions
from cluster.kubernetes import objects
from cluster.kubernetes.watch import Reflector, version
from cluster.types import GPU_EPS, NodeState, NodeView

log = logging.getLogger(__name__)
DETACHED_AT_ANNOTATION = "tidal.io/detached-at"  # when a pod left its ReplicaSet: its replacement is younger
TEMPLATE_HASH_ANNOTATION = "tidal.io/template-hash"
CONFLICT_RETRIES = 5


class NotFound(BackendError):
    pass


class Conflict(BackendError):
    """409: the object changed since it was read (or the name is taken)."""


@dataclass(frozen=True)
class KubeSettings:
    namespace: str = "tidal-workloads"  # where Tidal's pods and ReplicaSets live
    image: str = "busybox:1.37"  # for pods whose job names no image (inference services have none yet)
    labels: objects.Labels = field(default_factory=objects.Labels)
    grace_period_s: int = 30  # evicted pods' termination grace
    replacement_wait_s: float = 5.0  # how long detach_pod waits for the ReplicaSet controller's new pod
    request_timeout_s: float = 10.0
    bind_parallelism: int = 8  # pod creates in flight in bind_many (the client's connection pool holds 10 or more)
    follow_timeout_s: float = 3600.0  # a followed log's stream is dropped after this long without a line


@dataclass
class _Read:
    """One read of the cluster, turned into views."""

    nodes: dict[str, NodeView]
    device_gib: dict[str, int | None]  # per node
    pods: dict[str, PodView]  # Tidal's bound, live pods
    raw: dict[str, Mapping]  # Tidal's pods, every phase, by name
    pending: list[PendingPodView]
    replicasets: dict[str, ReplicaSetView]
    raw_replicasets: dict[str, Mapping]


class KubernetesCluster:
    def __init__(self, api: client.ApiClient, settings: KubeSettings = KubeSettings(),
                 clock: Callable[[], float] = time.time) -> None:
        self.settings, self._clock = settings, clock
        self._core, self._apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self._read: _Read | None = None
        self._reported: set[str] = set()  # terminal pods whose event an earlier drain gave
        # Every pod, not only Tidal's: the others' requests count against their nodes.
        self._pods_watch = Reflector("pods", self._core.list_pod_for_all_namespaces, self._pod_events)
        self._nodes_watch = Reflector("nodes", self._core.list_node, self._node_events)
        self._replicasets_watch = Reflector("replicasets", self._apps.list_namespaced_replica_set, lambda *_: (),
                                            namespace=settings.namespace)
        self._watches = (self._nodes_watch, self._pods_watch, self._replicasets_watch)
        self._written = dict.fromkeys(self._watches, 0)  # per store, the resourceVersion of our last write to it

    # -- reading -------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Forget the last read (a new tick starts) and link detached pods to replacements that appeared since."""
        self._read = None
        self._link_replacements()

    def snapshot(self) -> tuple[tuple[PodView, ...], tuple[NodeView, ...]]:
        """The bound pods and the nodes as the watches hold them now, writing nothing (unlike refresh): what a
        metrics exporter beside the loops reads."""
        self._read = None
        state = self._state()
        return tuple(state.pods.values()), tuple(state.nodes.values())

    def nodes(self) -> tuple[NodeView, ...]:
        return tuple(self._state().nodes.values())

    def pods(self) -> tuple[PodView, ...]:
        return tuple(self._state().pods.values())

    def pod(self, name: str) -> PodView | None:
        return self._state().pods.get(name)

    def pending_pods(self) -> tuple[PendingPodView, ...]:
        return tuple(sorted(self._state().pending, key=lambda p: p.since))

    def replicasets(self) -> tuple[ReplicaSetView, ...]:
        return tuple(self._state().replicasets.values())

    def replicaset(self, name: str) -> ReplicaSetView:
        try:
            return self._state().replicasets[name]
        except KeyError:
            raise BackendError(f"unknown replicaset {name}") from None

    def _state(self) -> _Read:
        if self._read is None:
            self._read = self._load(*(w.read(self._written[w], self.settings.request_timeout_s).values()
                                      for w in self._watches))
        return self._read

    def _load(self, all_nodes: Iterable[Mapping], all_pods: Iterable[Mapping], all_rs: Iterable[Mapping]) -> _Read:
        names = self.settings.labels
        nodes = {objects.meta(n)["name"]: n for n in all_nodes if objects.is_tidal_node(n, names)}
        gib = {name: conventions.device_gib(objects.allocatable(n)) for name, n in nodes.items()}
        raw, others = {}, defaultdict(lambda: [0, 0])
        for pod in all_pods:
            if self._ours(pod):
                raw[objects.meta(pod)["name"]] = pod
            elif objects.phase(pod) not in objects.TERMINAL and objects.node_name(pod) in nodes:
                # others' pods: DaemonSets and the like
                cpu, memory, _ = objects.requests_of(pod.get("spec") or {})
                others[objects.node_name(pod)][0] += cpu
                others[objects.node_name(pod)][1] += memory
        pods, pending = self._pod_views(raw, gib, nodes)
        by_node: dict[str, list[PodView]] = defaultdict(list)
        for view in pods.values():
            by_node[view.node].append(view)
        views = {name: objects.node_view(n, names, by_node[name], tuple(others[name])) for name, n in nodes.items()}
        rs_raw = {objects.meta(r)["name"]: r for r in all_rs}
        return _Read(views, gib, pods, raw, pending, self._rs_views(rs_raw, pods, pending), rs_raw)

    def _ours(self, pod: Mapping) -> bool:
        return objects.meta(pod).get("namespace") == self.settings.namespace and KIND_LABEL in objects.labels_of(pod)

    def _pod_views(self, raw: Mapping[str, Mapping], gib: Mapping[str, int | None],
                   nodes: Mapping[str, Mapping]) -> tuple[dict[str, PodView], list[PendingPodView]]:
        """Live pods as views; whole GPUs another scheduler placed are counted on the lowest free devices."""
        pods: dict[str, PodView] = {}
        pending: list[PendingPodView] = []
        unknown: list[tuple[Mapping, PodSpec]] = []
        used: dict[str, list[float]] = {n: [0.0] * objects.gpu_count(node) for n, node in nodes.items()}
        for pod in sorted(raw.values(), key=lambda p: objects.meta(p).get("creationTimestamp") or ""):
            if objects.phase(pod) in objects.TERMINAL:
                continue
            node = objects.node_name(pod)
            spec, known = objects.pod_spec(pod, gib.get(node))
            if not node:
                if REPLICASET_LABEL in spec.labels and not objects.terminating(pod):
                    pending.append(objects.pending_view(pod, spec))
                continue
            if node not in nodes:
                continue  # on a node that is not Tidal's
            if not known:
                unknown.append((pod, spec))
                continue
            for s in spec.gpu_shares:
                if s.index < len(used[node]):
                    used[node][s.index] += s.share
            pods[spec.name] = objects.pod_view(pod, spec)
        for pod, spec in unknown:
            placed = objects.place_unknown(spec, used[objects.node_name(pod)])
            for s in placed.gpu_shares:
                used[objects.node_name(pod)][s.index] += s.share
            pods[spec.name] = objects.pod_view(pod, placed)
        return pods, pending

    def _rs_views(self, rs_raw: Mapping[str, Mapping], pods: Mapping[str, PodView],
                  pending: list[PendingPodView]) -> dict[str, ReplicaSetView]:
        out = {}
        for name, rs in rs_raw.items():
            template, _ = objects.pod_spec((rs.get("spec") or {}).get("template") or {})
            owned = [p for p in pods.values() if p.replicaset == name and not p.terminating]
            waiting = sum(1 for p in pending if p.replicaset == name)
            out[name] = objects.replicaset_view(rs, template, owned, waiting, self.settings.labels)
        return out

    # -- ReplicaSets -----------------------------------------------------------------------------------
    def apply_replicaset(self, name: str, template: PodSpec, replicas: int, *,
                         node_selector: Mapping[str, str] | None = None) -> None:
        if replicas < 0:
            raise BackendError(f"replicaset {name}: replicas must be >= 0, got {replicas}")
        for s in template.gpu_shares:
            if not 0 < s.share <= 1:
                raise BackendError(f"replicaset {name}: bad GPU share {s}")
        stored = self._state().raw_replicasets.get(name)
        if node_selector is None and stored is not None:
            node_selector = self._state().replicasets[name].node_selector
        try:
            body = objects.replicaset(name, template, replicas, self.settings.namespace, self.settings.image,
                                 node_selector, self._template_gib(template), self.settings.labels)
        except ValueError as error:
            raise BackendError(f"replicaset {name}: {error}") from None
        digest = hashlib.sha256(json.dumps(body["spec"]["template"], sort_keys=True).encode()).hexdigest()[:16]
        body["metadata"]["annotations"] = {TEMPLATE_HASH_ANNOTATION: digest}
        if stored is None:
            self._write(self._replicasets_watch, self._apps.create_namespaced_replica_set, self.settings.namespace,
                        body)
            return
        old = stored.get("spec") or {}
        patch: dict = {}
        if old.get("replicas") != replicas:
            patch["spec"] = {"replicas": replicas}
        if objects.annotations_of(stored).get(TEMPLATE_HASH_ANNOTATION) != digest:  # new pods get the new template
            patch = {"metadata": {"annotations": body["metadata"]["annotations"]},
                     "spec": {"replicas": replicas, "template": body["spec"]["template"]}}
        if patch:
            self._write(self._replicasets_watch, self._apps.patch_namespaced_replica_set, name, self.settings.namespace,
                        patch)

    def _template_gib(self, template: PodSpec) -> int | None:
        """GiB of one device of the template's GPU model (gpushare needs it for a fractional replica)."""
        if not template.gpu_shares or template.gpus >= 1 - GPU_EPS:
            return None
        state = self._state()
        return next((state.device_gib[n.name] for n in state.nodes.values()
                     if n.gpu_model == template.gpu_model and state.device_gib.get(n.name)), None)

    def detach_pod(self, pod: str) -> str:
        """Relabel the pod out of its ReplicaSet's selector (the ReplicaSet controller then creates a replacement)
        and link the two; "" when the replacement has not appeared within replacement_wait_s (linked later)."""
        raw = self._state().raw.get(pod)
        if raw is None or not objects.node_name(raw) or objects.phase(raw) in objects.TERMINAL:
            raise BackendError(f"pod {pod} is not bound")
        owner = objects.labels_of(raw).get(REPLICASET_LABEL)
        if owner is None:
            raise BackendError(f"pod {pod} belongs to no replicaset (already detached?)")
        before = {p for p, r in self._state().raw.items() if objects.labels_of(r).get(REPLICASET_LABEL) == owner}
        self._write(self._pods_watch, self._core.patch_namespaced_pod, pod, self.settings.namespace, {"metadata": {
            "labels": {REPLICASET_LABEL: None, DETACHED_FROM_LABEL: owner},
            "annotations": {DETACHED_AT_ANNOTATION: f"{self._clock():.3f}"}, "ownerReferences": None}})
        replacement = self._pods_watch.wait(lambda store: self._new_pod(store.values(), owner, before),
                                            self.settings.replacement_wait_s)
        if replacement is None:
            log.info("detached %s: no replacement yet, linked on a later tick", pod)
            return ""
        self._link(pod, replacement)
        return replacement

    def _new_pod(self, pods: Iterable[Mapping], owner: str, before: set[str]) -> str | None:
        """The oldest pod of ReplicaSet `owner` not in `before` that replaces no other, or None."""
        new = sorted((p for p in pods if self._ours(p) and objects.labels_of(p).get(REPLICASET_LABEL) == owner
                      and objects.meta(p)["name"] not in before and REPLACES_LABEL not in objects.labels_of(p)),
                     key=lambda p: objects.meta(p).get("creationTimestamp") or "")
        return objects.meta(new[0])["name"] if new else None

    def _link(self, old: str, new: str) -> None:
        self._write(self._pods_watch, self._core.patch_namespaced_pod, new, self.settings.namespace,
                    {"metadata": {"labels": {REPLACES_LABEL: old}}})
        self._write(self._pods_watch, self._core.patch_namespaced_pod, old, self.settings.namespace,
                    {"metadata": {"labels": {REPLACED_BY_LABEL: new}}})

    def _link_replacements(self) -> None:
        """A detached pod whose replacement came after detach_pod stopped waiting gets it now: the oldest unclaimed
        pod of its ReplicaSet created after it was detached."""
        state = self._state()
        claimed = {objects.labels_of(p).get(REPLACES_LABEL) for p in state.raw.values()}
        for name, pod in state.raw.items():
            labels = objects.labels_of(pod)
            owner = labels.get(DETACHED_FROM_LABEL)
            if owner is None or REPLACED_BY_LABEL in labels or name in claimed or objects.terminating(pod):
                continue
            since = float(objects.annotations_of(pod).get(DETACHED_AT_ANNOTATION, "0"))
            candidates = sorted((objects.meta(p).get("creationTimestamp") or "", n) for n, p in state.raw.items()
                                if objects.labels_of(p).get(REPLICASET_LABEL) == owner
                                and REPLACES_LABEL not in objects.labels_of(p)
                                and objects.timestamp(objects.meta(p).get("creationTimestamp")) >= int(since))
            if candidates:
                self._link(name, candidates[0][1])
                state = self._state()

    # -- training pods ---------------------------------------------------------------------------------
    def bind(self, pod: PodSpec, node: str) -> None:
        refused = self.bind_many([(pod, node)])
        if refused:
            raise refused[pod.name]

    def bind_many(self, pods: Sequence[tuple[PodSpec, str]]) -> dict[str, BackendError]:
        """Bind several pods, each as `bind` does: checked in order against the tick's read (a pod sees the room the
        ones before it took), then created concurrently, at most settings.bind_parallelism in flight (kube-scheduler
        binds asynchronously too). Returns the refusals by pod name; the other pods are bound. BackendUnavailable,
        once every create has answered, when one could not be made."""
        state = self._state()
        refused: dict[str, BackendError] = {}
        bodies = []
        for spec, node in pods:
            try:
                body = self._bound_pod(spec, node, state)
            except BackendError as error:
                refused[spec.name] = error
                continue
            self._remember_bound(body, state)  # the read is updated with each pod instead of redone
            bodies.append(body)
        failed: Exception | None = None
        for body, outcome in zip(bodies, self._create_all(bodies), strict=True):
            name = objects.meta(body)["name"]
            if isinstance(outcome, Conflict):
                refused[name] = BackendError(f"pod {name} is already bound")
            elif isinstance(outcome, BackendError):
                refused[name] = outcome
            elif isinstance(outcome, Exception):
                failed = failed or outcome
            else:
                self._wrote(self._pods_watch, outcome)
                state.raw[name] = outcome
        if failed is not None or any(objects.meta(b)["name"] in refused for b in bodies):
            self._read = None  # it counts pods that were not created
        if failed is not None:
            raise failed
        return refused

    def _bound_pod(self, pod: PodSpec, node: str, state: _Read) -> dict:
        view = state.nodes.get(node)
        if view is None:
            raise BackendError(f"unknown node {node}")
        why = misfit(pod, view)  # the kubelet would refuse it (OutOfcpu, ...) after the fact: refuse it before
        if why:
            raise BackendError(why)
        try:
            return objects.bound_pod(pod, node, self.settings.namespace, self.settings.image,
                                     state.device_gib.get(node), self.settings.grace_period_s, time.time_ns())
        except ValueError as error:
            raise BackendError(f"pod {pod.name} on {node}: {error}") from None

    def _create_all(self, bodies: list[dict]) -> list[Mapping | Exception]:
        """Each pod's created object, or the error its create raised."""
        def create(body: dict) -> Mapping | Exception:
            try:
                return self._call(create_pod, self._core.api_client, self.settings.namespace, body)
            except Exception as error:  # handed back: bind_many tells refusals from outages
                return error

        if len(bodies) <= 1:
            return [create(b) for b in bodies]
        with ThreadPoolExecutor(min(self.settings.bind_parallelism, len(bodies))) as pool:
            return list(pool.map(create, bodies))

    @staticmethod
    def _remember_bound(pod: Mapping, state: _Read) -> None:
        spec, _ = objects.pod_spec(pod, state.device_gib.get(objects.node_name(pod)))
        view = objects.pod_view(pod, spec)
        node = state.nodes[view.node]
        used = list(node.used_shares())
        for s in spec.gpu_shares:
            used[s.index] += s.share
        state.raw[spec.name], state.pods[spec.name] = pod, view
        state.nodes[view.node] = replace(node, gpu_used=tuple(used), cpu_used=node.cpu_used + spec.cpu_milli,
                                         memory_used=node.memory_used + spec.memory_mib, pods=node.pods + (spec.name,))

    def evict(self, pod: str, reason: str) -> None:
        """The Eviction API (disruption budgets apply: 429 is BackendBusy). The reason goes on the pod first, so
        `kubectl describe` tells why it went."""
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=self.settings.namespace),
                                 delete_options=client.V1DeleteOptions(grace_period_seconds=self.settings.grace_period_s))
        try:
            self._call(self._core.patch_namespaced_pod, pod, self.settings.namespace,
                       {"metadata": {"annotations": {"tidal.io/eviction-reason": reason[:256]}}})
            self._call(self._core.create_namespaced_pod_eviction, pod, self.settings.namespace, body)
        except NotFound:
            self._read = None
            raise BackendError(f"pod {pod} is not bound") from None
        except Exception:
            self._read = None
            raise
        self._remember_evicted(pod)

    def _remember_evicted(self, pod: str) -> None:
        """Evicted is terminating (it holds its resources until it is gone), as the next read would show it: the
        tick's read stays valid, so preempting many pods costs no re-read each."""
        state = self._read
        view = state.pods.get(pod) if state else None
        if view is None:
            self._read = None
        else:
            state.pods[pod] = replace(view, terminating=True)

    # -- gangs' headless Services ------------------------------------------------------------------------
    def apply_headless_service(self, name: str, selector: Mapping[str, str]) -> None:
        """Create the Service; one that exists already is kept (a retried admission of the same run)."""
        body = objects.headless_service(name, self.settings.namespace, selector)
        try:
            self._call(self._core.create_namespaced_service, self.settings.namespace, body)
        except Conflict:
            log.info("service %s exists already: kept", name)

    def delete_service(self, name: str) -> None:
        try:
            self._call(self._core.delete_namespaced_service, name, self.settings.namespace)
        except NotFound:
            pass

    # -- logs ------------------------------------------------------------------------------------------
    def pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None) -> str:
        """`GET .../pods/{pod}/log`: the kubelet keeps a terminated container's log until the pod is deleted."""
        response = self._log_request(pod, since, tail, follow=False)
        try:
            return response.data.decode("utf-8", errors="replace")
        finally:
            response.release_conn()

    def follow_pod_logs(self, pod: str, *, since: float | None = None, tail: int | None = None,
                        poll_s: float = 1.0) -> Iterator[str]:
        """`?follow=true`, streamed: the API server keeps the response open and writes each line as the container
        does. A kubelet ends it when the container stops; kwok (tests, the demo) keeps it open, so whenever no line
        came for `poll_s` the pod is looked at, and a further quiet `poll_s` once it ended (or went) ends the stream.
        A thread reads the response, so that waiting for a line can time out without breaking the stream."""
        response = self._log_request(pod, since, tail, follow=True)
        lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        reader = threading.Thread(target=_stream_lines, args=(response, lines, pod), name=f"log-{pod}", daemon=True)
        reader.start()
        ended = False
        try:
            while True:
                try:
                    line = lines.get(timeout=poll_s)
                except queue.Empty:
                    if ended:
                        return
                    ended = self._pod_ended(pod)
                    continue
                if line is None:
                    return
                yield line
        finally:
            with contextlib.suppress(ValueError, RuntimeError, OSError):  # already closed by the server
                response.shutdown()  # unblocks the reader, which releases the connection
            reader.join(timeout=5)

    def _pod_ended(self, pod: str) -> bool:
        try:
            obj = self._call(self._core.read_namespaced_pod, pod, self.settings.namespace)
        except NotFound:
            return True
        except (BackendError, BackendUnavailable):
            return False  # asked again after the next quiet spell
        return objects.phase(obj) in objects.TERMINAL or objects.terminating(obj)

    def _log_request(self, pod: str, since: float | None, tail: int | None, follow: bool):
        options: dict = {"follow": follow}
        if since is not None:
            options["since_seconds"] = max(1, math.ceil(since))  # the API takes whole seconds, at least 1
        if tail is not None:
            options["tail_lines"] = tail
        timeout = (self.settings.request_timeout_s, self.settings.follow_timeout_s) if follow \
            else self.settings.request_timeout_s
        try:
            return self._core.read_namespaced_pod_log(pod, self.settings.namespace, _preload_content=False,
                                                      _request_timeout=timeout, **options)
        except ApiException as error:
            raise _refusal("read_namespaced_pod_log", error) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendUnavailable(f"read_namespaced_pod_log: the API server did not answer ({error})") from None

    # -- nodes -----------------------------------------------------------------------------------------
    def set_node_state(self, node: str, state: NodeState, labels: Mapping[str, str] | None = None) -> None:
        """Tidal's labels plus cordon/uncordon, guarded by resourceVersion: a 409 is re-read and retried."""
        names = self.settings.labels
        for attempt in range(CONFLICT_RETRIES):
            current = self._call(self._core.read_node, node)
            patch = {"metadata": {"resourceVersion": objects.meta(current).get("resourceVersion"),
                                  "labels": {**(labels or {}), names.state: state.value}},
                     "spec": {"unschedulable": None if state.normal else True}}
            try:
                self._write(self._nodes_watch, self._core.patch_node, node, patch)
                return
            except Conflict:
                log.info("node %s changed while we set it %s (attempt %d); re-reading", node, state.value, attempt + 1)
        raise BackendBusy(f"node {node} kept changing: {state.value} not set after {CONFLICT_RETRIES} tries")

    # -- events ----------------------------------------------------------------------------------------
    def drain_events(self) -> list[ClusterEvent]:
        """What the watches saw since the last drain, then every terminal pod still on the cluster (level-triggered:
        a missed watch event cannot strand its job). A terminal pod already reported is deleted now."""
        for reflector in self._watches:
            reflector.start()
        events = self._pods_watch.drain() + self._nodes_watch.drain()
        now, state = self._clock(), self._state()
        for name, pod in list(state.raw.items()):
            if objects.phase(pod) not in objects.TERMINAL or objects.labels_of(pod).get(KIND_LABEL) != TRAINING:
                continue
            if name in self._reported:
                self._delete_terminal(name, state)
            else:
                events.extend(_terminal_events(pod, now))
                self._reported.add(name)
        return sorted(events, key=lambda e: e.at)

    def _delete_terminal(self, name: str, state: _Read) -> None:
        """Clean up a terminal pod without dropping the tick's read: the scheduler reconciles against the same
        read its events came from, so a pod that ends in between cannot look "missing" before it looks finished."""
        try:
            self._wrote(self._pods_watch, self._call(self._core.delete_namespaced_pod, name, self.settings.namespace,
                                                     grace_period_seconds=0))
        except NotFound:
            pass
        state.raw.pop(name, None)
        self._reported.discard(name)

    def stop(self) -> None:
        for reflector in self._watches:
            reflector.stop()

    def _pod_events(self, kind: str, pod: Mapping, previous: Mapping | None) -> Iterable[ClusterEvent]:
        if not self._ours(pod):
            return
        now = self._clock()
        before_node = objects.node_name(previous) if previous else ""
        spec, _ = objects.pod_spec(pod)
        node = objects.node_name(pod)
        if kind == "DELETED":
            if previous is not None and objects.phase(previous) not in objects.TERMINAL and before_node:
                deleted = EventKind.POD_DELETED if spec.labels.get(KIND_LABEL) == INFERENCE else EventKind.POD_EVICTED
                yield ClusterEvent(deleted, now, before_node, spec.name, spec.job_id, "deleted")
            return
        if node and not before_node:
            started = EventKind.POD_CREATED if REPLICASET_LABEL in spec.labels else EventKind.POD_STARTED
            yield ClusterEvent(started, now, node, spec.name, spec.job_id)
        became_ready = objects.is_ready(pod) and not (previous and objects.is_ready(previous))
        if became_ready and spec.labels.get(KIND_LABEL) == INFERENCE:
            yield ClusterEvent(EventKind.POD_READY, now, node, spec.name)
        if objects.phase(pod) in objects.TERMINAL and not (previous and objects.phase(previous) in objects.TERMINAL):
            yield from _terminal_events(pod, now)

    def _node_events(self, kind: str, node: Mapping, previous: Mapping | None) -> Iterable[ClusterEvent]:
        names = self.settings.labels
        if kind == "DELETED" or previous is None or not objects.is_tidal_node(node, names):
            return
        old, new = objects.node_state(previous, names), objects.node_state(node, names)
        if old is not new:
            yield ClusterEvent(EventKind.NODE_STATE_CHANGED, self._clock(), objects.meta(node)["name"],
                               detail=f"{old.value}->{new.value}")

    # -- calls -----------------------------------------------------------------------------------------
    def _write(self, store: Reflector, fn: Callable, *args, **kwargs) -> Mapping:
        """A write after which what we read no longer holds: the next read waits until `store` shows it."""
        self._read = None
        written = self._call(fn, *args, **kwargs)
        self._wrote(store, written)
        return written

    def _wrote(self, store: Reflector, obj: Mapping) -> None:
        self._written[store] = max(self._written[store], version(objects.meta(obj).get("resourceVersion")))

    def _call(self, fn: Callable, *args, **kwargs) -> Mapping:
        what = fn.__name__
        try:
            response = fn(*args, _preload_content=False, _request_timeout=self.settings.request_timeout_s, **kwargs)
        except ApiException as error:
            raise _refusal(what, error) from None
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendUnavailable(f"{what}: the API server did not answer ({error})") from None
        return json.loads(response.data or b"{}")


def create_pod(api: client.ApiClient, namespace: str, body: Mapping, *, _preload_content: bool = False,
               _request_timeout: float | None = None):
    """POST the pod as it is (the answer unread: its `data` is the JSON); ApiException when refused. The generated
    create_namespaced_pod would first validate the dict into the client's model classes (pydantic) and serialise them
    back: about half of the client's CPU per pod, when a cycle binds thousands."""
    request = api.param_serialize(method="POST", resource_path="/api/v1/namespaces/{namespace}/pods",
                                  path_params={"namespace": namespace}, body=body, auth_settings=["BearerToken"],
                                  header_params={"Accept": "application/json", "Content-Type": "application/json"})
    response = api.call_api(*request, _request_timeout=_request_timeout)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=response.reason, body=response.data)
    return response


def _stream_lines(response, lines: queue.SimpleQueue[str | None], pod: str) -> None:
    """A followed log's response, line by line (without the newline) into `lines`, then None when it ends."""
    pending = b""
    try:
        for chunk in response.stream(4096, decode_content=True):
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                lines.put(line.decode("utf-8", errors="replace"))
        if pending:
            lines.put(pending.decode("utf-8", errors="replace"))
    except (urllib3.exceptions.HTTPError, OSError) as error:  # broken (or shut by the follower): what came is all
        log.info("following %s's log stopped: %s", pod, error)
    finally:
        lines.put(None)
        response.release_conn()
        response.close()


def _terminal_events(pod: Mapping, now: float) -> list[ClusterEvent]:
    spec, _ = objects.pod_spec(pod)
    status = pod.get("status") or {}
    node = objects.node_name(pod)
    if objects.phase(pod) == "Succeeded":
        return [ClusterEvent(EventKind.POD_FINISHED, now, node, spec.name, spec.job_id)]
    reason = status.get("reason") or ""
    detail = f"{reason}: {status.get('message', '')}".strip(": ") or "failed"
    kind = EventKind.POD_EVICTED if reason in ("Evicted", "Preempting", "NodeShutdown", "Terminated") else \
        EventKind.POD_FAILED
    return [ClusterEvent(kind, now, node, spec.name, spec.job_id, detail)]


def _refusal(what: str, error: ApiException) -> Exception:
    message = error.reason or ""
    try:
        message = json.loads(error.body or "{}").get("message") or message
    except (ValueError, AttributeError):
        pass
    text = f"{what}: {error.status} {message}"
    if error.status == 429:
        return BackendBusy(text)
    if error.status == 404:
        return NotFound(text)
    if error.status == 409:
        return Conflict(text)
    if error.status == 0 or error.status >= 500:
        return BackendUnavailable(text)
    return BackendError(text)
