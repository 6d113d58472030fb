"""Prometheus -> Kafka publisher: one PodSample per pod per step on ``Topics(prefix).pod_samples``.

Every cycle evaluates a fixed set of PromQL expressions (``QUERIES``) with ``query_range`` on a grid
of epoch-aligned steps (ts = k * step), one request per expression over the whole range, so every
metric of a pod lands on the same timestamps; the results are joined by (namespace, pod, ts) into
PodSamples, produced keyed by pod, and the producer is flushed before the cursor moves.

Rows: a (pod, ts) becomes a record when ``kube_pod_labels`` at ts gives the pod a job
(``tidal.io/job``) or a service (``tidal.io/service``) label and at least one usage metric (GPU,
CPU, memory, requests/latency) has a value; requests alone (a pending pod) are not a sample. NaN
and ±Inf (e.g. a latency over zero requests) become null. A pod with request counters but no 5xx
series has ``errors_per_s`` 0. Istio series reported by the client side (``reporter="source"``)
are left out, so a pod's qps is what it served.

Cursor: Redis key ``<prefix>:publisher:cursor`` holds the ts (epoch ms) of the last published step.
A cycle covers the steps in (cursor, now - delay], at most ``max_steps_per_cycle`` of them, in
chunks of ``chunk_steps`` (Prometheus answers at most 11,000 points per series); each chunk is
queried, produced, flushed (every record acked by the broker, acks=all) and only then the cursor is
set to the chunk's last step. A restart therefore resumes right after the last acked chunk: no step
is skipped and none is published twice — except after a crash between the flush and the cursor
save, when that one chunk is published again on restart. The re-published records are identical
(same query range, same data, records sorted by (ts, namespace, pod), same JSON), and the Flink job
deduplicates by (pod, ts) within its window, so downstream profiles count each step once. The delay
(settings.TIDAL_PUBLISHER_DELAY_S) lets scrapes land first so that re-querying a range gives the
same answer. With no cursor the first step is ``now - delay - backfill`` aligned down to the step.
Run one publisher per prefix (two would each publish every step).

No Django here: the management command ``profiling/management/commands/publish_metrics.py`` builds
a ``PublisherConfig`` from settings.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cluster.backend import JOB_LABEL, RUN_LABEL, SERVICE_LABEL, kube_state_label
from streaming.attribution import DeviceReading, attribute
from streaming.records import PodSample, encode
from streaming.topics import Topics

log = logging.getLogger(__name__)

PROMETHEUS_MAX_POINTS = 11_000  # per series of one query_range answer


@dataclass(frozen=True, slots=True)
class PublisherConfig:
    prometheus_url: str
    kafka_bootstrap: str
    redis_url: str
    topic_prefix: str = "tidal"
    step_s: int = 5  # settings.TIDAL_METRICS_STEP_S
    interval_s: float = 10.0  # settings.TIDAL_PUBLISHER_INTERVAL_S
    delay_s: int = 10  # settings.TIDAL_PUBLISHER_DELAY_S
    backfill_s: int = 0  # first start without a cursor: publish this much history
    chunk_steps: int = 120  # steps per query_range (and per flush + cursor save)
    max_steps_per_cycle: int = 720  # a cycle stops there; the next one starts at once
    rate_window: str = "1m"  # irate() range: must hold >= 2 scrapes
    selector: str = ""  # PromQL label matchers every series must also match, e.g. 'namespace=~"team-.*"'
    query_timeout_s: float = 60.0
    flush_timeout_s: float = 60.0
    linger_ms: int = 20

    def __post_init__(self) -> None:
        if int(self.step_s) != self.step_s or self.step_s < 1:
            raise ValueError("step_s must be a whole number of seconds >= 1")
        if self.chunk_steps < 1 or self.max_steps_per_cycle < 1:
            raise ValueError("chunk_steps and max_steps_per_cycle must be >= 1")

    @property
    def step_ms(self) -> int:
        return int(self.step_s) * 1000


def cursor_key(prefix: str) -> str:
    return f"{prefix}:publisher:cursor"


# --- the PromQL --------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Query:
    name: str  # a PodSample field, or "requests" / "labels" (split by label)
    expr: str


REQUEST_FIELDS = {"nvidia_com_gpu": "req_gpus", "cpu": "req_cpu_cores", "memory": "req_mem_bytes"}
LABEL_JOB, LABEL_RUN, LABEL_SERVICE = (kube_state_label(n) for n in (JOB_LABEL, RUN_LABEL, SERVICE_LABEL))
# PodSample field <- dcgm-exporter's profiling field (a ratio 0..1), averaged over the pod's GPUs
DCGM_PROF_FIELDS = {"sm_active": "DCGM_FI_PROF_SM_ACTIVE", "sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY",
                    "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE"}
# Read per (pod, GPU) and combined in `join` (streaming/attribution.py): field -> (metric, divisor)
DEVICE_FIELDS = {"gpu_util": ("DCGM_FI_DEV_GPU_UTIL", 100), **{f: (m, 1) for f, m in DCGM_PROF_FIELDS.items()}}
DEVICE_QUERIES = frozenset(f"{field}{peak}" for field in DEVICE_FIELDS for peak in ("", "_peak"))
DEVICE_LABEL = "UUID"
USAGE_FIELDS = ("gpu_util", "gpu_mem_used_mib", "gpu_mem_free_mib", "cpu_cores", "mem_bytes",
                "qps", "errors_per_s", "latency_mean_ms", "latency_p99_ms", *DCGM_PROF_FIELDS)


def build_queries(rate_window: str = "1m", selector: str = "", step_s: int = 5) -> tuple[Query, ...]:
    """The cycle's PromQL. DCGM gauges are read over the step ending at each point (mean, and max for the peaks),
    not at the point: a burst shorter than the step (an idle notebook's 1-s matmuls every 10 s) would read 0 at
    every point. The window is a millisecond short of the step, so a sample on a grid point counts in one step
    only, whichever end of the range the Prometheus version includes."""
    w = rate_window
    by = "by (namespace, pod)"
    pod = 'pod!=""' + (f", {selector}" if selector else "")
    cont = f'container!="", container!="POD", {pod}'  # "" is cAdvisor's pod-level cgroup sum
    srv = f'reporter!="source", {pod}'  # the server side of istio's telemetry
    step = f"[{int(step_s) * 1000 - 1}ms]"

    def device(field: str, fn: str) -> Query:
        metric, divisor = DEVICE_FIELDS[field]
        name = field if fn == "avg" else f"{field}_peak"
        return Query(name, f"avg by (namespace, pod, {DEVICE_LABEL}) ({fn}_over_time({metric}{{{pod}}}{step}))"
                           + (f" / {divisor}" if divisor != 1 else ""))

    return (
        *(device(field, fn) for field in DEVICE_FIELDS for fn in ("avg", "max")),
        Query("gpu_mem_used_mib", f"sum {by} (avg_over_time(DCGM_FI_DEV_FB_USED{{{pod}}}{step}))"),
        Query("gpu_mem_free_mib", f"sum {by} (avg_over_time(DCGM_FI_DEV_FB_FREE{{{pod}}}{step}))"),
        Query("cpu_cores", f"sum {by} (irate(container_cpu_usage_seconds_total{{{cont}}}[{w}]))"),
        Query("mem_bytes", f"sum {by} (container_memory_working_set_bytes{{{cont}}})"),
        Query("requests", "sum by (namespace, pod, resource) (kube_pod_container_resource_requests"
                          f'{{resource=~"cpu|memory|nvidia_com_gpu", {pod}}})'),
        Query("labels", f"max by (namespace, pod, {LABEL_JOB}, {LABEL_RUN}, {LABEL_SERVICE}) "
                        f"(kube_pod_labels{{{pod}}})"),
        Query("qps", f"sum {by} (irate(istio_requests_total{{{srv}}}[{w}]))"),
        Query("errors_per_s", f'sum {by} (irate(istio_requests_total{{{srv}, response_code=~"5.."}}[{w}]))'),
        Query("latency_mean_ms", f"sum {by} (irate(istio_request_duration_milliseconds_sum{{{srv}}}[{w}]))"
                                 f" / sum {by} (irate(istio_request_duration_milliseconds_count{{{srv}}}[{w}]))"),
        Query("latency_p99_ms", "histogram_quantile(0.99, sum by (namespace, pod, le) "
                                f"(irate(istio_request_duration_milliseconds_bucket{{{srv}}}[{w}])))"),
    )


QUERIES = build_queries()


# --- pure parts: the step grid, chunks, the join ------------------------------------------------------

def align_down(t_ms: int, step_ms: int) -> int:
    return t_ms // step_ms * step_ms


@dataclass(frozen=True, slots=True)
class Plan:
    first_ms: int  # first step to publish (inclusive)
    last_ms: int  # last step to publish (inclusive; < first_ms: nothing to do)
    end_ms: int  # the newest publishable step now (last_ms < end_ms: capped, more to do)
    step_ms: int

    @property
    def steps(self) -> int:
        return max(0, (self.last_ms - self.first_ms) // self.step_ms + 1)


def plan_range(cursor_ms: int | None, now_ms: int, cfg: PublisherConfig, until_ms: int | None = None) -> Plan:
    """The steps of one cycle: (cursor, now - delay] (and <= until), at most max_steps_per_cycle."""
    step = cfg.step_ms
    end = align_down(now_ms - cfg.delay_s * 1000, step)
    if until_ms is not None:
        end = min(end, align_down(until_ms, step))
    if cursor_ms is None:
        first = align_down(now_ms - cfg.delay_s * 1000 - cfg.backfill_s * 1000, step)
    else:
        first = align_down(cursor_ms, step) + step
    last = min(end, first + (cfg.max_steps_per_cycle - 1) * step)
    return Plan(first, last, end, step)


def chunk_range(first_ms: int, last_ms: int, step_ms: int, chunk_steps: int) -> list[tuple[int, int]]:
    """Split [first, last] (both on the grid) into inclusive sub-ranges of at most chunk_steps steps
    (never more than Prometheus' 11,000 points per series)."""
    n = max(1, min(chunk_steps, PROMETHEUS_MAX_POINTS))
    out = []
    a = first_ms
    while a <= last_ms:
        b = min(last_ms, a + (n - 1) * step_ms)
        out.append((a, b))
        a = b + step_ms
    return out


def to_float(raw: Any) -> float | None:
    """A Prometheus sample value ("1.5", "NaN", "+Inf") as a finite float, else None."""
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _to_int(raw: str | None) -> int | None:
    try:
        return int(raw) if raw not in (None, "") else None
    except ValueError:
        return None


Series = Mapping[str, Any]  # one query_range result: {"metric": {...}, "values": [[t_s, "v"], ...]}


def join(results: Mapping[str, Sequence[Series]], step_ms: int | None = None) -> list[PodSample]:
    """PodSamples from the query_range answers of QUERIES, keyed by query name; sorted by (ts, ns, pod).

    The DEVICE_QUERIES answer per (pod, GPU): they are combined per pod by streaming/attribution.py, which
    splits a shared GPU's activity among its pods and marks those samples `estimated`.
    Points off the step grid (if `step_ms` is given) are ignored."""
    values: dict[tuple[int, str, str], dict[str, float]] = {}
    labels: dict[tuple[int, str, str], tuple[int | None, int | None, str | None]] = {}
    devices: dict[int, dict[tuple[str, str, str], dict[str, float]]] = {}  # ts -> (ns, pod, GPU) -> field -> v

    def points(series: Series) -> Iterable[tuple[tuple[int, str, str], Any]]:
        m = series.get("metric", {})
        ns, pod = m.get("namespace", ""), m.get("pod", "")
        if not pod:
            return
        for t, raw in series.get("values", ()):
            ts = round(float(t) * 1000)
            if step_ms is None or ts % step_ms == 0:
                yield (ts, ns, pod), raw

    for name, series_list in results.items():
        for series in series_list:
            m = series.get("metric", {})
            if name == "labels":
                ident = (_to_int(m.get(LABEL_JOB)), _to_int(m.get(LABEL_RUN)), m.get(LABEL_SERVICE) or None)
                for key, _ in points(series):
                    # Two label sets at one ts (labels changed within the lookback): keep the greatest.
                    if key not in labels or _order(ident) > _order(labels[key]):
                        labels[key] = ident
                continue
            if name in DEVICE_QUERIES:
                for (ts, ns, pod), raw in points(series):
                    if (v := to_float(raw)) is not None:
                        devices.setdefault(ts, {}).setdefault((ns, pod, m.get(DEVICE_LABEL, "")), {})[name] = v
                continue
            field = REQUEST_FIELDS.get(m.get("resource", "")) if name == "requests" else name
            if field is None:
                continue
            for key, raw in points(series):
                v = to_float(raw)
                if v is not None:
                    values.setdefault(key, {})[field] = v
    for ts, readings in devices.items():
        per_pod = attribute(DeviceReading((ns, pod), gpu, v) for (ns, pod, gpu), v in readings.items())
        for (ns, pod), figures in per_pod.items():
            row = values.setdefault((ts, ns, pod), {})
            row.update(figures.values)
            if figures.estimated:
                row["estimated"] = 1

    out = []
    for key in sorted(values):
        job, run, service = labels.get(key, (None, None, None))
        if job is None and service is None:
            continue
        row = values[key]
        if not any(f in row for f in USAGE_FIELDS):
            continue
        if "qps" in row and "errors_per_s" not in row:
            row["errors_per_s"] = 0.0
        ts, ns, pod = key
        out.append(PodSample(ts=ts, namespace=ns, pod=pod, job=job, run=run, service=service, **row))
    return out


def _order(ident: tuple[int | None, int | None, str | None]) -> tuple:
    job, run, service = ident
    return (job is not None, job or 0, run or 0, service or "")


# --- the cursor and the publisher ---------------------------------------------------------------------

class PrometheusUnavailable(Exception):
    """A query of the cycle got no answer: nothing of the chunk is published and the cursor stays."""


def _root_cause(error: BaseException) -> str:
    """The innermost error of a failed request, e.g. "[Errno 111] Connection refused" (requests wraps
    urllib3's MaxRetryError, which wraps the connection error in `reason`)."""
    inner = getattr(error, "reason", None)
    if not isinstance(inner, BaseException) and error.args and isinstance(error.args[0], BaseException):
        inner = error.args[0]
    return _root_cause(inner) if isinstance(inner, BaseException) else f"{type(error).__name__}: {error}"


class RedisCursor:
    """The ts (epoch ms) of the last published step, in Redis."""

    def __init__(self, client: Any, key: str) -> None:
        self.client, self.key = client, key

    def load(self) -> int | None:
        raw = self.client.get(self.key)
        return None if raw is None else int(raw)

    def save(self, ts_ms: int) -> None:
        self.client.set(self.key, str(int(ts_ms)))


@dataclass(frozen=True, slots=True)
class CycleStats:
    steps: int
    records: int
    seconds: float
    first_ms: int | None  # the published steps (None: nothing to publish)
    last_ms: int | None
    cursor_ms: int | None  # after the cycle
    more: bool  # capped by max_steps_per_cycle (or stopped): steps are waiting

    def line(self) -> str:
        rng = "-" if self.first_ms is None else f"{_iso(self.first_ms)}..{_iso(self.last_ms)}"
        return (f"published steps={self.steps} records={self.records} range={rng} "
                f"in {self.seconds:.3f}s" + (" (more pending)" if self.more else ""))


def _iso(ts_ms: int | None) -> str:
    return "-" if ts_ms is None else datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%H:%M:%SZ")


class Publisher:
    """Reads Prometheus, writes PodSamples to Kafka, keeps its cursor in Redis.

    The clients can be injected (tests); by default they are built from the config."""

    def __init__(self, cfg: PublisherConfig, *, prometheus: Callable[[], Any] | None = None,
                 producer: Any = None, redis_client: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.topic = Topics(cfg.topic_prefix).pod_samples
        self.queries = build_queries(cfg.rate_window, cfg.selector, cfg.step_s)
        self.clock = clock
        self.stop_event = threading.Event()
        self.cursor_ms: int | None = None  # the last published step, as the latest cycle saw it
        make_prom = prometheus or self._prometheus_client
        self._proms = [make_prom() for _ in self.queries]  # one client (HTTP session) per query thread
        self._pool = ThreadPoolExecutor(max_workers=len(self.queries), thread_name_prefix="prom-query")
        self.producer = producer if producer is not None else self._kafka_producer()
        if redis_client is None:
            import redis

            redis_client = redis.Redis.from_url(cfg.redis_url)
        self.cursor = RedisCursor(redis_client, cursor_key(cfg.topic_prefix))

    def _prometheus_client(self) -> Any:
        from prometheus_api_client import PrometheusConnect

        return PrometheusConnect(url=self.cfg.prometheus_url, disable_ssl=True, timeout=self.cfg.query_timeout_s)

    def _kafka_producer(self) -> Any:
        from kafka import KafkaProducer

        return KafkaProducer(bootstrap_servers=self.cfg.kafka_bootstrap, client_id="tidal-publisher",
                             acks="all", linger_ms=self.cfg.linger_ms, batch_size=256 * 1024)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.producer.close(timeout=self.cfg.flush_timeout_s)

    # one chunk: query, join, produce, flush
    def query(self, first_ms: int, last_ms: int) -> dict[str, list[Series]]:
        start = datetime.fromtimestamp(first_ms / 1000, UTC)
        end = datetime.fromtimestamp(last_ms / 1000, UTC)
        step = str(self.cfg.step_s)

        def run(i: int) -> list[Series]:
            return self._proms[i].custom_query_range(self.queries[i].expr, start_time=start, end_time=end,
                                                     step=step)

        try:
            answers = list(self._pool.map(run, range(len(self.queries))))
        except Exception as error:  # down, starting up (503), or refusing the query
            raise PrometheusUnavailable(f"Prometheus at {self.cfg.prometheus_url} did not answer: "
                                        f"{_root_cause(error)}") from error
        return {q.name: a for q, a in zip(self.queries, answers, strict=True)}

    def samples(self, first_ms: int, last_ms: int) -> list[PodSample]:
        return join(self.query(first_ms, last_ms), self.cfg.step_ms)

    def produce(self, samples: Sequence[PodSample]) -> None:
        """Send and flush; raise unless every record was acked."""
        futures = [self.producer.send(self.topic, key=s.pod.encode(), value=encode(s)) for s in samples]
        self.producer.flush(timeout=self.cfg.flush_timeout_s)
        for f in futures:
            if not f.is_done:
                raise TimeoutError(f"{self.topic}: a record was not acked within {self.cfg.flush_timeout_s}s")
            if f.failed():
                raise f.exception

    def run_cycle(self, until_s: float | None = None) -> CycleStats:
        started = time.perf_counter()
        step = self.cfg.step_ms
        cursor = self.cursor_ms = self.cursor.load()
        plan = plan_range(cursor, int(self.clock() * 1000), self.cfg,
                          None if until_s is None else int(until_s * 1000))
        if cursor is None:  # first start: pin where it begins, so a failed first cycle shifts nothing
            cursor = plan.first_ms - step
            self.cursor.save(cursor)
        steps = records = 0
        first = last = None
        for a, b in chunk_range(plan.first_ms, plan.last_ms, step, self.cfg.chunk_steps):
            batch = self.samples(a, b)
            self.produce(batch)
            self.cursor.save(b)  # only after every record of the chunk is acked
            cursor, first, last = b, a if first is None else first, b
            self.cursor_ms = cursor
            steps += (b - a) // step + 1
            records += len(batch)
            if self.stop_event.is_set():
                break
        return CycleStats(steps, records, time.perf_counter() - started, first, last, cursor,
                          more=cursor < plan.end_ms)

    def run(self, *, once: bool = False, until_s: float | None = None) -> None:
        """Cycle every interval_s until stop_event (or, with `until_s`, until that step is published).

        A failed cycle (Prometheus, Kafka or Redis unreachable) is logged and retried next interval
        without moving the cursor past what was published; with `once` it raises. Prometheus being
        down is an expected outage: one warning line per retry, naming the cause and the cursor."""
        until_ms = None if until_s is None else align_down(int(until_s * 1000), self.cfg.step_ms)
        while not self.stop_event.is_set():
            try:
                stats = self.run_cycle(until_s)
            except Exception as error:
                if once:
                    raise
                if isinstance(error, PrometheusUnavailable):
                    log.warning("%s; cursor stays at %s (nothing after it is published); retrying in %ss",
                                error, _iso(self.cursor_ms), self.cfg.interval_s)
                else:
                    log.exception("publish cycle failed; retrying in %ss", self.cfg.interval_s)
                self.stop_event.wait(self.cfg.interval_s)
                continue
            log.info(stats.line())
            if once or (until_ms is not None and not stats.more
                        and self.clock() * 1000 - self.cfg.delay_s * 1000 >= until_ms):
                return
            if not stats.more:
                self.stop_event.wait(self.cfg.interval_s)
