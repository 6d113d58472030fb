"""Tidal's identity on the real control plane: the ServiceAccount and RBAC its Helm chart renders
(platform/kubernetes/tidal.yaml), applied as shipped. What the backend needs is granted (the whole backend contract
suite runs under this identity: tests/integration/test_backend_contract.py); what it does not need answers 403 — the
Roles are least-privilege."""
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster.backend import BackendUnavailable
from cluster.kubernetes.conventions import LEASE_NAME
from cluster.kubernetes.lease import LeaseElector
from cluster.types import NodeState, NodeView, Pool
from tests.integration.kubecluster import kwok_cluster, tidal_client

NODES = (NodeView("n1", "cpu", None, 0, 8000, 32768, Pool.COLOCATION, NodeState.ONLINE_NORMAL),)
NS = "tidal-workloads"


@pytest.fixture(scope="module")
def tidal():
    with kwok_cluster(NODES, NS) as cluster:
        api = tidal_client(cluster.api)
        yield cluster, api
        api.close()


def refused(call, *args, **kwargs) -> int:
    try:
        call(*args, **kwargs)
    except ApiException as error:
        return error.status
    return 200


@pytest.mark.parametrize("what, call", [
    ("delete a node", lambda core, apps: core.delete_node("n1")),
    ("read secrets", lambda core, apps: core.list_namespaced_secret(NS)),
    ("create a pod outside its namespace", lambda core, apps: core.create_namespaced_pod("default", {
        "metadata": {"name": "intruder"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})),
    ("delete a ReplicaSet", lambda core, apps: apps.delete_namespaced_replica_set("svc", NS)),
    ("update a pod's status", lambda core, apps: core.patch_namespaced_pod_status("p", NS, {"status": {}})),
    ("create a node", lambda core, apps: core.create_node({"metadata": {"name": "n2"}})),
], ids=lambda v: v if isinstance(v, str) else "")
def test_what_the_roles_do_not_grant_is_forbidden(tidal, what, call):
    _, api = tidal
    assert refused(call, client.CoreV1Api(api), client.AppsV1Api(api)) == 403, what


def test_what_the_backend_reads_is_granted(tidal):
    _, api = tidal
    core = client.CoreV1Api(api)
    assert [n.metadata.name for n in core.list_node().items] == ["n1"]
    assert core.list_pod_for_all_namespaces(watch=False).items == []


def test_the_leader_lease_is_held_only_in_tidals_own_namespace(tidal):
    _, api = tidal
    now = time.time()
    assert LeaseElector(api, "tidal", LEASE_NAME, "worker-a").acquire(now)
    assert LeaseElector(api, "tidal", LEASE_NAME, "worker-a").acquire(now + 1)  # renewed
    with pytest.raises(BackendUnavailable, match="403"):  # whoever may create workloads cannot lead
        LeaseElector(api, NS, LEASE_NAME, "worker-a").acquire(now)
    with pytest.raises(BackendUnavailable, match="403"):  # only that Lease, by name
        LeaseElector(api, "tidal", "another-lease", "worker-a").acquire(now)
