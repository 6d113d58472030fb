"""The simulated world: nodes from the Alibaba 2023 node list, inference services on a per-minute traffic curve
(World Cup 98, the GenAI log or a CSV: cluster/simulated/traffic.py), training jobs shaped by real traces
(experiments/colocation_sim/training_load.py). Deterministic for a seed (hash-based draws)."""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from cluster.backend import PodSpec
from cluster.simulated.inference import DAY_MIN, InferenceLoad, genai_util_model
from cluster.simulated.traces import alibaba_node
from cluster.simulated.traffic import BUILTIN, Traffic, builtin, read_csv
from cluster.types import GpuShare, JobStatus, JobView, NodeState, NodeView, Pool
from colocation.policy.autoscaling import decide_service
from experiments.autoscale_eval.llm import servegen
from experiments.colocation_sim.autoscale import Measured
from experiments.colocation_sim.config import SIM_START, GroupSpec, SimConfig
from experiments.colocation_sim.training_load import GroupTarget, NodeShape, TrainingLoad, build as build_training

ALIBABA = "alibaba-gpu-2023"
NODE_FILE = "openb_node_list_all_node.csv"
FRAMEWORK = "pytorch"


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
    return modelled_replicas(cfg, load, index, 0)


def modelled_replicas(cfg: SimConfig, load: InferenceLoad, index: int, minute: int) -> int:
    """What a minute's traffic needs at expectRate, within the policy's bounds (minutes before 0: the curve's days
    before the run)."""
    policy = cfg.autoscale
    want = round(load.replicas_for(load.qps(index, minute), policy.rates()["gpu"].expect_rate))
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
        pods = peak.get(key, 0) * g.group_size
        online[key] = min(len(mine), ceil_div(pods, max(1, replicas_per_node(g, mine[0]))))
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
    template: PodSpec  # one pod of a replica
    request: float  # per replica (every pod of a group), in the group's unit

    @property
    def size(self) -> int:
        """Pods per replica."""
        return self.group.group_size

    @property
    def pod_request(self) -> float:
        return self.group.replica_request


def template_for(g: GroupSpec, name: str) -> PodSpec:
    if g.model:
        whole, frac = divmod(g.replica_request, 1.0)
        shares = tuple(GpuShare(i, 1.0) for i in range(int(whole))) + ((GpuShare(int(whole), frac),) if frac else ())
        return PodSpec(name, None, g.model, shares, g.replica_cpu_milli, g.replica_memory_mib)
    return PodSpec(name, None, None, (), int(g.replica_request), g.replica_memory_mib)


SERVEGEN_FILE = "servegen:"  # a traffic source naming a ServeGen-format file: this prefix, then its path


def servegen_source(path: Path) -> str:
    return SERVEGEN_FILE + str(path)


@lru_cache(maxsize=4)
def _traffic(traces: Path, source: str) -> Traffic:
    if source in servegen.BUILTIN or source.startswith(SERVEGEN_FILE):  # LLM traffic: requests/min, whole days
        path = servegen.path_of(source, traces) if source in servegen.BUILTIN else Path(source[len(SERVEGEN_FILE):])
        w = servegen.read(path)
        days = w.minutes // DAY_MIN
        return Traffic(source if source in servegen.BUILTIN else path.name, 0.0, w.rps[:days * DAY_MIN] * 60.0, "requests/min")
    return builtin(source, traces) if source in BUILTIN else read_csv(Path(source))


def load_traffic(cfg: SimConfig) -> Traffic:
    """The run's traffic curve: a built-in trace by name or a CSV path (TrafficError names a bad line); read once per
    process (a forked worker inherits what its parent read)."""
    return _traffic(cfg.traces, cfg.traffic)


def build_services(cfg: SimConfig, nodes: list[NodeView]) -> tuple[list[Service], InferenceLoad]:
    """Services of each group share its peak demand (weights drawn by seed)."""
    names, peaks, services = [], [], []
    for g in cfg.groups:
        cap = group_capacity(nodes, g, Pool.COLOCATION)
        rng = random.Random(f"services-{cfg.seed}-{g.name}")
        weights = [rng.uniform(0.5, 1.5) for _ in range(g.services)]
        for j, w in enumerate(weights):
            name = f"{g.name.lower()}-svc-{j}"
            peak_units = cfg.inference_peak * cap * w / sum(weights)  # replicas x request at peak
            names.append(name)
            request = g.replica_request * g.group_size
            peaks.append(peak_units / request)  # peak replicas; converted to QPS below
            services.append(Service(len(services), name, g, template_for(g, name), request))
    traffic = load_traffic(cfg)
    genai = cfg.traces / "alibaba-genai-2026"
    model = genai_util_model(str(genai))
    # peak replicas N at expectRate: QPS = N * expectRate / k
    qps = [n * cfg.autoscale.rates()["gpu"].expect_rate / model.per_qps for n in peaks]
    return services, InferenceLoad(traffic, genai, names, qps, cfg.days, cfg.seed, cfg.start_day)


# -- training -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arrival:
    at: float
    job: JobView
    run_s: float


def _shape(n: NodeView) -> NodeShape:
    return NodeShape(n.gpu_count, n.cpu_milli, n.memory_mib)


def build_jobs(cfg: SimConfig, nodes: list[NodeView], start: float) -> tuple[list[Arrival], TrainingLoad]:
    """The trace-shaped training load (experiments/colocation_sim/training_load.py), sized on the training capacity: each
    group's fixed-pool nodes (with `fixed_from_static`, the static split's training side). Expected run time = the
    real one times a lognormal factor of sigma `cfg.runtime_error` (0: a perfect profile)."""
    targets = []
    for g in cfg.groups:
        key = g.model or "CPU"
        mine = [n for n in nodes if n.resource_group == key]
        fixed = [n for n in mine if n.pool is Pool.FIXED]
        targets.append(GroupTarget(g.name, g.model or None, _shape(mine[0]), tuple(_shape(n) for n in fixed),
                                   group_capacity(nodes, g, Pool.FIXED)))
    load = build_training(cfg.traces, targets, cfg.training_load, cfg.days, cfg.seed)
    out = []
    error = random.Random(f"runtime-error-{cfg.seed}")
    for i, j in enumerate(load.jobs, start=1):
        at = start + j.at
        expected = j.run_s * error.lognormvariate(0.0, cfg.runtime_error) if cfg.runtime_error else j.run_s
        out.append(Arrival(at, JobView(i, j.name, f"task-{j.name}", j.department, FRAMEWORK, j.model, j.shape.gpus,
                                       j.shape.cpu_milli, j.shape.memory_mib, JobStatus.PENDING, submitted_at=at,
                                       expected_duration_s=expected, workers=j.workers), j.run_s))
    return out, load


def ceil_div(a: float, b: float) -> int:
    return math.ceil(a / b - 1e-9)
