"""Per-minute traffic traces for the evaluation, read in place from the shared traces folder."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from cluster.simulated.inference import DAY_MIN, LOCAL_OFFSET_MIN, WORLDCUP_FILE, worldcup_local_minutes

WORLDCUP_DIR = "worldcup98-per-minute"
GENAI_QPS = "alibaba-genai-2026/qps.csv"
TRACES = ("worldcup98", "genai")
MIN_TRAIN_DAYS = 1


class TraceError(ValueError):
    """The trace cannot be evaluated as asked (missing, too short); the message says why."""


@dataclass(frozen=True)
class Trace:
    """Requests per minute from local midnight of day 0; `start` is that midnight as epoch seconds of a
    UTC-labelled clock (local wall time, so minute-of-day and weekday features come out in local time)."""

    name: str
    demand: np.ndarray  # requests per minute
    start: float

    @property
    def days(self) -> int:
        return len(self.demand) // DAY_MIN


def load(name: str, traces_dir: Path) -> Trace:
    if name == "worldcup98":
        return _worldcup(traces_dir / WORLDCUP_DIR)
    if name == "genai":
        return _genai(traces_dir / GENAI_QPS)
    raise TraceError(f"unknown trace {name!r}: choose one of {', '.join(TRACES)}")


def _worldcup(folder: Path) -> Trace:
    path = folder / WORLDCUP_FILE
    if not path.is_file():
        raise TraceError(f"World Cup 98 trace not found: {path}")
    with open(path, newline="") as f:
        first = datetime.fromisoformat(next(csv.DictReader(f))["period"])
    local = first + timedelta(minutes=LOCAL_OFFSET_MIN)
    day0 = datetime(local.year, local.month, local.day, tzinfo=timezone.utc) + timedelta(days=1)  # as inference.py
    return Trace("worldcup98", np.asarray(worldcup_local_minutes(str(folder)), dtype=float), day0.timestamp())


def _genai(path: Path) -> Trace:
    """The Alibaba GenAI QPS trace spans under a day (57 s samples, anonymized start): no earlier whole day to
    train on, so it is refused with its span; the error is the answer."""
    if not path.is_file():
        raise TraceError(f"GenAI QPS trace not found: {path}")
    with open(path, newline="") as f:
        stamps = [float(r["timestamp_anon"]) for r in csv.DictReader(f)]
    hours = (max(stamps) - min(stamps)) / 3600 if stamps else 0.0
    raise TraceError(f"the GenAI QPS trace ({path}) spans {hours:.1f} hours: the evaluation needs at least "
                     f"{MIN_TRAIN_DAYS} whole day to train the forecast on plus the evaluated days after it; "
                     "use --trace worldcup98")


def split(trace: Trace, days: int) -> int:
    """The first evaluated minute: the last `days` whole days are evaluated, every earlier day trains."""
    if days < 1:
        raise TraceError(f"--days must be at least 1, got {days}")
    if trace.days - days < MIN_TRAIN_DAYS:
        raise TraceError(f"--days {days} leaves {trace.days - days} of the trace's {trace.days} days for training; "
                         f"at most {trace.days - MIN_TRAIN_DAYS} days can be evaluated")
    return (trace.days - days) * DAY_MIN
