"""ServeGen-format LLM traffic (../shared/traces/alibaba-servegen-2025/README.md): 10-minute windows of
`t_s,requests_per_s,cv_weighted,mean_input_tokens,mean_output_tokens`, turned into minutes.

Each column is interpolated linearly between window centres (a window's rate is its mean, not a step). A window at
0 requests/s is missing data, not idle (the README), and is bridged like an empty token cell. A cell that is not a
number >= 0, or a t_s that does not increase, is refused with its line. Each minute's request
count is drawn around its rate with the variance a renewal process of the window's burstiness gives over a minute
(λ·60·cv²; a gamma draw, seeded), so bursty windows swing more from minute to minute.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

BUILTIN = {"servegen-m-large": "m-large.csv", "servegen-m-small": "m-small.csv",
           "servegen-deepseek-r1": "deepseek-r1.csv"}
FOLDER = "alibaba-servegen-2025"
COLUMNS = ("t_s", "requests_per_s", "cv_weighted", "mean_input_tokens", "mean_output_tokens")
DAY_MIN = 1440


class ServeGenError(ValueError):
    pass


@dataclass(frozen=True)
class Workload:
    name: str
    rps: np.ndarray  # requests/s per minute (drawn)
    cv: np.ndarray
    tokens_in: np.ndarray  # mean prompt tokens per request
    tokens_out: np.ndarray

    @property
    def minutes(self) -> int:
        return len(self.rps)

    @property
    def tokens(self) -> float:
        """Prompt and output tokens over the whole workload."""
        return float((self.rps * 60.0 * (self.tokens_in + self.tokens_out)).sum())

    def days(self, n: int | None) -> Workload:
        """The first `n` days (None: all)."""
        end = self.minutes if n is None else n * DAY_MIN
        if n is not None and (n < 1 or end > self.minutes):
            raise ServeGenError(f"{self.name} holds {self.minutes / DAY_MIN:.1f} days; asked {n}")
        return Workload(self.name, self.rps[:end], self.cv[:end], self.tokens_in[:end], self.tokens_out[:end])


def path_of(trace: str, traces_dir: Path) -> Path:
    return traces_dir / FOLDER / BUILTIN[trace]


def read(path: Path, seed: int = 0) -> Workload:
    """The CSV's windows as minutes (module docstring)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ServeGenError(f"cannot read {path}: {e}") from e
    if not rows or any(c not in rows[0] for c in COLUMNS):
        raise ServeGenError(f"{path}: need the columns {', '.join(COLUMNS)}")
    t = np.array([_value(path, i, r, "t_s", empty=False) for i, r in enumerate(rows, start=2)])
    cols = {c: np.array([_value(path, i, r, c) for i, r in enumerate(rows, start=2)]) for c in COLUMNS[1:]}
    if (np.diff(t) <= 0).any():
        line = int(np.argmax(np.diff(t) <= 0)) + 3
        raise ServeGenError(f"{path}, line {line}: t_s must increase from window to window")
    cols["requests_per_s"][cols["requests_per_s"] == 0] = np.nan
    step = float(np.median(np.diff(t))) if len(t) > 1 else 600.0
    minutes = np.arange(0.0, t[-1] + step, 60.0)
    centres = t + step / 2
    at = {c: _interpolate(minutes + 30.0, centres, v, c) for c, v in cols.items()}
    rate = at["requests_per_s"]
    mean = rate * 60.0
    var = np.maximum(mean * at["cv_weighted"] ** 2, 1e-9)
    rng = np.random.default_rng(seed)
    counts = np.where(mean > 0, rng.gamma(mean * mean / var, var / np.maximum(mean, 1e-9)), 0.0)
    return Workload(path.stem, counts / 60.0, at["cv_weighted"], at["mean_input_tokens"], at["mean_output_tokens"])


def _value(path: Path, line: int, row: dict[str, str], column: str, empty: bool = True) -> float:
    """A cell as a finite number >= 0; NaN for an empty one where `empty` (a column the window has no sample of)."""
    cell = (row[column] or "").strip()
    if not cell and empty:
        return np.nan
    try:
        v = float(cell)
    except ValueError:
        v = np.nan
    if not np.isfinite(v) or v < 0:
        raise ServeGenError(f"{path}, line {line}: {column} must be a number >= 0, got {cell!r}")
    return v


def _interpolate(x: np.ndarray, xp: np.ndarray, v: np.ndarray, name: str) -> np.ndarray:
    known = ~np.isnan(v)
    if not known.any():
        raise ServeGenError(f"the column {name} has no value")
    return np.interp(x, xp[known], v[known])
