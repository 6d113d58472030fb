"""The real Kubernetes control plane platform/stack.sh starts (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok), as the tests use it: an admin client, kwok nodes made from NodeViews, and a workloads namespace
emptied after each test.

kwok plays the kubelet of every node annotated kwok.x-k8s.io/node=fake (platform/kube/kwok/stages.yaml): a bound pod
goes Running and Ready at once, a training pod labelled with a run time succeeds a second after it, a deleted pod is
removed, and a pod a test crashes (`KwokCluster.restart_container`) has its container restarted in place.
Nodes are cluster-wide, so a test's nodes are the only nodes Tidal sees (those with a resource-group label) while it
runs: the fixture deletes any left from an earlier test first. kwok serves a pod's log (pods/log) from the file the
kwok log writer (cluster/simulated/kwok_logs.py) writes, which tidal_on_kwok runs beside the live loops.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from redis import Redis

from cluster.backend import RESOURCE_GROUP_LABEL
from cluster.kubernetes.kwok import node_object
from cluster.simulated.kwok_logs import KwokLogWriter
from cluster.types import NodeView
from colocation import live_backend
from tests.integration.livecluster import on_kubernetes

Obj = dict
RESTARTS_ANNOTATION = "tidal.io/sim-restarts"  # the restart count kwok takes a pod's container to (stages.yaml)


def admin_client() -> client.ApiClient:
    """A client with the admin certificate of the control plane `platform/stack.sh env` names."""
    path = os.environ.get("TIDAL_KUBECONFIG") or os.environ.get("KUBECONFIG")
    if not path or not os.path.exists(path):
        pytest.fail("no Kubernetes control plane: start it with platform/stack.sh start and export "
                    "platform/stack.sh env (TIDAL_KUBECONFIG)")
    configuration = client.Configuration()
    config.load_kube_config(config_file=path, client_configuration=configuration)
    return client.ApiClient(configuration)


def wait_for(condition: Callable[[], object], seconds: float = 30, what: str = "the cluster") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {seconds} s")
        time.sleep(0.05)


def items(response) -> list[Obj]:
    return json.loads(response.data)["items"]


def ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not \
        (node.get("spec") or {}).get("taints")


def ensure_namespace(core: client.CoreV1Api, namespace: str) -> None:
    """`namespace`, and its `default` ServiceAccount (made by the service-account controller), without which no pod
    can be created there."""
    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except ApiException as error:
        if error.status != 409:
            raise
    wait_for(lambda: any(sa["metadata"]["name"] == "default" for sa in items(
        core.list_namespaced_service_account(namespace, _preload_content=False))),
        what=f"serviceaccount {namespace}/default")


@dataclass
class KwokCluster:
    """kwok nodes and a workloads namespace on the real control plane, through an admin client."""

    api: client.ApiClient
    namespace: str

    def __post_init__(self) -> None:
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)

    # -- reads -------------------------------------------------------------------------------------------
    def pods(self) -> list[Obj]:
        return items(self.core.list_namespaced_pod(self.namespace, _preload_content=False))

    def pod(self, name: str) -> Obj | None:
        return next((p for p in self.pods() if p["metadata"]["name"] == name), None)

    def services(self) -> list[Obj]:
        return items(self.core.list_namespaced_service(self.namespace, _preload_content=False))

    def nodes(self) -> list[Obj]:
        return items(self.core.list_node(label_selector=RESOURCE_GROUP_LABEL, _preload_content=False))

    # -- what a kubelet would do -------------------------------------------------------------------------------
    def restart_container(self, name: str, timeout_s: float = 30) -> None:
        """The engine of pod `name` crashes and its kubelet starts it again (restartPolicy Always): kwok's
        tidal-pod-container-restart stage takes its container's restartCount one up and the pod out of Ready, and
        tidal-pod-ready-after-restart readies it after its start-up time. Returns once the API server shows the
        restart; a pod still starting is restarted once it is ready."""
        def restarts() -> int:
            return self.pod(name)["status"]["containerStatuses"][0]["restartCount"]

        before = restarts()
        self.core.patch_namespaced_pod(name, self.namespace,
                                       {"metadata": {"annotations": {RESTARTS_ANNOTATION: str(before + 1)}}})
        wait_for(lambda: restarts() > before, timeout_s, what=f"the container of {name} restarted")

    # -- setting up and emptying ---------------------------------------------------------------------------
    def add_nodes(self, views: Iterable[NodeView]) -> None:
        names = []
        for view in views:
            self.core.create_node(node_object(view))
            names.append(view.name)
        # kwok reports them Ready; the node lifecycle controller then lifts the not-ready taint
        wait_for(lambda: all(ready(n) for n in self.nodes() if n["metadata"]["name"] in names) and
                 {n["metadata"]["name"] for n in self.nodes()} >= set(names), what="kwok nodes Ready")

    def ensure_namespace(self) -> None:
        ensure_namespace(self.core, self.namespace)

    def empty(self) -> None:
        """Every ReplicaSet, pod, Service, PodDisruptionBudget and Lease of the namespace and every Tidal node gone
        (pods forcibly: a pod left on a node name would count against the next test's node of that name)."""
        client.CoordinationV1Api(self.api).delete_collection_namespaced_lease(self.namespace)
        client.PolicyV1Api(self.api).delete_collection_namespaced_pod_disruption_budget(self.namespace)
        self.apps.delete_collection_namespaced_replica_set(self.namespace, propagation_policy="Orphan")
        wait_for(lambda: not items(self.apps.list_namespaced_replica_set(self.namespace, _preload_content=False)),
                 what="replicasets deleted")
        self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        for service in self.services():
            self.core.delete_namespaced_service(service["metadata"]["name"], self.namespace)
        for node in self.nodes():
            self.core.delete_node(node["metadata"]["name"])
        wait_for(lambda: not self.pods() and not self.nodes(), what="pods and nodes deleted")

    # -- waiting for the cluster -----------------------------------------------------------------------------
    def settle(self, timeout_s: float = 20) -> None:
        """Until the controllers have caught up: every ReplicaSet has its replicas, no pod is being deleted, every
        bound pod runs or has ended, and nothing changed over the last half second."""
        deadline, last = time.monotonic() + timeout_s, None
        while time.monotonic() < deadline:
            state = self._state()
            if state == last and self._quiet():
                return
            last = state
            time.sleep(0.25)
        raise AssertionError(f"the cluster did not settle in {timeout_s} s")

    def _state(self) -> list[tuple]:
        return sorted((p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in self.pods())

    def _quiet(self) -> bool:
        for rs in items(self.apps.list_namespaced_replica_set(self.namespace, _preload_content=False)):
            status = rs.get("status") or {}
            if status.get("observedGeneration") != rs["metadata"]["generation"] or \
                    status.get("replicas", 0) != rs["spec"]["replicas"]:
                return False
        for pod in self.pods():
            if pod["metadata"].get("deletionTimestamp"):
                return False
            if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") == "Pending":
                return False
        return True


@contextmanager
def kwok_cluster(nodes: Iterable[NodeView], namespace: str = "tidal-workloads") -> Iterator[KwokCluster]:
    """`nodes` as kwok nodes, the only Tidal nodes on the control plane, and an empty `namespace`; emptied after."""
    cluster = KwokCluster(admin_client(), namespace)
    cluster.ensure_namespace()
    cluster.empty()
    cluster.add_nodes(nodes)
    try:
        yield cluster
    finally:
        cluster.empty()
        cluster.api.close()


# -- Tidal's identity: the ServiceAccount and RBAC its Helm chart renders -----------------------------------------
# platform/kubernetes/tidal.yaml: the chart's rendering with the default values (make manifests), proved up to date by
# tests/integration/test_helm_chart.py.
RENDERED = Path(__file__).resolve().parents[2] / "platform" / "kubernetes" / "tidal.yaml"
IDENTITY = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
SERVICE_ACCOUNT = ("tidal", "tidal")  # namespace, name: the release's


def apply_identity(api: client.ApiClient) -> None:
    """Server-side apply Tidal's namespaces, ServiceAccount, Roles and bindings, as the chart renders them (in the
    release's namespace, which Helm would create)."""
    ensure_namespace(client.CoreV1Api(api), SERVICE_ACCOUNT[0])
    dynamic = DynamicClient(api)
    for doc in yaml.safe_load_all(RENDERED.read_text()):
        if doc and doc["kind"] in IDENTITY:
            resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
            dynamic.server_side_apply(resource, body=doc, namespace=doc["metadata"].get("namespace"),
                                      field_manager="tidal-tests", force_conflicts=True)


def tidal_client(admin: client.ApiClient) -> client.ApiClient:
    """A client that is Tidal's ServiceAccount (a bound token from the TokenRequest API), with nothing but the
    permissions the chart's RBAC grants it."""
    apply_identity(admin)
    namespace, name = SERVICE_ACCOUNT
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=3600))
    token = client.CoreV1Api(admin).create_namespaced_service_account_token(name, namespace, request).status.token
    configuration = client.Configuration()
    configuration.host, configuration.ssl_ca_cert = admin.configuration.host, admin.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def kubeconfig_of(api: client.ApiClient) -> dict:
    """A kubeconfig for a client with a bearer token (tidal_client's)."""
    configuration = api.configuration
    return {"apiVersion": "v1", "kind": "Config", "current-context": "tidal",
            "clusters": [{"name": "kwok", "cluster": {"server": configuration.host,
                                                      "certificate-authority": configuration.ssl_ca_cert}}],
            "users": [{"name": "tidal", "user": {"token": configuration.api_key["authorization"].split()[-1]}}],
            "contexts": [{"name": "tidal", "context": {"cluster": "kwok", "user": "tidal"}}]}


@contextmanager
def tidal_on_kwok(settings, tmp_path: Path, nodes: Iterable[NodeView], *, namespace: str = "tidal-workloads",
                  prefix: str) -> Iterator[tuple[KwokCluster, str]]:
    """kwok_cluster with its training pods' logs written (the kwok log writer), and the live loops and the log reads
    on it as Tidal's ServiceAccount: the cluster and the test's Redis namespace (`prefix-…`), all emptied after."""
    with kwok_cluster(nodes, namespace) as cluster, closing(admin_client()) as writer_api, \
            KwokLogWriter(writer_api, namespace, tmp_path / "pod-logs"):
        path = tmp_path / "kubeconfig"
        with closing(tidal_client(cluster.api)) as tidal:
            path.write_text(yaml.safe_dump(kubeconfig_of(tidal)))
        redis_namespace = on_kubernetes(settings, path, namespace=namespace, prefix=prefix)
        settings.TIDAL_K8S_LEASE_NAMESPACE = SERVICE_ACCOUNT[0]  # where the Role lets Tidal lead
        redis = Redis.from_url(settings.REDIS_URL)
        try:
            yield cluster, redis_namespace
        finally:
            live_backend.kubernetes_backend()[0].stop()
            live_backend.kubernetes_backend.cache_clear()
            for key in redis.scan_iter(f"{redis_namespace}:*"):
                redis.delete(key)
