"""This machine's speed just before a benchmark, so that figures of different hours compare."""

from __future__ import annotations

import json
import time


def reference_ms(tries: int = 21) -> float:
    """This machine's speed now: the fewest milliseconds a fixed piece of Python work took (JSON out and back of a
    page of 50 job-like rows, 50 times). A VM's speed here drifts by a third within an hour; the CPU per request of
    two runs compares once each is divided by its run's reference."""
    page = [{"id": i, "name": f"resnet50-{i}", "gpus": "1.000", "status": "running", "node": None,
             "submitted_at": "2026-11-26T04:00:00Z", "cpu_milli": 8000} for i in range(50)]
    best = float("inf")
    for _ in range(tries):
        started = time.perf_counter()
        for _ in range(50):
            json.loads(json.dumps(page))
        best = min(best, time.perf_counter() - started)
    return round(1000 * best, 2)
