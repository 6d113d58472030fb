"""The three autoscalers of the LLM evaluation, one step per simulated minute. tidal calls the real policy
(`colocation.policy.autoscaling.decide_service`, with the service's serving targets and the look-ahead of
forecast.py), hpa `colocation.policy.hpa.decide`, kpa `colocation.policy.kpa.decide`; nothing here decides by
itself. HPA and the KPA see the GPU utilization of the ready groups (at most 1.0: a busy GPU reads 100 %);
tidal also sees the serving engine's signals and the gateway's request rate."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from colocation.policy import hpa, kpa
from colocation.policy.autoscaling import LoadMinute, ScalingPolicy, ServiceView, decide_service, keep_minutes, \
    lookahead
from experiments.autoscale_eval.llm.forecast import RateLookahead

SERVICE = "llm"


@dataclass(frozen=True, slots=True)
class Observed:
    """One minute as the metrics pipeline reports it (latencies capped: an overloaded engine reports its timeouts)."""

    at: float
    ready: int
    utilization: float  # per ready group, at most 1.0
    rps: float  # at the gateway
    per_rps: float | None  # the work one request/s asked, learned from unsaturated minutes (u·ready/rps)
    tokens_in: float
    tokens_out: float
    ttft_p50: float
    ttft_p99: float
    tpot_p50: float  # the replica model gives every request the group's TPOT (no spread): p50 = p99 = mean
    tpot_p99: float
    tpot_mean: float  # exact, as the histogram's _sum / _count
    kv_cache: float
    queue: float


class Hpa:
    name = "hpa"

    def __init__(self, spec: hpa.HpaSpec) -> None:
        self.spec, self._history = spec, ()

    def step(self, seen: Observed, now: float, size: int, ready: int) -> int:
        d = hpa.decide(self.spec, current=size, ready=seen.ready, utilization=seen.utilization,
                       history=self._history, now=now)
        self._history = d.recommendations
        return d.desired

    def changed(self, now: float) -> None:
        pass


class Kpa:
    name = "kpa"

    def __init__(self, spec: kpa.KpaSpec) -> None:
        self.spec, self._state = spec, kpa.KpaState()
        self._samples: deque[kpa.Sample] = deque(maxlen=10)

    def step(self, seen: Observed, now: float, size: int, ready: int) -> int:
        self._samples.append(kpa.Sample(now, seen.utilization * seen.ready))
        d = kpa.decide(self.spec, seen.ready, tuple(self._samples), self._state, now)
        self._state = d.state
        return d.desired

    def changed(self, now: float) -> None:
        pass


class Tidal:
    """decide_service on the serving signals, the utilization the gateway's tokens ask (the measured one when the
    group is saturated says only 100 %) and the request-rate look-ahead (forecast.py, at `z`) over one start-up
    (`lookahead`: it decides again while its groups start)."""

    name = "tidal"

    def __init__(self, policy: ScalingPolicy, z: float = 1.0) -> None:
        self.policy, self.z = policy, z
        self._loads: deque[LoadMinute] = deque(maxlen=keep_minutes(policy))
        self._ahead = RateLookahead(lookahead(policy), z)
        self._changed_at: float | None = None

    def step(self, seen: Observed, now: float, size: int, ready: int) -> int:
        self._ahead.add(seen.rps)
        asked = seen.utilization
        if seen.per_rps is not None and seen.ready:
            asked = max(asked, seen.rps * seen.per_rps / seen.ready)
        self._loads.append(LoadMinute(seen.at, seen.ready, gpu=asked, qps=seen.rps, tokens_in=seen.tokens_in,
                                      tokens_out=seen.tokens_out, queue=seen.queue, kv_cache=seen.kv_cache,
                                      ttft_p50=seen.ttft_p50, ttft_p99=seen.ttft_p99, tpot_p50=seen.tpot_p50,
                                      tpot_p99=seen.tpot_p99, tpot_mean=seen.tpot_mean))
        ahead: tuple = ()
        if seen.per_rps is not None and size:
            scale = seen.per_rps / size
            ahead = (("gpu", tuple((self._ahead.values() * scale).tolist())),)
        view = ServiceView(SERVICE, self.policy, size, ready, tuple(self._loads), self._changed_at, forecast=ahead)
        return decide_service(view, now).target

    def changed(self, now: float) -> None:
        self._changed_at = now
