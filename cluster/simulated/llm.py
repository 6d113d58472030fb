"""What a vLLM engine's `/metrics` shows for a simulated LLM pod at a load (docs/reference/llm-serving-metrics.md).

The exporter (cluster/simulated/metrics.py) publishes these series under vLLM's names for the load-driven serving pods
(the leader of a group: the engine's API server runs there), so the live autoscaler reads real Prometheus queries.
A small queueing model, not a measurement: at utilization ρ of its replica a first token waits the queue and the
prefill (BASE_TTFT_S / (1-ρ) at the median: an idle engine's time stretched M/M/1-like), the requests waiting are
what Little's law gives for that wait (requests/s × the mean time to first token past an idle engine's), its KV cache
holds the running sequences (ρ of it, at most KV_FULL), and each output token takes a decode step that a fuller batch
slows (BASE_TPOT_S × (1+ρ)). Latencies are lognormal around those medians: a first token's widely (TTFT_SIGMA: whether
it waits behind a queue), a request's time per output token narrowly (TPOT_SIGMA: the mean of its decode steps).
The queue is consistent with the first tokens' wait, as a real engine's is: the autoscaler's TTFT limit reads the
prefill wait as requests waiting / requests per second. (ρ²/(1-ρ) whatever the rate said a wait of seconds at the
demo's 0.1 requests/s.) Each minute's limit still varies with its noise, one minute fitting the model and the next
not; the autoscaler takes the median over several minutes (serving.TTFT_MINUTES), which keeps the band steady (with a
limit from one minute, llm-chat flapped 3 -> 6 -> 2 groups within 25 s, 2026-11-30), and keeps that limit through
minutes too quiet to fit (under 17 % use here). Pure: no Django, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ServeGen language m-large (../shared/traces/alibaba-servegen-2025/m-large.csv), request-weighted means
PROMPT_TOKENS = 924.0
OUTPUT_TOKENS = 142.0
BASE_TTFT_S = 0.05  # an idle engine's median time to first token
BASE_TPOT_S = 0.02  # an idle engine's median time per output token
MAX_LOAD = 0.98  # a saturated engine's queue and wait stay finite
KV_FULL = 0.98
TTFT_SIGMA = 0.5  # lognormal spread of the time to first token: p99 ≈ 3.2 × the median (queueing and prefill)
# A request's TPOT is the mean over its decode steps (vLLM's vllm:request_time_per_output_token_seconds), so requests
# differ far less than single steps do: 141 independent steps of σ 0.5 would average to σ 0.04, but a request's steps
# share its batch, which moves with the load. σ 0.15 puts the p99 at 1.42 × the median, inside the 1.0-1.6 × that
# vLLM's benchmark_serving reports (e.g. p99 72.6 ms at a median 70.2 ms, 32 concurrent requests): a TPOT target
# between 1.42 × BASE_TPOT_S and 1.42 × 2 BASE_TPOT_S is met at a moderate load and missed near saturation.
TPOT_SIGMA = 0.15
# vLLM's bucket bounds (vllm/v1/metrics/loggers.py)
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                  40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                  80.0)


@dataclass(frozen=True, slots=True)
class EngineState:
    """An engine's gauges and latency medians at one load."""

    waiting: float  # vllm:num_requests_waiting
    kv_cache: float  # vllm:kv_cache_usage_perc, 0..1
    ttft_median_s: float
    tpot_median_s: float


def engine_at(utilization: float, qps: float = 0.0) -> EngineState:
    """An engine at `utilization` of its replica taking `qps` requests/s."""
    rho = min(max(utilization, 0.0), MAX_LOAD)
    ttft = BASE_TTFT_S / (1.0 - rho)
    wait = (ttft - BASE_TTFT_S) * math.exp(TTFT_SIGMA ** 2 / 2)  # the mean TTFT past an idle engine's
    return EngineState(waiting=max(qps, 0.0) * wait, kv_cache=min(KV_FULL, rho), ttft_median_s=ttft,
                       tpot_median_s=BASE_TPOT_S * (1.0 + rho))


def request_median_s(state: EngineState) -> float:
    """A whole request's median time: its first token, then each further output token's decode step."""
    return state.ttft_median_s + (OUTPUT_TOKENS - 1) * state.tpot_median_s


def share_within(le_s: float, median_s: float, sigma: float) -> float:
    """The share of lognormal latencies of median `median_s` and spread `sigma` that take at most `le_s`."""
    return 0.5 * (1.0 + math.erf(math.log(le_s / median_s) / (sigma * math.sqrt(2.0))))


@dataclass(slots=True)
class EngineCounters:
    """An engine's counters and histograms, integrated from scrape to scrape (a rate that follows the replica count
    has no closed form)."""

    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    ttft_sum_s: float = 0.0
    ttft_count: float = 0.0
    ttft_buckets: list[float] | None = None
    tpot_sum_s: float = 0.0
    tpot_count: float = 0.0
    tpot_buckets: list[float] | None = None

    def advance(self, qps: float, state: EngineState, dt: float) -> None:
        """`dt` seconds at `qps` requests/s: each request's first token, and its time per output token."""
        requests = qps * dt
        self.prompt_tokens += requests * PROMPT_TOKENS
        self.generation_tokens += requests * OUTPUT_TOKENS
        self.ttft_count += requests
        self.ttft_sum_s += requests * state.ttft_median_s * math.exp(TTFT_SIGMA ** 2 / 2)
        self.ttft_buckets = _add(self.ttft_buckets, TTFT_BUCKETS_S, requests, state.ttft_median_s, TTFT_SIGMA)
        self.tpot_count += requests
        self.tpot_sum_s += requests * state.tpot_median_s * math.exp(TPOT_SIGMA ** 2 / 2)
        self.tpot_buckets = _add(self.tpot_buckets, TPOT_BUCKETS_S, requests, state.tpot_median_s, TPOT_SIGMA)


def _add(buckets: list[float] | None, bounds: tuple[float, ...], n: float, median_s: float,
         sigma: float) -> list[float]:
    buckets = buckets or [0.0] * len(bounds)
    return [b + n * share_within(le, median_s, sigma) for b, le in zip(buckets, bounds, strict=True)]


@dataclass(frozen=True, slots=True)
class EngineReading:
    """One scrape of an engine: its gauges now and its counters so far."""

    state: EngineState
    counters: EngineCounters
