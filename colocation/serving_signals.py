"""An LLM service's serving signals for the live autoscaler, read from Prometheus under the serving engine's metric
names (docs/reference/llm-serving-metrics.md): prompt and generated tokens/s, requests waiting, KV-cache use, TTFT and
TPOT p50/p99 and the exact mean TPOT (its histogram's _sum / _count), per minute of the policy's clock. vLLM's names
first, SGLang's where a service's engines publish no vLLM series (PromQL `or`). An engine's series are tied to its
service by kube-state-metrics' `kube_pod_labels` (the pod's `tidal.io/service` label) in the Kubernetes namespace
the services run in, so any engine of that namespace that Prometheus scrapes with its pod's labels is read, and no other
one: two installations (or namespaces) that one Prometheus scrapes may each have a service of the same name.

`WithServingSignals` lays them over another load source's minutes (the demo's traffic, the service-load profiles):
a minute the other source lacks is kept with the serving signals alone, measured at the engines reporting in it
(a group reports from its leader only, so that is a count of groups).

A TPOT p99 read in the top 2 % of its histogram bucket says only "p99 <= the bucket's bound" (serving.bucket_bound):
the bounds, the `le` values of the TPOT histogram each service's engines publish in each minute, are read with one
query more, and such a minute carries the bound as `tpot_p99_bound`.

One query per signal covers every service; a tick reads them once (the source is made per tick), as many minutes back
as the services that want them read (minutes_for). Prometheus down or slow: the other source's minutes alone, and a
warning; a tick never fails on it.
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from requests import RequestException

from cluster.backend import SERVICE_LABEL, kube_state_label
from colocation.loads import LoadSource
from colocation.models import InferenceService
from colocation.policy.autoscaling import RULE_MINUTES, LoadMinute, ScalingPolicy, keep_minutes
from colocation.policy.serving import FIT_MINUTES, STEP_MINUTES, bucket_bound

log = logging.getLogger(__name__)
MINUTE = 60.0
SERVICE = kube_state_label(SERVICE_LABEL)  # label_tidal_io_service
# The most minutes any rule reads of the signals: TPOT p99's curve is fitted over FIT_MINUTES, the decode step is
# measured over STEP_MINUTES, the other rules look at 2 and 5. The signals carry no request rate: a policy that keeps
# more minutes (the SLO sizing's spread of the request rate) reads those from the other source.
MAX_MINUTES = max(STEP_MINUTES, FIT_MINUTES)
MIN_WINDOW_S = 6.0  # three scrapes of the `tidal` job (2 s): a rate needs two samples in its window
REPLICAS = "replicas"
TPOT_BOUND = "tpot_p99_bound"  # LoadMinute's field for a censored TPOT p99
# signal -> the engines' metric names, vLLM's first (docs/reference/llm-serving-metrics.md)
TOKENS_IN = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")
TOKENS_OUT = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")
QUEUE = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")
# A request's TPOT (the mean of its decode steps) first; an older vLLM has only the per-step histogram
TPOT = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds", "sglang:time_per_output_token_seconds", "sglang:inter_token_latency_seconds")


def promql_string(value: str) -> str:
    """`value` as a PromQL string literal (double-quoted, its backslashes, quotes and newlines escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def of_services(expr: str, namespace: str) -> str:
    """`expr`'s per-pod series of the pods in `namespace`, each with its pod's service label (`max by` keeps one
    kube_pod_labels per pod; the join drops the pods of other namespaces)."""
    pods = f'{SERVICE}!="",namespace={promql_string(namespace)}'
    return (f"({expr}) * on (namespace, pod) group_left ({SERVICE}) "
            f"max by (namespace, pod, {SERVICE}) (kube_pod_labels{{{pods}}})")


def minutes_for(policies: Iterable[ScalingPolicy]) -> int:
    """Minutes of signals to read for the services of these `policies` (those that want them): as many as the furthest
    back one reads (keep_minutes), at least what the reactive rules read, at most MAX_MINUTES."""
    return min(MAX_MINUTES, max((keep_minutes(p) for p in policies), default=RULE_MINUTES))


def queries(window: str, namespace: str) -> dict[str, str]:
    """{signal: PromQL by service} over a `window` (a PromQL duration) ending at each evaluation time, of the engines
    in `namespace`."""
    def first(exprs) -> str:
        return " or ".join(f"({e})" for e in exprs)

    def rate(names) -> str:
        return first(f"sum by ({SERVICE}) ({of_services(f'rate({n}[{window}])', namespace)})" for n in names)

    def gauge(agg: str, names) -> str:
        return first(f"{agg} by ({SERVICE}) ({of_services(f'avg_over_time({n}[{window}])', namespace)})" for n in names)

    def quantile(q: float, names) -> str:
        return first(f"histogram_quantile({q}, sum by ({SERVICE}, le) "
                     f"({of_services(f'rate({n}_bucket[{window}])', namespace)}))" for n in names)

    def mean(names) -> str:  # a histogram's exact mean: rate(_sum) / rate(_count)
        return first(f"sum by ({SERVICE}) ({of_services(f'rate({n}_sum[{window}])', namespace)}) / "
                     f"sum by ({SERVICE}) ({of_services(f'rate({n}_count[{window}])', namespace)})" for n in names)

    return {"tokens_in": rate(TOKENS_IN), "tokens_out": rate(TOKENS_OUT), "queue": gauge("sum", QUEUE),
            "kv_cache": gauge("avg", KV_CACHE), "ttft_p50": quantile(0.5, TTFT), "ttft_p99": quantile(0.99, TTFT),
            "tpot_p50": quantile(0.5, TPOT), "tpot_p99": quantile(0.99, TPOT), "tpot_mean": mean(TPOT),
            REPLICAS: first(f"count by ({SERVICE}) ({of_services(f'last_over_time({n}[{window}])', namespace)})"
                            for n in QUEUE)}


def tpot_bounds_query(window: str, namespace: str) -> str:
    """PromQL: one series per (service, `le`) of the TPOT histogram each service's engines in `namespace` publish over
    a `window`, under the first of TPOT's names a service has (as its p99 is read: `or on` the service, so a service's
    bounds come from one name)."""
    return f" or on ({SERVICE}) ".join(
        f"(group by ({SERVICE}, le) ({of_services(f'last_over_time({n}_bucket[{window}])', namespace)}))" for n in TPOT)


def with_tpot_bounds(read: dict[float, dict[str, float]], bounds: dict[float, set[float]]) -> None:
    """Marks each minute of `read` (one service's) whose TPOT p99 is censored by that minute's bucket `bounds`."""
    for at, signals in read.items():
        p99, les = signals.get("tpot_p99"), bounds.get(at)
        if p99 is not None and les and (bound := bucket_bound(p99, tuple(les))) is not None:
            signals[TPOT_BOUND] = bound


def _le(labels: dict[str, str]) -> float:
    """A bucket series' bound ("0.05", "+Inf"); NaN (no bound: bucket_bound skips it) for a label that is none."""
    try:
        return float(labels.get("le", "nan"))
    except ValueError:
        return math.nan


class ServingSignals:
    """The serving signals of every service whose engines run in the Kubernetes `namespace`, over the last `minutes`
    policy minutes (minutes_for), read once per `now`.

    `to_real`/`to_policy` map the policy's clock to epoch seconds and back (the demo compresses a day into minutes;
    live, both are the identity), `speed` is policy seconds per real second."""

    def __init__(self, url: str, namespace: str, *, minutes: int = MAX_MINUTES,
                 to_real: Callable[[float], float] = float, to_policy: Callable[[float], float] = float,
                 speed: float = 1.0, timeout_s: float = 5.0) -> None:
        self.prometheus = PrometheusConnect(url=url, disable_ssl=True, timeout=timeout_s)
        self.namespace, self.minutes = namespace, minutes
        self.to_real, self.to_policy, self.speed = to_real, to_policy, speed
        self._read: tuple[float, dict[str, dict[float, dict[str, float]]]] | None = None

    def of(self, service: str, now: float) -> dict[float, dict[str, float]]:
        """{minute start (policy clock): {signal: value}} of `service`, the minutes with a value only."""
        self.read(now)
        return self._read[1].get(service, {})

    def read(self, now: float) -> None:
        """Reads every service's minutes as of `now` from Prometheus, unless already read at `now`."""
        if self._read is None or self._read[0] != now:
            self._read = (now, self._minutes(now))

    def span(self, now: float) -> tuple[float, float, float]:
        """The range read at `now` (epoch seconds): its first and last evaluation times and the step between them,
        one evaluation at the end of each of the newest `minutes` complete policy minutes."""
        last = math.floor(now / MINUTE) - 1  # the newest complete minute
        start, end = (self.to_real((m + 1) * MINUTE) for m in (last - self.minutes + 1, last))
        return start, end, MINUTE / self.speed

    def _minutes(self, now: float) -> dict[str, dict[float, dict[str, float]]]:
        start, end, step = self.span(now)
        window = f"{round(max(step, MIN_WINDOW_S) * 1000)}ms"
        out: dict[str, dict[float, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
        bounds: dict[str, dict[float, set[float]]] = defaultdict(lambda: defaultdict(set))
        try:
            for signal, query in queries(window, self.namespace).items():
                for service, at, _, v in self._points(query, start, end, step):
                    out[service][at][signal] = v
            for service, at, labels, _ in self._points(tpot_bounds_query(window, self.namespace), start, end, step):
                bounds[service][at].add(_le(labels))
        except (PrometheusApiClientException, RequestException, ValueError) as error:
            log.warning("LLM serving signals not read from Prometheus: %s", error)
            return {}
        for service, minutes in out.items():
            with_tpot_bounds(minutes, bounds.get(service, {}))
        return out

    def _points(self, query: str, start: float, end: float, step: float) -> Iterator[tuple[str, float, dict, float]]:
        """(service, minute start on the policy clock, the series' labels, value) of each finite point of `query`."""
        # The client rounds start and end to whole seconds, which on the demo's clock (a minute in 0.42 s) moved the
        # newest point into the minute still running, measured by no other source: the exact times go as params.
        exact = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        for series in self.prometheus.custom_query_range(
                query, start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC),
                step=f"{step:g}", params=exact):
            service = series["metric"].get(SERVICE)
            for t, value in series["values"]:
                v = float(value)
                if service and math.isfinite(v):
                    yield service, (round(self.to_policy(float(t)) / MINUTE) - 1) * MINUTE, series["metric"], v


class WithServingSignals:
    """`base`'s minutes with the serving signals of the services that set a serving target."""

    def __init__(self, base: LoadSource, signals: ServingSignals,
                 wanted: Callable[[InferenceService], bool]) -> None:
        self.base, self.signals, self.wanted = base, signals, wanted

    def recent(self, service: InferenceService, now: float) -> tuple[LoadMinute, ...]:
        minutes = {m.at: m for m in self.base.recent(service, now)}
        if not self.wanted(service):
            return tuple(minutes.values())
        for at, read in self.signals.of(service.name, now).items():
            fields = {k: v for k, v in read.items() if k != REPLICAS}
            if at in minutes:
                minutes[at] = replace(minutes[at], **fields)
            elif read.get(REPLICAS):
                minutes[at] = LoadMinute(at, int(read[REPLICAS]), **fields)
        return tuple(minutes[at] for at in sorted(minutes))
