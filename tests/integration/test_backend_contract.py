"""One behavioural contract for ClusterBackend, run against both backends: the simulated cluster, and the Kubernetes
backend on the real control plane platform/stack.sh starts (kube-apiserver and etcd; kube-controller-manager's
ReplicaSet controller and garbage collector; kube-scheduler placing ReplicaSets' pods; kwok nodes whose pods run,
end and terminate — tests/integration/kubecluster.py), under Tidal's own ServiceAccount and the RBAC its Helm chart
renders (platform/kubernetes/tidal.yaml), as in production. The same test functions; only the harness differs. The
gang cases at the end run the live loop's acting on the database against each backend."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from cluster.backend import (
    DETACHED_FROM_LABEL, INFERENCE, JOB_LABEL, KIND_LABEL, REPLACED_BY_LABEL, REPLACES_LABEL, RESOURCE_GROUP_LABEL,
    RUN_LABEL, RUNTIME_LABEL, TRAINING, WORKER_LABEL, BackendError, ClusterBackend, ClusterEvent, EventKind, PodSpec,
    bind_in_order,
)
from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from cluster.types import GpuShare, NodeState, NodeView, Pool
from tests.integration.gangs import GANG_NODES, WHOLE_NODE, add_gang_nodes, gang_admit, gang_job, gang_pods

STARTUP_S = 0.3
NODES = (
    NodeView("gpu-a", "t4", "T4", 2, 16000, 65536, Pool.COLOCATION, NodeState.ONLINE_NORMAL),
    NodeView("gpu-b", "t4", "T4", 2, 16000, 65536, Pool.COLOCATION, NodeState.ONLINE_NORMAL),
    NodeView("gpu-c", "t4", "T4", 2, 16000, 65536, Pool.FIXED, NodeState.OFFLINE_NORMAL),
    NodeView("cpu-a", "cpu", None, 0, 8000, 32768, Pool.FIXED, NodeState.OFFLINE_NORMAL),
)


@dataclass
class Harness:
    backend: ClusterBackend
    settle_fn: object
    wait_fn: object
    services_fn: object  # the headless Services on the cluster: name -> selector
    manifest_fn: object = None  # a pod as the API stores it (Kubernetes only)
    refuse_bind_fn: object = None  # refuse one pod bind, after letting `after` through
    restart_fn: object = None  # a pod's container restarts in place (kwok's stage on Kubernetes)
    seen: list[ClusterEvent] = field(default_factory=list)

    def refuse_bind(self, after: int) -> None:
        self.refuse_bind_fn(after)

    def restart_container(self, pod: str) -> None:
        self.restart_fn(pod)

    def settle(self) -> None:
        """Let the cluster do what it does unasked (place, start, ready, terminate) until nothing changes."""
        self.settle_fn()

    def wait(self, seconds: float) -> None:
        """Let `seconds` of cluster time pass."""
        self.wait_fn(seconds)

    def until(self, condition: Callable[[], bool], seconds: float, what: str) -> None:
        """Let cluster time pass, a tenth of a second at a time, until `condition` holds: at most `seconds` of it."""
        for _ in range(round(seconds / 0.1)):
            if condition():
                return
            self.wait(0.1)
        assert condition(), f"{what}: not within {seconds} s"

    def events(self, kind: EventKind, pod: str | None = None, node: str | None = None) -> list[ClusterEvent]:
        """Matching events drained so far (the Kubernetes watch delivers them asynchronously: poll a little)."""
        deadline = time.monotonic() + 5
        while True:
            self.seen += self.backend.drain_events()
            found = [e for e in self.seen if e.kind is kind and pod in (None, e.pod) and node in (None, e.node)]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def node(self, name: str) -> NodeView:
        return next(n for n in self.backend.nodes() if n.name == name)

    def pod(self, name: str):
        return next((p for p in self.backend.pods() if p.spec.name == name), None)

    def services(self) -> dict[str, dict[str, str]]:
        return self.services_fn()


def _simulated(nodes: tuple[NodeView, ...] = NODES) -> Iterator[Harness]:
    clock = VirtualClock(1_000_000.0)
    cluster = SimulatedCluster(nodes, clock, store.labelled_runtime, startup_s=STARTUP_S)

    def wait(seconds: float) -> None:
        clock.advance(seconds)
        cluster.advance()

    harness = Harness(cluster, lambda: wait(STARTUP_S + 0.01), wait, cluster.services)

    def refuse_bind(after: int) -> None:
        harness.backend = RefusingBinds(cluster, after)

    harness.refuse_bind_fn = refuse_bind
    harness.restart_fn = cluster.restart_container
    yield harness


class RefusingBinds:
    """The simulated cluster refusing one bind after `after` (nothing stands in front of it to inject the fault)."""

    def __init__(self, cluster: SimulatedCluster, after: int) -> None:
        self._cluster, self._after = cluster, after

    def __getattr__(self, name: str):
        return getattr(self._cluster, name)

    def bind(self, pod: PodSpec, node: str) -> None:
        self._after -= 1
        if self._after == -1:
            raise BackendError(f"pods {pod.name!r} is forbidden: exceeded quota")
        self._cluster.bind(pod, node)

    def bind_many(self, pods) -> dict[str, BackendError]:
        """Each pod as `bind` above, in order (the engine's bind_many would bind around the refusal)."""
        return bind_in_order(self.bind, pods)


def _kubernetes(tidal_api, nodes: tuple[NodeView, ...] = NODES, through_proxy: bool = False) -> Iterator[Harness]:
    """The backend as Tidal's ServiceAccount (`tidal_api`); the nodes and the checks as the cluster's admin. Through
    the fault-injecting proxy (tests/integration/faultproxy.py), the backend talks to the API server as its admin."""
    from cluster.kubernetes.backend import KubernetesCluster, KubeSettings
    from tests.integration.faultproxy import FaultProxy
    from tests.integration.kubecluster import kwok_cluster

    with kwok_cluster(nodes, "tidal-workloads") as kube, FaultProxy(kube.api.configuration) as proxy:
        api = proxy.api_client() if through_proxy else tidal_api
        backend = KubernetesCluster(api, KubeSettings(namespace="tidal-workloads", replacement_wait_s=10,
                                                      grace_period_s=1))

        def settle() -> None:
            """Until the controllers are done and the backend's pod watch has seen every pod as the server has it."""
            kube.settle()
            server = {f"{kube.namespace}/{p['metadata']['name']}": p["metadata"]["resourceVersion"] for p in kube.pods()}
            seen = backend._pods_watch.wait(lambda store: {k: o["metadata"]["resourceVersion"] for k, o in store.items()
                                                          if k.startswith(f"{kube.namespace}/")} == server or None, 10)
            assert seen, "the backend's pod watch did not catch up with the API server"
            backend.refresh()

        def wait(seconds: float) -> None:
            time.sleep(seconds)
            backend.refresh()

        def services() -> dict[str, dict[str, str]]:
            return {svc["metadata"]["name"]: svc["spec"].get("selector", {}) for svc in kube.services()}

        def refuse_bind(after: int) -> None:  # a pod create the API server refuses (as a quota admission would)
            proxy.fail("POST", r"/namespaces/[^/]+/pods$", 403, times=1, after=after)

        harness = Harness(backend, settle, wait, services, kube.pod, refuse_bind_fn=refuse_bind,
                          restart_fn=kube.restart_container)
        harness.seen += backend.drain_events()  # start the watches
        try:
            yield harness
        finally:
            backend.stop()


@pytest.fixture(scope="module")
def tidal_api():
    """A client that is Tidal's ServiceAccount, with the RBAC its Helm chart renders applied as shipped."""
    from tests.integration.kubecluster import admin_client, tidal_client

    with admin_client() as admin:
        api = tidal_client(admin)
    yield api
    api.close()


@pytest.fixture(params=["simulated", "kubernetes"])
def cluster(request) -> Iterator[Harness]:
    if request.param == "simulated":
        yield from _simulated()
    else:
        yield from _kubernetes(request.getfixturevalue("tidal_api"))


def training(name: str, shares: tuple[GpuShare, ...] = (), cpu: int = 1000, mem: int = 1024, job: int = 1,
             **labels: str) -> PodSpec:
    return PodSpec(name=name, job_id=job, gpu_model="T4" if shares else None, gpu_shares=shares, cpu_milli=cpu,
                   memory_mib=mem, labels={JOB_LABEL: str(job), **labels})


def serving(name: str = "svc", gpus: float = 0.5) -> PodSpec:
    shares = (GpuShare(0, gpus),) if gpus <= 1 else tuple(GpuShare(i, 1.0) for i in range(int(gpus)))
    return PodSpec(name=name, job_id=None, gpu_model="T4", gpu_shares=shares, cpu_milli=2000, memory_mib=4096,
                   labels={KIND_LABEL: INFERENCE})


T4_ONLINE = {RESOURCE_GROUP_LABEL: "t4"}


# --- inventory -----------------------------------------------------------------------------------------------


def test_nodes_show_the_inventory(cluster):
    nodes = {n.name: n for n in cluster.backend.nodes()}
    assert set(nodes) == {n.name for n in NODES}
    for want in NODES:
        got = nodes[want.name]
        assert (got.resource_group, got.gpu_model, got.gpu_count, got.cpu_milli, got.memory_mib, got.pool, got.state) \
            == (want.resource_group, want.gpu_model, want.gpu_count, want.cpu_milli, want.memory_mib, want.pool,
                want.state)
        assert sum(got.used_shares()) == 0 and got.cpu_used == 0 and got.pods == ()


# --- binding training pods ----------------------------------------------------------------------------------


def test_bind_takes_exactly_the_given_shares(cluster):
    cluster.backend.bind(training("job-1-1", (GpuShare(0, 0.5), GpuShare(1, 1.0)), cpu=3000, mem=2048), "gpu-c")
    cluster.backend.bind(training("job-2-1", (GpuShare(0, 0.25),), job=2), "gpu-c")
    node = cluster.node("gpu-c")
    assert node.used_shares() == (0.75, 1.0)
    assert (node.cpu_used, node.memory_used) == (4000, 3072)
    assert set(node.pods) == {"job-1-1", "job-2-1"}
    pod = cluster.pod("job-1-1")
    assert pod.node == "gpu-c" and pod.ready and pod.kind == TRAINING and pod.spec.job_id == 1
    assert pod.spec.gpu_shares == (GpuShare(0, 0.5), GpuShare(1, 1.0))
    assert cluster.events(EventKind.POD_STARTED, pod="job-1-1")


@pytest.mark.parametrize("pod, node, why", [
    (training("job-9-1", (GpuShare(0, 1.0),)), "nowhere", "unknown node"),
    (training("job-9-1", (GpuShare(2, 1.0),)), "gpu-c", "bad GPU share"),
    (training("job-9-1", cpu=64000), "gpu-c", "does not fit"),
    (training("job-9-1", (GpuShare(0, 1.0),)), "cpu-a", "wants T4"),
], ids=["unknown-node", "no-such-gpu", "too-much-cpu", "wrong-model"])
def test_bind_refuses_what_cannot_run_and_changes_nothing(cluster, pod, node, why):
    with pytest.raises(BackendError, match=why):
        cluster.backend.bind(pod, node)
    assert cluster.pod("job-9-1") is None
    assert all(n.pods == () for n in cluster.backend.nodes())


def test_bind_refuses_a_full_gpu_a_taken_name_and_an_unnormal_node(cluster):
    cluster.backend.bind(training("job-1-1", (GpuShare(0, 0.75),)), "gpu-c")
    with pytest.raises(BackendError, match="free"):
        cluster.backend.bind(training("job-2-1", (GpuShare(0, 0.5),), job=2), "gpu-c")
    with pytest.raises(BackendError, match="already bound"):
        cluster.backend.bind(training("job-1-1", (GpuShare(1, 0.5),)), "gpu-c")
    cluster.backend.set_node_state("cpu-a", NodeState.OFFLINE_UNNORMAL)
    with pytest.raises(BackendError, match="unnormal"):
        cluster.backend.bind(training("job-3-1", job=3), "cpu-a")
    assert cluster.node("gpu-c").used_shares() == (0.75, 0.0)


def test_bind_many_checks_each_pod_against_the_room_the_ones_before_it_took(cluster):
    refused = cluster.backend.bind_many([
        (training("job-1-1", (GpuShare(0, 0.75),)), "gpu-c"),
        (training("job-2-1", (GpuShare(0, 0.5),), job=2), "gpu-c"),  # the first took GPU 0's room
        (training("job-3-1", (GpuShare(1, 1.0),), job=3), "gpu-c"),
        (training("job-4-1", job=4), "nowhere"),
    ])
    assert sorted(refused) == ["job-2-1", "job-4-1"] and "free" in str(refused["job-2-1"])
    assert cluster.node("gpu-c").used_shares() == (0.75, 1.0)
    assert sorted(cluster.node("gpu-c").pods) == ["job-1-1", "job-3-1"] and cluster.pod("job-2-1") is None


# --- evicting ----------------------------------------------------------------------------------------------


def test_evict_frees_the_pod_and_reports_it(cluster):
    cluster.backend.bind(training("job-1-1", (GpuShare(0, 1.0),)), "gpu-c")
    cluster.backend.evict("job-1-1", "preempted for job 2")
    pod = cluster.pod("job-1-1")
    assert pod is None or pod.terminating  # gone, or shutting down within its grace period
    cluster.settle()
    assert cluster.pod("job-1-1") is None
    assert cluster.node("gpu-c").used_shares() == (0.0, 0.0)
    assert cluster.events(EventKind.POD_EVICTED, pod="job-1-1")
    with pytest.raises(BackendError, match="not bound"):
        cluster.backend.evict("job-1-1", "again")


def test_a_training_pod_that_ends_is_reported_finished(cluster):
    cluster.backend.bind(training("job-1-1", (GpuShare(0, 1.0),), **{RUNTIME_LABEL: "1"}), "gpu-c")
    cluster.wait(2.5)  # kwok reports the end a second after the run time, as a kubelet notices an exit
    finished = cluster.events(EventKind.POD_FINISHED, pod="job-1-1")
    assert finished and finished[0].job_id == 1 and finished[0].node == "gpu-c"
    assert cluster.pod("job-1-1") is None
    assert cluster.node("gpu-c").used_shares() == (0.0, 0.0)


# --- node states -------------------------------------------------------------------------------------------


def test_node_state_and_labels_change_together(cluster):
    cluster.backend.set_node_state("gpu-a", NodeState.OFFLINE_UNNORMAL, {"tidal.io/lent-by": "lending"})
    node = cluster.node("gpu-a")
    assert node.state is NodeState.OFFLINE_UNNORMAL and node.labels["tidal.io/lent-by"] == "lending"
    changed = cluster.events(EventKind.NODE_STATE_CHANGED, node="gpu-a")
    assert changed and changed[-1].detail == "online-normal->offline-unnormal"
    cluster.backend.set_node_state("gpu-a", NodeState.OFFLINE_NORMAL)
    assert cluster.node("gpu-a").state is NodeState.OFFLINE_NORMAL
    with pytest.raises(BackendError):
        cluster.backend.set_node_state("nowhere", NodeState.OFFLINE_NORMAL)


# --- ReplicaSets -------------------------------------------------------------------------------------------


def test_replicaset_places_its_pods_and_they_become_ready(cluster):
    cluster.backend.apply_replicaset("svc", serving(), 3, node_selector=T4_ONLINE)
    cluster.settle()
    rs = cluster.backend.replicaset("svc")
    assert (rs.replicas, len(rs.pods), rs.ready, rs.pending) == (3, 3, 3, 0)
    assert dict(rs.node_selector) == T4_ONLINE
    pods = [cluster.pod(name) for name in rs.pods]
    assert all(p.kind == INFERENCE and p.replicaset == "svc" and p.ready for p in pods)
    assert {p.node for p in pods} <= {"gpu-a", "gpu-b"}  # online nodes of the group only, not the fixed gpu-c
    assert sum(sum(cluster.node(n).used_shares()) for n in ("gpu-a", "gpu-b")) == pytest.approx(1.5)
    assert cluster.events(EventKind.POD_READY)


def test_replicaset_scales_down_and_keeps_what_does_not_fit_pending(cluster):
    cluster.backend.apply_replicaset("svc", serving(gpus=1), 6, node_selector=T4_ONLINE)  # room for 4
    cluster.settle()
    rs = cluster.backend.replicaset("svc")
    assert (len(rs.pods), rs.pending) == (4, 2)
    pending = cluster.backend.pending_pods()
    assert len(pending) == 2 and all(p.replicaset == "svc" and p.spec.gpus == 1 for p in pending)
    cluster.backend.apply_replicaset("svc", serving(gpus=1), 2)
    cluster.settle()
    rs = cluster.backend.replicaset("svc")
    assert (rs.replicas, len(rs.pods), rs.pending) == (2, 2, 0)
    assert cluster.backend.pending_pods() == ()
    with pytest.raises(BackendError):
        cluster.backend.apply_replicaset("svc", serving(), -1)
    with pytest.raises(BackendError):
        cluster.backend.replicaset("nothing")


def test_detach_starts_a_replacement_before_the_old_pod_goes(cluster):
    """Create-before-delete: the detached pod keeps serving until its replacement is ready, then is evicted."""
    cluster.backend.apply_replicaset("svc", serving(gpus=1), 1, node_selector=T4_ONLINE)
    cluster.settle()
    (old,) = cluster.backend.replicaset("svc").pods
    source = cluster.pod(old).node
    cluster.backend.set_node_state(source, NodeState.OFFLINE_UNNORMAL)  # the lend marks it first
    replacement = cluster.backend.detach_pod(old)
    cluster.settle()
    detached = cluster.pod(old)
    assert detached is not None and detached.ready and detached.detached_from == "svc" and detached.replicaset is None
    new = cluster.pod(replacement)
    assert new is not None and new.ready and new.node != source and new.spec.labels[REPLACES_LABEL] == old
    assert detached.spec.labels[REPLACED_BY_LABEL] == replacement
    assert cluster.backend.replicaset("svc").pods == (replacement,)
    cluster.backend.evict(old, "migrated: its replacement is ready")
    cluster.settle()
    assert cluster.pod(old) is None and cluster.backend.replicaset("svc").ready == 1
    assert sum(cluster.node(source).used_shares()) == 0
    with pytest.raises(BackendError):
        cluster.backend.detach_pod(replacement + "-nope")


def test_detaching_a_pod_outside_any_replicaset_is_refused(cluster):
    cluster.backend.bind(training("job-1-1"), "cpu-a")
    with pytest.raises(BackendError, match="replicaset"):
        cluster.backend.detach_pod("job-1-1")
    assert DETACHED_FROM_LABEL not in cluster.pod("job-1-1").spec.labels


# --- gangs: the live loop binding a job of several workers, on the database ---------------------------------
# The same cases on both backends: what the scheduler and the lending controller do to a gang's pods and headless
# Service, and what they record. The admission is built by hand (tests/integration/gangs.py).


@dataclass
class GangLab:
    world: object
    cluster: Harness


@pytest.fixture(params=["simulated", "kubernetes"])
def gangs(request, world) -> Iterator[GangLab]:
    from colocation.selectors import node_views

    add_gang_nodes(world)
    nodes = node_views()
    harness = _simulated(nodes) if request.param == "simulated" else \
        _kubernetes(request.getfixturevalue("tidal_api"), nodes)
    yield from (GangLab(world, h) for h in harness)


def _gang_pods_on_cluster(lab: GangLab, job) -> list[str]:
    return sorted(p.spec.name for p in lab.cluster.backend.pods() if p.spec.job_id == job.pk)


@pytest.mark.django_db
def test_a_gang_is_bound_whole_with_its_rendezvous_environment_and_headless_service(gangs):
    from core.models import Decision
    from scheduler import live
    from scheduler.models import JobStatus

    job = gang_job(gangs.world)
    assert live.admit(gang_admit(job), gangs.cluster.backend, time.time())
    gangs.cluster.settle()
    service, pods = f"gang-{job.pk}-1", gang_pods(job)
    assert gangs.cluster.services() == {service: {JOB_LABEL: str(job.pk), RUN_LABEL: "1"}}
    for rank, name in enumerate(pods):
        pod = gangs.cluster.pod(name)
        assert pod is not None and pod.node == GANG_NODES[rank] and pod.spec.gpu_shares == WHOLE_NODE
        assert {k: pod.spec.labels[k] for k in (JOB_LABEL, RUN_LABEL, WORKER_LABEL)} == \
            {JOB_LABEL: str(job.pk), RUN_LABEL: "1", WORKER_LABEL: str(rank)}
        assert pod.spec.subdomain == service
        env = pod.spec.env
        assert (env["MASTER_ADDR"], env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == \
            (f"{pods[0]}.{service}", "4", str(rank), str(rank), "2")
        manifest = gangs.cluster.manifest_fn and gangs.cluster.manifest_fn(name)
        if manifest is not None:  # Kubernetes: the DNS name <hostname>.<subdomain> of the Service
            assert (manifest["spec"]["hostname"], manifest["spec"]["subdomain"]) == (name, service)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.node.name == "g-0"
    run = job.runs.get()
    assert [(w["rank"], w["node"], w["pod"], w["state"]) for w in run.workers] == \
        [(r, GANG_NODES[r], pods[r], "running") for r in range(4)]
    assert run.pod == pods[0]
    admission = Decision.objects.get(subject=f"job:{job.pk}", kind="admission")
    assert admission.data["nodes"] == list(GANG_NODES)


@pytest.mark.django_db
def test_a_gang_with_one_bind_refused_leaves_nothing_bound_and_is_requeued_once(gangs):
    from core.models import Decision
    from scheduler import live
    from scheduler.models import JobStatus

    blocker = PodSpec(name="someone-else", job_id=None, gpu_model="T4", gpu_shares=(GpuShare(1, 1.0),),
                      cpu_milli=1000, memory_mib=1024, labels={KIND_LABEL: TRAINING})
    gangs.cluster.backend.bind(blocker, "g-2")  # the cluster changed since the cycle looked: worker 2 cannot go
    job = gang_job(gangs.world)
    assert not live.admit(gang_admit(job), gangs.cluster.backend, time.time())
    gangs.cluster.settle()
    assert _gang_pods_on_cluster(gangs, job) == []
    assert gangs.cluster.services() == {}
    assert gangs.cluster.pod("someone-else") is not None  # not ours: left alone
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING
    (run,) = job.runs.all()
    assert run.outcome == "failed" and run.ended_at is not None
    assert [w["state"] for w in run.workers] == ["stopped", "stopped", "failed", "stopped"]
    (requeued,) = Decision.objects.filter(subject=f"job:{job.pk}", reason="bind-failed")
    assert "worker 2 of 4" in requeued.message and "g-2" in requeued.message
    assert "the 3 workers bound were removed" in requeued.message  # 0, 1 and 3 were created in the same batch


@pytest.mark.django_db
def test_a_cycles_admissions_are_bound_in_one_batch_and_a_gang_with_a_refused_pod_starts_none(gangs):
    from core.models import Decision
    from scheduler import live
    from scheduler.models import JobStatus
    from scheduler.policy.decisions import CycleResult

    one_gpu = (GpuShare(0, 1.0),)
    blocker = PodSpec(name="someone-else", job_id=None, gpu_model="T4", gpu_shares=one_gpu, cpu_milli=1000,
                      memory_mib=1024, labels={KIND_LABEL: TRAINING})
    gangs.cluster.backend.bind(blocker, "g-2")  # taken since the cycle looked: the gang's worker 2 cannot go
    gang, single = gang_job(gangs.world, gpus="1"), gang_job(gangs.world, workers=1, gpus="1")
    result = CycleResult(time.time(), (gang_admit(gang, shares=one_gpu),
                                       gang_admit(single, nodes=("g-3",), shares=(GpuShare(1, 1.0),))))
    report = live.TickReport()
    live.act(result, gangs.cluster.backend, time.time(), report)
    gangs.cluster.settle()
    assert report.admitted == 1
    assert _gang_pods_on_cluster(gangs, gang) == [] and gangs.cluster.services() == {}
    gang.refresh_from_db()
    single.refresh_from_db()
    assert gang.status == JobStatus.PENDING and single.status == JobStatus.RUNNING
    assert [w["state"] for w in gang.runs.get().workers] == ["stopped", "stopped", "failed", "stopped"]
    assert _gang_pods_on_cluster(gangs, single) == [single.runs.get().pod]
    assert Decision.objects.filter(reason="bind-failed").count() == 1


@pytest.mark.django_db
def test_taking_back_a_node_with_one_worker_requeues_the_whole_gang_once(gangs):
    from colocation import controller, services as colocation_services
    from colocation.models import Node, NodeTransition
    from colocation.policy import DEFAULT, Direction
    from core.models import Decision
    from scheduler import live
    from scheduler.models import JobStatus

    job = gang_job(gangs.world)
    assert live.admit(gang_admit(job), gangs.cluster.backend, time.time())
    gangs.cluster.settle()
    colocation_services.transition_request(node=Node.objects.get(name="g-2"), direction=Direction.TAKE_BACK,
                                           actor=gangs.world.users["operator"], reason="operator", message="by hand")
    controller.lending_tick(backend=gangs.cluster.backend, now=time.time(), profile=DEFAULT)
    gangs.cluster.settle()
    # the other workers went with it, in the same tick (no scheduler tick ran to evict orphans)
    assert _gang_pods_on_cluster(gangs, job) == []
    assert gangs.cluster.services() == {}
    for _ in range(5):  # a graceful eviction is waited for: the transition finishes on a later tick
        if NodeTransition.objects.get(node__name="g-2").status == "done":
            break
        controller.lending_tick(backend=gangs.cluster.backend, now=time.time(), profile=DEFAULT)
        gangs.cluster.settle()
    assert NodeTransition.objects.get(node__name="g-2").status == "done"
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.pool_preference == "fixed"
    (run,) = job.runs.all()
    assert run.outcome == "killed"
    assert [w["state"] for w in run.workers] == ["stopped", "stopped", "killed", "stopped"]
    (requeued,) = Decision.objects.filter(subject=f"job:{job.pk}", reason="taken-back")
    assert "g-2" in requeued.message and "worker 2 of 4" in requeued.message


# --- service groups: a replica of several pods, placed, healed, scaled and rolled whole -----------------------
# The same cases on both backends: colocation/groups.py (the live loops' acting for services whose replica is a group,
# docs/concepts/service-groups.md) binding, evicting and recording on the database.

GROUP_NODES = tuple(f"s-{i}" for i in range(6))
RESTART_STARTUP_S = 5  # a restarted engine's start-up again: long enough for a tick to see its pod not ready


@dataclass
class GroupLab:
    world: object
    cluster: Harness

    def service(self, **fields):
        from decimal import Decimal

        defaults = dict(name="llm", gpu_model=self.world.gpu_models["T4"], gpus_per_replica=Decimal(2), group_size=4,
                        replicas=1, min_replicas=1, max_replicas=4, startup_s=0)
        return self.world.service(**{**defaults, **fields})

    def tick(self, service, desired: int | None = None, now: float | None = None):
        """One group tick of `service` (its stored replica count unless `desired`), then the cluster settles."""
        from colocation import groups

        service.refresh_from_db()
        actions = groups.reconcile(self.cluster.backend, service, service.replicas if desired is None else desired,
                                   "t4", time.time() if now is None else now)
        self.cluster.settle()
        return actions

    def groups(self, service) -> dict[int, list]:
        """Group index -> its pods on the cluster that are not going away, leader first."""
        out: dict[int, list] = {}
        for p in self.cluster.backend.pods():
            if p.spec.labels.get("tidal.io/service") == service.name and not p.terminating:
                out.setdefault(int(p.spec.labels["tidal.io/group"]), []).append(p)
        return {i: sorted(pods, key=lambda p: int(p.spec.labels[WORKER_LABEL])) for i, pods in sorted(out.items())}

    def until_ready(self, service) -> None:
        """Until every pod of the service's one group is ready (its start-up passed)."""
        self.cluster.until(lambda: all(p.ready for pods in self.groups(service).values() for p in pods), 30,
                           f"the group of {service.name} ready")

    def identities(self, pods) -> list[tuple]:
        """What tells one pod from another of its name: its node and start, and on Kubernetes its uid."""
        manifest = self.cluster.manifest_fn or (lambda name: {"metadata": {}})
        return [(p.spec.name, p.node, p.started_at, manifest(p.spec.name)["metadata"].get("uid")) for p in pods]

    def decisions(self, service, reason: str) -> list:
        from core.models import Decision

        return list(Decision.objects.filter(subject=f"service:{service.name}", reason=reason).order_by("created_at"))


@pytest.fixture(params=["simulated", "kubernetes"])
def group_lab(request, world) -> Iterator[GroupLab]:
    """Six online T4 nodes of two GPUs (beside the world's t4-1), one topology block."""
    from colocation.selectors import node_views

    add_gang_nodes(world, GROUP_NODES, online=True)
    nodes = tuple(node_views())
    harness = _simulated(nodes) if request.param == "simulated" else \
        _kubernetes(request.getfixturevalue("tidal_api"), nodes, through_proxy=True)
    yield from (GroupLab(world, h) for h in harness)


@pytest.mark.django_db
def test_a_group_is_bound_whole_with_its_lws_environment_and_headless_service(group_lab):
    from colocation.models import ServiceGroup

    service = group_lab.service()
    group_lab.tick(service)
    (pods,) = group_lab.groups(service).values()
    assert [p.spec.name for p in pods] == ["llm-0", "llm-0-1", "llm-0-2", "llm-0-3"]
    assert [p.node for p in pods] == list(GROUP_NODES[:4])
    assert group_lab.cluster.services() == {"llm-group-0": {"tidal.io/service": "llm", "tidal.io/group": "0"}}
    for worker, pod in enumerate(pods):
        assert pod.spec.gpu_shares == (GpuShare(0, 1.0), GpuShare(1, 1.0)) and pod.kind == INFERENCE
        assert {k: pod.spec.env[k] for k in ("LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX")} == \
            {"LWS_LEADER_ADDRESS": "llm-0.llm-group-0", "LWS_GROUP_SIZE": "4", "LWS_WORKER_INDEX": str(worker)}
        manifest = group_lab.cluster.manifest_fn and group_lab.cluster.manifest_fn(pod.spec.name)
        if manifest is not None:  # Kubernetes: the leader address resolves through the group's headless Service
            assert (manifest["spec"]["hostname"], manifest["spec"]["subdomain"]) == (pod.spec.name, "llm-group-0")
    (placed,) = group_lab.decisions(service, "group-placed")
    assert placed.data == {"group": 0, "nodes": list(GROUP_NODES[:4])} and "leader on s-0" in placed.message
    group_lab.tick(service)  # the next tick sees every pod ready
    row = ServiceGroup.objects.get(service=service, index=0)
    assert (row.ready, row.pods_ready, row.leader, row.nodes) == (True, 4, "llm-0", list(GROUP_NODES[:4]))


@pytest.mark.django_db
def test_a_group_is_ready_only_after_its_start_up_and_holds_unready_gpu_seconds_until_then(group_lab):
    """kwok's tidal-pod-ready-after-startup stage on Kubernetes, the engine's start-up on the simulated cluster."""
    from colocation import groups
    from colocation.models import InferenceService, ServiceGroup

    service = group_lab.service(group_size=2, startup_s=3)
    now = time.time()
    groups.reconcile(group_lab.cluster.backend, service, 1, "t4", now)
    group_lab.cluster.wait(0.5)
    (pods,) = group_lab.groups(service).values()
    assert len(pods) == 2 and not any(p.ready for p in pods)  # bound, still starting
    groups.reconcile(group_lab.cluster.backend, service, 1, "t4", now + 0.5)
    assert not ServiceGroup.objects.get(service=service, index=0).ready
    group_lab.cluster.wait(3.0)
    group_lab.cluster.settle()
    (pods,) = group_lab.groups(service).values()
    assert all(p.ready for p in pods)
    groups.reconcile(group_lab.cluster.backend, service, 1, "t4", now + 3.5)
    assert ServiceGroup.objects.get(service=service, index=0).ready
    held = InferenceService.objects.get(pk=service.pk).unready_gpu_seconds
    assert held == pytest.approx(2 * 2 * 3.5)  # 2 pods of 2 GPUs not ready from placed to the tick that saw them ready


@pytest.mark.django_db
def test_a_group_with_one_bind_refused_leaves_nothing_bound_and_is_placed_again_once(group_lab):
    service = group_lab.service()
    group_lab.cluster.refuse_bind(after=2)  # one worker of the group is refused (the third pod created)
    group_lab.tick(service)
    assert group_lab.groups(service) == {}
    assert group_lab.cluster.services() == {}
    (refused,) = group_lab.decisions(service, "group-bind-refused")
    assert " of 4) on s-" in refused.message and "the 3 pods already bound were removed" in refused.message
    assert len(refused.data["removed"]) == 3  # the pods are created in one batch: the others were bound
    group_lab.tick(service)
    (pods,) = group_lab.groups(service).values()
    assert len(pods) == 4 and group_lab.cluster.services().keys() == {"llm-group-0"}
    assert len(group_lab.decisions(service, "group-bind-refused")) == 1
    assert len(group_lab.decisions(service, "group-placed")) == 1


@pytest.mark.django_db
def test_a_killed_pod_recreates_the_whole_group_once_after_its_back_off(group_lab):
    from colocation.models import ServiceGroup

    service = group_lab.service()
    now = time.time()
    group_lab.tick(service, now=now)
    group_lab.tick(service, now=now + 1)
    group_lab.cluster.backend.evict("llm-0-2", "killed")  # one worker dies
    group_lab.cluster.settle()
    group_lab.tick(service, now=now + 2)
    assert group_lab.groups(service) == {}  # the whole group went, not just the dead worker
    (recreated,) = group_lab.decisions(service, "group-recreated")
    assert "1 of its 4 pods" in recreated.message and recreated.data["restarts"] == 1
    assert ServiceGroup.objects.get(service=service, index=0).restarts == 1
    group_lab.tick(service, now=now + 5)  # inside the back-off: not yet
    assert group_lab.groups(service) == {}
    assert len(group_lab.decisions(service, "group-backoff")) == 1
    group_lab.tick(service, now=now + 20)
    (pods,) = group_lab.groups(service).values()
    assert [p.node for p in pods] == list(GROUP_NODES[:4])
    assert len(group_lab.decisions(service, "group-recreated")) == 1
    assert len(group_lab.decisions(service, "group-placed")) == 2


@pytest.mark.django_db
def test_a_container_restarted_in_place_recreates_the_whole_group_once(group_lab):
    """LeaderWorkerSet's RecreateGroupOnPodRestart: the pod is still there, but its group restarts whole, once."""
    from colocation.models import ServiceGroup

    service = group_lab.service(group_size=2, startup_s=RESTART_STARTUP_S)
    now = time.time()
    group_lab.tick(service, now=now)
    group_lab.until_ready(service)
    group_lab.tick(service, now=now + 1)
    (before,) = group_lab.groups(service).values()
    group_lab.cluster.restart_container("llm-0-1")
    group_lab.cluster.settle()
    assert [(p.ready, p.restarts) for p in group_lab.groups(service)[0]] == [(True, 0), (False, 1)]
    group_lab.tick(service, now=now + 2)
    assert group_lab.groups(service) == {}  # the leader went too
    (recreated,) = group_lab.decisions(service, "group-recreated")
    assert "the container of llm-0-1 restarted in place" in recreated.message and recreated.data["restarts"] == 1
    group_lab.tick(service, now=now + 20)  # past its back-off: new pods, no restart counted
    (pods,) = group_lab.groups(service).values()
    assert [p.spec.name for p in pods] == ["llm-0", "llm-0-1"] and [p.restarts for p in pods] == [0, 0]
    assert not set(group_lab.identities(pods)) & set(group_lab.identities(before))  # other pods of the same names
    group_lab.until_ready(service)
    group_lab.tick(service, now=now + 21)
    group_lab.tick(service, now=now + 22)
    row = ServiceGroup.objects.get(service=service, index=0)
    assert (row.ready, row.restarts, row.pod_restarts) == (True, 1, {})
    assert len(group_lab.decisions(service, "group-recreated")) == 1
    assert len(group_lab.decisions(service, "group-placed")) == 2
    assert group_lab.decisions(service, "group-pod-restarted") == []


@pytest.mark.django_db
def test_a_container_restarted_in_place_keeps_its_group_with_restart_policy_none(group_lab):
    """LeaderWorkerSet's None: the pod restarts in place, its group is kept (the same pods on the same nodes), not
    ready until that pod has started again, then ready again. On Kubernetes, kwok restarts the container as a kubelet
    would (tidal-pod-container-restart) and readies it after the pod's start-up (tidal-pod-ready-after-restart)."""
    from colocation import groups
    from colocation.models import ServiceGroup

    service = group_lab.service(group_size=2, group_restart_policy="None", startup_s=RESTART_STARTUP_S)
    now = time.time()
    group_lab.tick(service, now=now)
    group_lab.until_ready(service)
    group_lab.tick(service, now=now + 1)
    assert ServiceGroup.objects.get(service=service, index=0).ready
    (before,) = group_lab.groups(service).values()
    group_lab.cluster.restart_container("llm-0-1")
    group_lab.cluster.settle()
    group_lab.tick(service, now=now + 2)
    (pods,) = group_lab.groups(service).values()
    assert group_lab.identities(pods) == group_lab.identities(before)  # the same pods: none recreated
    assert [(p.ready, p.restarts) for p in pods] == [(True, 0), (False, 1)]  # llm-0-1 starting again
    row = ServiceGroup.objects.get(service=service, index=0)
    assert (row.ready, row.pods_ready, row.restarts, row.pod_restarts) == (False, 1, 0, {"llm-0-1": 1})
    assert groups.ready_groups(group_lab.cluster.backend.pods(), service) == 0  # not serving meanwhile
    (kept,) = group_lab.decisions(service, "group-pod-restarted")
    assert kept.data == {"group": 0, "pod": "llm-0-1", "restarts": 1} and "kept" in kept.message
    group_lab.until_ready(service)
    group_lab.tick(service, now=now + 3)
    (pods,) = group_lab.groups(service).values()
    assert group_lab.identities(pods) == group_lab.identities(before)
    assert [p.restarts for p in pods] == [0, 1]
    row = ServiceGroup.objects.get(service=service, index=0)
    assert (row.ready, row.pods_ready, row.nodes) == (True, 2, [p.node for p in before])
    assert groups.ready_groups(group_lab.cluster.backend.pods(), service) == 1
    assert len(group_lab.decisions(service, "group-pod-restarted")) == 1  # acted on once, not again
    assert group_lab.decisions(service, "group-recreated") == [] and group_lab.decisions(service, "group-backoff") == []
    assert len(group_lab.decisions(service, "group-placed")) == 1
    assert len(group_lab.cluster.events(EventKind.POD_READY, pod="llm-0-1")) == 2  # started, and started again


@pytest.mark.django_db
def test_groups_scale_out_and_in_highest_index_first(group_lab):
    service = group_lab.service(group_size=2, replicas=2, max_replicas=3)
    group_lab.tick(service, desired=2)
    assert list(group_lab.groups(service)) == [0, 1]
    group_lab.tick(service, desired=3)
    groups = group_lab.groups(service)
    assert list(groups) == [0, 1, 2] and all(len(pods) == 2 for pods in groups.values())
    assert len({p.node for pods in groups.values() for p in pods}) == 6  # every pod its own node (2 GPUs each)
    group_lab.tick(service, desired=1)
    assert list(group_lab.groups(service)) == [0]
    assert [d.data["group"] for d in group_lab.decisions(service, "group-removed")] == [2, 1]
    assert set(group_lab.cluster.services()) == {"llm-group-0"}


@pytest.mark.django_db
def test_a_rolling_update_with_no_room_to_surge_completes_at_max_unavailable(group_lab):
    service = group_lab.service(group_size=2, replicas=3, max_replicas=3, max_surge=1, max_unavailable=1)
    for _ in range(2):
        group_lab.tick(service)  # three groups on s-0..s-5: only t4-1 is free, a surge group needs two nodes
    before = {i: p[0].spec.labels["tidal.io/revision"] for i, p in group_lab.groups(service).items()}
    assert len(before) == 3 and len(set(before.values())) == 1
    service.cpu_milli_per_replica = 8000  # a new revision
    service.save()
    for _ in range(12):
        group_lab.tick(service)
        groups = group_lab.groups(service)
        ready = [i for i, pods in groups.items() if len(pods) == 2 and all(p.ready for p in pods)]
        assert len(ready) >= 2  # never more than max_unavailable groups down
        if all(pods[0].spec.labels["tidal.io/revision"] != before[0] for pods in groups.values()) and len(ready) == 3:
            break
    else:
        raise AssertionError(f"the rollout did not complete: {groups}")
    assert all(p.spec.cpu_milli == 8000 for pods in groups.values() for p in pods)
    (no_room,) = group_lab.decisions(service, "rollout-no-surge-room")
    assert "max_unavailable 1" in no_room.message
    assert [d.data["group"] for d in group_lab.decisions(service, "group-rolled")] == [2, 1, 0]


@pytest.mark.django_db
def test_lending_a_node_of_a_group_moves_the_whole_group_create_before_delete(group_lab):
    from colocation import controller, services as colocation_services
    from colocation.models import Node, NodeTransition
    from colocation.policy import DEFAULT, Direction

    service = group_lab.service(group_size=2)
    group_lab.tick(service)
    assert [p.node for p in group_lab.groups(service)[0]] == ["s-0", "s-1"]
    colocation_services.transition_request(node=Node.objects.get(name="s-1"), direction=Direction.LEND,
                                           actor=group_lab.world.users["operator"], reason="operator", message="by hand")
    seen = []
    for _ in range(8):
        controller.lending_tick(backend=group_lab.cluster.backend, now=time.time(), profile=DEFAULT)
        group_lab.cluster.settle()
        groups = group_lab.groups(service)
        seen.append(sorted(groups))
        assert any(len(pods) == 2 and all(p.ready for p in pods) for pods in groups.values())  # never none serving
        if NodeTransition.objects.get(node__name="s-1").status == "done":
            break
    assert NodeTransition.objects.get(node__name="s-1").status == "done"
    assert [0, 1] in seen  # the stand-in and the old group served side by side
    (pods,) = group_lab.groups(service).values()
    assert len(pods) == 2 and "s-1" not in {p.node for p in pods}  # whole, elsewhere
    (moving,) = group_lab.decisions(service, "group-moving")
    assert moving.data["group"] == 1 and "standing in for group 0 that leaves s-1" in moving.message
    (moved,) = group_lab.decisions(service, "group-moved")
    assert moved.data["group"] == 0 and "s-1" in moved.message and "group 1 stands in for it, ready" in moved.message
    assert moved.created_at > moving.created_at
    group_lab.tick(service)  # the stand-in keeps serving: nothing is placed or removed again
    assert list(group_lab.groups(service)) == [1]
    assert len(group_lab.decisions(service, "group-placed")) == 1 and not group_lab.decisions(service, "group-removed")
