"""The live demo's inference traffic (`make run`): a real diurnal curve on a compressed clock, so the demo
"breathes" within minutes — services scale in at night, nodes are lent to training, and the morning rise
scales services out and takes the nodes back. Pure: no Django, no Redis; traces are read in place.

- Clock: `DemoClock` maps real time to demo time, `speed` demo seconds per real second (default one demo
  day in 12 real minutes, 120×), starting at `start_hour` (demo local time) of the real start's date. The
  autoscaler's policy runs on demo time (its `now`, the minutes it measures); what is stored stays real.
- QPS: the World Cup 98 per-minute request counts (cluster/simulated/inference.py), smoothed over
  SMOOTH_MIN minutes (the raw minutes jump ±10 %, which no service sees once a load balancer averages
  them), each service on its own trace day and phase, scaled so the trace's 99th percentile over the
  days it uses is the service's `peak_qps`. TRACE_SHIFT_MIN moves the trace's morning trough (about
  09:00 local: the site's audience was largely American) to the demo's night (about 04:00).
- GPU utilization of a ready replica: k · QPS / ready · (1 + noise), clipped to [0, 1]; k and the noise
  come from the Alibaba GenAI serving trace (`genai_util_model`). The noise is the per-pod spread divided
  by √ready (the service's mean over independent pods), drawn from a hash of (service, minute), so a
  minute's value is the same whenever it is computed. CPU utilization follows GPU at CPU_PER_GPU (an
  assumption: the trace has no CPU series for serving pods).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from functools import lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo

from cluster.simulated.inference import DAY_MIN, UtilModel, genai_util_model, worldcup_local_minutes

SMOOTH_MIN = 15
TRACE_SHIFT_MIN = 300  # demo 04:00 reads the trace at 09:00 local, its usual trough
CPU_PER_GPU = 0.5
DEMO_DAY_S = 600.0  # real seconds per demo day by default (144×)
START_HOUR = 22.0  # the demo starts in the evening decline: the trough comes 3-6 demo hours later
# Trace days whose next 20 hours (from 03:00) have a clean night trough and a day peak 2.4-3× above it,
# without the tournament's match-time spikes (which the demo does not need to explain).
DEMO_DAYS = (24, 25, 26, 27, 30, 37, 38)
MAX_PHASE_MIN = 20
MINUTE = 60


@dataclass(frozen=True, slots=True)
class DemoClock:
    """Real epoch seconds <-> demo epoch seconds."""

    real_start: float
    demo_start: float
    speed: float  # demo seconds per real second
    origin: float  # demo epoch seconds of the demo's first local midnight: trace minutes count from it

    @classmethod
    def starting(cls, real_start: float, *, speed: float = 86400 / DEMO_DAY_S, start_hour: float = START_HOUR,
                 tz: str = "UTC") -> DemoClock:
        """A clock whose demo time at `real_start` is `start_hour` local time on the real start's date."""
        day = datetime.fromtimestamp(real_start, ZoneInfo(tz)).date()
        midnight = datetime.combine(day, time(0), tzinfo=ZoneInfo(tz))
        return cls(real_start, (midnight + timedelta(hours=start_hour)).timestamp(), speed, midnight.timestamp())

    def demo(self, real: float) -> float:
        return self.demo_start + (real - self.real_start) * self.speed

    def real(self, demo: float) -> float:
        return self.real_start + (demo - self.demo_start) / self.speed

    def minute(self, demo: float) -> int:
        """Demo minute number (epoch minutes of demo time)."""
        return int(demo // MINUTE)


@dataclass(frozen=True, slots=True)
class ServiceTraffic:
    """One service's request-rate curve: a window of the trace, shifted and scaled."""

    name: str
    day: int  # trace day the demo's first day maps to
    phase_min: int  # extra shift of this service's curve (minutes)
    peak_qps: float  # the trace's p99 over the days used maps to this


def service_traffic(name: str, peak_qps: float) -> ServiceTraffic:
    """A service's curve: trace day and phase from a stable hash of its name (so each service breathes a
    little differently, the same on every run)."""
    h = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big")
    return ServiceTraffic(name, DEMO_DAYS[h % len(DEMO_DAYS)], (h // 7) % (2 * MAX_PHASE_MIN + 1) - MAX_PHASE_MIN,
                          peak_qps)


def peak_qps_for(replicas: float, utilization: float, model: UtilModel) -> float:
    """The QPS `replicas` serve at `utilization` each: the demo sizes a service's peak by its replicas."""
    return replicas * utilization / model.per_qps


@lru_cache(maxsize=2)
def smoothed_curve(folder: str, window: int = SMOOTH_MIN) -> tuple[float, ...]:
    """The World Cup curve, centred moving mean over `window` minutes (wrapping at the ends)."""
    raw = worldcup_local_minutes(folder)
    n, half = len(raw), window // 2
    prefix = [0.0]
    for v in raw + raw[:window]:
        prefix.append(prefix[-1] + v)
    return tuple((prefix[(i - half) % n + window] - prefix[(i - half) % n]) / window for i in range(n))


class DemoTraffic:
    """Per-service QPS and per-replica utilization at a demo minute; deterministic."""

    def __init__(self, worldcup_dir: str | Path, genai_dir: str | Path, services: Sequence[ServiceTraffic],
                 origin: float = 0.0, days: int = 2) -> None:
        self.curve = smoothed_curve(str(worldcup_dir))
        self.model: UtilModel = genai_util_model(str(genai_dir))
        self.origin = origin  # demo time that reads minute 0 of each service's trace day
        self.services = {s.name: s for s in services}
        self._scale = {}
        for s in services:
            window = sorted(self.curve[s.day * DAY_MIN:(s.day + days) * DAY_MIN])
            self._scale[s.name] = s.peak_qps / (window[int(0.99 * (len(window) - 1))] or 1.0)

    def _index(self, s: ServiceTraffic, demo: float) -> int:
        """Trace minute read at demo time `demo`: minutes since the origin, on the service's trace day."""
        return s.day * DAY_MIN + int((demo - self.origin) // MINUTE) + TRACE_SHIFT_MIN - s.phase_min

    def qps(self, name: str, demo: float) -> float:
        s = self.services[name]
        return self.curve[self._index(s, demo) % len(self.curve)] * self._scale[name]

    def gpu(self, name: str, demo: float, ready: int) -> float:
        """Mean GPU utilization of one ready replica during the demo minute starting at `demo`."""
        q = self.qps(name, demo)
        if ready <= 0:
            return 1.0 if q > 0 else 0.0
        noise = self._noise(name, demo) * self.model.noise / math.sqrt(ready)
        return min(1.0, max(0.0, self.model.per_qps * q / ready * (1.0 + noise)))

    def cpu(self, name: str, demo: float, ready: int) -> float:
        return min(1.0, CPU_PER_GPU * self.gpu(name, demo, ready))

    def replicas_for(self, name: str, demo: float, utilization: float) -> int:
        """Replicas that serve the QPS at `demo` at `utilization` each (for sizing)."""
        return max(1, math.ceil(self.model.per_qps * self.qps(name, demo) / utilization))

    @staticmethod
    def _noise(name: str, demo: float) -> float:
        seed = hashlib.blake2b(f"{name}:{int(demo // MINUTE)}".encode(), digest_size=8).digest()
        return random.Random(seed).gauss(0.0, 1.0)


@dataclass(frozen=True, slots=True)
class DemoServing:
    """The demo's traffic as the simulated cluster's exporter serves it (metrics.ServingLoad): at real time `now`,
    the figures of the demo minute the autoscaler measures then (colocation/loads.py DemoLoads)."""

    traffic: DemoTraffic
    clock: DemoClock

    def _minute_start(self, now: float) -> float:
        return self.clock.minute(self.clock.demo(now)) * MINUTE

    def serves(self, service: str) -> bool:
        return service in self.traffic.services

    def qps(self, service: str, now: float) -> float:
        return self.traffic.qps(service, self._minute_start(now))

    def gpu(self, service: str, now: float, ready: int) -> float:
        return self.traffic.gpu(service, self._minute_start(now), ready)
