"""What the evaluation replays: a built-in trace or a `timestamp,value` CSV (read by cluster/simulated/traffic.py,
the one reader), and which of its days are evaluated and which train the forecast."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cluster.simulated.inference import DAY_MIN
from cluster.simulated.traffic import BUILTIN, Traffic, TrafficError, builtin, read_csv

TRACES = BUILTIN
MIN_TRAIN_DAYS = 1
TraceError = TrafficError


@dataclass(frozen=True)
class Span:
    """The evaluated days [first_day, first_day + days) of `traffic`; every earlier day may train the forecast."""

    traffic: Traffic
    first_day: int
    days: int

    @property
    def at(self) -> int:
        """The first evaluated minute."""
        return self.first_day * DAY_MIN

    @property
    def end(self) -> int:
        return (self.first_day + self.days) * DAY_MIN


def load(trace: str | None, csv_path: Path | None, traces_dir: Path) -> Traffic:
    """`--traffic CSV` when given, else the built-in `--trace`."""
    if csv_path is not None:
        return read_csv(csv_path)
    return builtin(trace or "worldcup98", traces_dir)


def span(traffic: Traffic, days: int, start_day: int | None = None) -> Span:
    """`days` evaluated days from `start_day` (None: the last `days`), with at least one earlier day to train on."""
    if days < 1:
        raise TrafficError(f"--days must be at least 1, got {days}")
    first = traffic.days - days if start_day is None else start_day
    if first < MIN_TRAIN_DAYS:
        most = traffic.days - MIN_TRAIN_DAYS
        raise TrafficError(f"{traffic.name}: evaluating {days} days from day {first} leaves {max(first, 0)} of its "
                           f"{traffic.days} days for training (at least {MIN_TRAIN_DAYS} needed); --days can be at "
                           f"most {most} and --start at least {MIN_TRAIN_DAYS}")
    if first + days > traffic.days:
        raise TrafficError(f"{traffic.name} has {traffic.days} whole days (0..{traffic.days - 1}): {days} days from "
                           f"day {first} run past its end")
    return Span(traffic, first, days)
