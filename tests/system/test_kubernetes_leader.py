"""Leader election on a real Lease: two Celery workers of the project's app (A and B) drive the real control plane
(tests/integration/kubecluster.py) as the live scheduler does, each with its own leader identity. A's tick is stopped
mid-tick without timing (the test holds the row of a job A is about to admit: A waits there with the Lease, the
cluster lock and half its admissions done, their pods created), then A is killed with SIGKILL. B acts once A's lock and
Lease have expired, and then every job runs with exactly one pod — none bound twice, none lost — and the fault
invariants hold (tests/integration/fault_invariants.py)."""
from __future__ import annotations

import os
import time
from collections import Counter

import psycopg
import pytest
from kubernetes import client

from cluster.kubernetes.backend import KubernetesCluster, KubeSettings
from cluster.kubernetes.conventions import LEASE_NAME
from cluster.types import Pool
from colocation.models import Node, NodeState
from colocation.selectors import node_views
from scheduler.models import JobStatus, Quota, TrainingJob
from tests.integration.kubecluster import kwok_cluster
from tests.system import fault_invariants
from tests.system.test_faults_worker import DSN, two_workers, wait_for

NS = "tidal-workloads"
NODES, JOBS, BLOCKED_AT = 6, 24, 12  # 4 T4 GPUs a node, one-GPU jobs: every job fits
LOCK_S, LEASE_S = 4, 5


@pytest.fixture
def workers(tmp_path):
    env = {**os.environ, "TIDAL_CLUSTER_BACKEND": "kubernetes", "TIDAL_K8S_NAMESPACE": NS,
           "TIDAL_K8S_LEASE_NAMESPACE": NS, "TIDAL_K8S_LEASE_S": str(LEASE_S), "TIDAL_CLUSTER_LOCK_S": str(LOCK_S),
           "DATABASE_URL": DSN()}
    with two_workers("test-leader", env, tmp_path, leader_ids=True) as started:
        yield started


def queue(world) -> None:
    group, t4 = world.groups["t4"], world.gpu_models["T4"]
    Node.objects.bulk_create(
        Node(name=f"lead-t4-{i}", resource_group=group, gpu_model=t4, gpu_count=4, cpu_milli=96000,
             memory_mib=1048576, pool=Pool.FIXED, state=NodeState.OFFLINE_NORMAL) for i in range(NODES))
    Quota.objects.filter(department=world.departments["ml-search"]).update(own=10**9)
    for i in range(JOBS):
        world.submit(name=f"lead-{i}", gpus="1", gpu_model="T4")


@pytest.mark.django_db(transaction=True)
def test_the_leader_killed_mid_tick_is_replaced_and_no_pod_is_bound_twice(world, workers):
    namespace, a, b = workers
    queue(world)
    jobs = TrainingJob.objects.filter(name__startswith="lead-").order_by("pk")
    held = jobs[BLOCKED_AT]
    with kwok_cluster(node_views(), NS) as cluster:
        a.ready()
        b.ready()
        with psycopg.connect(DSN()) as locker, psycopg.connect(DSN(), autocommit=True) as observer:
            locker.execute("SELECT 1 FROM scheduler_trainingjob WHERE id = %s FOR UPDATE", (held.pk,))
            a.send_tick()
            wait_for(lambda: observer.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'").fetchone()[0], "A to reach the held job")
            bound_by_a = len(cluster.pods())
            assert bound_by_a == 0  # A records a cycle's every admission before it binds their pods in one batch
            assert b.tick() == "None", "B must not act while A leads"
            a.kill()
            killed_at = time.monotonic()
            locker.rollback()

        while (report := b.tick()) == "None":  # until A's cluster lock and Lease have expired
            assert time.monotonic() - killed_at < LOCK_S + LEASE_S + 60, "B never took over"
            time.sleep(0.25)
        print(f"A bound {bound_by_a} pods before SIGKILL; B acted {time.monotonic() - killed_at:.1f} s after: "
              f"{report[:100]}")
        for _ in range(5):  # B's next ticks see its binds' pods start
            if set(jobs.values_list("status", flat=True)) == {JobStatus.RUNNING}:
                break
            b.tick()
        assert set(jobs.values_list("status", flat=True)) == {JobStatus.RUNNING}
        pods = Counter(p["metadata"]["labels"]["tidal.io/job"] for p in cluster.pods()
                       if not p["metadata"].get("deletionTimestamp"))
        assert set(pods) == {str(pk) for pk in jobs.values_list("pk", flat=True)} and set(pods.values()) == {1}
        lease = client.CoordinationV1Api(cluster.api).read_namespaced_lease(LEASE_NAME, NS).spec
        assert lease.holder_identity == "worker-b" and lease.lease_transitions >= 1  # the leadership moved
        backend = KubernetesCluster(cluster.api, KubeSettings(namespace=NS))
        try:
            assert fault_invariants.violations(backend) == []
        finally:
            backend.stop()
