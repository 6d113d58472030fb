"""The records on the pipeline's topics, and their wire format (encode/decode here, nowhere else).

Times are epoch milliseconds (ints). Utilizations are fractions (0..1 of what the pod requested,
GPU utilization 0..1 of the GPUs it holds). A field the source does not have is null (a CPU-only
pod has no GPU fields; a training pod has no request-rate fields). The Flink job's SQL tables use
exactly these field names.

metrics.pods (PodSample: one per pod per step, every other topic is a few rows per run a minute) is
one CSV line, the dataclass's fields in declaration order: Flink's `csv` format reads columns by
position, so no field names to scan and match per record, and the line is about half the JSON
object. A null is the literal \\N (`CSV_NULL`, Flink's `csv.null-literal`), not an empty field: an
empty field would read back as an empty string for a STRING column, so `service` IS NOT NULL - the
job's filter - would pass a null; and \\N cannot be a Kubernetes name (encode refuses it). Names
holding a comma, quote or line break are quoted, RFC 4180 style. Floats are repr()s: the shortest
text that reads back as the same double. A new PodSample field goes last: Flink reads a line
without it as that column null (a line with more columns than the table is dropped).

The other topics stay JSON objects keyed by field name: self-describing for the sink, the tests
and a human with a console consumer, and too few records for their decoding to matter.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, fields
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PodSample:
    """One pod at one step (topic metrics.pods, key = pod). Built by the publisher from PromQL."""

    ts: int  # epoch ms, a multiple of the publisher's step
    namespace: str
    pod: str
    job: int | None = None  # TrainingJob id (pod label tidal.io/job)
    run: int | None = None  # JobRun attempt (pod label tidal.io/run)
    service: str | None = None  # InferenceService name (pod label tidal.io/service)
    gpu_util: float | None = None  # mean DCGM_FI_DEV_GPU_UTIL over its GPUs / 100
    gpu_mem_used_mib: float | None = None  # sum DCGM_FI_DEV_FB_USED
    gpu_mem_free_mib: float | None = None  # sum DCGM_FI_DEV_FB_FREE
    cpu_cores: float | None = None  # rate(container_cpu_usage_seconds_total), summed over containers
    mem_bytes: float | None = None  # container_memory_working_set_bytes, summed over containers
    req_gpus: float | None = None  # kube_pod_container_resource_requests{resource="nvidia_com_gpu"}
    req_cpu_cores: float | None = None  # ...{resource="cpu"}
    req_mem_bytes: float | None = None  # ...{resource="memory"}
    qps: float | None = None  # rate(istio_requests_total)
    errors_per_s: float | None = None  # rate(istio_requests_total{response_code=~"5.."})
    latency_mean_ms: float | None = None  # rate(_sum) / rate(_count) of istio_request_duration_milliseconds
    latency_p99_ms: float | None = None  # histogram_quantile(0.99, ... _bucket)
    # DCGM profiling ratios (0..1), each the mean over the pod's GPUs (docs/reference/metrics.md)
    sm_active: float | None = None  # DCGM_FI_PROF_SM_ACTIVE: what the GPU's SMs did, not just "a kernel ran"
    sm_occupancy: float | None = None  # DCGM_FI_PROF_SM_OCCUPANCY
    tensor_active: float | None = None  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    dram_active: float | None = None  # DCGM_FI_PROF_DRAM_ACTIVE
    # The DCGM figures above are each the mean over the step ending at ts; these are the step's maxima.
    gpu_util_peak: float | None = None
    sm_active_peak: float | None = None
    sm_occupancy_peak: float | None = None
    tensor_active_peak: float | None = None
    dram_active_peak: float | None = None
    # 1: the profiling ratios were attributed from a GPU shared with other pods (streaming/attribution.py)
    estimated: int | None = None


@dataclass(frozen=True, slots=True)
class JobMinute:
    """A training run over one event-time minute (topic profiles.job-minute, key = job).

    Means are over the run's (pod, step) samples in the window, each counted once however often
    it was delivered; peaks are their maxima. Utilization = used / requested."""

    job: int
    run: int
    window_start: int  # epoch ms
    window_end: int
    samples: int
    gpu_util_mean: float | None
    gpu_util_peak: float | None
    gpu_mem_util_mean: float | None  # FB used / (used + free)
    gpu_mem_util_peak: float | None
    cpu_util_mean: float | None  # cpu_cores / req_cpu_cores
    cpu_util_peak: float | None
    mem_util_mean: float | None  # mem_bytes / req_mem_bytes
    mem_util_peak: float | None
    cpu_cores_mean: float | None  # absolute, for right-sizing (docs/concepts/quotas-and-priority.md#right-sizing)
    cpu_cores_peak: float | None
    req_gpus: float | None
    req_cpu_cores: float | None
    req_mem_bytes: float | None
    emitted_at: int  # epoch ms when Flink closed the window (the lag is measured from here)
    # DCGM profiling ratios; null where the exporter does not publish them (older GPUs, default counters)
    sm_active_mean: float | None = None
    sm_active_peak: float | None = None
    sm_occupancy_mean: float | None = None
    sm_occupancy_peak: float | None = None
    tensor_active_mean: float | None = None
    tensor_active_peak: float | None = None
    dram_active_mean: float | None = None
    dram_active_peak: float | None = None
    estimated: int | None = None  # 1: some samples' profiling ratios were attributed from a shared GPU


@dataclass(frozen=True, slots=True)
class ServiceMinute:
    """An inference service over one event-time minute (topic profiles.service-minute, key = service)."""

    service: str
    window_start: int
    window_end: int
    samples: int
    replicas: int  # distinct pods seen in the minute
    gpu_util_mean: float | None  # mean over its pods' samples
    cpu_util_mean: float | None
    qps: float | None  # requests/s of the whole service (sum over pods, mean over steps)
    errors_per_s: float | None
    latency_mean_ms: float | None  # request-weighted mean over pods
    latency_p99_ms: float | None  # max of the pods' p99 (an upper bound of the service's p99)
    emitted_at: int
    sm_active_mean: float | None = None  # DCGM_FI_PROF_SM_ACTIVE, mean over its pods' samples
    estimated: int | None = None  # 1: some of it was attributed from a shared GPU


@dataclass(frozen=True, slots=True)
class LateSample:
    """A PodSample Flink dropped because its minute had closed > 2 min before (topic metrics.late)."""

    ts: int
    pod: str
    job: int | None
    run: int | None
    service: str | None
    emitted_at: int


CSV_NULL = "\\N"  # a null column of a CSV record (Flink's csv.null-literal)
_CSV_SPECIAL = frozenset(',"\r\n')


def encode(record: Any) -> bytes:
    """A PodSample as a CSV line, any other record as a JSON object."""
    return _csv_line(record) if isinstance(record, PodSample) else _json_object(record)


def decode(cls: type[T], raw: bytes | str | dict) -> T:
    """A record from what `encode` made of it (JSON: unknown keys ignored, missing optional keys null)."""
    if cls is PodSample:
        return _from_csv(cls, raw if isinstance(raw, str) else bytes(raw).decode())  # type: ignore[arg-type]
    data = raw if isinstance(raw, dict) else json.loads(raw)
    return cls(**{f.name: data.get(f.name) for f in fields(cls)})  # type: ignore[arg-type]


def _csv_line(record: Any) -> bytes:
    """Field by field, not dataclasses.astuple: that deep-copies, and this runs per sample."""
    return ",".join(_csv_value(getattr(record, name)) for name in record.__dataclass_fields__).encode()


def _csv_value(value: Any) -> str:
    if value is None:
        return CSV_NULL
    if isinstance(value, str):
        if value == CSV_NULL:
            raise ValueError(f"{CSV_NULL!r} is the CSV null: not a name")
        return f'"{value.replace(chr(34), chr(34) * 2)}"' if _CSV_SPECIAL.intersection(value) else value
    return repr(value)  # int or float (bool is no PodSample type)


def _from_csv(cls: type[T], text: str) -> T:
    values = next(csv.reader([text], strict=True))
    parsers = _parsers(cls)
    if len(values) != len(parsers):
        raise ValueError(f"{cls.__name__}: {len(values)} columns, not {len(parsers)}")
    return cls(*(None if v == CSV_NULL else parse(v) for v, parse in zip(values, parsers, strict=True)))


def _parsers(cls: type) -> list[type]:
    """int, float or str per field, from its annotation ("float | None" -> float)."""
    kinds = {"int": int, "float": float, "str": str}
    return [kinds[str(f.type).split(" | ")[0]] for f in fields(cls)]


def _json_object(record: Any) -> bytes:
    """Compact JSON without the null fields (readers take a missing field as null). Field by field, not
    dataclasses.asdict, which deep-copies."""
    values = ((name, getattr(record, name)) for name in record.__dataclass_fields__)
    return json.dumps({name: value for name, value in values if value is not None}, separators=(",", ":")).encode()
