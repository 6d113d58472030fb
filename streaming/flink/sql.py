"""The profile job as Flink SQL: pod samples -> per-minute job profiles, service loads, late samples.

Event time is the sample's `ts`. The watermark trails the newest sample by `lateness_s` (2 min), so
samples arriving out of order by up to 2 minutes still land in their minute; a sample whose minute
closed before it arrived is dropped by the window and, by the same rule, routed to the late topic
(the `late_samples` view reproduces the window operator's test `watermark >= window max timestamp`).

Each window first collapses duplicate (pod, ts) samples - a publisher that crashed between flushing
and saving its cursor re-publishes a range - then aggregates per run or service (a cascading window
aggregation: the inner window's `window_time` is the outer window's time attribute).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from streaming.records import CSV_NULL, JobMinute, LateSample, PodSample, ServiceMinute
from streaming.topics import Topics

# Column types of the records' fields; everything not listed is DOUBLE.
_TYPES = {"ts": "BIGINT", "namespace": "STRING", "pod": "STRING", "job": "BIGINT", "run": "INT",
          "service": "STRING", "window_start": "BIGINT", "window_end": "BIGINT", "samples": "BIGINT",
          "replicas": "BIGINT", "emitted_at": "BIGINT", "estimated": "INT"}
# Planner options that shape the job's operators (so they are part of its plan_id).
PLANNER = {
    # Window aggregates in one phase: the per-(pod, step) dedup has one record per key, so a local
    # pre-aggregation only added a buffer, a combine and a bigger record to every sample.
    "table.optimizer.agg-phase-strategy": "ONE_PHASE",
}
# The DCGM profiling ratios of PodSample, each kept per step and averaged / maxed per minute like GPU util.
PROF_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
# A step's peak is the publisher's max over the step, or its value where a record has no peak.
_PROF_STEP = ", ".join(f"MAX({f}) AS {f}, MAX(COALESCE({f}_peak, {f})) AS {f}_peak" for f in PROF_FIELDS)
# Wall-clock epoch ms when a row leaves the job: the start of the window-close -> profile-row lag.
_NOW_MS = ("CAST(EXTRACT(EPOCH FROM CURRENT_TIMESTAMP) AS BIGINT) * 1000"
           " + EXTRACT(MILLISECOND FROM CURRENT_TIMESTAMP)")


@dataclass(frozen=True, slots=True)
class Spec:
    bootstrap: str
    topics: Topics
    group_id: str
    window_s: int = 60
    lateness_s: int = 120


def _interval(seconds: int) -> str:
    """A Flink SQL interval literal (`INTERVAL '120' SECOND` overflows SECOND's 2-digit precision)."""
    days, rest = divmod(seconds, 86400)
    return f"INTERVAL '{days} {rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}' DAY TO SECOND"


def _columns(record: type) -> str:
    return ",\n  ".join(f"`{name}` {_TYPES.get(name, 'DOUBLE')}" for name in record.__dataclass_fields__)


def _kafka(spec: Spec, topic: str, extra: str) -> str:
    return f"'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{spec.bootstrap}', {extra}"


def _sink(spec: Spec, name: str, record: type, topic: str, key: str) -> str:
    options = _kafka(spec, topic, f"'format' = 'json', 'key.format' = 'json', 'key.fields' = '{key}', "
                     "'value.fields-include' = 'ALL', 'sink.delivery-guarantee' = 'at-least-once'")
    return f"CREATE TEMPORARY TABLE {name} (\n  {_columns(record)}\n) WITH ({options})"


def ddl(spec: Spec) -> list[str]:
    # streaming/records.py's CSV line. A malformed field reads as null (like a missing column), so a line
    # without ts, pod or a job run / service is filtered below; one with extra columns is dropped.
    source = _kafka(spec, spec.topics.pod_samples,
                    f"'format' = 'csv', 'csv.null-literal' = '{CSV_NULL}', 'csv.ignore-parse-errors' = 'true', "
                    f"'properties.group.id' = '{spec.group_id}', 'scan.startup.mode' = 'group-offsets', "
                    "'properties.auto.offset.reset' = 'earliest'")
    window_ms = spec.window_s * 1000
    return [
        f"""CREATE TEMPORARY TABLE pod_samples (
  {_columns(PodSample)},
  rowtime AS TO_TIMESTAMP_LTZ(ts, 3),
  WATERMARK FOR rowtime AS rowtime - {_interval(spec.lateness_s)}
) WITH ({source})""",
        _sink(spec, "job_minutes", JobMinute, spec.topics.job_minutes, "job"),
        _sink(spec, "service_minutes", ServiceMinute, spec.topics.service_minutes, "service"),
        _sink(spec, "late_samples", LateSample, spec.topics.late_samples, "pod"),
        # Filter: a sample must say when, which pod, and whom it works for.
        """CREATE TEMPORARY VIEW samples AS SELECT * FROM pod_samples
WHERE ts IS NOT NULL AND pod IS NOT NULL AND ((job IS NOT NULL AND run IS NOT NULL) OR service IS NOT NULL)""",
        f"""CREATE TEMPORARY VIEW job_steps AS
SELECT job, run, pod, ts, window_time AS step_time,
  MAX(gpu_util) AS gpu_util, MAX(COALESCE(gpu_util_peak, gpu_util)) AS gpu_util_peak, MAX(estimated) AS estimated,
  MAX(CASE WHEN gpu_mem_used_mib + gpu_mem_free_mib > 0
      THEN gpu_mem_used_mib / (gpu_mem_used_mib + gpu_mem_free_mib) END) AS gpu_mem_util,
  MAX(CASE WHEN req_cpu_cores > 0 THEN cpu_cores / req_cpu_cores END) AS cpu_util,
  MAX(CASE WHEN req_mem_bytes > 0 THEN mem_bytes / req_mem_bytes END) AS mem_util,
  MAX(cpu_cores) AS cpu_cores, MAX(req_gpus) AS req_gpus, MAX(req_cpu_cores) AS req_cpu_cores,
  MAX(req_mem_bytes) AS req_mem_bytes, {_PROF_STEP}
FROM TABLE(TUMBLE(TABLE samples, DESCRIPTOR(rowtime), {_interval(spec.window_s)}))
WHERE job IS NOT NULL AND run IS NOT NULL
GROUP BY job, run, pod, ts, window_start, window_end, window_time""",
        f"""CREATE TEMPORARY VIEW service_steps AS
SELECT service, pod, ts, window_time AS step_time,
  MAX(gpu_util) AS gpu_util, MAX(sm_active) AS sm_active, MAX(estimated) AS estimated,
  MAX(CASE WHEN req_cpu_cores > 0 THEN cpu_cores / req_cpu_cores END) AS cpu_util,
  MAX(qps) AS qps, MAX(errors_per_s) AS errors_per_s,
  MAX(latency_mean_ms) AS latency_mean_ms, MAX(latency_p99_ms) AS latency_p99_ms
FROM TABLE(TUMBLE(TABLE samples, DESCRIPTOR(rowtime), {_interval(spec.window_s)}))
WHERE service IS NOT NULL
GROUP BY service, pod, ts, window_start, window_end, window_time""",
        f"""CREATE TEMPORARY VIEW late AS
SELECT ts, pod, job, run, service, {_NOW_MS} AS emitted_at FROM samples
WHERE CURRENT_WATERMARK(rowtime) IS NOT NULL
  AND CURRENT_WATERMARK(rowtime) >= TO_TIMESTAMP_LTZ(ts - MOD(ts, {window_ms}) + {window_ms - 1}, 3)""",
    ]


def inserts(spec: Spec) -> list[str]:
    window_ms = spec.window_s * 1000
    start = f"MIN(ts) - MOD(MIN(ts), {window_ms})"
    windowed = f"TABLE(TUMBLE(TABLE {{}}, DESCRIPTOR(step_time), {_interval(spec.window_s)}))"
    return [
        f"""INSERT INTO job_minutes
SELECT job, run, {start}, {start} + {window_ms}, COUNT(*),
  AVG(gpu_util), MAX(gpu_util_peak), AVG(gpu_mem_util), MAX(gpu_mem_util), AVG(cpu_util), MAX(cpu_util),
  AVG(mem_util), MAX(mem_util), AVG(cpu_cores), MAX(cpu_cores),
  MAX(req_gpus), MAX(req_cpu_cores), MAX(req_mem_bytes), {_NOW_MS},
  {", ".join(f"AVG({f}), MAX({f}_peak)" for f in PROF_FIELDS)}, MAX(estimated)
FROM {windowed.format('job_steps')}
GROUP BY job, run, window_start, window_end""",
        f"""INSERT INTO service_minutes
SELECT service, {start}, {start} + {window_ms}, COUNT(*), COUNT(DISTINCT pod),
  AVG(gpu_util), AVG(cpu_util),
  SUM(qps) / COUNT(DISTINCT ts), SUM(errors_per_s) / COUNT(DISTINCT ts),
  SUM(CASE WHEN latency_mean_ms IS NOT NULL THEN qps * latency_mean_ms END)
    / NULLIF(SUM(CASE WHEN latency_mean_ms IS NOT NULL THEN qps END), 0),
  MAX(latency_p99_ms), {_NOW_MS}, AVG(sm_active), MAX(estimated)
FROM {windowed.format('service_steps')}
GROUP BY service, window_start, window_end""",
        "INSERT INTO late_samples SELECT * FROM late",
    ]


def plan_id(spec: Spec) -> str:
    """A short hash of the job's SQL and planner options: checkpoints are only restored into the plan that
    wrote them."""
    return hashlib.sha256("\n".join(ddl(spec) + inserts(spec) + sorted(f"{k}={v}" for k, v in PLANNER.items()))
                          .encode()).hexdigest()[:12]
