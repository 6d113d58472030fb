"""The training containers of kwok's nodes, as far as their logs go: each training pod's log written to a file that
kwok serves as the pod's `pods/log`, read through the real API server.

kwok plays the kubelet of its nodes but runs no container; it serves a pod's log from the file a kwok `Logs` object
(namespace and name of the pod) names: platform/stack.sh applies that CRD (platform/kube/kwok/logs-crd.yaml) and
starts kwok with --enable-crds Logs. This writer plays the containers. For every training pod of `namespace` that has
started on a node, it writes, in the CRI log format a container runtime writes, the lines cluster.simulated.podlog
decides (the simulated cluster's deterministic training log) as their time comes, ends them as the pod ends (success
after its labelled run time; the SIGTERM lines once it is being deleted), and makes the pod's `Logs` object, owned by
the pod so that the garbage collector removes it with the pod. A pod gone, its file goes. podlog decides; this writes.

    python -m cluster.simulated.kwok_logs --kubeconfig .run/kube/kwok.kubeconfig --namespace tidal-workloads \
        --dir .run/pod-logs

A pod evicted on kwok is removed at once (the pod-delete stage of platform/kube/kwok/stages.yaml), so its SIGTERM
lines are written but seldom read: its archive keeps the log read before the eviction.
"""
from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from cluster.backend import KIND_LABEL, RUNTIME_LABEL, TRAINING
from cluster.kubernetes.objects import annotations_of, labels_of, pod_spec, timestamp
from cluster.simulated import podlog

log = logging.getLogger(__name__)
GROUP, VERSION, PLURAL = "kwok.x-k8s.io", "v1alpha1", "logs"
EVICTION_REASON = "tidal.io/eviction-reason"  # the Kubernetes backend annotates it before it evicts


def log_source(pod: dict) -> podlog.PodLogSource | None:
    """What the pod's container logs, from the pod as stored: its spec, its start, and its end (after its labelled run
    time; its deletion: an eviction); None before it started."""
    status, metadata = pod.get("status") or {}, pod["metadata"]
    if not pod["spec"].get("nodeName") or not status.get("startTime"):
        return None
    spec, _ = pod_spec(pod)
    started = timestamp(status["startTime"])
    if metadata.get("deletionTimestamp"):
        return podlog.source_of(spec, started, ended_at=timestamp(metadata["deletionTimestamp"]), end=podlog.EVICTED,
                                reason=annotations_of(pod).get(EVICTION_REASON, ""))
    runtime = labels_of(pod).get(RUNTIME_LABEL)
    if runtime:
        return podlog.source_of(spec, started, ended_at=started + float(runtime), end=podlog.SUCCEEDED)
    return podlog.source_of(spec, started)


def cri_lines(lines: list[str]) -> str:
    """podlog's lines (each starts with its RFC 3339 time) as a container runtime writes them: `<time> stdout F
    <line>`, so that kwok's sinceSeconds goes by the time a line was written."""
    return "".join(f"{line.partition(' ')[0]} stdout F {line}\n" for line in lines)


@dataclass
class KwokLogWriter:
    """Writes the logs of `namespace`'s training pods into `directory`, a pass every `period_s` (start()/close(), or
    `with`); write_pass() is one pass."""

    api: client.ApiClient
    namespace: str
    directory: Path
    period_s: float = 0.2
    _written: dict[str, tuple[Path, int]] = field(default_factory=dict, init=False)  # pod uid -> file, lines
    _closed: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.directory = Path(self.directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._core, self._custom = client.CoreV1Api(self.api), client.CustomObjectsApi(self.api)

    def __enter__(self) -> KwokLogWriter:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="kwok-log-writer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def run(self) -> None:
        """Passes until close()."""
        while not self._closed.wait(self.period_s):
            try:
                self.write_pass()
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:  # the API server away: next pass
                log.warning("kwok log writer: pass failed: %s", error)
            except Exception:  # a bug: say so, and keep the logs going
                log.exception("kwok log writer: pass failed")

    def write_pass(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        pods = json.loads(self._core.list_namespaced_pod(self.namespace, label_selector=f"{KIND_LABEL}={TRAINING}",
                                                         _preload_content=False).data)["items"]
        alive = set()
        for pod in pods:
            source = log_source(pod)
            if source is not None:
                alive.add(pod["metadata"]["uid"])
                self._write(pod, source, now)
        for uid in set(self._written) - alive:  # the pod is gone: so is its log (its Logs object goes with it)
            path, _ = self._written.pop(uid)
            path.unlink(missing_ok=True)

    def _write(self, pod: dict, source: podlog.PodLogSource, now: float) -> None:
        uid = pod["metadata"]["uid"]
        if uid not in self._written:
            path = self.directory / f"{self.namespace}_{pod['metadata']['name']}_{uid}.log"
            path.touch()
            self._publish(pod, path)
            self._written[uid] = (path, 0)
        path, written = self._written[uid]
        count = podlog.pod_log_count(source, now)
        if count > written:
            with path.open("a") as file:
                file.write(cri_lines(podlog.pod_log_lines(source, now, tail=count - written)))
            self._written[uid] = (path, count)

    def _publish(self, pod: dict, path: Path) -> None:
        """The pod's Logs object naming `path` (replacing one left by an earlier pod of the same name)."""
        metadata = pod["metadata"]
        owner = {"apiVersion": "v1", "kind": "Pod", "name": metadata["name"], "uid": metadata["uid"]}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Logs",
                "metadata": {"name": metadata["name"], "namespace": self.namespace, "ownerReferences": [owner]},
                "spec": {"logs": [{"logsFile": str(path), "follow": True}]}}
        try:
            self._custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        except ApiException as error:
            if error.status != 409:
                raise
            self._custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, metadata["name"],
                                                        {"metadata": body["metadata"], "spec": body["spec"]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", default="tidal-workloads")
    parser.add_argument("--dir", required=True, type=Path, help="where the log files are written (kwok reads them)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    writer = KwokLogWriter(config.new_client_from_config(config_file=args.kubeconfig), args.namespace, args.dir)
    log.info("writing the training logs of namespace %s into %s", args.namespace, writer.directory)
    try:
        writer.run()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
