"""platform/kubernetes/, checked offline (no cluster, no network, no helm): the chart's rendering with the default
values (platform/kubernetes/tidal.yaml, `make manifests`; tests/integration/test_helm_chart.py proves it up to date)
is valid Kubernetes objects with no unknown field, and the deployment keeps its promises: least-privilege RBAC,
secrets only by reference, probes on /healthz and /readyz, one beat, resources everywhere, settings names that
tidal/settings.py really reads."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "platform" / "kubernetes"
RENDERED = KUBE / "tidal.yaml"
CHART = KUBE / "chart"
SETTINGS = (ROOT / "tidal" / "settings.py").read_text()

SECRET = "tidal-secrets"
SECRET_ENV = {"DATABASE_URL": "database-url", "REDIS_URL": "redis-url", "DJANGO_SECRET_KEY": "django-secret-key",
              "TIDAL_ALERT_WEBHOOK_URL": "alert-webhook-url"}
REQUIRED_SECRET_ENV = {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}
DEPLOYMENTS = {"tidal-web", "tidal-worker", "tidal-beat"}

# Every permission Tidal holds: (role kind, namespace or None, apiGroup, resource) -> verbs. These are the calls
# cluster/kubernetes/ makes; a rule added to the chart's templates/rbac.yaml without a reason here fails the test.
PERMISSIONS = {
    ("ClusterRole", None, "", "nodes"): {"get", "list", "watch", "patch"},
    ("ClusterRole", None, "", "pods"): {"list", "watch"},  # the tick's read counts every pod's requests on its node
    ("Role", "tidal-workloads", "", "pods"): {"get", "list", "watch", "create", "delete", "patch"},
    ("Role", "tidal-workloads", "", "pods/eviction"): {"create"},
    ("Role", "tidal-workloads", "", "pods/log"): {"get"},
    ("Role", "tidal-workloads", "", "services"): {"create", "delete"},  # a gang's headless Service
    ("Role", "tidal-workloads", "apps", "replicasets"): {"get", "list", "watch", "create", "patch"},
    ("Role", "tidal", "coordination.k8s.io", "leases"): {"get", "create", "update", "patch"},
}


def load(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


DOCS = load(RENDERED)


def of_kind(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in DOCS if d["kind"] == kind}


def containers(deployment: dict) -> list[dict]:
    spec = deployment["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def model_name(doc: dict) -> str:
    """apps/v1 Deployment -> V1Deployment: the kubernetes client's model for the document."""
    version = doc["apiVersion"].rsplit("/", 1)[-1]
    return version[0].upper() + version[1:] + doc["kind"]


# --- the strict schema check ---------------------------------------------------------------------------------
# The client's deserializer ignores keys it does not know (a misspelt `readinessprobe` would vanish silently, and
# so would the probe), so every key is checked against the models' attribute_map here, and every scalar against
# its declared type (a ConfigMap value written 0 instead of "0" is refused by the API server).
PRIMITIVES = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "datetime": (str,),
              "date": (str,), "bytearray": (str,)}


def unknown_fields(data, type_name: str, where: str = "") -> list[str]:
    type_name = type_name.strip()
    if m := re.fullmatch(r"Optional\[(.*)\]", type_name):
        return unknown_fields(data, m.group(1), where)
    if m := re.fullmatch(r"(?:List|list)\[(.*)\]", type_name):
        if not isinstance(data, list):
            return [f"{where}: a list expected"]
        return [e for i, item in enumerate(data) for e in unknown_fields(item, m.group(1), f"{where}[{i}]")]
    if m := re.fullmatch(r"(?:Dict\[|dict\()\s*str\s*,\s*(.*)[\])]", type_name):
        if not isinstance(data, dict):
            return [f"{where}: a mapping expected"]
        return [e for k, v in data.items() for e in unknown_fields(v, m.group(1), f"{where}.{k}")]
    if type_name == "object":
        return []
    if type_name in PRIMITIVES:
        ok = isinstance(data, PRIMITIVES[type_name]) and not (type_name != "bool" and isinstance(data, bool))
        return [] if ok else [f"{where}: {type_name} expected, got {data!r}"]
    model = getattr(client.models, type_name)
    if not isinstance(data, dict):
        return [f"{where}: a {type_name} mapping expected"]
    by_key = {key: attr for attr, key in model.attribute_map.items()}
    errors = []
    for key, value in data.items():
        if key not in by_key:
            errors.append(f"{where}.{key}: no such field in {type_name}")
        elif value is not None:
            errors.extend(unknown_fields(value, model.openapi_types[by_key[key]], f"{where}.{key}"))
    return errors


def test_the_strict_check_catches_what_the_client_would_ignore():
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "lables": {}}, "data": {"A": 0}}
    assert unknown_fields(bad, "V1ConfigMap") == [".metadata.lables: no such field in V1ObjectMeta",
                                                  ".data.A: str expected, got 0"]


# --- the rendering ------------------------------------------------------------------------------------------
def test_every_document_is_a_valid_kubernetes_object():
    assert DOCS, "platform/kubernetes/tidal.yaml is empty: make manifests"
    for doc in DOCS:
        name = model_name(doc)
        where = f"{doc['kind']}/{doc.get('metadata', {}).get('name')}"
        assert hasattr(client.models, name), f"{where}: no model {name} for {doc['apiVersion']}"
        assert unknown_fields(doc, name) == [], where
        # Required fields: the models refuse a missing one (ValueError, or pydantic's ValidationError under it).
        obj = client.ApiClient()._ApiClient__deserialize(doc, name)
        assert obj.metadata.name and (obj.metadata.namespace or doc["kind"] in {"Namespace", "ClusterRole",
                                                                                 "ClusterRoleBinding"}), where


# --- namespaces, identity, RBAC ------------------------------------------------------------------------------
def test_the_namespaces_are_the_ones_the_configuration_names():
    config = of_kind("ConfigMap")["tidal-config"]["data"]
    # The release's namespace is Helm's (--create-namespace); the chart makes the workloads namespace.
    assert set(of_kind("Namespace")) == {config["TIDAL_K8S_NAMESPACE"]} == {"tidal-workloads"}
    assert config["TIDAL_K8S_LEASE_NAMESPACE"] == "tidal"
    assert {d["metadata"].get("namespace") for d in DOCS} == {None, "tidal", "tidal-workloads"}
    roles = {(d["metadata"]["namespace"], r["resources"][0]) for d in of_kind("Role").values() for r in d["rules"]}
    assert (config["TIDAL_K8S_NAMESPACE"], "pods") in roles
    assert (config["TIDAL_K8S_LEASE_NAMESPACE"], "leases") in roles
    assert config["TIDAL_CLUSTER_BACKEND"] == "kubernetes" and config["TIDAL_KUBECONFIG"] == ""  # in-cluster


def test_rbac_grants_exactly_the_backends_calls():
    granted: dict[tuple, set] = {}
    for doc in DOCS:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        namespace = doc["metadata"].get("namespace")
        for rule in doc["rules"]:
            assert not rule.get("nonResourceURLs"), rule
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"{doc['metadata']['name']}: wildcard in {field}"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    granted.setdefault((doc["kind"], namespace, group, resource), set()).update(rule["verbs"])
    assert granted == PERMISSIONS
    assert not any(r == "secrets" for _, _, _, r in granted)


def test_every_role_is_bound_to_the_service_account_only():
    roles = {(d["kind"], d["metadata"]["name"]) for d in DOCS if d["kind"] in ("ClusterRole", "Role")}
    bound = set()
    for doc in DOCS:
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding"):
            assert doc["subjects"] == [{"kind": "ServiceAccount", "name": "tidal", "namespace": "tidal"}]
            assert doc["roleRef"]["kind"] != "ClusterRole" or doc["kind"] == "ClusterRoleBinding"
            bound.add((doc["roleRef"]["kind"], doc["roleRef"]["name"]))
    assert bound == roles
    assert set(of_kind("ServiceAccount")) == {"tidal"}


def test_all_three_deployments_run_as_the_service_account_and_only_the_worker_holds_its_token():
    deployments = of_kind("Deployment")
    assert set(deployments) == DEPLOYMENTS
    for name, d in deployments.items():
        spec = d["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == "tidal", name
        assert spec.get("automountServiceAccountToken") is (name == "tidal-worker"), name
    assert of_kind("ServiceAccount")["tidal"]["automountServiceAccountToken"] is False


# --- Deployments ---------------------------------------------------------------------------------------------
def test_every_container_has_requests_and_limits():
    for d in of_kind("Deployment").values():
        for c in containers(d):
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"].get(bound, {})), (d["metadata"]["name"], c["name"])


def test_every_pod_runs_as_the_images_non_root_user_on_a_read_only_root():
    uid = int(containerfile_user().split(":")[0])
    for d in of_kind("Deployment").values():
        spec = d["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == uid
        scratch = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in containers(d):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert {"name": next(iter(scratch & {"tmp"})), "mountPath": "/tmp"} in c["volumeMounts"]


def test_web_probes_hit_healthz_and_readyz_on_the_gunicorn_port_with_an_allowed_host():
    web = of_kind("Deployment")["tidal-web"]
    (container,) = web["spec"]["template"]["spec"]["containers"]
    assert web["spec"]["replicas"] == 2
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    allowed = of_kind("ConfigMap")["tidal-config"]["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = container[probe]["httpGet"]
        assert ports.get(get["port"], get["port"]) == 8000
        assert {"name": "Host", "value": get_host(get)} in get["httpHeaders"] and get_host(get) in allowed


def get_host(http_get: dict) -> str:
    return next(h["value"] for h in http_get.get("httpHeaders", []) if h["name"] == "Host")


def test_beat_is_exactly_one_and_never_two_during_a_rollout():
    beat = of_kind("Deployment")["tidal-beat"]
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}


def test_commands_start_what_manage_py_up_starts():
    deployments = of_kind("Deployment")
    commands = {name: d["spec"]["template"]["spec"]["containers"][0].get("command") for name, d in deployments.items()}
    assert commands["tidal-web"] is None  # the image's CMD: gunicorn tidal.wsgi
    assert commands["tidal-worker"][:4] == ["celery", "-A", "tidal", "worker"]
    assert commands["tidal-beat"][:4] == ["celery", "-A", "tidal", "beat"]
    assert any(a.startswith("/tmp/") for a in commands["tidal-beat"])  # its schedule file on the writable scratch


def test_service_and_disruption_budget_select_the_web_pods():
    web = of_kind("Deployment")["tidal-web"]
    labels = web["spec"]["template"]["metadata"]["labels"]
    assert web["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = of_kind("Service")["tidal-web"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    pdb = of_kind("PodDisruptionBudget")["tidal-web"]
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for d in of_kind("Deployment").values():  # each Deployment selects its own pods, not the others'
        assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()


# --- configuration and secrets -------------------------------------------------------------------------------
def read_by_settings(name: str) -> bool:
    if name == "DATABASE_URL":  # dj-database-url's config() reads it by default
        return "dj_database_url.config(" in SETTINGS and "env=" not in SETTINGS.split("dj_database_url.config(")[1][:80]
    return f'os.environ.get("{name}"' in SETTINGS


def test_every_setting_given_is_one_tidal_settings_reads():
    config = of_kind("ConfigMap")["tidal-config"]["data"]
    assert [k for k in config if not read_by_settings(k)] == []
    assert [k for k in SECRET_ENV if not read_by_settings(k)] == []
    assert not set(config) & set(SECRET_ENV), "a secret setting in the ConfigMap"
    for d in of_kind("Deployment").values():
        for c in containers(d):
            assert c["envFrom"] == [{"configMapRef": {"name": "tidal-config"}}]
            assert [e["name"] for e in c.get("env", []) if not read_by_settings(e["name"])] == []


def test_secrets_are_only_referenced():
    assert not of_kind("Secret"), "a Secret in the default rendering: the operator creates it"
    for d in of_kind("Deployment").values():
        for c in containers(d):
            env = {e["name"]: e for e in c.get("env", [])}
            assert REQUIRED_SECRET_ENV <= set(env), (d["metadata"]["name"], c["name"])
            for name, var in env.items():
                assert "value" not in var, f"{name} has a literal value"
                ref = var["valueFrom"]["secretKeyRef"]
                assert ref["name"] == SECRET and ref["key"] == SECRET_ENV[name]
                assert ref.get("optional", False) is (name not in REQUIRED_SECRET_ENV)
    # No credentials anywhere in what is applied: no URL with a user:password@, no scheme of the secret URLs.
    text = RENDERED.read_text()
    assert not re.search(r"\b(postgres(ql)?|redis|rediss)://", text)
    assert not re.search(r"://[^/\s:@]*:[^/\s@]+@", text)


def test_the_schema_refuses_in_settings_exactly_what_other_values_and_the_secrets_set():
    """values.yaml's free-form `settings` may not name a setting the chart writes from another value (the ConfigMap
    would hold it twice, and one would silently win) nor a secret (it would sit in the ConfigMap in clear)."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["settings"]
    refused = {name for name, rule in schema["properties"].items() if rule is False}
    (values,) = load(CHART / "values.yaml")
    config = of_kind("ConfigMap")["tidal-config"]["data"]
    optional = {"TIDAL_TRACES_DIR"}  # set only with replays.tracesClaim (tests/integration/test_helm_chart.py)
    assert refused == (set(config) - set(values["settings"])) | set(SECRET_ENV) | optional


def test_production_settings_are_on():
    config = of_kind("ConfigMap")["tidal-config"]["data"]
    assert config["DJANGO_DEBUG"] == "0" and config["TIDAL_HTTPS"] == "1"


# --- the image -----------------------------------------------------------------------------------------------
def containerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", (KUBE / "Containerfile").read_text())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1] if " " in ln else "") for ln in lines]


def containerfile_user() -> str:
    return [args for op, args in containerfile() if op == "USER"][-1]


def test_containerfile_builds_a_non_root_gunicorn_image():
    instructions = containerfile()
    ops = [op for op, _ in instructions]
    assert instructions[0][0] == "FROM" and instructions[0][1].startswith("python:3.11-slim")
    user = containerfile_user()
    assert re.fullmatch(r"\d+(:\d+)?", user), "numeric, so that runAsNonRoot can verify it"
    assert int(user.split(":")[0]) != 0
    assert ops.index("USER") > max(i for i, (op, args) in enumerate(instructions) if op == "RUN")  # last RUN as root
    assert ("EXPOSE", "8000") in instructions
    (cmd,) = [args for op, args in instructions if op == "CMD"]
    assert cmd.startswith('["gunicorn", "tidal.wsgi"') and "0.0.0.0:8000" in cmd
    runs = " ".join(args for op, args in instructions if op == "RUN")
    assert "pip install -r requirements.txt" in runs and "collectstatic --noinput" in runs
    assert "java" not in runs.lower() and "jdk" not in runs.lower()


def test_containerfile_copies_every_top_level_package():
    copied = {args.split()[0].rstrip("/") for op, args in containerfile() if op == "COPY"}
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests"}
    assert packages <= copied, f"missing from the image: {packages - copied}"
    assert "manage.py" in " ".join(args for op, args in containerfile() if op == "COPY")
