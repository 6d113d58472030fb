"""The scheduling cycle's decisions, byte for byte, on a generated cluster (a guard for speed-ups).

A deterministic cluster of 300 nodes shaped like the Alibaba 2023 list, filled and kept with about
1,000 jobs queued, tight quotas (own = 1/10 of the cluster per department, borrowed 0.1 of it), run for
several cycles through the bench's acting layer, so the later cycles see running jobs, borrowing,
reclaim and priority preemption, model fallback and right-sizing. Every decision of every cycle, for
the three profiles, is serialized with repr() and compared with the golden files under data/:
`cycle_golden.sha256` (the hash of each run's whole serialization) and `cycle_golden_sample.txt`
(a readable sample of the lines, checked too, so a failure shows what changed).

The golden files were generated from the cycle before any optimisation. Optimisations must keep
them; a deliberate policy change regenerates them with
    TIDAL_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_cycle_golden.py
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest

from cluster.types import JobStatus
from experiments.builders.cluster import BUILTIN_SHAPES, queued_cluster
from scheduler.policy import get_profile, schedule
from scheduler.policy.cache import CycleCache

DATA = Path(__file__).parent / "data"
HASHES = DATA / "cycle_golden.sha256"
SAMPLE = DATA / "cycle_golden_sample.txt"
REGEN = os.environ.get("TIDAL_REGEN_GOLDEN") == "1"
PROFILES = ("tidal", "fifo", "quota-borrowing")
SAMPLE_EVERY = 97  # every n-th line of each run goes to the readable sample


def decision_lines(profile_name: str, nodes: int = 300, pending: int = 1000, cycles: int = 6,
                   seed: int = 11, cycle_s: float = 300.0) -> list[str]:
    """repr() of every decision of every cycle, prefixed by the cycle number."""
    sim, clock, arrive = queued_cluster(nodes, BUILTIN_SHAPES, random.Random(seed), pending, borrow_ratio=0.1,
                                        runtime_s=(300, 2 * 3600), batch=50)
    profile = get_profile(profile_name)
    lines = []
    cache = CycleCache()  # the loop's, as the live loop keeps one from cycle to cycle
    for cycle in range(cycles):
        sim.finish_elapsed()
        result = schedule(sim.snapshot(), profile, cache=cache)
        lines.extend(f"{cycle} {d!r}" for d in result.decisions)
        sim.apply(result)
        clock.advance(cycle_s)
        arrive(max(0, pending - sum(j.status is JobStatus.PENDING for j in sim.jobs.values())))
    return lines


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _read_golden() -> tuple[dict[str, str], dict[str, list[str]]]:
    hashes = dict(line.split(" ", 1)[::-1] for line in HASHES.read_text().splitlines() if line)
    samples: dict[str, list[str]] = {}
    for line in SAMPLE.read_text().splitlines():
        name, text = line.split(" ", 1)
        samples.setdefault(name, []).append(text)
    return hashes, samples


def _regenerate() -> None:
    DATA.mkdir(exist_ok=True)
    hash_lines, sample_lines = [], []
    for name in PROFILES:
        lines = decision_lines(name)
        hash_lines.append(f"{_digest(lines)} {name}")
        sample_lines.extend(f"{name} {line}" for line in lines[::SAMPLE_EVERY])
    HASHES.write_text("\n".join(hash_lines) + "\n")
    SAMPLE.write_text("\n".join(sample_lines) + "\n")


if REGEN:
    _regenerate()


def test_the_generated_cluster_exercises_borrowing_preemption_and_fallback():
    text = "\n".join(decision_lines("tidal"))
    for what in ("ADMITTED_BORROWED", "ADMITTED_OWN", "PREEMPTED_RECLAIM", "PREEMPTED_PRIORITY", "NO_CAPACITY",
                 "NO_IDLE_CAPACITY", "most idle certified model", "right-sized from"):
        assert what in text, what
    assert "QUOTA_EXHAUSTED" in "\n".join(decision_lines("quota-borrowing"))


@pytest.mark.parametrize("name", PROFILES)
def test_decisions_are_byte_identical_to_the_golden_run(name):
    hashes, samples = _read_golden()
    lines = decision_lines(name)
    assert [line for line in lines[::SAMPLE_EVERY]] == samples[name]
    assert _digest(lines) == hashes[name]
