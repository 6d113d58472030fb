"""The live loops end to end on the Kubernetes backend, on the real control plane platform/stack.sh starts
(kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok nodes; tests/integration/kubecluster.py): the
scheduler's tick, the lending controller's lend (create-before-delete) and take-back, leader election on a real
Lease, and faults. The backend talks to the API server through a fault-injecting proxy
(tests/integration/faultproxy.py), which stops mid-tick and answers 500 on demand; a 409 and a 429 come from the
API server itself (a write on a stale resourceVersion; an eviction a PodDisruptionBudget forbids)."""
from __future__ import annotations

import time

import pytest
import yaml
from kubernetes import client
from redis import Redis

from cluster.backend import RUNTIME_LABEL
from cluster.kubernetes.conventions import LEASE_NAME
from cluster.kubernetes.lease import LeaseElector
from colocation import controller, live_backend, services
from cluster.types import Pool
from colocation.models import Node, NodeState, NodeTransition
from colocation.policy import Direction
from colocation.selectors import lending_profile, node_views
from core.models import Decision
from scheduler import live
from scheduler.models import JobStatus, TrainingJob
from scheduler.policy.profile import get_profile
from tests.integration.faultproxy import FaultProxy
from tests.integration.kubecluster import kwok_cluster
from tests.integration.livecluster import on_kubernetes

pytestmark = pytest.mark.django_db(transaction=True)  # the watch threads read nothing from the database, but the
# ticks commit as in production
NS = "tidal-workloads"


@pytest.fixture
def kube(world, settings, tmp_path):
    """The world's inventory (without the fixed T4 node, so T4 training lands on lent nodes) plus a second online
    T4 node, as kwok nodes; the live loops configured for the control plane, through the fault proxy."""
    Node.objects.filter(name="t4-0").delete()
    Node.objects.create(name="t4-2", resource_group=world.groups["t4"], gpu_model=world.gpu_models["T4"], gpu_count=2,
                        cpu_milli=32000, memory_mib=131072, pool=Pool.COLOCATION, state=NodeState.ONLINE_NORMAL)
    for group in world.groups.values():
        group.lending = False
        group.save()
    with kwok_cluster(node_views(), NS) as cluster, FaultProxy(cluster.api.configuration) as proxy:
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(proxy.kubeconfig()))
        namespace = on_kubernetes(settings, path, namespace=NS, prefix="test-k8s")
        settings.TIDAL_CLUSTER_BACKOFF_S = 0.01
        redis = Redis.from_url(settings.REDIS_URL)
        yield world, cluster, proxy, redis, namespace
        live_backend.kubernetes_backend()[0].stop()
        live_backend.kubernetes_backend.cache_clear()
        for key in redis.scan_iter(f"{settings.TIDAL_REDIS_NAMESPACE}:*"):
            redis.delete(key)


def schedule(kube):
    _, cluster, _, redis, namespace = kube
    cluster.settle()
    return live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal"))


def lend_tick(kube):
    _, cluster, _, redis, namespace = kube
    cluster.settle()
    return controller.run_lending_tick(redis=redis, namespace=namespace, profile=lending_profile())


def until(step, done, ticks: int = 60, pause: float = 0.1):
    for _ in range(ticks):
        step()
        if done():
            return
        time.sleep(pause)
    raise AssertionError("did not converge")


def pods(cluster, **labels) -> list[dict]:
    return [p for p in cluster.pods() if all((p["metadata"].get("labels") or {}).get(k) == v for k, v in labels.items())]


def node_of(cluster, name: str) -> dict:
    return next(n for n in cluster.nodes() if n["metadata"]["name"] == name)


def submit(world, **fields):
    job = world.submit(gpus="1", gpu_model="T4", **fields)
    return TrainingJob.objects.get(pk=job.pk)


# --- the loops ---------------------------------------------------------------------------------------------


def test_the_scheduler_binds_on_the_cluster_and_records_the_end(kube):
    world, cluster, *_ = kube
    services.transition_request(node=Node.objects.get(name="t4-1"), direction=Direction.LEND, actor=None,
                                reason="operator", message="for training")
    until(lambda: lend_tick(kube), lambda: Node.objects.get(name="t4-1").state == NodeState.OFFLINE_NORMAL)
    job = submit(world)
    job.annotations = {RUNTIME_LABEL: "1"}
    job.save()
    report = schedule(kube)
    assert report.admitted == 1
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.node.name == "t4-1"
    (pod,) = pods(cluster, **{"tidal.io/job": str(job.pk)})
    assert pod["spec"]["nodeName"] == "t4-1" and pod["metadata"]["name"] == job.runs.get().pod
    assert pod["spec"]["containers"][0]["image"] == job.image
    until(lambda: schedule(kube), lambda: TrainingJob.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED)
    assert Decision.objects.filter(subject=f"job:{job.pk}", reason="finished").count() == 1


def test_lend_migrates_inference_create_before_delete_and_take_back_requeues_training(kube):
    world, cluster, *_ = kube
    world.service(name="search-api", gpu_model=world.gpu_models["T4"], replicas=1, min_replicas=1, max_replicas=2,
                  gpus_per_replica=1, cpu_milli_per_replica=2000, memory_mib_per_replica=4096, autoscaling=False)
    until(lambda: lend_tick(kube), lambda: any(_ready(p) for p in pods(cluster, **{"tidal.io/service": "search-api"})))
    (first,) = pods(cluster, **{"tidal.io/service": "search-api"})
    lent = first["spec"]["nodeName"]  # kube-scheduler's choice of the two online T4 nodes
    other = ({"t4-1", "t4-2"} - {lent}).pop()

    services.transition_request(node=Node.objects.get(name=lent), direction=Direction.LEND, actor=None,
                                reason="operator", message="lend it")
    serving = []

    def step():
        lend_tick(kube)
        serving.append(sum(_ready(p) for p in pods(cluster, **{"tidal.io/service": "search-api"})))

    until(step, lambda: NodeTransition.objects.get(node__name=lent).status == NodeTransition.Status.DONE)
    assert min(serving) >= 1  # the service never dropped its replica
    live_pods = [p for p in pods(cluster, **{"tidal.io/service": "search-api"}) if not p["metadata"].get("deletionTimestamp")]
    assert [p["spec"]["nodeName"] for p in live_pods] == [other]
    node = node_of(cluster, lent)
    assert node["metadata"]["labels"]["tidal.io/state"] == "offline-normal" and not node["spec"].get("unschedulable")
    assert Node.objects.get(name=lent).state == NodeState.OFFLINE_NORMAL

    job = submit(world)
    schedule(kube)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.node.name == lent
    services.transition_request(node=Node.objects.get(name=lent), direction=Direction.TAKE_BACK, actor=None,
                                reason="operator", message="peak")
    until(lambda: lend_tick(kube), lambda: NodeTransition.objects.filter(
        node__name=lent, status=NodeTransition.Status.DONE).count() == 2)
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.pool_preference == "fixed"
    assert [r.outcome for r in job.runs.all()] == ["killed"]
    assert pods(cluster, **{"tidal.io/job": str(job.pk)}) == []
    assert node_of(cluster, lent)["metadata"]["labels"]["tidal.io/state"] == "online-normal"
    assert Node.objects.get(name=lent).state == NodeState.ONLINE_NORMAL


def _ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# --- leader election ---------------------------------------------------------------------------------------


def test_only_the_lease_holder_acts_and_a_silent_leader_is_replaced(kube):
    world, cluster, proxy, redis, namespace = kube
    api = cluster.api
    a = LeaseElector(api, NS, LEASE_NAME, "worker-a", duration_s=15)
    b = LeaseElector(api, NS, LEASE_NAME, "worker-b", duration_s=15)
    now = time.time()
    assert a.acquire(now) and not b.acquire(now + 1) and a.acquire(now + 10)
    assert b.acquire(now + 26)  # a stopped renewing 16 s ago
    assert not a.acquire(now + 27)  # a lost it: it must not act

    submit(world)
    assert schedule(kube) is None  # this worker (worker-a) is not the leader now: nothing is bound
    assert pods(cluster) == [] and TrainingJob.objects.get().status == JobStatus.PENDING


# --- faults ------------------------------------------------------------------------------------------------


def test_the_cluster_stopping_mid_tick_loses_no_job(kube, monkeypatch):
    world, cluster, proxy, redis, namespace = kube
    services.transition_request(node=Node.objects.get(name="t4-1"), direction=Direction.LEND, actor=None,
                                reason="operator", message="for training")
    until(lambda: lend_tick(kube), lambda: Node.objects.get(name="t4-1").state == NodeState.OFFLINE_NORMAL)
    job = submit(world)
    backend, _ = live_backend.kubernetes_backend()
    bind_many = backend.bind_many

    def stop_then_bind(pods):
        proxy.stop()  # the API server goes away between the admission being recorded and the pod being created
        return bind_many(pods)

    monkeypatch.setattr(backend, "bind_many", stop_then_bind)
    assert schedule(kube) is None  # the tick stopped where it was
    monkeypatch.setattr(backend, "bind_many", bind_many)
    job.refresh_from_db()
    assert job.status == JobStatus.ADMITTED  # recorded, not yet known to have started
    proxy.start()
    until(lambda: schedule(kube), lambda: TrainingJob.objects.get(pk=job.pk).status == JobStatus.RUNNING)
    job.refresh_from_db()
    assert len(pods(cluster, **{"tidal.io/job": str(job.pk)})) == 1  # exactly one pod: no job lost or doubled
    assert job.runs.filter(ended_at__isnull=True).count() == 1


def test_server_errors_back_off_raise_one_alert_and_recover(kube):
    world, cluster, proxy, redis, namespace = kube
    proxy.fail("GET", rf"/leases/{LEASE_NAME}$", 500, times=3)
    for _ in range(3):
        assert schedule(kube) is None
        time.sleep(0.1)  # past the (test's tiny) backoff
    alerts = Decision.objects.filter(kind=Decision.Kind.ALERT, subject="cluster")
    assert list(alerts.values_list("reason", flat=True)) == ["cluster-unavailable"]
    assert "3 ticks in a row" in alerts.get().message
    time.sleep(0.2)
    assert schedule(kube) is not None
    assert Decision.objects.filter(kind=Decision.Kind.ALERT, reason="cluster-available").count() == 1


def test_a_conflict_is_reread_and_a_disruption_budget_is_waited_for(kube, monkeypatch):
    world, cluster, proxy, redis, namespace = kube
    backend, _ = live_backend.kubernetes_backend()
    read_node, raced = backend._core.read_node, []

    def read_then_someone_writes(name, **kwargs):
        """Another writer changes the node after each of our first two reads: our write's resourceVersion is stale."""
        response = read_node(name, **kwargs)
        if name == "t4-1" and len(raced) < 2:
            raced.append(name)
            cluster.core.patch_node(name, {"metadata": {"annotations": {"someone-else": str(len(raced))}}})
        return response

    monkeypatch.setattr(backend._core, "read_node", read_then_someone_writes)
    services.transition_request(node=Node.objects.get(name="t4-1"), direction=Direction.LEND, actor=None,
                                reason="operator", message="for training")
    until(lambda: lend_tick(kube), lambda: Node.objects.get(name="t4-1").state == NodeState.OFFLINE_NORMAL)
    assert len(raced) == 2  # both 409s were re-read and retried
    job = submit(world)
    schedule(kube)
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.RUNNING

    (pod,) = pods(cluster, **{"tidal.io/job": str(job.pk)})
    budget = client.V1PodDisruptionBudget(  # the API server refuses the eviction with 429 while it stands
        metadata=client.V1ObjectMeta(name="keep-training"),
        spec=client.V1PodDisruptionBudgetSpec(max_unavailable=0, selector=client.V1LabelSelector(
            match_labels={"tidal.io/job": str(job.pk)})))
    policy = client.PolicyV1Api(cluster.api)
    policy.create_namespaced_pod_disruption_budget(NS, budget)
    services.transition_request(node=Node.objects.get(name="t4-1"), direction=Direction.TAKE_BACK, actor=None,
                                reason="operator", message="peak")
    first = lend_tick(kube)
    assert "refused it for now" in first.waiting["t4-1"]
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.RUNNING  # not requeued: its pod still runs
    assert pods(cluster, **{"tidal.io/job": str(job.pk)})[0]["metadata"]["uid"] == pod["metadata"]["uid"]
    policy.delete_namespaced_pod_disruption_budget("keep-training", NS)
    until(lambda: lend_tick(kube), lambda: NodeTransition.objects.filter(
        node__name="t4-1", direction=Direction.TAKE_BACK.value, status=NodeTransition.Status.DONE).exists())
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and [r.outcome for r in job.runs.all()] == ["killed"]
    assert node_of(cluster, "t4-1")["metadata"]["labels"]["tidal.io/state"] == "online-normal"
    assert not node_of(cluster, "t4-1")["spec"].get("unschedulable")


def test_a_preemptor_waits_for_its_victims_to_stop_instead_of_failing_to_bind(kube):
    """On Kubernetes an evicted pod keeps its GPUs until it has stopped; the job that preempted it is admitted on a
    later tick, never bound onto GPUs that are still taken."""
    world, cluster, *_ = kube
    borrowers = [world.submit("outsider", department="ml-ads", gpus="1", gpu_model="A100", name=f"ads-{i}")
                 for i in range(6)]  # 4 own + 2 borrowed of a100-0's 8 GPUs
    schedule(kube)
    assert TrainingJob.objects.filter(pk__in=[j.pk for j in borrowers], status=JobStatus.RUNNING).count() == 6
    owners = [world.submit(gpus="1", gpu_model="A100", name=f"search-{i}") for i in range(4)]  # own quota: 2 reclaim
    report = schedule(kube)
    assert report.preempted == 2 and report.admitted == 2
    waiting = Decision.objects.filter(reason="waiting-for-preemption")
    assert waiting.count() == 2 and "once their pods have stopped" in waiting.first().message
    until(lambda: schedule(kube), lambda: TrainingJob.objects.filter(
        pk__in=[j.pk for j in owners], status=JobStatus.RUNNING).count() == 4)
    assert not Decision.objects.filter(reason="bind-failed").exists()
    assert TrainingJob.objects.filter(department__name="ml-ads", status=JobStatus.PENDING).count() == 2
    assert len([p for p in cluster.pods() if p["spec"].get("nodeName") == "a100-0"]) == 8
