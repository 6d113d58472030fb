"""Lending profile: thresholds, step control, busy windows and the long-job rule, in one frozen value.

Rates are fractions 0..1 (as ScalingThreshold stores them). Times of day are local wall-clock
times in `tz` (an IANA name, resolved with zoneinfo), so DST shifts move the windows with the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import time

from colocation.policy.calibration import UNCALIBRATED, RuntimeCalibration
from colocation.policy.states import Direction


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Online quota usage thresholds of one resource group (operators edit them per group)."""

    min_rate: float = 0.4  # below it, with training pending: lend
    expect_rate: float = 0.6  # every conversion is sized to land here
    max_rate: float = 0.8  # above it: take back

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_rate <= self.expect_rate <= self.max_rate <= 1.0:
            raise ValueError(f"need 0 <= minRate <= expectRate <= maxRate <= 1, got "
                             f"{self.min_rate}/{self.expect_rate}/{self.max_rate}")


@dataclass(frozen=True, slots=True)
class BusyWindow:
    """[start, end) local time when conversions in `direction` are expected (docs/concepts/lending.md#pools)."""

    start: time
    end: time
    direction: Direction


@dataclass(frozen=True, slots=True)
class LendingProfile:
    thresholds: Thresholds = Thresholds()  # default for groups without their own
    max_parallel: int = 3  # nodes converting at once per group, in-flight ones included
    min_online_nodes: int = 1  # lending never empties a group's online side
    busy_windows: tuple[BusyWindow, ...] = field(default_factory=lambda: (
        BusyWindow(time(8), time(11), Direction.TAKE_BACK),
        BusyWindow(time(18), time(22), Direction.LEND),
    ))
    # Inside a busy window, the opposite direction is held unless urgent (online pods pending):
    # lending at 09:00 would hand training a machine that is taken back (and its jobs killed) soon.
    hold_against_window: bool = True
    tz: str = "UTC"
    long_job_s: float = 12 * 3600.0
    night_start: time = time(18)
    night_end: time = time(8)
    night_slack_s: float = 3600.0
    unknown_is_long: bool = False  # no history and no stated duration: co-location first
    # A take-back that is not urgent (no online pod pending) cordons the node at once but evicts its training pods
    # only this long after (a forecast take-back: at the forecast rise if later): usage above maxRate still leaves
    # 1 - maxRate of headroom, and pending online pods expedite the eviction. 0: evict at once.
    take_back_grace_s: float = 900.0
    # Forecast-driven lending (colocation/policy/forecast.py); False: the threshold rules alone, as before.
    forecast: bool = False
    drain_s: float = 900.0  # a take-back's expected duration: start it this long before the forecast rise
    # Do not lend a node the forecast needs back sooner than this: a lend and its take-back cost two migrations, and
    # a short lease holds few jobs to their end. 2 h: on World Cup 98 and the GenAI log (7 days each) forecast
    # lending then kills <= 0.41 % of the jobs on lent nodes and flaps less than with 1 h
    # (docs/concepts/lending.md#forecast-driven-lending).
    min_lend_s: float = 7200.0
    # Hysteresis: no lend in a group within this long after its latest take-back (a rise that forced a take-back
    # often comes back; lending at once would hand training nodes that are taken back again, killing their jobs).
    relend_after_s: float = 3600.0
    deadline_margin_s: float = 1800.0  # a job on a lent node must end this long before its predicted take-back
    # (GPU model, "" for CPU-only; predicted take-back epoch s), set by the caller each cycle from take_back_at
    take_back_by: tuple[tuple[str, float], ...] = ()
    # how real run times compared with their estimates lately (calibration.calibrate over the last finished jobs), set
    # by the caller each cycle: lending reads a job's expected run × its factor (uncalibrated: × 1)
    runtime: RuntimeCalibration = UNCALIBRATED

    def __post_init__(self) -> None:
        for name in ("drain_s", "min_lend_s", "deadline_margin_s", "take_back_grace_s", "relend_after_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def with_(self, **overrides: object) -> LendingProfile:
        return replace(self, **overrides)


DEFAULT = LendingProfile()
