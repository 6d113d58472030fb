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

Also (the second half): per-minute traffic for simulations and evaluations, from a `timestamp,value` CSV or a
built-in trace (World Cup 98 requests, the GenAI request log's GPU work), and whole-day windows of it.
"""

from __future__ import annotations

import csv
import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from cluster.simulated.inference import (DAY_MIN, LOCAL_OFFSET_MIN, WORLDCUP_FILE, UtilModel, genai_util_model,
                                         worldcup_local_minutes)

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


# -- traffic from a file, and the built-in traces (issue 26) --------------------------------------------------
# Simulations and evaluations read per-minute traffic through `read_csv`, `builtin` and `window`. A CSV's value is
# a rate per minute (requests or work units) holding from its timestamp to the next one (the last one for one
# median step); each minute gets the time-weighted mean of that step curve, so any step resamples exactly: finer
# samples average, coarser ones forward-fill. The wall clock is the time as written (naive ISO), the row's own
# offset's wall clock (ISO with an offset), or UTC (epoch seconds); values are kept from the first midnight on
# and trimmed to whole days.

class TrafficError(ValueError):
    """The traffic cannot be read or windowed as asked; the message names the file and line (or the span)."""


BUILTIN = ("worldcup98", "genai")
WORLDCUP_DIR = "worldcup98-per-minute"
GENAI_REQUESTS = "alibaba-genai-2026/lora_request_trace.csv"
DAY_S = 86400
EPOCH_MS = 1e11  # an epoch in seconds stays below this until the year 5138: larger numbers are milliseconds


@dataclass(frozen=True, eq=False)
class Traffic:
    """Per-minute traffic from a midnight: `start` is that midnight as epoch seconds of a UTC-labelled wall clock
    (so minute-of-day and weekday features come out in the trace's local time)."""

    name: str
    start: float
    values: np.ndarray  # per minute, >= 0, whole days
    unit: str  # "requests/min" or "GPU-seconds/min"

    def __post_init__(self) -> None:
        if len(self.values) % DAY_MIN:
            raise TrafficError(f"{self.name}: {len(self.values)} minutes is not a whole number of days")

    @property
    def days(self) -> int:
        return len(self.values) // DAY_MIN


def read_csv(path: Path) -> Traffic:
    """A `timestamp,value` CSV as whole days of per-minute values; TrafficError names the line of any bad row."""
    path = Path(path)
    try:
        with open(path, newline="") as f:
            stamps, values = _rows(path.name, csv.reader(f))
    except OSError as e:
        raise TrafficError(f"{path}: cannot read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise TrafficError(f"{path}: not a text CSV ({e.reason})") from e
    return _per_minute(path.name, stamps, values, "requests/min")


def _rows(name: str, reader) -> tuple[np.ndarray, np.ndarray]:
    header = next(reader, None)
    cols = [c.strip().lower() for c in header or []]
    if "timestamp" not in cols or "value" not in cols:
        raise TrafficError(f"{name} line 1: expected a header with columns timestamp,value, got {','.join(cols)!r}")
    ti, vi = cols.index("timestamp"), cols.index("value")
    stamps: list[float] = []
    values: list[float] = []
    instants: list[float] = []
    for row in reader:
        line = reader.line_num
        if not any(c.strip() for c in row):
            continue
        if len(row) <= max(ti, vi):
            raise TrafficError(f"{name} line {line}: expected {len(cols)} columns, got {len(row)}")
        wall, instant = _timestamp(name, line, row[ti].strip())
        if instants and instant <= instants[-1]:
            raise TrafficError(f"{name} line {line}: timestamp {row[ti].strip()!r} is not after the previous row's")
        instants.append(instant)
        stamps.append(max(wall, stamps[-1]) if stamps else wall)  # a DST fall-back's repeated hour collapses
        values.append(_value(name, line, row[vi].strip()))
    return np.asarray(stamps, dtype=float), np.asarray(values, dtype=float)


def _timestamp(name: str, line: int, text: str) -> tuple[float, float]:
    """(wall clock as UTC-labelled epoch seconds, the real instant) of one timestamp cell."""
    try:
        epoch = float(text)
    except ValueError:
        epoch = None
    if epoch is not None:
        if not math.isfinite(epoch) or abs(epoch) >= EPOCH_MS:
            raise TrafficError(f"{name} line {line}: timestamp {text!r} is not epoch seconds"
                               + (" (milliseconds?)" if math.isfinite(epoch) else ""))
        return epoch, epoch
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise TrafficError(f"{name} line {line}: timestamp {text!r} is neither ISO 8601 nor epoch seconds") from None
    wall = t.replace(tzinfo=timezone.utc).timestamp()
    return wall, t.timestamp() if t.tzinfo else wall


def _value(name: str, line: int, text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise TrafficError(f"{name} line {line}: value {text!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise TrafficError(f"{name} line {line}: value {text!r} must be a finite number >= 0")
    return v


def _per_minute(name: str, stamps: np.ndarray, values: np.ndarray, unit: str) -> Traffic:
    """Time-weighted per-minute means of the step curve, from the first midnight, whole days only."""
    if len(stamps) == 0:
        raise TrafficError(f"{name}: no data rows")
    step = float(np.median(np.diff(stamps))) if len(stamps) > 1 else 60.0
    edges = np.append(stamps, stamps[-1] + step)
    area = np.concatenate([[0.0], np.cumsum(values * np.diff(edges))])  # integral of the curve at each edge
    day0 = math.ceil(stamps[0] / DAY_S) * DAY_S
    days = int((edges[-1] - day0) // DAY_S)
    if days < 1:
        span = (edges[-1] - stamps[0]) / 3600
        raise TrafficError(f"{name}: spans {span:.1f} hours with {max(days, 0)} whole days from its first midnight; "
                           "at least one whole day (midnight to midnight) is needed")
    bounds = day0 + 60.0 * np.arange(days * DAY_MIN + 1)
    per_min = np.diff(np.interp(bounds, edges, area)) / 60.0
    return Traffic(name, float(day0), np.maximum(per_min, 0.0), unit)


def builtin(name: str, traces_dir: Path) -> Traffic:
    """A built-in trace read in place from the shared traces folder."""
    if name == "worldcup98":
        return _worldcup(Path(traces_dir) / WORLDCUP_DIR)
    if name == "genai":
        return genai_work(Path(traces_dir) / GENAI_REQUESTS)
    raise TrafficError(f"unknown trace {name!r}: choose one of {', '.join(BUILTIN)}")


def _worldcup(folder: Path) -> Traffic:
    """World Cup 98 requests per minute in the site's local time (GMT+2), whole local days (as inference.py)."""
    path = folder / WORLDCUP_FILE
    if not path.is_file():
        raise TrafficError(f"World Cup 98 trace not found: {path}")
    with open(path, newline="") as f:
        first = datetime.fromisoformat(next(csv.DictReader(f))["period"])
    local = first + timedelta(minutes=LOCAL_OFFSET_MIN)
    day0 = datetime(local.year, local.month, local.day, tzinfo=timezone.utc) + timedelta(days=1)
    return Traffic("worldcup98", day0.timestamp(), np.asarray(worldcup_local_minutes(str(folder)), dtype=float),
                   "requests/min")


def genai_work(path: Path) -> Traffic:
    """GPU work per minute of the GenAI request log: each request's exec_time_seconds spread over the minutes it
    ran in from its gmt_create (so a minute's value is the GPU-seconds busy in it, i.e. 60 x the busy GPUs). Every
    request counts, failed ones too (they held a GPU). The log's clock is kept as written (anonymized offset)."""
    path = Path(path)
    if not path.is_file():
        raise TrafficError(f"GenAI request log not found: {path}")
    starts: list[float] = []
    work: list[float] = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            line = reader.line_num
            starts.append(_timestamp(path.name, line, (row.get("gmt_create") or "").strip())[0])
            work.append(_value(path.name, line, (row.get("exec_time_seconds") or "").strip()))
    if not starts:
        raise TrafficError(f"{path.name}: no requests")
    begin, finish = np.asarray(starts), np.asarray(starts) + np.asarray(work)
    t0 = math.floor(begin.min() / 60) * 60
    n = int(math.ceil((finish.max() - t0) / 60)) + 1
    # the busy-GPU count steps at each start (+1) and finish (-1); its integral over a minute is that minute's work
    edges = np.concatenate([begin, finish])
    signs = np.concatenate([np.ones_like(begin), -np.ones_like(finish)])
    order = np.argsort(edges, kind="stable")
    edges, level = edges[order], np.cumsum(signs[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(edges))])
    bounds = t0 + 60.0 * np.arange(n + 1)
    per_min = np.diff(np.interp(bounds, edges, area, left=0.0, right=area[-1]))
    stamps = bounds[:-1]
    return _per_minute("genai", stamps, per_min, "GPU-seconds/min")


def window(t: Traffic, days: int, start_day: int | None = None) -> Traffic:
    """`days` whole days from day `start_day` (None: the last `days` days)."""
    if days < 1:
        raise TrafficError(f"{t.name}: the window needs at least 1 day, got {days}")
    first = t.days - days if start_day is None else start_day
    if first < 0 or first + days > t.days:
        at = "the end" if start_day is None else f"day {start_day}"
        raise TrafficError(f"{t.name} has {t.days} whole days: cannot take {days} days from {at}")
    return Traffic(t.name, t.start + first * DAY_S, t.values[first * DAY_MIN:(first + days) * DAY_MIN], t.unit)
