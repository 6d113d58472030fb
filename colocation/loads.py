"""Where the autoscaler's per-minute loads come from: a `LoadSource` answers `recent(service, now)` with the
service's last minutes (`colocation.policy.autoscaling.LoadMinute`, oldest first, times in the policy's clock).

- `ProfileLoads`: the service-load profiles (profiling.models.ServiceMinute: mean GPU/CPU utilization, QPS,
  replicas) written by the profile pipeline. A minute is written once Flink's watermark passes it, about
  3 minutes after it starts (1-minute window + 2-minute lateness bound + the publisher's delay), while the
  policy drops a minute whose end lies more than 2 minutes behind `now` (docs/concepts/autoscaling.md#the-policy: "drop
  metrics that lag more than 2 minutes"). So with today's pipeline every minute arrives already stale: the policy
  answers "stale-metrics" and, after 5 silent minutes, restores yesterday's maximum. Using this source for live
  decisions needs a pipeline lateness bound under a minute (or a direct Prometheus read); it is right for vertical
  recommendations and forecasts, which look at hours of history.
- `DemoLoads`: the live demo's traffic (cluster/simulated/traffic.py) on the demo's compressed clock; each
  minute is measured at the ready count the loop sees when it first reads it, kept in Redis next to the
  simulated cluster; its busy figure is the SM active of the H200 server the service's pods follow
  (cluster/simulated/h200.py) at that GPU util. `make run` uses this one (TIDAL_DEMO_TRAFFIC=1).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from django.conf import settings

from cluster.clock import utc
from cluster.simulated import h200
from cluster.simulated.inference import genai_util_model
from cluster.simulated.metrics import pick
from cluster.simulated.traffic import DemoClock, DemoTraffic, peak_qps_for, service_traffic
from cluster.types import SM_ACTIVE
from colocation.models import InferenceService
from colocation.policy import LendingProfile
from colocation.policy.autoscaling import LoadMinute, busy_of
from profiling.selectors import service_load

MINUTE = 60
DEMO_KEY = "demo-traffic"  # under the instance's namespace, beside "simulated-cluster"
KEEP_MIN = 90  # minutes kept per service at least: the rules look at 5, scale to zero at its idle time
Keep = Callable[[InferenceService], int]  # minutes the service's policy reads (policy.autoscaling.keep_minutes)
PEAK_SHARE = 2 / 3  # a demo service's peak needs this share of its max_replicas at expectRate
WORLDCUP = "worldcup98-per-minute"
GENAI = "alibaba-genai-2026"


class LoadSource(Protocol):
    def recent(self, service: InferenceService, now: float) -> tuple[LoadMinute, ...]:
        """The service's recent minutes, oldest first; `now` and the minutes' `at` in the policy's clock."""
        ...


def _none(service: InferenceService) -> int:
    return 0


class ProfileLoads:
    """The service-load profiles of the last `window_min` minutes, or of as many as the service's policy reads
    (`keep`; see the module's note on their lag)."""

    def __init__(self, window_min: int = 30, keep: Keep = _none) -> None:
        self.window_min, self.keep = window_min, keep

    def recent(self, service: InferenceService, now: float) -> tuple[LoadMinute, ...]:
        window = max(self.window_min, self.keep(service))
        rows = service_load(service_id=service.pk, since=utc(now - window * MINUTE), until=utc(now))
        return tuple(LoadMinute(r.minute.timestamp(), r.replicas, gpu=r.gpu_util_mean, cpu=r.cpu_util_mean, qps=r.qps,
                                **dict(zip(("busy", "busy_source"), busy_of(r.sm_active_mean, r.gpu_util_mean))))
                     for r in rows)


class DemoLoads:
    """The demo's traffic, measured minute by minute at the serving replicas the loop sees (`serving`); KEEP_MIN
    minutes kept, or as many as the service's policy reads (`keep`)."""

    def __init__(self, *, redis, namespace: str, traffic: DemoTraffic, clock: DemoClock,
                 serving: Mapping[str, int], keep: Keep = _none) -> None:
        self.redis, self.namespace, self.traffic, self.clock, self.serving = redis, namespace, traffic, clock, serving
        self.keep = keep

    def recent(self, service: InferenceService, now: float) -> tuple[LoadMinute, ...]:
        name = service.name
        if name not in self.traffic.services:
            return ()
        key = f"{self.namespace}:{DEMO_KEY}:{name}"
        measured = json.loads(self.redis.get(key) or "[]")  # [[demo minute, ready], ...]
        last = self.clock.minute(now) - 1  # the newest complete minute
        first = measured[-1][0] + 1 if measured else self.clock.minute(self.clock.demo_start)
        ready, kept = self.serving.get(name, 0), max(KEEP_MIN, self.keep(service))
        measured += [[m, ready] for m in range(max(first, last - kept + 1), last + 1)]
        measured = measured[-kept:]
        self.redis.set(key, json.dumps(measured))
        t = self.traffic
        server = h200.load()[h200.workload_for(name, inference=True, gpus=1, pick=pick, llm=service.group_size > 1)]
        return tuple(LoadMinute(m * MINUTE, r, gpu=(gpu := t.gpu(name, m * MINUTE, r)), cpu=t.cpu(name, m * MINUTE, r),
                                qps=t.qps(name, m * MINUTE), busy=server.sm_active_at(gpu), busy_source=SM_ACTIVE)
                     for m, r in measured)


# --- the demo's configuration --------------------------------------------------------------------------


def demo_clock(*, redis, namespace: str, now: float) -> DemoClock:
    """The demo's clock, started by the first tick that asks (kept in Redis, so every process agrees)."""
    key = f"{namespace}:{DEMO_KEY}:clock"
    fresh = DemoClock.starting(now, speed=86400 / settings.TIDAL_DEMO_DAY_S, start_hour=settings.TIDAL_DEMO_START_HOUR,
                               tz=settings.TIME_ZONE)
    redis.set(key, json.dumps([fresh.real_start, fresh.demo_start, fresh.speed, fresh.origin]), nx=True)
    return DemoClock(*json.loads(redis.get(key)))


def demo_traffic(*, clock: DemoClock, traces_dir: Path | None = None) -> DemoTraffic | None:
    """Every autoscaled service's demo curve: its peak needs PEAK_SHARE of its max_replicas at expectRate of
    its GPU threshold (demo/data.py sizes the services); None without the traces."""
    traces = Path(traces_dir or settings.TRACES_DIR)
    if not (traces / WORLDCUP).is_dir() or not (traces / GENAI).is_dir():
        return None
    specs, model = [], genai_util_model(str(traces / GENAI))
    for service in InferenceService.objects.prefetch_related("thresholds"):
        gpu = next((t for t in service.thresholds.all() if t.metric == "gpu"), None)
        if gpu is not None:
            peak = peak_qps_for(service.max_replicas * PEAK_SHARE, gpu.expect_rate, model)
            specs.append(service_traffic(service.name, peak))
    return DemoTraffic(traces / WORLDCUP, traces / GENAI, specs, origin=clock.origin)


def demo_lending_profile(profile: LendingProfile) -> LendingProfile:
    """The demo's lending profile: its busy windows are real wall-clock hours (08-11 take back, 18-22 lend),
    while its traffic runs on the compressed demo clock; holding a non-urgent conversion against a real-time
    window would make the demo depend on the hour it is started at. Urgent take-backs (online pods pending)
    ignore windows anyway. A take-back's grace is compressed like the day (15 minutes of a day: 6 s of a
    10-minute demo day), or a cordoned node would sit out an hour and a half of demo time; so is lending's hysteresis
    after a take-back."""
    compress = settings.TIDAL_DEMO_DAY_S / 86400
    return profile.with_(hold_against_window=False, take_back_grace_s=profile.take_back_grace_s * compress,
                         relend_after_s=profile.relend_after_s * compress)
