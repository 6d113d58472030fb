"""Tidal's Helm chart (platform/kubernetes/chart) with helm v4 (built from its Go module, platform/kube/build.sh) on the
real control plane platform/stack.sh starts. `helm lint` passes; the plain manifests are its rendering, up to date;
`helm install` creates what the chart promises and the real controllers act on it (kube-controller-manager makes the
ReplicaSets and pods, kube-scheduler places them on a kwok node, kwok runs them), with the values given in the
ConfigMap, the Secret and the pods; an upgrade that changes a setting rolls the pods; `helm uninstall` removes it all
but the workloads namespace; and bad values are refused by the schema before anything reaches the cluster."""
from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cluster.kubernetes.kwok import KWOK_ANNOTATION
from tests.integration.kubecluster import RENDERED, admin_client, items, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "platform" / "kubernetes" / "chart"

RELEASE, NAMESPACE, WORKLOADS = "tidal-it", "tidal-helm", "tidal-helm-workloads"  # apart from the other tests'
NODE = "helm-control-plane"
PLACE = {"tidal-test/helm": "control-plane"}  # the node's label and taint; the chart's pods select and tolerate them
REPLICAS = {"web": 3, "worker": 2, "beat": 1}
VALUES = {
    "image": {"repository": "registry.example.com/tidal", "tag": "9.9.9"},
    "workloads": {"namespace": WORKLOADS},
    "database": {"url": "postgres://tidal:pw@db.example.internal:5432/tidal"},
    "redis": {"url": "redis://:pw@redis.example.internal:6379/0"},
    "kafka": {"bootstrapServers": "kafka-0.example.internal:9092,kafka-1.example.internal:9092"},
    "prometheus": {"url": "http://prometheus.example.internal:9090"},
    "django": {"allowedHosts": ["tidal.example.org"], "secretKey": {"value": "not-a-secret"}},
    "alertWebhook": {"secretRef": {"name": "alerts", "key": "url"}},  # by reference: the chart's Secret lacks it
    "settings": {"TIDAL_SCHEDULER_INTERVAL_S": "7"},
    "web": {"replicas": REPLICAS["web"]},
    "nodeSelector": PLACE,
    "tolerations": [{"key": "tidal-test/helm", "operator": "Equal", "value": "control-plane",
                     "effect": "NoSchedule"}],
}


@dataclass
class Helm:
    binary: Path
    env: dict[str, str]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.binary), *args], env=self.env, capture_output=True, text=True, timeout=300)
        if check:
            assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def releases(self) -> list[str]:  # in any status (helm v4 lists them all)
        return [r["name"] for r in yaml.safe_load(self("list", "--all-namespaces", "-o", "json").stdout)]


@pytest.fixture(scope="module")
def helm(tmp_path_factory) -> Helm:
    """helm on the admin kubeconfig, its own configuration and cache (nothing shared with another checkout)."""
    binary = Path(os.environ.get("TIDAL_KUBE_BIN", "")) / "helm"
    kubeconfig = os.environ.get("TIDAL_KUBECONFIG", "")
    if not binary.is_file() or not os.path.exists(kubeconfig):
        pytest.fail("no helm or no control plane: platform/kube/build.sh, platform/stack.sh start and export "
                    "platform/stack.sh env (TIDAL_KUBE_BIN, TIDAL_KUBECONFIG)")
    home = tmp_path_factory.mktemp("helm")
    env = {**os.environ, "KUBECONFIG": kubeconfig, "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_CACHE_HOME": str(home / "cache"), "HELM_DATA_HOME": str(home / "data")}
    return Helm(binary, env)


@pytest.fixture(scope="module")
def values_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text(yaml.safe_dump(VALUES))
    return path


# --- the chart, offline ------------------------------------------------------------------------------------------
def test_helm_lint_passes_with_the_default_values_and_with_ours(helm, values_file):
    helm("lint", "--strict", str(CHART))
    helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(values_file))


def test_the_plain_manifests_are_the_charts_rendering():
    rendered = subprocess.run(["bash", str(ROOT / "platform" / "kubernetes" / "render.sh")], capture_output=True,
                              text=True, check=True, timeout=300).stdout
    assert rendered == RENDERED.read_text(), "platform/kubernetes/tidal.yaml is stale: run make manifests"


def test_replays_share_the_claims_named_in_web_and_worker(helm):
    docs = [d for d in yaml.safe_load_all(helm("template", "tidal", str(CHART), "--namespace", "tidal", "--set",
                                               "replays.existingClaim=replays,replays.tracesClaim=traces").stdout) if d]
    assert next(d for d in docs if d["kind"] == "ConfigMap")["data"]["TIDAL_TRACES_DIR"] == "/app/traces"
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"}
    for name in ("tidal-web", "tidal-worker"):
        volumes = {v["name"]: v.get("persistentVolumeClaim") for v in pods[name]["volumes"]}
        assert volumes["replays"] == {"claimName": "replays"}
        assert volumes["traces"] == {"claimName": "traces", "readOnly": True}
        mounts = {m["name"]: m for m in pods[name]["containers"][0]["volumeMounts"]}
        assert mounts["traces"] == {"name": "traces", "mountPath": "/app/traces", "readOnly": True}
    assert "traces" not in {v["name"] for v in pods["tidal-beat"]["volumes"]}


BAD_VALUES = [  # --set, and what the error says
    ("web.replicas=0", "at '/web/replicas': minimum: got 0, want 1"),
    ("web.replica=3", "at '/web': additional properties 'replica' not allowed"),
    ("redis.url=http://redis.example.internal:6379", "at '/redis/url'"),
    ("kafka.bootstrapServers=kafka://kafka.example.internal:9092", "at '/kafka/bootstrapServers'"),
    ("settings.DATABASE_URL=postgres://db/tidal", "at '/settings/DATABASE_URL': false schema"),
    ("service.type=ExternalName", "at '/service/type'"),
    ("database.secretRef.name=Not_A_Name", "at '/database/secretRef/name'"),
]


@pytest.mark.parametrize("bad, error", BAD_VALUES, ids=[bad.split("=")[0] for bad, _ in BAD_VALUES])
def test_bad_values_are_refused_by_the_schema_before_anything_reaches_the_cluster(helm, bad, error):
    refused = helm("install", "tidal-bad", str(CHART), "--namespace", "tidal-helm-bad", "--create-namespace",
                   "--set", bad, check=False)
    assert refused.returncode != 0
    assert "values don't meet the specifications of the schema" in refused.stderr and error in refused.stderr, \
        refused.stderr
    assert "tidal-bad" not in helm.releases()
    with admin_client() as api:
        assert "tidal-helm-bad" not in {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}


# --- installed on the control plane ------------------------------------------------------------------------------
@dataclass
class Cluster:
    api: client.ApiClient

    def __post_init__(self) -> None:
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        self.rbac, self.policy = client.RbacAuthorizationV1Api(self.api), client.PolicyV1Api(self.api)

    def deployments(self) -> dict[str, dict]:
        return {d["metadata"]["name"]: d for d in items(self.apps.list_namespaced_deployment(
            NAMESPACE, _preload_content=False))}

    def replica_sets(self) -> list[dict]:
        return items(self.apps.list_namespaced_replica_set(NAMESPACE, _preload_content=False))

    def pods(self) -> list[dict]:
        return items(self.core.list_namespaced_pod(NAMESPACE, _preload_content=False))

    def namespaces(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in items(self.core.list_namespace(_preload_content=False))}

    def add_node(self) -> None:
        self.core.create_node({
            "metadata": {"name": NODE, "labels": PLACE, "annotations": KWOK_ANNOTATION},
            "spec": {"taints": [{"key": k, "value": v, "effect": "NoSchedule"} for k, v in PLACE.items()]},
            "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                       "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}})

    def remove(self) -> None:
        for name in (NAMESPACE, WORKLOADS):
            if name in self.namespaces():
                self.core.delete_namespace(name)
        if any(n.metadata.name == NODE for n in self.core.list_node().items):
            self.core.delete_node(NODE)
        wait_for(lambda: not {NAMESPACE, WORKLOADS} & set(self.namespaces()), 60, "the test's namespaces deleted")


def rolled_out(cluster: Cluster) -> bool:
    """Every Deployment has its replicas, all updated and ready, and nothing else runs."""
    deployments = cluster.deployments()
    return len(deployments) == 3 and all(
        (d.get("status") or {}).get("observedGeneration") == d["metadata"]["generation"] and
        all((d.get("status") or {}).get(k) == d["spec"]["replicas"] for k in ("replicas", "updatedReplicas",
                                                                              "readyReplicas"))
        for d in deployments.values()) and len(cluster.pods()) == sum(REPLICAS.values())


@pytest.fixture(scope="module")
def installed(helm, values_file) -> Iterator[Cluster]:
    """The chart installed as RELEASE in NAMESPACE with VALUES, its pods placed on a kwok node of their own."""
    with admin_client() as api:
        cluster = Cluster(api)
        cluster.remove()  # what an interrupted earlier run left
        cluster.add_node()
        try:
            helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace",
                 "-f", str(values_file), "--wait", "--timeout", "3m")
            wait_for(lambda: rolled_out(cluster), 60, "the three Deployments rolled out")
            yield cluster
        finally:
            if RELEASE in helm.releases():
                helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
            cluster.remove()


def component(obj: dict) -> str:
    return obj["metadata"]["labels"]["app.kubernetes.io/component"]


def owner(obj: dict) -> tuple[str, str]:
    (ref,) = [r for r in obj["metadata"]["ownerReferences"] if r.get("controller")]
    return ref["kind"], ref["uid"]


def test_the_controllers_run_the_three_deployments_on_the_node_the_values_choose(installed):
    deployments = installed.deployments()
    assert {name: d["spec"]["replicas"] for name, d in deployments.items()} == \
        {f"{RELEASE}-{c}": n for c, n in REPLICAS.items()}
    replica_sets = installed.replica_sets()
    # One ReplicaSet per Deployment, made by the deployment controller; the pods made by the ReplicaSet controller.
    assert sorted(owner(rs) for rs in replica_sets) == sorted(("Deployment", d["metadata"]["uid"])
                                                              for d in deployments.values())
    by_uid = {rs["metadata"]["uid"]: component(rs) for rs in replica_sets}
    pods = installed.pods()
    assert sorted(by_uid[owner(p)[1]] for p in pods) == sorted(c for c, n in REPLICAS.items() for _ in range(n))
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeName"] == NODE and pod["status"]["phase"] == "Running"  # kube-scheduler, then kwok
        assert {c["image"] for c in spec["containers"] + spec.get("initContainers", [])} == \
            {"registry.example.com/tidal:9.9.9"}
        assert spec["serviceAccountName"] == RELEASE
        # Only the worker holds the ServiceAccount's token (the projected kube-api-access volume).
        tokens = [v for v in spec["volumes"] if v["name"].startswith("kube-api-access")]
        assert bool(tokens) is (component(pod) == "worker"), pod["metadata"]["name"]
    assert [c["name"] for c in next(p for p in pods if component(p) == "web")["spec"]["initContainers"]] == \
        ["migrate"]


def test_the_service_account_holds_exactly_the_rbac_the_contract_suite_runs_under(installed):
    """The Roles installed carry the rules of the rendering the backend contract suite and the RBAC test run under
    (platform/kubernetes/tidal.yaml), bound to this release's ServiceAccount only."""
    shipped = {(d["kind"], d["metadata"]["name"].removeprefix("tidal-")): d["rules"]
               for d in yaml.safe_load_all(RENDERED.read_text()) if d and d["kind"] in ("ClusterRole", "Role")}
    rbac = installed.rbac
    installed_roles = {
        ("ClusterRole", "controller"): rbac.read_cluster_role(f"{RELEASE}-controller"),
        ("Role", "workloads"): rbac.read_namespaced_role(f"{RELEASE}-workloads", WORKLOADS),
        ("Role", "leader-election"): rbac.read_namespaced_role(f"{RELEASE}-leader-election", NAMESPACE),
    }
    assert {key: [installed.api.sanitize_for_serialization(r) for r in role.rules]
            for key, role in installed_roles.items()} == shipped
    bindings = [rbac.read_cluster_role_binding(f"{RELEASE}-controller"),
                rbac.read_namespaced_role_binding(f"{RELEASE}-workloads", WORKLOADS),
                rbac.read_namespaced_role_binding(f"{RELEASE}-leader-election", NAMESPACE)]
    for binding in bindings:
        assert [(s.kind, s.name, s.namespace) for s in binding.subjects] == [("ServiceAccount", RELEASE, NAMESPACE)]
        assert binding.role_ref.name == binding.metadata.name
    assert installed.core.read_namespaced_service_account(RELEASE, NAMESPACE).automount_service_account_token is False
    # What the API server's authorizer decides for the ServiceAccount.
    user = f"system:serviceaccount:{NAMESPACE}:{RELEASE}"
    authorization = client.AuthorizationV1Api(installed.api)

    def allowed(verb: str, resource: str, namespace: str | None = None, group: str = "", name: str = "") -> bool:
        review = {"spec": {"user": user, "resourceAttributes": {
            "verb": verb, "resource": resource, "group": group, "namespace": namespace, "name": name}}}
        return authorization.create_subject_access_review(review).status.allowed

    assert allowed("patch", "nodes") and allowed("watch", "pods")
    assert allowed("create", "pods", WORKLOADS) and not allowed("create", "pods", NAMESPACE)
    assert allowed("update", "leases", NAMESPACE, "coordination.k8s.io", "tidal-controller")
    assert not allowed("update", "leases", WORKLOADS, "coordination.k8s.io", "tidal-controller")
    assert not allowed("list", "secrets", WORKLOADS) and not allowed("delete", "nodes")


def test_the_values_reach_the_configmap_the_secret_and_every_container(installed):
    config = installed.core.read_namespaced_config_map(f"{RELEASE}-config", NAMESPACE).data
    assert {k: config[k] for k in ("KAFKA_BOOTSTRAP", "PROMETHEUS_URL", "DJANGO_ALLOWED_HOSTS", "TIDAL_K8S_NAMESPACE",
                                   "TIDAL_K8S_LEASE_NAMESPACE", "TIDAL_SCHEDULER_INTERVAL_S")} == {
        "KAFKA_BOOTSTRAP": VALUES["kafka"]["bootstrapServers"], "PROMETHEUS_URL": VALUES["prometheus"]["url"],
        "DJANGO_ALLOWED_HOSTS": "tidal.example.org,localhost", "TIDAL_K8S_NAMESPACE": WORKLOADS,
        "TIDAL_K8S_LEASE_NAMESPACE": NAMESPACE, "TIDAL_SCHEDULER_INTERVAL_S": "7"}
    secret = installed.core.read_namespaced_secret(f"{RELEASE}-secrets", NAMESPACE).data
    assert {k: base64.b64decode(v).decode() for k, v in secret.items()} == {
        "database-url": VALUES["database"]["url"], "redis-url": VALUES["redis"]["url"],
        "django-secret-key": "not-a-secret"}
    ours = {"name": f"{RELEASE}-secrets"}
    expected = {"DATABASE_URL": {**ours, "key": "database-url"}, "REDIS_URL": {**ours, "key": "redis-url"},
                "DJANGO_SECRET_KEY": {**ours, "key": "django-secret-key"}}
    for pod in installed.pods():
        for container in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
            assert container["envFrom"] == [{"configMapRef": {"name": f"{RELEASE}-config"}}]
            env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
            if component(pod) == "worker":
                assert env.pop("TIDAL_ALERT_WEBHOOK_URL") == {"name": "alerts", "key": "url", "optional": True}
            assert env == expected


def test_the_service_and_the_disruption_budget_cover_the_web_pods(installed):
    web = {p["metadata"]["name"] for p in installed.pods() if component(p) == "web"}
    service = installed.core.read_namespaced_service(f"{RELEASE}-web", NAMESPACE)
    assert [(p.port, p.target_port) for p in service.spec.ports] == [(80, "http")]
    selected = installed.core.list_namespaced_pod(NAMESPACE, label_selector=",".join(
        f"{k}={v}" for k, v in service.spec.selector.items())).items
    assert {p.metadata.name for p in selected} == web
    # The disruption controller counts the pods the budget covers: every web pod, healthy; one must stay.
    name = f"{RELEASE}-web"
    wait_for(lambda: (installed.policy.read_namespaced_pod_disruption_budget(name, NAMESPACE).status.expected_pods
                      == len(web)), what="the disruption budget's status")
    status = installed.policy.read_namespaced_pod_disruption_budget(name, NAMESPACE).status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (3, 1, 2)


def test_an_upgrade_that_changes_a_setting_rolls_every_deployment(installed, helm):
    """The pods read the ConfigMap only at start: its checksum in the pod template makes a changed setting a new
    ReplicaSet per Deployment."""
    before = {rs["metadata"]["name"] for rs in installed.replica_sets()}
    helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
         "--set", "settings.TIDAL_SCHEDULER_INTERVAL_S=9", "--wait", "--timeout", "3m")
    wait_for(lambda: rolled_out(installed), 60, "the three Deployments rolled out again")
    assert installed.core.read_namespaced_config_map(f"{RELEASE}-config", NAMESPACE).data[
        "TIDAL_SCHEDULER_INTERVAL_S"] == "9"
    current = {owner(p)[1] for p in installed.pods()}
    fresh = {rs["metadata"]["uid"] for rs in installed.replica_sets() if rs["metadata"]["name"] not in before}
    assert len(fresh) == 3 and current == fresh


def test_uninstall_removes_everything_but_the_workloads_namespace(installed, helm):
    helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait")
    assert RELEASE not in helm.releases()
    core, rbac, policy = installed.core, installed.rbac, installed.policy

    def gone(read, *args) -> bool:
        try:
            read(*args)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(lambda: not installed.deployments() and not installed.replica_sets() and not installed.pods(), 60,
             "the Deployments, their ReplicaSets and pods deleted")
    assert all(gone(*call) for call in [
        (core.read_namespaced_config_map, f"{RELEASE}-config", NAMESPACE),
        (core.read_namespaced_secret, f"{RELEASE}-secrets", NAMESPACE),
        (core.read_namespaced_service, f"{RELEASE}-web", NAMESPACE),
        (core.read_namespaced_service_account, RELEASE, NAMESPACE),
        (policy.read_namespaced_pod_disruption_budget, f"{RELEASE}-web", NAMESPACE),
        (rbac.read_cluster_role, f"{RELEASE}-controller"),
        (rbac.read_cluster_role_binding, f"{RELEASE}-controller"),
        (rbac.read_namespaced_role, f"{RELEASE}-workloads", WORKLOADS),
        (rbac.read_namespaced_role_binding, f"{RELEASE}-workloads", WORKLOADS),
        (rbac.read_namespaced_role, f"{RELEASE}-leader-election", NAMESPACE),
        (rbac.read_namespaced_role_binding, f"{RELEASE}-leader-election", NAMESPACE),
    ])
    # Kept: it holds the training pods and inference services that run there.
    namespace = installed.namespaces()[WORKLOADS]
    assert namespace["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert namespace["status"]["phase"] == "Active"
