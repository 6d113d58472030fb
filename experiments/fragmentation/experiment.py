"""The FGD experiment: pods arrive one at a time on an empty cluster until 1.3x its GPU capacity has been asked.

Per seed (artifact: pkg/simulator/core.go Simulate, simulator.go SortClusterPods / TunePodsByNodeTotalResource /
syncClusterResourceList):
- the pod list is sorted by name and shuffled; then tuned to `tune` x the cluster's milli-GPU: while its total
  GPU request is above that, a random pod is dropped; while below, pods drawn uniformly with replacement from
  the original list are appended until the next one would pass it — the artifact compares the total plus the
  drawn pod's milli-GPU *per GPU* (tuneUpPods), which we keep;
- the nodes get a random order, which breaks score ties for every policy;
- the pods arrive in that order, creation and deletion times ignored, never leaving; a pod no node can take is
  dropped (no queue, no retry).
Every policy sees the same arrivals and node order for a seed.

After each pod: arrived % = cumulative GPU request of the arrived pods (failed ones included) over capacity;
allocated % = allocated milli-GPU over capacity; fragmentation % = the target workload's fragmented share of
the idle milli-GPU. Per seed, a value at an integer arrived % is the mean over the pod events whose arrived %
rounds (half to even, as pandas) to it — or, when none does, to it +-1 — of the allocated % rounded to 2 places
(experiments/analysis/merge_alloc_discrete.py). Across seeds: mean, sd (n-1) and median of the unallocated %
(100 - allocated) at 100 %; the median curve (with the 25-75 % band the artifact's plots draw) per integer
arrived %; the median fragmentation % at 60/80/90 % arrived. With the interference model (Setup.interference), also
the goodput % per arrived % and the pairs on one GPU the model refuses (goodput.py).
"""

from __future__ import annotations

import multiprocessing as mpc
import queue as queue_mod
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from cluster.simulated.alibaba import read_nodes, read_pods, trace_name
from experiments.fragmentation.goodput import GoodputState, Predictor, with_kinds
from experiments.fragmentation.measure import FragMeasure, FragState
from experiments.fragmentation.scorers import SCORERS, Context, make
from experiments.fragmentation.state import MILLI, ClusterState, PodRequest
from scheduler.policy.interference import Model
from scheduler.policy.workload import TargetWorkload

DEFAULT_POLICIES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "tidal")
DEFAULT_SEEDS = tuple(range(42, 52))
DEFAULT_TUNE = 1.3
CURVE = (75, 130)            # integer arrived % of the reported curve
FRAG_AT = (60, 80, 90)       # arrived % at which fragmentation is reported
HEADLINE = 100               # arrived % of the headline figure


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpu_model: str | None
    gpu_count: int
    cpu_milli: int
    memory_mib: int


@dataclass(frozen=True)
class Setup:
    trace: str                      # e.g. "default"
    pods_path: Path
    nodes_path: Path
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodRequest, ...]    # sorted by pod name (the artifact's order before shuffling)
    workload: TargetWorkload
    tune: float
    seeds: tuple[int, ...]
    interference: Model | None = None  # with it: share pods get measured workloads, and goodput is measured

    @property
    def capacity_milli(self) -> int:
        return sum(n.gpu_count for n in self.nodes) * MILLI

    @property
    def capacity_gpus(self) -> int:
        return self.capacity_milli // MILLI


def load(nodes_csv: str | Path, pods_csv: str | Path, tune: float = DEFAULT_TUNE,
         seeds: Sequence[int] = DEFAULT_SEEDS, interference: Model | None = None) -> Setup:
    """Read both lists with the project's validated reader (TraceError names file:line)."""
    if not tune > 0:
        raise ValueError(f"tune must be > 0, got {tune}")
    if not seeds:
        raise ValueError("no seeds")
    nodes = tuple(NodeSpec(n.name, n.gpu_model, n.gpu_count, n.cpu_milli, n.memory_mib)
                  for n in read_nodes(nodes_csv))
    trace = read_pods(pods_csv)
    rows = sorted(trace.pods, key=lambda p: p.name)
    pods = tuple(PodRequest.from_gpus(p.cpu_milli, p.memory_mib, p.gpus, p.gpu_spec) for p in rows)
    return Setup(trace_name(pods_csv), Path(pods_csv), Path(nodes_csv), nodes, pods,
                 TargetWorkload.from_pods(pods), float(tune), tuple(seeds), interference)


# -- per seed: arrivals and node order ---------------------------------------------------------------------
def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator, np.random.Generator]:
    arrivals, nodes, policy = np.random.SeedSequence(seed).spawn(3)
    return np.random.default_rng(arrivals), np.random.default_rng(nodes), np.random.default_rng(policy)


def tune_pods(pods: Sequence[PodRequest], order: Sequence[int], target_milli: float,
              rng: np.random.Generator) -> list[int]:
    """`order` (indices into pods) dropped or topped up to `target_milli` of GPU request."""
    seq = list(order)
    total = sum(pods[i].total_milli for i in seq)
    if total > target_milli:
        while total > target_milli and seq:
            total -= pods[seq.pop(int(rng.integers(len(seq))))].total_milli
    elif total < target_milli:
        while True:
            i = int(rng.integers(len(pods)))
            if total + pods[i].gpu_milli > target_milli:  # per GPU, as the artifact's tuneUpPods compares
                break
            total += pods[i].total_milli
            seq.append(i)
    return seq


def arrivals(setup: Setup, seed: int) -> list[int]:
    rng = _streams(seed)[0]
    order = rng.permutation(len(setup.pods))
    return tune_pods(setup.pods, order.tolist(), setup.tune * setup.capacity_milli, rng)


def node_order(setup: Setup, seed: int) -> np.ndarray:
    return _streams(seed)[1].permutation(len(setup.nodes))


# -- one run ------------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    policy: str
    seed: int
    pods: int
    placed: int
    alloc_pct: list[float | None]   # per integer arrived % 0..max: allocated % (None: no event near it)
    frag_pct: list[float | None]    # per integer arrived %: fragmentation % of the idle GPUs
    wall_s: float
    goodput_pct: list[float | None] = field(default_factory=list)  # per arrived %: useful work % (goodput.py)
    refused_pairs: int = 0          # at the end: pairs of shares on one GPU the interference model refuses
    overruled: int = 0              # shares the model kept off the GPU the least GPU loss alone would take


def run_one(setup: Setup, policy: str, seed: int, seq: Sequence[int] | None = None,
            progress: Callable[[int], None] | None = None) -> RunResult:
    started = time.perf_counter()
    seq = arrivals(setup, seed) if seq is None else seq
    cluster = ClusterState.from_nodes(setup.nodes, node_order(setup, seed))
    measure = FragMeasure(setup.workload, cluster.model_names, cluster.max_gpus)
    frag = FragState.attach(cluster, measure)
    predictor = Predictor(setup.interference) if setup.interference is not None else None
    pods = setup.pods if predictor is None else with_kinds(setup.pods, predictor.kinds)
    goodput = GoodputState.attach(cluster, predictor) if predictor is not None else None
    scorer = make(policy, Context(rng=_streams(seed)[2], measure=measure, interference=predictor))
    n = len(seq)
    arrived = np.empty(n, dtype=np.int64)
    allocated = np.empty(n, dtype=np.int64)
    fragmented = np.empty(n, dtype=np.int64)
    useful = np.zeros(n)
    total, placed = 0, 0
    for i, p in enumerate(seq):
        pod = pods[p]
        total += pod.total_milli
        choice = scorer.choose(cluster, pod)
        if choice is not None:
            cluster.place(choice, pod)
            placed += 1
        arrived[i], allocated[i], fragmented[i] = total, cluster.allocated_milli, frag.total
        if goodput is not None:
            useful[i] = goodput.total
        if progress and (i + 1) % 500 == 0:
            progress(500)
    if progress and n % 500:
        progress(n % 500)
    capacity = cluster.capacity_milli
    idle = capacity - allocated
    frag_share = np.where(idle > 0, fragmented / measure.weight / np.maximum(idle, 1) * 100, np.nan)
    top = int(np.ceil(100 * setup.tune)) + 1
    gpus = capacity // MILLI
    alloc_pct = by_arrived_pct(arrived, np.round(allocated / gpus / 10, 2), gpus, top, digits=2)
    frag_pct = by_arrived_pct(arrived, frag_share, gpus, top)
    goodput_pct = [] if goodput is None else by_arrived_pct(arrived, np.round(useful / gpus / 10, 2), gpus, top, 2)
    return RunResult(policy, seed, n, placed, alloc_pct, frag_pct, time.perf_counter() - started, goodput_pct,
                     goodput.refused_total if goodput is not None else 0, scorer.overruled)


def by_arrived_pct(arrived_milli: np.ndarray, values: np.ndarray, capacity_gpus: int, top: int,
                   digits: int | None = None) -> list[float | None]:
    """Per integer arrived % 0..top: the mean of `values` over the events whose arrived % rounds to it (half to
    even), else over those rounding to it +-1; None when there are none. Percentages are computed as the
    artifact's merge scripts do (milli / GPUs / 10), so halves round alike."""
    pct = np.round(arrived_milli / capacity_gpus / 10, 0).astype(np.int64)
    ok = np.isfinite(values) & (pct >= 0) & (pct <= top + 1)
    pct, vals = pct[ok], values[ok]
    sums = np.bincount(pct, weights=vals, minlength=top + 2)
    counts = np.bincount(pct, minlength=top + 2)
    out: list[float | None] = []
    for a in range(top + 1):
        s, c = sums[a], counts[a]
        if not c:
            lo, hi = max(a - 1, 0), a + 2
            s, c = sums[lo:hi].sum(), counts[lo:hi].sum()
        out.append(None if not c else (round(float(s / c), digits) if digits is not None else float(s / c)))
    return out


# -- many runs, in processes ----------------------------------------------------------------------------------
@dataclass
class Outcome:
    setup: Setup
    policies: tuple[str, ...]
    runs: dict[tuple[str, int], RunResult]
    wall_s: float
    processes: int
    wall_by_policy: dict[str, float] = field(default_factory=dict)  # CPU-side seconds summed over seeds


_WORKER: dict = {}


def _work(policy: str, seed: int) -> RunResult:
    setup, q, seqs = _WORKER["setup"], _WORKER["queue"], _WORKER["seqs"]
    return run_one(setup, policy, seed, seqs[seed], (lambda k: q.put(k)) if q is not None else None)


Remote = Callable[[Sequence[tuple[str, int]]], Iterator[RunResult]]  # runs elsewhere, yielded as they end


def run(setup: Setup, policies: Sequence[str], processes: int = 1,
        bar: Callable[[int], Callable[[int], None]] | None = None, remote: Remote | None = None) -> Outcome:
    """Every policy x seed; `bar(total_pods)` returns a callback taking pods done. Runs fan out over
    `processes` forked processes (ProcessPoolExecutor), the heaviest (FGD) first — or, with `remote`, over
    whatever it sends them to (the Celery workers: `run_remote`)."""
    unknown = [p for p in policies if p not in SCORERS]
    if unknown:
        raise ValueError(f"unknown polic{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}; "
                         f"known: {', '.join(SCORERS)}")
    policies = tuple(dict.fromkeys(policies))
    started = time.perf_counter()
    seqs = {s: arrivals(setup, s) for s in setup.seeds}
    tasks = [(p, s) for p in policies for s in setup.seeds]
    tasks.sort(key=lambda t: t[0] not in ("fgd", "tidal"))  # stable: the slowest first, so the pool ends together
    update = bar(sum(len(seqs[s]) for _, s in tasks)) if bar else None
    results: dict[tuple[str, int], RunResult] = {}
    if remote is not None:
        for result in remote(tasks):
            results[(result.policy, result.seed)] = result
            if update:
                update(result.pods)
    elif processes <= 1 or len(tasks) == 1 or "fork" not in mpc.get_all_start_methods():
        for p, s in tasks:
            results[(p, s)] = run_one(setup, p, s, seqs[s], update)
    else:
        ctx = mpc.get_context("fork")
        q = ctx.Queue() if update else None
        _WORKER.update(setup=setup, queue=q, seqs=seqs)
        try:
            with ProcessPoolExecutor(min(processes, len(tasks)), mp_context=ctx) as pool:
                futures = {t: pool.submit(_work, *t) for t in tasks}
                while not all(f.done() for f in futures.values()):
                    if q is None:
                        time.sleep(0.2)
                        continue
                    try:
                        update(q.get(timeout=0.2))
                    except queue_mod.Empty:
                        continue
                results = {t: f.result() for t, f in futures.items()}
            if q is not None:
                while True:
                    try:
                        update(q.get_nowait())
                    except queue_mod.Empty:
                        break
        finally:
            _WORKER.clear()
    wall = time.perf_counter() - started
    by_policy = {p: sum(results[(p, s)].wall_s for s in setup.seeds) for p in policies}
    ordered = {(p, s): results[(p, s)] for p in policies for s in setup.seeds}
    return Outcome(setup, policies, ordered, wall, max(1, processes), by_policy)


# -- summary ---------------------------------------------------------------------------------------------------
def _unallocated(r: RunResult, pct: int) -> float | None:
    a = r.alloc_pct[pct] if pct < len(r.alloc_pct) else None
    return None if a is None else round(100 - a, 2)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    return {"mean": round(statistics.fmean(values), 2) if values else None,
            "sd": round(statistics.stdev(values), 2) if len(values) > 1 else (0.0 if values else None),
            "median": round(statistics.median(values), 2) if values else None}


def _at(values: Sequence[float | None], pct: int) -> float | None:
    return values[pct] if pct < len(values) else None


def _last(values: Sequence[float | None]) -> float | None:
    return next((v for v in reversed(values) if v is not None), None)


def summary(outcome: Outcome) -> dict:
    """The JSON the command writes with --json: {capacity_gpus, nodes, policies: {name: {at100: {mean, sd,
    median}, curve: {"75": median, ..., "130": median}, frag_pct: {"60", "80", "90"}, and with the interference model
    goodput: {at100, at_end: {mean, sd, median} (% of capacity), refused_pairs_at_end, overruled (means)}}}}."""
    setup = outcome.setup
    policies: dict[str, dict] = {}
    for p in outcome.policies:
        runs = [outcome.runs[(p, s)] for s in setup.seeds]
        at = [v for r in runs if (v := _unallocated(r, HEADLINE)) is not None]
        curve = {}
        for a in range(CURVE[0], CURVE[1] + 1):
            vals = [v for r in runs if (v := _unallocated(r, a)) is not None]
            curve[str(a)] = round(statistics.median(vals), 2) if vals else None
        frag = {}
        for a in FRAG_AT:
            vals = [r.frag_pct[a] for r in runs if a < len(r.frag_pct) and r.frag_pct[a] is not None]
            frag[str(a)] = round(statistics.median(vals), 2) if vals else None
        policies[p] = {
            "at100": _stats(at),
            "curve": curve,
            "frag_pct": frag,
        }
        if setup.interference is not None:
            policies[p]["goodput"] = {
                "at100": _stats([v for r in runs if (v := _at(r.goodput_pct, HEADLINE)) is not None]),
                "at_end": _stats([v for r in runs if (v := _last(r.goodput_pct)) is not None]),
                "refused_pairs_at_end": round(statistics.fmean(r.refused_pairs for r in runs), 1),
                "overruled": round(statistics.fmean(r.overruled for r in runs), 1),
            }
    return {"capacity_gpus": setup.capacity_gpus, "nodes": len(setup.nodes), "policies": policies}


def details(outcome: Outcome) -> dict:
    """Everything report.json keeps beyond `summary`: per-seed figures, the curve's 25-75 % band, timings."""
    setup = outcome.setup
    out: dict[str, dict] = {}
    for p in outcome.policies:
        runs = [outcome.runs[(p, s)] for s in setup.seeds]
        band = {}
        for a in range(0, len(runs[0].alloc_pct)):
            vals = [v for r in runs if (v := _unallocated(r, a)) is not None]
            if vals:
                band[str(a)] = [round(percentile(vals, 25), 2), round(statistics.median(vals), 2),
                                round(percentile(vals, 75), 2)]
        out[p] = {
            "at100_by_seed": {str(r.seed): _unallocated(r, HEADLINE) for r in runs},
            "pods_by_seed": {str(r.seed): r.pods for r in runs},
            "placed_by_seed": {str(r.seed): r.placed for r in runs},
            "unallocated_band": band,  # arrived % -> [p25, median, p75] over seeds
            "frag_band": {str(a): [round(percentile(v, 25), 2), round(statistics.median(v), 2),
                                   round(percentile(v, 75), 2)]
                          for a in range(len(runs[0].frag_pct))
                          if (v := [r.frag_pct[a] for r in runs if r.frag_pct[a] is not None])},
            "run_s": round(outcome.wall_by_policy[p], 2),
        }
    return out


# -- one run on a Celery worker -------------------------------------------------------------------------------
@lru_cache(maxsize=2)
def _setup(nodes_csv: str, pods_csv: str, tune: float, seeds: tuple[int, ...], interference: str | None) -> Setup:
    from scheduler import interference_tables  # the model's loader reads the measured tables

    model = interference_tables.load(Path(interference)) if interference else None
    return load(nodes_csv, pods_csv, tune, seeds, model)


def run_remote(nodes_csv: str, pods_csv: str, tune: float, seeds: Sequence[int], policy: str, seed: int,
               interference: str | None = None) -> dict:
    """One run where a worker reads the lists itself (once per worker for a whole experiment): the Celery task
    `experiments.fragmentation_run`'s body. JSON in, JSON out (`result_of` reads it back). `interference`: the
    folder of the H200 measurements (goodput and the tidal-interference policy), or None."""
    return asdict(run_one(_setup(nodes_csv, pods_csv, tune, tuple(seeds), interference), policy, seed))


def result_of(data: dict) -> RunResult:
    return RunResult(**data)

