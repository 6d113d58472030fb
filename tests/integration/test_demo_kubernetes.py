"""The demo's LLM service on the Kubernetes backend (docs/how-to/kubernetes.md#the-demo-on-kubernetes): the demo's
seeding, its inventory registered as kwok nodes the way `up --kubernetes` registers it, and the live loops' Celery
ticks acting on the real control plane as Tidal's ServiceAccount (tests/integration/kubecluster.py). Through the API
server: llm-chat's groups are bound whole on G2 kwok nodes, every pod with LeaderWorkerSet's environment and under its
group's headless Service; kwok makes them ready after their start-up; the autoscaler on the demo's traffic scales them
in by whole groups, the highest index first, their Services with them."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from cluster.backend import GROUP_LABEL, SERVICE_LABEL, WORKER_LABEL
from cluster.kubernetes.conventions import GPU_MODEL_LABEL
from cluster.kubernetes.kwok import register_nodes
from colocation import tasks
from colocation.models import InferenceService, ServiceGroup
from colocation.selectors import node_views
from core.models import Decision
from demo.data import LLM_GPUS_PER_POD, LLM_GROUP_SIZE, LLM_SERVICE, LLM_STATIC_GROUPS, demo_load
from tests.integration.kubecluster import KwokCluster, tidal_on_kwok, wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the ticks commit, as the demo's worker does
NS = "tidal-workloads"
# The demo day starts at 22:00 (TIDAL_DEMO_START_HOUR); from 02:00 its traffic is in the night trough, where four
# groups are far more than llm-chat needs: the first minutes the autoscaler reads ask for a scale-in.
NIGHT_HOUR = 2


def llm_pods(cluster: KwokCluster) -> dict[int, list[dict]]:
    """Group index -> its pods on the API server that are not being deleted, leader first."""
    groups: dict[int, list[dict]] = {}
    for pod in cluster.pods():
        labels = pod["metadata"].get("labels", {})
        if labels.get(SERVICE_LABEL) == LLM_SERVICE and not pod["metadata"].get("deletionTimestamp"):
            groups.setdefault(int(labels[GROUP_LABEL]), []).append(pod)
    return {i: sorted(pods, key=lambda p: int(p["metadata"]["labels"][WORKER_LABEL])) for i, pods in sorted(groups.items())}


def llm_services(cluster: KwokCluster) -> dict[str, dict]:
    return {s["metadata"]["name"]: s["spec"] for s in cluster.services()
            if s["metadata"]["name"].startswith(f"{LLM_SERVICE}-group-")}


def ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions", ()))


def env(pod: dict) -> dict[str, str]:
    (container,) = pod["spec"]["containers"]
    return {e["name"]: e["value"] for e in container.get("env", ())}


def test_the_demos_llm_service_runs_whole_groups_on_kwok_nodes_and_scales_them_in(settings, tmp_path):
    demo_load(traces_dir=Path(django_settings.TRACES_DIR))
    # the demo's 20 s start-up (kwok's tidal.io/sim-startup-s stage) cut to 1 s: the test does not wait it out
    InferenceService.objects.filter(name=LLM_SERVICE).update(startup_s=1)
    settings.TIDAL_DEMO_TRAFFIC = True
    settings.TIDAL_DEMO_START_HOUR = NIGHT_HOUR
    with tidal_on_kwok(settings, tmp_path, (), namespace=NS, prefix="test-demo-k8s") as (cluster, _):
        registered = register_nodes(cluster.api, node_views(), (NS,))
        assert registered.created == len(node_views()) and not registered.others

        tasks.lending_tick()  # applies every service: llm-chat's groups are bound
        groups = llm_pods(cluster)
        assert list(groups) == list(range(LLM_STATIC_GROUPS))
        g2 = {n["metadata"]["name"] for n in cluster.nodes() if n["metadata"]["labels"].get(GPU_MODEL_LABEL) == "G2"}
        nodes = [p["spec"]["nodeName"] for pods in groups.values() for p in pods]
        assert set(nodes) <= g2 and len(set(nodes)) == len(nodes)  # a whole G2 node per pod
        for index, pods in groups.items():
            leader = f"{LLM_SERVICE}-{index}"
            assert [p["metadata"]["name"] for p in pods] == [leader, f"{leader}-1"]
            for worker, pod in enumerate(pods):
                assert {k: v for k, v in env(pod).items() if k.startswith("LWS_")} == {
                    "LWS_LEADER_ADDRESS": f"{leader}.{LLM_SERVICE}-group-{index}",
                    "LWS_GROUP_SIZE": str(LLM_GROUP_SIZE), "LWS_WORKER_INDEX": str(worker),
                    "LWS_GROUP_INDEX": str(index)}
                assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (
                    pod["metadata"]["name"], f"{LLM_SERVICE}-group-{index}")
                limits = pod["spec"]["containers"][0]["resources"]["limits"]
                assert limits["nvidia.com/gpu"] == str(LLM_GPUS_PER_POD)
        services = llm_services(cluster)
        assert set(services) == {f"{LLM_SERVICE}-group-{i}" for i in groups}
        for name, spec in services.items():
            assert spec["clusterIP"] == "None"  # headless: each pod resolves as <pod>.<service>
            assert spec["selector"] == {SERVICE_LABEL: LLM_SERVICE, GROUP_LABEL: name.rsplit("-", 1)[1]}

        wait_for(lambda: all(ready(p) for pods in llm_pods(cluster).values() for p in pods), what="llm-chat ready")
        tasks.lending_tick()  # sees the groups ready
        assert ServiceGroup.objects.filter(service__name=LLM_SERVICE, ready=True).count() == LLM_STATIC_GROUPS

        def scaled_in() -> bool:
            tasks.autoscale_tick()
            return Decision.objects.filter(subject=f"service:{LLM_SERVICE}", reason="scale-in").exists()

        for _ in range(40):  # the demo clock measures a minute every 0.42 s; the policy reads the last 5
            if scaled_in():
                break
            time.sleep(0.5)
        else:
            raise AssertionError(list(Decision.objects.filter(subject=f"service:{LLM_SERVICE}")
                                      .values_list("reason", "message")))
        wanted = InferenceService.objects.get(name=LLM_SERVICE).replicas
        assert 2 <= wanted < LLM_STATIC_GROUPS
        cluster.settle()
        assert list(llm_pods(cluster)) == list(range(wanted))  # the highest indexes went, whole
        assert set(llm_services(cluster)) == {f"{LLM_SERVICE}-group-{i}" for i in range(wanted)}
        # the highest indexes first, down to the count wanted (from the most it ran: a TTFT miss may have added groups)
        placed = Decision.objects.filter(subject=f"service:{LLM_SERVICE}", reason="group-placed")
        most = max(LLM_STATIC_GROUPS, *(d.data["group"] + 1 for d in placed if d.data.get("group") is not None))
        removed = Decision.objects.filter(subject=f"service:{LLM_SERVICE}", reason="group-removed").order_by("id")
        assert [d.data["group"] for d in removed] == list(range(most - 1, wanted - 1, -1))
