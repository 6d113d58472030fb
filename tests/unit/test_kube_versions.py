"""The control plane's versions live in platform/kube/versions.env; the go.mod beside each build says the same, every
k8s.io staging module is pinned to the Kubernetes release's v0.X.Y, and build.sh builds exactly the modules' tools."""
import re
from pathlib import Path

import pytest

KUBE = Path(__file__).resolve().parents[2] / "platform" / "kube"


def versions() -> dict[str, str]:
    lines = (line.split("#")[0].strip() for line in (KUBE / "versions.env").read_text().splitlines())
    return dict(line.split("=", 1) for line in lines if line)


def required(module: str) -> dict[str, str]:
    """module path -> version, from a go.mod's require lines (single and in blocks)."""
    text = (KUBE / module / "go.mod").read_text()
    return dict(re.findall(r"^(?:require\s+|\t)(\S+) (v\S+)", text, re.M))


def tools(module: str) -> set[str]:
    text = (KUBE / module / "go.mod").read_text()
    single = re.findall(r"^tool ([^\s(]+)$", text, re.M)
    blocks = [line.strip() for block in re.findall(r"^tool \($(.*?)^\)", text, re.M | re.S)
              for line in block.splitlines() if line.strip()]
    return {*single, *blocks}


def built() -> set[tuple[str, str, str]]:
    """(module folder, package, version variable) of each component build.sh builds."""
    rows = re.findall(r'^\s+"[\w-]+\|(\w+)\|(\S+)\|\$(\w+)\|[^"]*"$', (KUBE / "build.sh").read_text(), re.M)
    return set(rows)


@pytest.mark.parametrize("module, path, variable", [
    ("kubernetes", "k8s.io/kubernetes", "KUBERNETES_VERSION"),
    ("etcd", "go.etcd.io/etcd/server/v3", "ETCD_VERSION"),
    ("kubernetes", "sigs.k8s.io/kwok", "KWOK_VERSION"),
    ("helm", "helm.sh/helm/v4", "HELM_VERSION"),
])
def test_each_go_mod_requires_the_version_in_versions_env(module, path, variable):
    assert required(module)[path] == versions()[variable]


def test_every_staging_module_is_pinned_to_the_release():
    release = versions()["KUBERNETES_VERSION"]  # v1.37.2 -> the staging modules' v0.37.2
    staging = "v0." + release.removeprefix("v1.")
    text = (KUBE / "kubernetes" / "go.mod").read_text()
    replaces = dict(re.findall(r"^\t(k8s\.io/[\w-]+) => \1 (v\S+)$", text, re.M))
    assert len(replaces) > 20 and set(replaces.values()) == {staging}
    for path, version in required("kubernetes").items():
        if path in replaces:
            assert version == staging, path


def test_build_script_builds_the_modules_tools_at_their_versions():
    rows = built()
    assert {(module, package) for module, package, _ in rows} == {
        (module, package) for module in ("kubernetes", "etcd", "helm") for package in tools(module)}
    variables = {"k8s.io/kubernetes": "KUBERNETES_VERSION", "go.etcd.io/etcd/server/v3": "ETCD_VERSION",
                 "sigs.k8s.io/kwok": "KWOK_VERSION", "helm.sh/helm/v4": "HELM_VERSION"}
    assert all(variable == next(v for path, v in variables.items() if package.startswith(path))
               for _, package, variable in rows)
