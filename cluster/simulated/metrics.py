"""Per-pod metrics of the simulated cluster under the real exporters' names (DCGM exporter, cAdvisor,
kube-state-metrics, Istio), shaped by real series: what a pod's GPU does follows a workload measured on an
NVIDIA H200 (cluster/simulated/h200.py, second by second), its GPU memory and serving traffic the per-pod series
of the Alibaba GenAI serving trace (GenTD26).

Every value is a closed-form function of (pod labels, pod name, start time, now): a scrape recomputes it,
so counters are the integral of their rate since the pod started (monotonic across scrapes and exporter
restarts) and a test can compute any value by hand. Pure: no Django; the trace is read in place, once.

Trace containers -> pods. A container gives per-minute series (the mean of the minute's samples; gaps carry
the last value, except QPS: the gateway only logs minutes with requests). A pod reads minute
(now - started_at) // 60 of its container's series, wrapping around.
- training: H200 workload, container and usage profile by a stable hash of the task label (else the pod name),
  so every run of a task has the same shape; GPU util, SM active, occupancy, tensor and DRAM activity are the
  workload's (a saturating ResNet-50 or GPT-2, a data-loader-bound job, an idle notebook, ...); the profile sets
  the GPU-memory level and CPU/memory factors.
- inference: container by hash of the pod name, with its real duty cycle, GPU memory and QPS; latency is
  lognormal with a median that rises with load (QPS / capacity); 1% of requests fail with 500. Its activity is
  the H200 BERT or GPT-2 decode server's at that duty cycle.
- inference driven by a `ServingLoad` (the live demo's traffic, `LoadDriven`): the service's QPS shared by the
  pods serving it, each at the load's GPU utilization — the very figures the autoscaler acts on — so the
  service-load profiles follow the curve that drives the decisions. Their counters are integrated from scrape to
  scrape (a rate that follows the replica count has no closed form); only GPU memory keeps the trace's series.
  A service whose replica is a group of pods serves from the groups whose every pod is ready: each pod of the group
  is busy at the load's utilization, the leader takes the group's requests. Each pod taking requests also shows a vLLM engine's `/metrics` at that load (cluster/simulated/llm.py:
  tokens, queue, KV cache, TTFT and TPOT histograms under vLLM's names), which the autoscaler's LLM signals read.
GPU values are relative to what the pod holds: DCGM_FI_DEV_GPU_UTIL is how busy the pod keeps its share of
that GPU (0-100); FB_USED + FB_FREE is its share of the GPU's framebuffer (MiB). The profiling ratios
(DCGM_FI_PROF_*) are per GPU, as dcgm-exporter has them: a pod alone on its GPU share reads its own; pods sharing
one GPU (the same `UUID`) each read the GPU's, the sum of each one's activity times its share, and the publisher
splits it among them (streaming/attribution.py). Every DCGM series has a `shape` label naming its source,
h200-workloads/<workload>.
"""

from __future__ import annotations

import csv
import hashlib
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from cluster.backend import (DETACHED_FROM_LABEL, GROUP_LABEL, INFERENCE, JOB_LABEL, KIND_LABEL, REPLICASET_LABEL,
                             RUN_LABEL, SERVICE_LABEL, TASK_LABEL, WORKER_LABEL, PodView, kube_state_label,
                             serving_pods)
from cluster.simulated import h200, llm
from cluster.simulated.alibaba import TraceError, number
from cluster.types import NodeView

TRAINING_NAMESPACE = "tidal-training"
INFERENCE_NAMESPACE = "tidal-inference"
CONTAINER = "main"
POD_LABELS = (JOB_LABEL, RUN_LABEL, TASK_LABEL, SERVICE_LABEL)  # exposed as kube_pod_labels

DUTY_FILE = "pod_gpu_duty_cycle_anon.csv"  # value,timestamp_anon,container_ip: GPU util %
MEMORY_FILE = "pod_gpu_memory_used_bytes_anon.csv"  # timestamp_anon,value,container_ip: bytes
QPS_FILE = "qps.csv"  # timestamp_anon,value,container_ip,request_type
GENERATIVE = "Generative Requests"  # the per-container rows (API rows have no container)
MIN_TRACE_MINUTES = 60  # a shorter container has no usable shape

MINUTE_MS = 60_000
SCALE = 1_000_000  # series are kept in millionths: integrals are exact integers, so counters never step back
MIB = 1 << 20
FB_MIB = {"T4": 16384, "P100": 16384, "V100M16": 16384, "V100M32": 32768, "V100": 16384, "A10": 24576,
          "G2": 24576, "G3": 32768, "P40": 24576, "RTX3090": 24576, "A100": 40960}  # as demo/data.py
DEFAULT_FB_MIB = 16384

# Latency: lora_request_trace.csv exec times have median 23 s, p90 53 s. At the typical load (0.5) the
# median is 2 x BASE = 24 s; sigma = ln(53/23) / 1.28.
LATENCY_BUCKETS_MS = (100, 250, 500, 1000, 2500, 5000, 10000, 15000, 20000, 30000, 45000, 60000, 90000,
                      120000, 300000, 600000)
BASE_LATENCY_MS = 12_000.0
LATENCY_SIGMA = 0.65
MAX_LOAD = 0.9  # queueing caps the median at 10 x BASE
ERROR_PER_MILLE = 10  # 1% of requests answer 500
BUCKETS_MS = np.asarray(LATENCY_BUCKETS_MS, dtype=float)


# -- series ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class Series:
    """A series of one value per step (a minute, or a second) that repeats; `integral` is O(1) through integer
    prefix sums."""

    units: np.ndarray  # int64 per step: value x SCALE
    prefix: np.ndarray  # int64: prefix[k] = sum(units[:k])
    step_ms: int = MINUTE_MS

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray, step_ms: int = MINUTE_MS) -> Series:
        units = np.rint(np.asarray(values, dtype=float) * SCALE).astype(np.int64)
        if units.size == 0 or units.min() < 0:
            raise ValueError("a series needs at least one step and no negative value")
        return cls(units, np.concatenate(([0], np.cumsum(units))), step_ms)

    def __len__(self) -> int:
        return int(self.units.size)

    @property
    def mean(self) -> float:
        return int(self.prefix[-1]) / len(self) / SCALE

    def at(self, elapsed_ms: int) -> float:
        return int(self.units[elapsed_ms // self.step_ms % len(self)]) / SCALE

    def integral(self, elapsed_ms: int) -> float:
        """Integral of the series (value x seconds) over the first `elapsed_ms`."""
        step, rest_ms = divmod(elapsed_ms, self.step_ms)
        cycles, i = divmod(step, len(self))
        exact = (cycles * int(self.prefix[-1]) + int(self.prefix[i])) * self.step_ms + int(self.units[i]) * rest_ms
        return exact / (SCALE * 1000)  # exact int, correctly rounded division: monotonic in elapsed_ms


# -- trace shapes ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, eq=False)
class TrainingShape:
    memory: Series  # GPU memory / its mean: ~1


@dataclass(frozen=True, slots=True, eq=False)
class ServingShape:
    util: Series  # GPU duty cycle, 0..1
    memory: Series  # GPU memory as a fraction of the framebuffer
    qps: Series  # requests per second
    latency_sum: Series  # qps x mean latency (ms)
    buckets: tuple[Series, ...]  # qps x P(latency <= le), per LATENCY_BUCKETS_MS


@dataclass(frozen=True, slots=True, eq=False)
class GpuShape:
    """One H200 workload (cluster/simulated/h200.py): its seconds, and its GPU util as a series to integrate."""

    workload: h200.Workload
    util: Series  # per second, 0..1

    @classmethod
    def of(cls, workload: h200.Workload) -> GpuShape:
        return cls(workload, Series.of([a.gpu_util for a in workload.seconds], step_ms=1000))


def gpu_shapes() -> dict[str, GpuShape]:
    return {name: GpuShape.of(w) for name, w in h200.load().items()}


@dataclass(frozen=True, slots=True, eq=False)
class TraceShapes:
    training: tuple[TrainingShape, ...]
    serving: tuple[ServingShape, ...]
    gpu: dict[str, GpuShape] = field(default_factory=gpu_shapes)  # what each pod's GPU does, by workload


def training_shape(memory_bytes: Sequence[float]) -> TrainingShape:
    memory = np.asarray(memory_bytes, dtype=float)
    return TrainingShape(Series.of(memory / memory.mean()))


def median_latency_ms(qps: np.ndarray, capacity_qps: float) -> np.ndarray:
    """The median latency at a load of `qps` of `capacity_qps` (arrays or plain numbers)."""
    load = np.minimum(qps / capacity_qps, MAX_LOAD)
    return BASE_LATENCY_MS / (1.0 - load)


MEAN_PER_MEDIAN = math.exp(LATENCY_SIGMA ** 2 / 2)  # a lognormal latency's mean over its median
_erf = np.vectorize(math.erf)


def share_within(le_ms: float | np.ndarray, median_ms: float | np.ndarray) -> np.ndarray:
    """The share of lognormal latencies of median `median_ms` that take at most `le_ms`."""
    return 0.5 * (1 + _erf(np.log(le_ms / median_ms) / (LATENCY_SIGMA * math.sqrt(2))))


def serving_shape(duty_pct: Sequence[float], memory_fraction: Sequence[float], qps: Sequence[float],
                  capacity_qps: float) -> ServingShape:
    rate = np.asarray(qps, dtype=float)
    median = median_latency_ms(rate, capacity_qps)
    buckets = tuple(Series.of(rate * share_within(le, median)) for le in LATENCY_BUCKETS_MS)
    return ServingShape(util=Series.of(np.clip(np.asarray(duty_pct, dtype=float) / 100, 0, 1)),
                        memory=Series.of(np.clip(memory_fraction, 0, 1)), qps=Series.of(rate),
                        latency_sum=Series.of(rate * median * MEAN_PER_MEDIAN), buckets=buckets)


@lru_cache(maxsize=2)
def load_traces(folder: str | Path) -> TraceShapes:
    """Shapes from the GenTD26 files in `folder`; TraceError (file:line) on a malformed row."""
    folder = Path(folder)
    duty = _per_minute(folder / DUTY_FILE, carry=True)
    memory = _per_minute(folder / MEMORY_FILE, carry=True)
    qps = _per_minute(folder / QPS_FILE, carry=False, only=GENERATIVE)
    training = [training_shape(memory[c]) for c in sorted(duty.keys() & memory.keys())
                if duty[c].max() > 0 and memory[c].mean() > 0]
    served = sorted(qps.keys() & duty.keys() & memory.keys())
    if not training or not served:
        raise ValueError(f"{folder}: no container has {MIN_TRACE_MINUTES}+ minutes of duty cycle, GPU memory"
                         f" and QPS ({len(training)} training shapes, {len(served)} serving shapes)")
    framebuffer = max(m.max() for m in memory.values())  # the trace's GPUs: its fullest one
    rates = np.concatenate([qps[c] for c in served])
    capacity = 2 * float(np.median(rates[rates > 0]))  # the typical busy minute is at half load
    serving = [serving_shape(duty[c], memory[c] / framebuffer, qps[c], capacity) for c in served]
    return TraceShapes(tuple(training), tuple(serving))


def builtin_shapes() -> TraceShapes:
    """Stands in for the GenAI trace when the traces folder lacks it, as the built-in cluster does for the node list:
    one made-up hour (not measured) of a training pod's GPU duty cycle and memory, and of a serving pod's load."""
    minute = np.arange(60)
    wave = np.sin(minute / 60 * 2 * np.pi)
    qps = 20 + 15 * wave  # requests/s, 5..35
    return TraceShapes(
        (training_shape(1 + 0.1 * np.cos(minute / 60 * 2 * np.pi)),),
        (serving_shape(qps * 2.5, 0.3 + 0.1 * wave, qps, capacity_qps=40.0),))


def _per_minute(path: Path, *, carry: bool, only: str | None = None) -> dict[str, np.ndarray]:
    """Per container with MIN_TRACE_MINUTES+ minutes: the mean per minute from its first to last sample."""
    samples: dict[str, tuple[list[int], list[float]]] = {}
    for minute, value, container in _rows(path, only):
        minutes, values = samples.setdefault(container, ([], []))
        minutes.append(minute)
        values.append(value)
    out = {}
    for container, (minutes, values) in samples.items():
        m = np.asarray(minutes) - min(minutes)
        if m.max() + 1 >= MIN_TRACE_MINUTES:
            out[container] = _fill(np.bincount(m, weights=values), np.bincount(m), carry)
    return out


def _fill(sums: np.ndarray, counts: np.ndarray, carry: bool) -> np.ndarray:
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    if not carry:
        return means
    last_seen = np.maximum.accumulate(np.where(counts > 0, np.arange(counts.size), 0))
    return means[last_seen]


def _rows(path: Path, only: str | None) -> Iterator[tuple[int, float, str]]:
    """(minute, value, container) of every row; TraceError on a malformed one."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, [])
        wanted = ("timestamp_anon", "value", "container_ip") + (("request_type",) if only else ())
        missing = [c for c in wanted if c not in header]
        if missing:
            raise TraceError(path, 1, f"missing columns {', '.join(missing)} (header: {','.join(header)})")
        t, v, c, *kind = (header.index(col) for col in wanted)
        for line, row in enumerate(reader, start=2):
            if len(row) != len(header):
                raise TraceError(path, line, f"{len(row)} fields, the header has {len(header)}")
            if only and row[kind[0]] != only:
                continue
            yield _minute(path, line, row[t]), _value(path, line, row[v]), _container(path, line, row[c])


def _minute(path: Path, line: int, text: str) -> int:
    try:
        return int(float(text) // 60)
    except (ValueError, OverflowError):
        raise TraceError(path, line, f"timestamp_anon {text!r} is not a number") from None


def _value(path: Path, line: int, text: str) -> float:
    return number(path, line, "value", text)


def _container(path: Path, line: int, text: str) -> str:
    if not text or text in ("None", "NULL"):
        raise TraceError(path, line, "no container_ip")
    return text


# -- per pod ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Usage:
    """How a workload uses what it asks for; deterministic from its key (task, or service)."""

    gpu_util: float  # sets the GPU-memory level (GPU util itself follows the pod's H200 workload)
    gpu_memory: float  # GPU-memory fraction at the shape's mean memory (training)
    cpu: float  # CPU rate = request x cpu x (0.15 + 0.7 x GPU util)
    memory: float  # working set = request x memory x (0.3 + 0.6 x GPU-memory fraction)


def _unit(key: str, salt: str) -> float:
    """A stable hash of `key` in [0, 1) (not hash(): that changes between processes)."""
    digest = hashlib.blake2b(f"{salt}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2 ** 64


def usage_of(key: str) -> Usage:
    util = 0.10 + 0.85 * _unit(key, "gpu-util")
    return Usage(gpu_util=util, gpu_memory=util * (0.4 + 0.4 * _unit(key, "gpu-memory")),
                 cpu=0.5 + 0.5 * _unit(key, "cpu"), memory=0.6 + 0.4 * _unit(key, "memory"))


def pick(key: str, count: int) -> int:
    """Which of `count` trace containers a key maps to."""
    return int(_unit(key, "container") * count)


def training_key(pod: PodView) -> str:
    return pod.spec.labels.get(TASK_LABEL) or pod.spec.name


def service_of(pod: PodView) -> str | None:
    labels = pod.spec.labels
    return labels.get(SERVICE_LABEL) or labels.get(REPLICASET_LABEL) or labels.get(DETACHED_FROM_LABEL)


def is_inference(pod: PodView) -> bool:
    return pod.spec.labels.get(KIND_LABEL) == INFERENCE


@dataclass(frozen=True, slots=True)
class PodReading:
    gpu_util: float  # 0..1 of the GPU share(s) held
    gpu_memory: float  # 0..1 of the framebuffer share(s) held
    cpu_seconds: float  # counter since the pod started
    memory_bytes: float
    activity: h200.Activity | None = None  # SM active etc. of the GPU share(s) held, this second
    shape: str = ""  # the H200 workload the pod follows


def gpu_shape_of(pod: PodView, shapes: TraceShapes) -> GpuShape:
    """The H200 workload a pod follows (cluster/simulated/h200.py): by kind, then by its task or service."""
    inference = is_inference(pod)
    key = (service_of(pod) or pod.spec.name) if inference else training_key(pod)
    return shapes.gpu[h200.workload_for(key, inference=inference, gpus=pod.spec.gpus, pick=pick,
                                        llm=GROUP_LABEL in pod.spec.labels)]


@dataclass(frozen=True, slots=True)
class TrafficReading:
    requests: float  # since the pod started (the +Inf bucket); whole from the traces, exact integrals when driven
    errors: float  # of which answered 500
    latency_sum_ms: float
    buckets: tuple[float, ...]  # cumulative counts per LATENCY_BUCKETS_MS
    engine: tuple[llm.EngineState, llm.EngineCounters] | None = None  # a load-driven leader's vLLM figures


def elapsed_ms(pod: PodView, now: float) -> int:
    return max(0, int((now - pod.started_at) * 1000))


def training_sample(pod: PodView, shapes: TraceShapes, now: float) -> PodReading:
    """GPU util and activity from the pod's H200 workload, second by second; GPU memory from the GenAI trace."""
    key, t = training_key(pod), elapsed_ms(pod, now)
    shape, use, gpu = shapes.training[pick(key, len(shapes.training))], usage_of(key), gpu_shape_of(pod, shapes)
    activity = gpu.workload.at(t)
    return _sample(pod, use, activity.gpu_util, gpu.util.integral(t), use.gpu_memory * shape.memory.at(t), t,
                   activity, gpu.workload.name)


def inference_sample(pod: PodView, shapes: TraceShapes, now: float) -> PodReading:
    """GPU util, memory and traffic from the GenAI trace; the H200 server's activity at that util."""
    t, shape, gpu = elapsed_ms(pod, now), serving_for(pod, shapes), gpu_shape_of(pod, shapes)
    use, util = usage_of(service_of(pod) or pod.spec.name), shape.util.at(t)
    return _sample(pod, use, util, shape.util.integral(t), shape.memory.at(t), t,
                   gpu.workload.at(t).scaled_to(min(1.0, util), gpu.workload.mean_util), gpu.workload.name)


def _sample(pod: PodView, use: Usage, util: float, util_seconds: float, gpu_memory: float, t: int,
            activity: h200.Activity, shape: str) -> PodReading:
    memory = min(1.0, gpu_memory)
    return PodReading(gpu_util=min(1.0, util), gpu_memory=memory,
                     cpu_seconds=_cores(pod, use) * (0.15 * t / 1000 + 0.7 * util_seconds),
                     memory_bytes=_working_set(pod, use, memory), activity=activity, shape=shape)


def _cores(pod: PodView, use: Usage) -> float:
    return pod.spec.cpu_milli / 1000 * use.cpu


def _working_set(pod: PodView, use: Usage, gpu_memory: float) -> float:
    return pod.spec.memory_mib * MIB * use.memory * (0.3 + 0.6 * gpu_memory)


def serving_for(pod: PodView, shapes: TraceShapes) -> ServingShape:
    return shapes.serving[pick(pod.spec.name, len(shapes.serving))]


def traffic_sample(pod: PodView, shapes: TraceShapes, now: float) -> TrafficReading:
    t, shape = elapsed_ms(pod, now), serving_for(pod, shapes)
    requests = math.floor(shape.qps.integral(t))
    buckets = tuple(min(requests, math.floor(b.integral(t))) for b in shape.buckets)
    return TrafficReading(requests, requests * ERROR_PER_MILLE // 1000, shape.latency_sum.integral(t), buckets)


# -- inference driven by a load ---------------------------------------------------------------------------
def serving_groups(pods: Sequence[PodView]) -> dict[str, list[list[PodView]]]:
    """The groups serving each group service: those whose every pod is ready and none going (a group serves whole)."""
    groups: dict[tuple[str, str], list[PodView]] = {}
    for pod in pods:
        labels = pod.spec.labels
        if GROUP_LABEL in labels and SERVICE_LABEL in labels:
            groups.setdefault((labels[SERVICE_LABEL], labels[GROUP_LABEL]), []).append(pod)
    out: dict[str, list[list[PodView]]] = {}
    for (service, _), members in sorted(groups.items()):
        if all(p.ready and not p.terminating for p in members):
            out.setdefault(service, []).append(members)
    return out


class ServingLoad(Protocol):
    """What a service's pods serve at real time `now` (the live demo's traffic: cluster/simulated/traffic.py)."""

    def serves(self, service: str) -> bool: ...

    def qps(self, service: str, now: float) -> float:
        """The service's requests per second."""
        ...

    def gpu(self, service: str, now: float, ready: int) -> float:
        """GPU utilization (0..1) of each of the `ready` pods serving it."""
        ...


@dataclass(slots=True)
class _Totals:
    """A load-driven pod's counters, integrated since the exporter first saw it."""

    at: float
    cpu_seconds: float = 0.0
    requests: float = 0.0
    latency_sum_ms: float = 0.0
    buckets: list[float] = field(default_factory=lambda: [0.0] * len(LATENCY_BUCKETS_MS))
    engine: llm.EngineCounters = field(default_factory=llm.EngineCounters)


class LoadDriven:
    """Readings of the inference pods whose service `load` serves (see the module's docstring). Stateful: one per
    exporter; a pod's counters start at 0 when first seen and restart with the exporter, which Prometheus's
    rate() takes as a counter reset."""

    def __init__(self, load: ServingLoad) -> None:
        self.load = load
        self._totals: dict[str, _Totals] = {}

    def readings(self, pods: Sequence[PodView], shapes: TraceShapes,
                 now: float) -> dict[str, tuple[PodReading, TrafficReading | None]]:
        """{pod name: (reading, traffic or None when it serves none)} of every inference pod of a served service."""
        serving = serving_pods(pods)
        replicas = {service: len(members) for service, members in serving.items()}
        busy = {p.spec.name for members in serving.values() for p in members}
        takes = set(busy)  # the pods the requests go to
        serving_names = set(busy)  # one-pod replicas; the rest of `busy` are groups' pods (LLM engines)
        for service, groups in serving_groups(pods).items():
            replicas[service] = replicas.get(service, 0) + len(groups)
            busy |= {p.spec.name for group in groups for p in group}
            takes |= {p.spec.name for group in groups for p in group if p.spec.labels.get(WORKER_LABEL) == "0"}
        out = {}
        for pod in pods:
            service = service_of(pod) if is_inference(pod) else None
            if service is None or not self.load.serves(service):
                continue
            name, ready = pod.spec.name, replicas.get(service, 0)
            util = self.load.gpu(service, now, ready) if name in busy else 0.0
            qps = self.load.qps(service, now) / ready if name in takes else 0.0
            out[name] = self._advance(pod, shapes, now, util, qps, name in takes, grouped=name not in serving_names)
        self._totals = {name: totals for name, totals in self._totals.items() if name in out}
        return out

    def _advance(self, pod: PodView, shapes: TraceShapes, now: float, util: float, qps: float,
                 serves: bool, grouped: bool = False) -> tuple[PodReading, TrafficReading | None]:
        use = usage_of(service_of(pod) or pod.spec.name)
        totals = self._totals.setdefault(pod.spec.name, _Totals(now))
        dt, totals.at = max(0.0, now - totals.at), now
        totals.cpu_seconds += _cores(pod, use) * (0.15 + 0.7 * util) * dt
        engine = llm.engine_at(util, qps)
        # latency rises with how busy the GPU is; a group's engine answers in its first token and output tokens
        median = 1e3 * llm.request_median_s(engine) if grouped else float(median_latency_ms(util, 1.0))
        totals.requests += qps * dt
        totals.latency_sum_ms += qps * dt * median * MEAN_PER_MEDIAN
        for i, share in enumerate(share_within(BUCKETS_MS, median)):
            totals.buckets[i] += qps * dt * float(share)
        totals.engine.advance(qps, engine, dt)
        t = elapsed_ms(pod, now)
        gpu_memory = min(1.0, serving_for(pod, shapes).memory.at(t))
        gpu = gpu_shape_of(pod, shapes)
        reading = PodReading(gpu_util=util, gpu_memory=gpu_memory, cpu_seconds=totals.cpu_seconds,
                             memory_bytes=_working_set(pod, use, gpu_memory),
                             activity=gpu.workload.at(t).scaled_to(util, gpu.workload.mean_util),
                             shape=gpu.workload.name)
        if not serves:
            return reading, None
        # Exact integrals, not whole requests: a pod taking a fraction of a request per second between two
        # scrapes would otherwise show irate() jumping between 0 and 1 / scrape interval.
        requests = totals.requests
        buckets = tuple(min(requests, b) for b in totals.buckets)
        return reading, TrafficReading(requests, requests * ERROR_PER_MILLE / 1000, totals.latency_sum_ms, buckets,
                                       (engine, totals.engine))


# -- metric families -----------------------------------------------------------------------------------
class _Families:
    """One family per metric name, filled pod by pod."""

    def __init__(self) -> None:
        dcgm = ["gpu", "UUID", "modelName", "Hostname", "pod", "namespace", "container", "shape"]
        cadvisor = ["namespace", "pod", "container", "node"]
        self.util = GaugeMetricFamily("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels=dcgm)
        self.profiling = {f: GaugeMetricFamily(h200.FIELDS[f], f"{h200.FIELDS[f]} (ratio 0-1).", labels=dcgm)
                          for f in h200.PROFILING}
        self.fb_used = GaugeMetricFamily("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels=dcgm)
        self.fb_free = GaugeMetricFamily("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", labels=dcgm)
        self.cpu = CounterMetricFamily("container_cpu_usage_seconds_total",
                                       "Cumulative cpu time consumed in seconds.", labels=cadvisor)
        self.memory = GaugeMetricFamily("container_memory_working_set_bytes",
                                        "Current working set in bytes.", labels=cadvisor)
        self.requests = GaugeMetricFamily("kube_pod_container_resource_requests",
                                          "The number of requested request resource by a container.",
                                          labels=cadvisor + ["resource", "unit"])
        self.labels = GaugeMetricFamily("kube_pod_labels", "Kubernetes labels converted to Prometheus labels.")
        self.istio = CounterMetricFamily("istio_requests_total", "Total requests.",
                                         labels=["namespace", "pod", "destination_workload", "response_code"])
        self.latency = HistogramMetricFamily("istio_request_duration_milliseconds", "Request duration (ms).",
                                             labels=["namespace", "pod", "destination_workload"])
        vllm = ["namespace", "pod", "model_name"]
        self.waiting = GaugeMetricFamily("vllm:num_requests_waiting", "Requests waiting to be processed.",
                                         labels=vllm)
        self.kv_cache = GaugeMetricFamily("vllm:kv_cache_usage_perc", "KV-cache usage (1 = full).", labels=vllm)
        self.prompt = CounterMetricFamily("vllm:prompt_tokens", "Prefill tokens processed.", labels=vllm)
        self.generation = CounterMetricFamily("vllm:generation_tokens", "Generation tokens processed.", labels=vllm)
        self.ttft = HistogramMetricFamily("vllm:time_to_first_token_seconds", "Time to first token (s).",
                                          labels=vllm)
        self.tpot = HistogramMetricFamily("vllm:request_time_per_output_token_seconds",
                                          "Time per output token of each request (s).", labels=vllm)

    def all(self) -> list[Metric]:
        return [self.util, *self.profiling.values(), self.fb_used, self.fb_free, self.cpu, self.memory,
                self.requests, self.labels, self.istio, self.latency, self.waiting, self.kv_cache, self.prompt,
                self.generation, self.ttft, self.tpot]


def pod_families(pods: Sequence[PodView], nodes: Iterable[NodeView], now: float, shapes: TraceShapes,
                 fb_mib: Mapping[str, int] = FB_MIB, driven: LoadDriven | None = None,
                 namespace: str | None = None) -> list[Metric]:
    """The metric families of every bound pod at `now`; inference pods of the services `driven` serves from its
    load, the others from the traces. Every pod's series carry `namespace` (the kwok pods' own); None: the simulated
    cluster's, INFERENCE_NAMESPACE for an inference pod, TRAINING_NAMESPACE for the others."""
    models = {n.name: n.gpu_model for n in nodes}
    readings = driven.readings(pods, shapes, now) if driven is not None else {}
    out = _Families()
    sampled = []
    for pod in pods:
        inference = is_inference(pod)
        if pod.spec.name in readings:
            sample, traffic = readings[pod.spec.name]
        else:
            sample = (inference_sample if inference else training_sample)(pod, shapes, now)
            # only a ready pod is behind the service
            traffic = traffic_sample(pod, shapes, now) if inference and pod.ready else None
        sampled.append((pod, sample, traffic))
    shared = shared_gpus([(pod, sample) for pod, sample, _ in sampled])
    for pod, sample, traffic in sampled:
        ns = namespace or (INFERENCE_NAMESPACE if is_inference(pod) else TRAINING_NAMESPACE)
        model = pod.spec.gpu_model or models.get(pod.node) or ""
        _add_gpus(out, pod, ns, model, fb_mib.get(model, DEFAULT_FB_MIB), sample, shared)
        _add_container(out, pod, ns, sample)
        if traffic is not None:
            _add_traffic(out, pod, ns, traffic)
    return out.all()


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def shared_gpus(readings: Sequence[tuple[PodView, PodReading]]) -> dict[str, dict[str, float]]:
    """{UUID: profiling ratio -> the GPU's value} of every GPU more than one pod holds a share of: each pod's
    activity times its share, summed (at most 1)."""
    holders: dict[str, list[tuple[float, h200.Activity]]] = {}
    for pod, s in readings:
        for share in pod.spec.gpu_shares:
            if s.activity is not None:
                holders.setdefault(gpu_uuid(pod.node, share.index), []).append((share.share, s.activity))
    return {uuid: {f: min(1.0, sum(part * getattr(a, f) for part, a in held)) for f in h200.PROFILING}
            for uuid, held in holders.items() if len(held) > 1}


def _add_gpus(out: _Families, pod: PodView, namespace: str, model: str, fb_mib: int, s: PodReading,
              shared: Mapping[str, Mapping[str, float]]) -> None:
    for share in pod.spec.gpu_shares:  # none for a CPU-only pod
        uuid = gpu_uuid(pod.node, share.index)
        labels = [str(share.index), uuid, model, pod.node, pod.spec.name, namespace, CONTAINER,
                  f"{h200.SOURCE}/{s.shape}" if s.shape else ""]
        held = fb_mib * share.share
        out.util.add_metric(labels, round(100 * s.gpu_util, 3))
        out.fb_used.add_metric(labels, round(held * s.gpu_memory))
        out.fb_free.add_metric(labels, round(held) - round(held * s.gpu_memory))
        if s.activity is not None:
            device = shared.get(uuid)
            for f, family in out.profiling.items():
                family.add_metric(labels, round(device[f] if device else getattr(s.activity, f), 6))


def _add_container(out: _Families, pod: PodView, namespace: str, s: PodReading) -> None:
    labels = [namespace, pod.spec.name, CONTAINER, pod.node]
    out.cpu.add_metric(labels, s.cpu_seconds)
    out.memory.add_metric(labels, round(s.memory_bytes))
    out.requests.add_metric(labels + ["cpu", "core"], pod.spec.cpu_milli / 1000)
    out.requests.add_metric(labels + ["memory", "byte"], pod.spec.memory_mib * MIB)
    if pod.spec.gpu_shares:
        out.requests.add_metric(labels + ["nvidia_com_gpu", "integer"], pod.spec.gpus)
    tags = {k: v for k in POD_LABELS if (v := pod.spec.labels.get(k))}
    if is_inference(pod) and (service := service_of(pod)):
        tags[SERVICE_LABEL] = service  # a pod detached from its ReplicaSet still serves it
    out.labels.add_sample("kube_pod_labels", {"namespace": namespace, "pod": pod.spec.name,
                                              **{kube_state_label(k): v for k, v in tags.items()}}, 1.0)


def _add_traffic(out: _Families, pod: PodView, namespace: str, s: TrafficReading) -> None:
    labels = [namespace, pod.spec.name, service_of(pod) or pod.spec.name]
    out.istio.add_metric(labels + ["200"], s.requests - s.errors)
    out.istio.add_metric(labels + ["500"], s.errors)
    buckets = [(str(float(le)), n) for le, n in zip(LATENCY_BUCKETS_MS, s.buckets, strict=True)]
    out.latency.add_metric(labels, buckets + [("+Inf", s.requests)], s.latency_sum_ms)
    if s.engine is not None:
        _add_engine(out, labels, *s.engine)


def _add_engine(out: _Families, labels: list[str], state: llm.EngineState, c: llm.EngineCounters) -> None:
    """vLLM's series of one engine (its model served under the service's name)."""
    out.waiting.add_metric(labels, state.waiting)
    out.kv_cache.add_metric(labels, state.kv_cache)
    out.prompt.add_metric(labels, c.prompt_tokens)
    out.generation.add_metric(labels, c.generation_tokens)
    for family, bounds, counts, count, total in ((out.ttft, llm.TTFT_BUCKETS_S, c.ttft_buckets, c.ttft_count,
                                                  c.ttft_sum_s),
                                                 (out.tpot, llm.TPOT_BUCKETS_S, c.tpot_buckets, c.tpot_count,
                                                  c.tpot_sum_s)):
        cumulative = [(str(le), min(count, n)) for le, n in zip(bounds, counts or [0.0] * len(bounds), strict=True)]
        family.add_metric(labels, cumulative + [("+Inf", count)], total)


# -- collector ------------------------------------------------------------------------------------------
ClusterState = tuple[Sequence[PodView], Sequence[NodeView]]


class PodMetricsCollector(Collector):
    """Recomputes every pod's metrics on each scrape from `source()` (None: no cluster yet, no series); with a
    `load`, the inference pods of the services it serves follow it (LoadDriven); `namespace`: pod_families'."""

    def __init__(self, source: Callable[[], ClusterState | None], shapes: TraceShapes,
                 clock: Callable[[], float] = time.time, fb_mib: Mapping[str, int] = FB_MIB,
                 load: ServingLoad | None = None, namespace: str | None = None) -> None:
        self._source, self._shapes, self._clock, self._fb_mib = source, shapes, clock, fb_mib
        self._namespace = namespace
        self._driven = LoadDriven(load) if load is not None else None
        self._lock = threading.Lock()  # LoadDriven integrates between scrapes: one scrape at a time

    def collect(self) -> Iterable[Metric]:
        state = self._source()
        if state is None:
            return []
        pods, nodes = state
        with self._lock:
            return pod_families(list(pods), nodes, self._clock(), self._shapes, self._fb_mib, self._driven,
                                self._namespace)
