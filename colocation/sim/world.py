"""The simulated world: nodes from the Alibaba 2023 node list, inference services on the World Cup
curve, training jobs from the Alibaba 2023 pod list. Deterministic for a seed (hash-based draws)."""

from __future__ import annotations

import csv
import hashlib
import math
import random
from dataclasses import dataclass, replace

from cluster.backend import PodSpec
from cluster.simulated.inference import InferenceLoad
from cluster.simulated.alibaba import read_pods
from cluster.simulated.traces import alibaba_node
from cluster.types import GpuShare, JobStatus, JobView, NodeState, NodeView, Pool
from colocation.policy.autoscaling import decide_service
from colocation.sim.autoscale import Measured
from colocation.sim.config import SIM_START, GroupSpec, SimConfig

ALIBABA = "alibaba-gpu-2023"
NODE_FILE = "openb_node_list_all_node.csv"
POD_FILE = "openb_pod_list_default.csv"
FRAMEWORK = "pytorch"
JITTER_S = 6 * 3600.0


def _unit(key: str) -> float:
    """A deterministic number in [0, 1) from a string."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def build_nodes(cfg: SimConfig) -> list[NodeView]:
    """Per group, `nodes` rows of that model (most common shape), drawn by seed; the first
    `fixed_share` of them (by name) form the fixed pool (offline-normal), the rest start online."""
    with open(cfg.traces / ALIBABA / NODE_FILE, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for g in cfg.groups:
        mine = [r for r in rows if r["model"].strip() == g.model]
        if not mine:
            raise ValueError(f"no {g.model or 'CPU'} nodes in {NODE_FILE}")
        shapes: dict[tuple[str, str, str], int] = {}
        for r in mine:
            key = (r["gpu"], r["cpu_milli"], r["memory_mib"])
            shapes[key] = shapes.get(key, 0) + 1
        shape = max(shapes, key=lambda k: (shapes[k], k))  # one shape per group: GroupSpec sizes replicas by it
        mine = sorted((r for r in mine if (r["gpu"], r["cpu_milli"], r["memory_mib"]) == shape), key=lambda r: r["sn"])
        rng = random.Random(f"nodes-{cfg.seed}-{g.name}")
        chosen = sorted(rng.sample(mine, min(g.nodes, len(mine))), key=lambda r: r["sn"])
        fixed = max(1, round(cfg.fixed_share * len(chosen)))
        for i, r in enumerate(chosen):
            pool = Pool.FIXED if i < fixed else Pool.COLOCATION
            state = NodeState.OFFLINE_NORMAL if pool is Pool.FIXED else NodeState.ONLINE_NORMAL
            node = alibaba_node(r, name=f"{g.name.lower()}-{r['sn'][-4:]}", state=state, pool=pool)
            out.append(node)
    return sorted(out, key=lambda n: n.name)


def initial_replicas(cfg: SimConfig, load: InferenceLoad, index: int) -> int:
    """What minute 0 needs at expectRate, within the policy's bounds."""
    policy = cfg.autoscale
    want = round(load.replicas_for(load.qps(index, 0), policy.rates()["gpu"].expect_rate))
    return min(policy.max_replicas, max(policy.min_replicas, 2, want))


def peak_replicas(cfg: SimConfig, services: list[Service], load: InferenceLoad) -> dict[str, int]:
    """Per group, the most replicas its services hold at once over the run under the autoscaling policy
    (`decide_service`, the same utilization draws as the run) with unlimited room: new replicas serve from
    the next minute (startup_s < a tick). Uses `load`'s noise draws: pass a fresh InferenceLoad."""
    replicas = [initial_replicas(cfg, load, s.index) for s in services]
    measured = Measured(cfg.autoscale)
    peak: dict[str, int] = {}
    for minute in range(cfg.minutes):
        now = SIM_START + minute * cfg.tick_s
        for s in services:
            i = s.index
            measured.record(s.name, now - cfg.tick_s, replicas[i], load.utilization(i, minute, replicas[i]))
            d = decide_service(measured.view(s.name, replicas[i], replicas[i], s.request), now)
            if d.changes:
                replicas[i] = d.target
                measured.changed(s.name, now)
        per_group: dict[str, int] = {}
        for s in services:
            key = s.group.model or "CPU"
            per_group[key] = per_group.get(key, 0) + replicas[s.index]
        for key, n in per_group.items():
            peak[key] = max(peak.get(key, 0), n)
    return peak


def replicas_per_node(g: GroupSpec, shape: NodeView) -> int:
    per_node = min(shape.cpu_milli // g.replica_cpu_milli, shape.memory_mib // g.replica_memory_mib)
    if g.model:
        if g.replica_request >= 1:
            return min(per_node, shape.gpu_count // int(g.replica_request))
        return min(per_node, shape.gpu_count * int(1.0 // g.replica_request + 1e-9))
    return min(per_node, int(shape.cpu_milli // g.replica_request))


def static_split(cfg: SimConfig, nodes: list[NodeView], peak: dict[str, int]) -> tuple[list[NodeView], dict[str, int]]:
    """The static split baseline: per group, the online side gets enough nodes for the inference peak over
    the run (`peak_replicas` of the same load the lending run serves, over the replicas one node holds); the
    rest is the training side (fixed pool, offline-normal). Nodes never move."""
    online: dict[str, int] = {}
    out = []
    for g in cfg.groups:
        key = g.model or "CPU"
        mine = sorted((n for n in nodes if n.resource_group == key), key=lambda n: n.name)
        online[key] = min(len(mine), ceil_div(peak.get(key, 0), max(1, replicas_per_node(g, mine[0]))))
        for i, n in enumerate(mine):
            if i < online[key]:
                out.append(replace(n, state=NodeState.ONLINE_NORMAL, pool=Pool.COLOCATION))
            else:
                out.append(replace(n, state=NodeState.OFFLINE_NORMAL, pool=Pool.FIXED))
    return sorted(out, key=lambda n: n.name), online


def group_capacity(nodes: list[NodeView], g: GroupSpec, pool: Pool | None = None) -> float:
    return sum((n.gpu_count if g.model else n.cpu_milli) for n in nodes
               if n.resource_group == (g.model or "CPU") and (pool is None or n.pool is pool))


# -- inference ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Service:
    index: int  # into InferenceLoad
    name: str
    group: GroupSpec
    template: PodSpec
    request: float  # per replica, in the group's unit


def template_for(g: GroupSpec, name: str) -> PodSpec:
    if g.model:
        whole, frac = divmod(g.replica_request, 1.0)
        shares = tuple(GpuShare(i, 1.0) for i in range(int(whole))) + ((GpuShare(int(whole), frac),) if frac else ())
        return PodSpec(name, None, g.model, shares, g.replica_cpu_milli, g.replica_memory_mib)
    return PodSpec(name, None, None, (), int(g.replica_request), g.replica_memory_mib)


def build_services(cfg: SimConfig, nodes: list[NodeView]) -> tuple[list[Service], InferenceLoad]:
    """Services of each group share its peak demand (weights drawn by seed)."""
    names, peaks, services = [], [], []
    model = None
    for g in cfg.groups:
        cap = group_capacity(nodes, g, Pool.COLOCATION)
        rng = random.Random(f"services-{cfg.seed}-{g.name}")
        weights = [rng.uniform(0.5, 1.5) for _ in range(g.services)]
        for j, w in enumerate(weights):
            name = f"{g.name.lower()}-svc-{j}"
            peak_units = cfg.inference_peak * cap * w / sum(weights)  # replicas x request at peak
            names.append(name)
            peaks.append(peak_units / g.replica_request)  # peak replicas; converted to QPS below
            services.append(Service(len(services), name, g, template_for(g, name), g.replica_request))
    load = InferenceLoad(cfg.traces / "worldcup98-per-minute", cfg.traces / "alibaba-genai-2026", names,
                         [1.0] * len(names), cfg.days, cfg.seed)
    model = load.model
    # peak replicas N at expectRate: QPS = N * expectRate / k
    qps = [n * cfg.autoscale.rates()["gpu"].expect_rate / model.per_qps for n in peaks]
    load = InferenceLoad(cfg.traces / "worldcup98-per-minute", cfg.traces / "alibaba-genai-2026", names, qps,
                         cfg.days, cfg.seed)
    return services, load


# -- training -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    job: JobView
    run_s: float


def build_jobs(cfg: SimConfig, nodes: list[NodeView], start: float) -> tuple[list[Arrival], dict[str, float]]:
    """Pods of the densest `days` window of the Alibaba 2023 pod list, mapped to a group (CPU-only pods
    to the CPU group; GPU pods by hash, weighted by group GPUs; >2 GPUs need an 8-GPU group), replicated
    (copies jittered by up to +-JITTER_S/2: the trace comes in bursts) so each group's offered load is `training_load` of its capacity.
    Expected run time = the trace's run time (a perfect profile). Returns arrivals and the factors."""
    pods = []
    for p in read_pods(cfg.traces / ALIBABA / POD_FILE).pods:
        if p.creation is None or p.deletion is None:
            continue  # never ended in the trace: no run time to replay
        run = p.deletion - (p.scheduled if p.scheduled is not None else p.creation)
        if run > 0:
            pods.append((p.creation, p.name, p.gpus, p.cpu_milli, p.memory_mib, run))
    span = cfg.days * 86400
    pods.sort()
    # densest window by count of creations
    best, lo = (0, 0.0), 0
    for hi in range(len(pods)):
        while pods[hi][0] - pods[lo][0] > span:
            lo += 1
        if hi - lo + 1 > best[0]:
            best = (hi - lo + 1, pods[lo][0])
    t0 = best[1]
    window = [p for p in pods if t0 <= p[0] < t0 + span]
    gpu_groups = [g for g in cfg.groups if g.model]
    cpu_group = next((g for g in cfg.groups if not g.model), None)
    shapes = {g.name: next(n for n in nodes if n.resource_group == (g.model or "CPU")) for g in cfg.groups}
    caps = {g.name: group_capacity(nodes, g) for g in cfg.groups}

    def group_of(name: str, gpus: float) -> GroupSpec | None:
        if gpus == 0:
            return cpu_group
        fits = [g for g in gpu_groups if shapes[g.name].gpu_count >= gpus]
        if not fits:
            return None
        total = sum(caps[g.name] for g in fits)
        x, acc = _unit(f"group-{cfg.seed}-{name}") * total, 0.0
        for g in fits:
            acc += caps[g.name]
            if x < acc:
                return g
        return fits[-1]

    mapped: dict[str, list[tuple]] = {g.name: [] for g in cfg.groups}
    offered: dict[str, float] = {g.name: 0.0 for g in cfg.groups}
    for created, name, gpus, cpu, mem, run in window:
        g = group_of(name, gpus)
        if g is None:
            continue
        node = shapes[g.name]
        if cpu > node.cpu_milli or mem > node.memory_mib:
            continue
        mapped[g.name].append((created - t0, name, gpus, cpu, mem, run))
        offered[g.name] += (gpus if g.model else cpu) * min(run, span)
    arrivals: list[Arrival] = []
    factors = {}
    for g in cfg.groups:
        factor = cfg.training_load * caps[g.name] * span / offered[g.name] if offered[g.name] else 0.0
        factors[g.name] = factor
        for offset, name, gpus, cpu, mem, run in mapped[g.name]:
            u = _unit(f"copies-{cfg.seed}-{name}")
            copies = int(factor) + (1 if u < factor - int(factor) else 0)
            for c in range(copies):
                jitter = 0.0 if c == 0 else (_unit(f"jitter-{cfg.seed}-{name}-{c}") - 0.5) * JITTER_S
                at = start + min(span - 1, max(0.0, offset + jitter))
                arrivals.append(Arrival(at, JobView(
                    0, f"{name}-{c}", f"task-{name}", "training", FRAMEWORK, g.model or None, gpus, cpu, mem,
                    JobStatus.PENDING, submitted_at=at, expected_duration_s=run), run))
    arrivals.sort(key=lambda a: (a.at, a.job.name))
    out = []
    for i, a in enumerate(arrivals, start=1):
        out.append(Arrival(a.at, JobView(i, a.job.name, a.job.task_key, a.job.department, a.job.framework,
                                         a.job.gpu_model, a.job.gpus, a.job.cpu_milli, a.job.memory_mib,
                                         JobStatus.PENDING, submitted_at=a.at,
                                         expected_duration_s=a.job.expected_duration_s), a.run_s))
    return out, factors


def ceil_div(a: float, b: float) -> int:
    return math.ceil(a / b - 1e-9)
