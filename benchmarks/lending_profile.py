"""`bench lending-profile`: what reading the live loops' lending profile costs a tick, with and without the loop's
per-minute cache of the run time calibration (colocation.selectors.lending_profile).

It reads the configured database (DATABASE_URL, else the demo's .run/tidal.sqlite3) and Redis, and writes nothing:
run it against a database with finished jobs (the demo's after a while) for figures that say something. Each
figure is the median of `repeat` reads timed with perf_counter."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from django.conf import settings

from benchmarks.machine import reference_ms
from colocation.selectors import finished_runs, lending_profile
from core.expiring import Expiring
from profiling.models import RunSummary


def bench_lending_profile(*, repeat: int = 40) -> dict:
    cache: Expiring = Expiring()
    lending_profile(now=0.0, calibration=cache)  # filled: every timed read below within its minute is a hit
    figures: dict[str, float | int] = {
        "machine_reference_ms": reference_ms(), "run_summaries": RunSummary.objects.count(),
        "window_runs": len(finished_runs()),
        "finished_runs_ms": _median_ms(finished_runs, repeat),
        "uncached_ms": _median_ms(lending_profile, repeat),  # what every tick paid without the cache
        "cached_ms": _median_ms(lambda: lending_profile(now=1.0, calibration=cache), repeat),
    }
    for loop, interval_s in (("scheduler", settings.TIDAL_SCHEDULER_INTERVAL_S),
                             ("lending", settings.TIDAL_LENDING_INTERVAL_S)):
        # a tick a minute reads again (a miss); the others hit the cache
        misses = min(1.0, interval_s / cache.max_age_s)
        figures[f"{loop}_tick_ms"] = misses * figures["uncached_ms"] + (1 - misses) * figures["cached_ms"]
    return figures


def _median_ms(read: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        read()
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)
