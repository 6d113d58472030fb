"""The live loop binding a cycle's admissions in one batch on the real control plane, when the API server itself
refuses a create the backend's own check let through: a ResourceQuota of the namespace (403 "exceeded quota", which
the backend cannot know from its read). The gang whose worker was refused leaves nothing bound, once."""
from __future__ import annotations

import time
from contextlib import closing

import pytest
from kubernetes import client

from cluster.kubernetes.backend import KubernetesCluster, KubeSettings
from core.models import Decision
from scheduler import live
from scheduler.models import JobStatus
from scheduler.policy.decisions import CycleResult
from tests.integration.gangs import add_gang_nodes, gang_admit, gang_job
from tests.integration.kubecluster import kwok_cluster, tidal_client, wait_for

pytestmark = pytest.mark.django_db
NS = "tidal-workloads"


def test_a_gang_whose_one_create_the_api_server_refuses_leaves_nothing_bound(world):
    from colocation.selectors import node_views

    add_gang_nodes(world)
    with kwok_cluster(node_views(), NS) as cluster, closing(tidal_client(cluster.api)) as api:
        quota = {"metadata": {"name": "three-pods"}, "spec": {"hard": {"pods": "3"}}}
        cluster.core.create_namespaced_resource_quota(NS, quota)
        wait_for(lambda: (cluster.core.read_namespaced_resource_quota("three-pods", NS).status.hard or {}),
                 what="the quota controller's first count")  # the server admits no pod against an uncounted quota
        backend = KubernetesCluster(api, KubeSettings(namespace=NS, grace_period_s=1))
        try:
            job = gang_job(world)
            report = live.TickReport()
            live.act(CycleResult(time.time(), (gang_admit(job),)), backend, time.time(), report)
            assert report.admitted == 0
            job.refresh_from_db()
            assert job.status == JobStatus.PENDING
            assert sorted(w["state"] for w in job.runs.get().workers) == ["failed", "stopped", "stopped", "stopped"]
            (requeued,) = Decision.objects.filter(subject=f"job:{job.pk}", reason="bind-failed")
            assert "exceeded quota" in requeued.message and "the 3 workers bound were removed" in requeued.message
            cluster.settle()
            assert cluster.pods() == [] and cluster.services() == []
        finally:
            backend.stop()
            client.CoreV1Api(cluster.api).delete_namespaced_resource_quota("three-pods", NS)
