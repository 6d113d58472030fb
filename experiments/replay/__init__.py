"""Trace replay: the real scheduling policy against a recorded cluster trace on a virtual clock.

    trace.py    read and validate Alibaba 2023 node and pod lists (errors name file:line)
    mapping.py  pod -> training job: department, quota account, GPU-model constraints, run time
    tree.py     the Helios-derived quota tree (`--tree helios`): virtual clusters grouped into divisions by size
    engine.py   event loop over the shared acting layer (experiments.simulated_training.SimulatedTraining)
    metrics.py  what is measured while replaying
    report.py   report.md, report.json, PNG plots

No Django here: `scheduler/management/commands/replay.py` is the thin command over `replay()`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster.simulated.alibaba import TraceError, read_nodes, read_pods
from cluster.simulated.traces import helios_gpus
from experiments.replay import mapping as mp
from experiments.replay.engine import (CLOCK_SHIFT_S, NOISE_POLICY, NOISE_RUN, VARIANTS, NoiseFloor, Options, PolicyRun,
                                     Setup, build_setup, replay_profile, run_replays, shifted)
from experiments.replay.tree import TREES, helios_hierarchy

DEFAULT_POLICIES = ("tidal", "fifo", "quota-borrowing")
GANG_POLICIES = ("tidal", "fifo", "tidal-no-reservations")  # with gangs: what reservations buy
NOISE_LABEL = "noise floor"  # the noise floor's replay among the policies' (labelled by their names)


@dataclass(frozen=True)
class Outcome:
    setup: Setup
    runs: list[PolicyRun]
    files: dict[str, Path]
    wall_s: float
    noise: NoiseFloor | None = None  # with --noise-floor


def load(nodes_csv: str | Path, pods_csv: str | Path, quota_csv: str | Path | None, options: Options,
         borrow_ratio: float = 1.0, every: int = 1, tree: str = "flat") -> Setup:
    """Read and validate everything before anything runs (TraceError on the first fatal row). `every`: keep one
    node in that many of the list (the demo's cluster holds 1 in 10); `tree`: flat departments, or the Helios-derived
    quota tree (tree.py, from `quota_csv`)."""
    if tree not in TREES:
        raise ValueError(f"unknown quota tree {tree!r}; known: {', '.join(TREES)}")
    if tree == "helios" and quota_csv is None:
        raise ValueError("the helios quota tree is built from the Helios quota file: give one (not equal shares)")
    nodes = read_nodes(nodes_csv)[::every]
    pods = read_pods(pods_csv)
    hierarchy = None
    if quota_csv is not None:
        try:
            gpus = helios_gpus(quota_csv)
            hierarchy = helios_hierarchy(gpus) if tree == "helios" else None
        except (OSError, ValueError, IndexError, KeyError) as e:
            raise TraceError(quota_csv, 0, f"cannot read department quotas: {e}") from None
        shares = {vc: g / sum(gpus.values()) for vc, g in gpus.items()}
    else:
        shares = mp.equal_shares(10)
    return build_setup(pods, nodes, mp.Mapping(shares, borrow_ratio, hierarchy, seed=options.seed), options)


def replay(setup: Setup, policies: Sequence[str], out: Path, command: str, workers: int = 1,
           bar: Callable | None = None, noise: bool = False) -> Outcome:
    """Replay every policy on `setup` and write the report; with `noise`, NOISE_POLICY once more, its cycles
    CLOCK_SHIFT_S further apart than in its last replicate (the noise floor of the comparisons), alongside them."""
    import time

    from experiments.replay.report import noise_change, write_report

    started = time.perf_counter()
    jobs = {name: (setup, name) for name in dict.fromkeys(policies)}
    if noise:
        jobs[NOISE_LABEL] = (shifted(setup, setup.options.replicates), NOISE_POLICY)
    done = run_replays(jobs, workers, bar)
    floor_run = done.pop(NOISE_LABEL, None)
    runs = list(done.values())
    floor = None
    if floor_run is not None:
        floor = NoiseFloor(floor_run, noise_change({r.policy: r.figures for r in runs}, floor_run.figures))
    wall = time.perf_counter() - started
    files = write_report(out, setup, runs, command, wall, floor)
    return Outcome(setup, runs, files, wall, floor)


__all__ = ["CLOCK_SHIFT_S", "DEFAULT_POLICIES", "GANG_POLICIES", "NOISE_POLICY", "NOISE_RUN", "VARIANTS", "NoiseFloor",
           "Options", "Outcome", "TREES", "TraceError", "load", "replay", "replay_profile"]
