"""`bench kubernetes`: Tidal and kube-scheduler place the same pods on one kwok cluster, through the real API server.

One cluster of `nodes` kwok nodes shaped like the Alibaba GPU 2023 node list (experiments/builders/cluster.py), made
through the API server of the control plane platform/stack.sh runs. Then two phases, measured alike:

- Tidal: `pods` one-pod training jobs (whole and fractional GPUs, CPU-only; ten departments with quotas) wait in
  Tidal's queue. From the phase's start, Tidal's Kubernetes backend (cluster/kubernetes/, started cold: its watches
  list the cluster) feeds the real policy (quota, priority, least-GPU-loss placement: the `tidal` profile), whose
  admissions it binds the way the live loop does, creating each pod on its node (spec.nodeName). A pod is bound when
  its create returned.
- kube-scheduler: the very pods Tidal bound (same requests and limits; a node selector for the GPU model Tidal
  chose; `schedulerName: default-scheduler`), created pending in a namespace of their own before the phase. From the
  phase's start, a kube-scheduler started by the benchmark (benchmarks/kube_scheduler.py) binds them through the
  binding subresource. A pod is bound when the scheduler logged its binding.

Both clients use the admin kubeconfig and have no client-side rate limit. Per phase: pods bound per second (pods /
time from the phase's start to the last binding), p50/p99 from the phase's start (when every pod was waiting) to
bound, and the kube-apiserver's CPU seconds during the phase (/proc/<pid>/stat; the pid from the stack's pid file).
Creating kube-scheduler's pending pods is timed apart: Tidal's pending work is a row in its own database, not an API
object. Tidal's pods stay while kube-scheduler places its copies (they hold their room, as on a cluster both share;
Tidal's watches are stopped by then, so it sees none of kube-scheduler's pods). The phases start once 99 % of the
nodes are Ready and untainted (on a busy machine kwok misses some heartbeats and the node controller taints those
nodes for a while; Tidal does not read taints, kube-scheduler skips such nodes). kube-scheduler's phase ends when
every pod is bound or none was for STALL_S. Nodes and pods are deleted at the end.
"""
from __future__ import annotations

import json
import logging
import os
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from benchmarks import kube_scheduler as ks
from benchmarks.scheduler import percentile
from cluster.backend import JOB_LABEL, BackendUnavailable, PodSpec
from cluster.kubernetes import conventions, objects
from cluster.kubernetes.backend import KubernetesCluster, KubeSettings, create_pod
from cluster.kubernetes.kwok import node_object
from cluster.types import Allocation, JobStatus, JobView, NodeView, Snapshot
from experiments.builders.cluster import DEPARTMENTS, build_nodes, build_quotas, certified_map, node_shapes
from scheduler.gcfreeze import frozen_heap
from scheduler.policy import Admit, get_profile, schedule
from scheduler.policy.cache import CycleCache
from scheduler.policy.gpuloss import warm_up
from scheduler.policy.workload import jobs_workload

log = logging.getLogger(__name__)
TIDAL_NAMESPACE, KUBE_NAMESPACE = "bench-tidal", "bench-kube-scheduler"
NODE_PREFIX = "bench-"
BENCH_GPUS = (0, 0, 0, 0.25, 0.5, 1)  # GPUs per pod: about 30 % of the cluster's GPUs at 1,000 nodes, 10,000 pods
STALL_S = 120  # kube-scheduler's phase ends when no pod was bound for this long (the rest cannot be placed)
CHUNK = 200  # admissions Tidal binds per bind_many call (the figures' resolution of when a pod was bound)
READY_SHARE = 0.99  # of the nodes Ready and untainted before the phases start
PARALLEL = 16  # setting up and cleaning up (not measured): requests in flight
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Phase:
    """One scheduler's figures."""

    scheduler: str
    pods: int
    bound: int  # by this scheduler, of `pods`
    checked: int  # of those, pods the API server shows on the node this scheduler chose
    refused: int  # binds the backend refused (the job stays queued for the next cycle), or cycles cut short by
    # an unanswered request (the next cycle reads again, as the live loop's next tick does)
    seconds: float  # from the phase's start to the last binding
    first_bound_s: float  # from the phase's start (listing the cluster, starting up)
    bound_per_s: float
    p50_s: float  # from the phase's start to bound
    p99_s: float
    apiserver_cpu_s: float
    scheduler_cpu_s: float  # the scheduler's own process (Tidal's: the benchmark's, its watch threads included)
    load_before: float  # 1-minute load average
    load_after: float


@dataclass(frozen=True)
class Report:
    nodes: int
    pods: int
    gpus: float  # the cluster's
    gpus_asked: float  # by the pods
    client_limits: str
    tidal: Phase
    kube: Phase
    kube_pods_created_s: float  # creating kube-scheduler's pending pods, before its phase
    kube_pods_created_cpu_s: float  # the API server's CPU meanwhile
    cpus: int

    @property
    def ratio(self) -> float:
        """Tidal's pods bound per second over kube-scheduler's."""
        return self.tidal.bound_per_s / self.kube.bound_per_s if self.kube.bound_per_s else float("inf")

    def figures(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def render(report: Report) -> Iterator[object]:
    from rich.table import Table

    yield (f"{report.nodes:,} kwok nodes ({report.gpus:,.0f} GPUs), {report.pods:,} pods asking {report.gpus_asked:,.0f} "
           f"GPUs; both clients: {report.client_limits}; {report.cpus} CPUs.")
    table = Table(title="Binding the same pods through the real API server")
    for column in ("scheduler", "bound (checked)", "refused", "pods/s", "p50 s", "p99 s", "first s", "last s",
                   "API server CPU s", "scheduler CPU s", "load (1 min)"):
        table.add_column(column, justify="left" if column == "scheduler" else "right")
    for p in (report.tidal, report.kube):
        table.add_row(p.scheduler, f"{p.bound:,}/{p.pods:,} ({p.checked:,})", str(p.refused), f"{p.bound_per_s:,.1f}",
                      *(f"{v:.2f}" for v in (p.p50_s, p.p99_s, p.first_bound_s, p.seconds)),
                      f"{p.apiserver_cpu_s:.1f}", f"{p.scheduler_cpu_s:.1f}", f"{p.load_before:.1f}→{p.load_after:.1f}")
    yield table
    yield (f"ratio Tidal/kube-scheduler (pods bound per second): {report.ratio:.2f}. Creating kube-scheduler's "
           f"{report.kube.pods:,} pending pods before its phase took {report.kube_pods_created_s:.1f} s and "
           f"{report.kube_pods_created_cpu_s:.1f} API-server CPU s (not in its figures).")


def bench_kubernetes(*, nodes: int, pods: int, kubeconfig: str, run_dir: Path, seed: int = 7,
                     node_csv: str | Path | None = None, progress: Progress = lambda _: None) -> Report:
    rng = random.Random(seed)
    views = [replace(v, name=NODE_PREFIX + v.name) for v in build_nodes(nodes, node_shapes(node_csv), rng)]
    api = admin_client(kubeconfig)
    apiserver = ks.apiserver_pid(run_dir)
    limits = ks.ClientLimits()
    try:
        progress(f"creating {nodes:,} kwok nodes")
        _setup(api, views)
        jobs = bench_jobs(pods, views, rng, time.time())
        progress(f"Tidal places {pods:,} pods")
        tidal, specs = _tidal_phase(api, views, jobs, apiserver, progress)
        tidal = replace(tidal, checked=_checked(api, TIDAL_NAMESPACE, {s.name: node for s, node in specs}))
        progress(f"creating {len(specs):,} pending pods for kube-scheduler")
        with ks.stack_scheduler_paused(run_dir):
            started, cpu = time.time(), ks.cpu_seconds(apiserver)
            _parallel(lambda body: create_pod(api, KUBE_NAMESPACE, body),
                      [pending_pod(spec, node, views_by_name(views)) for spec, node in specs])
            created_s, created_cpu = time.time() - started, ks.cpu_seconds(apiserver) - cpu
            progress(f"kube-scheduler places {len(specs):,} pods")
            kube = _kube_phase(api, kubeconfig, limits, run_dir, len(specs), apiserver)
        progress(f"pods bound per second: Tidal {tidal.bound_per_s:.1f}, kube-scheduler {kube.bound_per_s:.1f} "
                 f"(the rest once the cleaning up is done)")
    finally:
        progress("cleaning up")
        _cleanup(api)
        api.close()
    return Report(nodes, pods, sum(v.gpu_count for v in views), sum(j.gpus for j in jobs), limits.describe(), tidal,
                  kube, created_s, created_cpu, os.cpu_count() or 1)


# -- the workload ------------------------------------------------------------------------------------------

def bench_jobs(count: int, nodes: list[NodeView], rng: random.Random, now: float) -> list[JobView]:
    """One-pod jobs of random departments, frameworks (which restrict the GPU models) and GPU sizes, submitted over
    the last two hours (their priorities differ)."""
    weights: Counter[str] = Counter()
    for n in nodes:
        if n.gpu_model:
            weights[n.gpu_model] += n.gpu_count
    certified = certified_map(weights)
    jobs = []
    for i in range(1, count + 1):
        gpus = rng.choice(BENCH_GPUS)
        framework = rng.choice(sorted(certified))
        models = [m for m in weights if m in certified[framework]]
        model = rng.choices(models, weights=[weights[m] for m in models])[0] if gpus and models else None
        per = max(gpus, 0.5)
        jobs.append(JobView(i, f"job-{i}", f"task-{i % 500}", rng.choice(DEPARTMENTS), framework, model,
                            float(gpus) if model else 0.0, int(4000 * per), int(16384 * per), JobStatus.PENDING,
                            submitted_at=now - rng.uniform(0, 7200)))
    return jobs


def pending_pod(spec: PodSpec, node: str, nodes: dict[str, NodeView]) -> dict:
    """kube-scheduler's copy of a pod Tidal bound: the same containers, pending, for the default scheduler, on a
    node of the GPU model Tidal chose."""
    view = nodes[node]
    body = objects.bound_pod(spec, node, KUBE_NAMESPACE, KubeSettings.image, _device_gib(view), 0, 0)
    pod = body["spec"]
    del pod["nodeName"]
    pod["schedulerName"] = "default-scheduler"
    if spec.gpu_model:
        pod["nodeSelector"] = {conventions.GPU_MODEL_LABEL: spec.gpu_model}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": spec.name, "namespace": KUBE_NAMESPACE,
                                                            "labels": {"app": "bench"}}, "spec": pod}


def _device_gib(view: NodeView) -> int | None:
    return conventions.device_gib(node_object(view)["status"]["allocatable"])


def views_by_name(views: list[NodeView]) -> dict[str, NodeView]:
    return {v.name: v for v in views}


# -- the phases ----------------------------------------------------------------------------------------------

def _tidal_phase(api: client.ApiClient, views: list[NodeView], jobs: list[JobView], apiserver: int,
                 progress: Progress) -> tuple[Phase, list[tuple[PodSpec, str]]]:
    """Cycles of the real policy on what the backend reads, binding each cycle's admissions, until all are bound
    or a cycle binds none."""
    quotas = tuple(build_quotas(views))
    probe = Snapshot(0, tuple(views), (), quotas, certified_map(_models(views)), tuple(sorted(_models(views))))
    workload = jobs_workload(jobs, probe.compatible_models)
    profile, cache = get_profile("tidal"), CycleCache()
    warm_up()  # as a worker's first tick does
    state = {j.id: j for j in jobs}
    bound: dict[str, float] = {}
    specs: list[tuple[PodSpec, str]] = []
    refused = 0
    load, cpu, started, own = os.getloadavg()[0], ks.cpu_seconds(apiserver), time.time(), time.process_time()
    backend = KubernetesCluster(api, KubeSettings(namespace=TIDAL_NAMESPACE))
    try:
        while any(j.status is JobStatus.PENDING for j in state.values()):
            backend.drain_events()  # the live tick's first read: starts the watches, lists the cluster
            backend.refresh()
            _reconcile(backend, state, bound, specs)
            snapshot = replace(probe, now=time.time(), nodes=backend.nodes(), jobs=tuple(state.values()))
            with frozen_heap():
                result = schedule(snapshot, profile, workload=workload, cache=cache)
            # a preemptor waits for its victims' pods to go: the benchmark places pending pods, it evicts none
            admits = [d for d in result.decisions if isinstance(d, Admit) and not d.preempting]
            before, stopped = len(bound), False
            try:
                for chunk in range(0, len(admits), CHUNK):
                    refused += _bind(backend, admits[chunk:chunk + CHUNK], state, snapshot.now, bound, specs)
            except BackendUnavailable as error:  # the next cycle reads again, as the live loop's next tick does
                progress(f"a cycle stopped: {error}")
                refused, stopped = refused + 1, True
            progress(f"Tidal's cycle: {len(admits):,} admitted, {len(bound) - before:,} bound, "
                     f"{len(result.preempted)} preemptions not carried out")
            if len(bound) == before and not stopped:
                break
    finally:
        backend.stop()
    phase = _phase("Tidal", len(jobs), bound, started, load, ks.cpu_seconds(apiserver) - cpu)
    return replace(phase, refused=refused, scheduler_cpu_s=time.process_time() - own), specs


def _reconcile(backend: KubernetesCluster, state: dict[int, JobView], bound: dict[str, float],
               specs: list[tuple[PodSpec, str]]) -> None:
    """A pending job whose pod is on the cluster (its create went through though its answer did not come) runs, as
    the live loop's reconcile finds it; it counts as bound now."""
    for job in list(state.values()):
        pod = backend.pod(f"job-{job.id}") if job.status is JobStatus.PENDING else None
        if pod is not None:
            bound[pod.spec.name] = time.time()
            specs.append((pod.spec, pod.node))
            state[job.id] = replace(job, status=JobStatus.RUNNING, started_at=pod.started_at, allocation=Allocation(
                pod.node, pod.spec.gpu_model, pod.spec.gpu_shares, pod.spec.cpu_milli, pod.spec.memory_mib, None))


def _bind(backend: KubernetesCluster, admits: list[Admit], state: dict[int, JobView], now: float,
          bound: dict[str, float], specs: list[tuple[PodSpec, str]]) -> int:
    """Bind admissions as the backend binds a batch; each pod counts as bound when its batch has returned. How many
    the backend refused."""
    pods = [(PodSpec(f"job-{d.job_id}", d.job_id, d.gpu_model, d.gpu_shares, d.rightsized.cpu_request_milli,
                     d.rightsized.memory_mib, labels={JOB_LABEL: str(d.job_id)}), d.node) for d in admits]
    refused = backend.bind_many(pods)
    at = time.time()
    for d, (spec, node) in zip(admits, pods, strict=True):
        if spec.name in refused:
            continue
        bound[spec.name] = at
        specs.append((spec, node))
        r = d.rightsized
        state[d.job_id] = replace(state[d.job_id], status=JobStatus.RUNNING, started_at=now,
                                  allocation=Allocation(d.node, d.gpu_model, d.gpu_shares, r.cpu_request_milli,
                                                        r.memory_mib, d.quota_kind))
    return len(refused)


def _kube_phase(api: client.ApiClient, kubeconfig: str, limits: ks.ClientLimits, run_dir: Path, pods: int, apiserver: int,
                timeout_s: float = 1800) -> Phase:
    load, cpu, started = os.getloadavg()[0], ks.cpu_seconds(apiserver), time.time()
    with ks.kube_scheduler(kubeconfig, limits, run_dir / "bench") as (log, pid):
        deadline, count, moved = started + timeout_s, 0, time.time()
        while count < pods and time.time() < deadline and time.time() - moved < STALL_S:
            time.sleep(0.2)
            if (now := ks.bound_count(log)) > count:
                count, moved = now, time.time()
        cpu, own = ks.cpu_seconds(apiserver) - cpu, ks.cpu_seconds(pid)
    bindings = ks.bindings(log, KUBE_NAMESPACE)
    phase = _phase("kube-scheduler", pods, {name: at for name, (at, _) in bindings.items()}, started, load, cpu)
    chosen = {name: node for name, (_, node) in bindings.items()}
    return replace(phase, scheduler_cpu_s=own, checked=_checked(api, KUBE_NAMESPACE, chosen))


def _phase(name: str, pods: int, bound: dict[str, float], started: float, load: float, cpu: float) -> Phase:
    waits = sorted(t - started for t in bound.values()) or [0.0]
    last = waits[-1]
    return Phase(name, pods, len(bound), 0, 0, last, waits[0], len(bound) / last if last else 0.0,
                 statistics.median(waits), percentile(waits, 0.99), cpu, 0.0, load, os.getloadavg()[0])


def _checked(api: client.ApiClient, namespace: str, chosen: dict[str, str]) -> int:
    """Pods of `namespace` the API server shows on the node their scheduler chose."""
    pods = objects_of(client.CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False))
    return sum(1 for p in pods if chosen.get(objects.meta(p)["name"]) == objects.node_name(p))


def _models(views: list[NodeView]) -> set[str]:
    return {v.gpu_model for v in views if v.gpu_model}


# -- the cluster -------------------------------------------------------------------------------------------------

def admin_client(kubeconfig: str) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    configuration.connection_pool_maxsize = PARALLEL
    return client.ApiClient(configuration)


def _setup(api: client.ApiClient, views: list[NodeView]) -> None:
    """Empty namespaces and `views` as kwok nodes, Ready and untainted (kube-scheduler skips tainted nodes)."""
    _cleanup(api)
    core = client.CoreV1Api(api)
    for namespace in (TIDAL_NAMESPACE, KUBE_NAMESPACE):
        try:
            core.create_namespace({"metadata": {"name": namespace}})
        except ApiException as error:
            if error.status != 409:
                raise
    _parallel(lambda body: core.create_node(body, _preload_content=False), [node_object(v) for v in views])
    # on a busy machine kwok may miss a few nodes' heartbeats: the node controller taints them for a while
    _wait(lambda: _ready_nodes(core) >= READY_SHARE * len(views), "kwok nodes Ready and untainted", poll_s=5)
    _wait(lambda: all(core.list_namespaced_service_account(n, field_selector="metadata.name=default").items
                      for n in (TIDAL_NAMESPACE, KUBE_NAMESPACE)), "the namespaces' default service accounts")


def _ready_nodes(core: client.CoreV1Api) -> int:
    nodes = objects_of(core.list_node(label_selector=conventions.POOL_LABEL, _preload_content=False))
    return sum(1 for n in nodes if objects.meta(n)["name"].startswith(NODE_PREFIX) and _ready(n))


def _ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and \
        not (node.get("spec") or {}).get("taints")


def objects_of(response) -> list[dict]:
    return json.loads(response.data)["items"]


def _delete_pods(api: client.ApiClient, namespace: str) -> None:
    """Every pod of `namespace` deleted at once (grace 0), many in flight: the API server's delete-collection
    deletes one at a time."""
    core = client.CoreV1Api(api)
    names = [objects.meta(p)["name"] for p in objects_of(core.list_namespaced_pod(namespace, _preload_content=False))]
    _parallel(lambda name: _gone(lambda: core.delete_namespaced_pod(name, namespace, grace_period_seconds=0,
                                                                    _preload_content=False)), names)


def _gone(delete: Callable[[], object]) -> None:
    try:
        delete()
    except ApiException as error:
        if error.status != 404:
            raise


def _cleanup(api: client.ApiClient) -> None:
    """The benchmark's pods and nodes gone (its namespaces stay, empty)."""
    core = client.CoreV1Api(api)
    namespaces = {n.metadata.name for n in core.list_namespace().items}
    for namespace in (TIDAL_NAMESPACE, KUBE_NAMESPACE):
        if namespace in namespaces:
            _delete_pods(api, namespace)
    names = [objects.meta(n)["name"] for n in objects_of(core.list_node(_preload_content=False))
             if objects.meta(n)["name"].startswith(NODE_PREFIX)]
    _parallel(lambda name: _gone(lambda: core.delete_node(name, _preload_content=False)), names)


def _parallel(call: Callable, items: list) -> None:
    with ThreadPoolExecutor(PARALLEL) as pool:
        for _ in pool.map(call, items):
            pass


def _wait(done: Callable[[], bool], what: str, timeout_s: float = 900, poll_s: float = 1) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(poll_s)
