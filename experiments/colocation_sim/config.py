"""Knobs of the co-location simulation, in one frozen value (no Django)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from colocation.policy.autoscaling import Rates, ScalingPolicy
from colocation.policy.profile import LendingProfile, Thresholds

SIM_START = 1_700_006_400.0  # 2023-11-15 00:00 UTC: a midnight, so minute-of-day = local hour in UTC


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One resource group: `nodes` drawn from the Alibaba node list rows with this GPU model
    ("" = CPU-only), inference services with `replica_request` each (GPUs, or CPU millicores)."""

    name: str
    model: str  # "" for CPU
    nodes: int
    services: int
    replica_request: float  # GPUs (fraction or whole) per replica; millicores for the CPU group
    replica_cpu_milli: int = 8000
    replica_memory_mib: int = 32768
    # Pods per replica: a multi-node LLM replica is a group (a leader and workers, one per node), serving only when
    # every pod of it is ready; `replica_request` and the cpu/memory above are each pod's.
    group_size: int = 1


@dataclass(frozen=True, slots=True)
class SimConfig:
    traces: Path
    days: int = 7
    seed: int = 0
    # Inference traffic: a built-in trace ("worldcup98", "genai") or a CSV path (cluster/simulated/traffic.py); the run
    # covers days [start_day, start_day + days) of it (None: its last `days` days).
    traffic: str = "worldcup98"
    start_day: int | None = None
    groups: tuple[GroupSpec, ...] = (
        GroupSpec("T4", "T4", 60, 4, 1.0),
        GroupSpec("G2", "G2", 30, 3, 1.0),
        GroupSpec("CPU", "", 30, 2, 8000.0, replica_cpu_milli=8000, replica_memory_mib=16384),
    )
    # Of each group's nodes: the fixed training pool, never lent, when not `fixed_from_static`; it also sizes the
    # inference load (below) in both layouts.
    fixed_share: float = 0.25
    # True: Lyra's comparison: the lending run keeps the static split's training side as its fixed pool and may lend
    # only the nodes the static split keeps online for inference (same training cluster, plus the inference
    # cluster's idle servers on loan). Long jobs (> 12 h: 79% of Philly's GPU time) run on the fixed pool only, so
    # a fixed pool smaller than the static training side would leave them less room than the baseline.
    fixed_from_static: bool = True
    # Inference: the services of a group together need this share of the group's co-location capacity (with
    # fixed_share) at their peak (p99 minute), with replicas at the autoscaler's expectRate.
    inference_peak: float = 0.50
    # docs/concepts/autoscaling.md#the-policy, on GPU utilization; reactive only: the simulation has no forecast model.
    autoscale: ScalingPolicy = ScalingPolicy(thresholds=(("gpu", Rates(0.3, 0.6, 0.8)),), max_replicas=10_000,
                                             predictive=False)
    startup_s: float = 30.0
    # Training (experiments/colocation_sim/training_load.py): GPU-hours offered within the run over the training capacity (each
    # group's fixed pool: the static split's training side). Default 0.75: the four Helios clusters ran
    # 0.73-0.84 of their GPUs over six months (helios_cluster_summary.csv: complete + cancel + fail GPU time over
    # gpu_num x 183 days; Earth 0.73, Venus 0.76, Uranus 0.79, Saturn 0.84).
    training_load: float = 0.75
    # The policy's runtime estimate of each job (its stated duration): the real run time times a lognormal factor of
    # this sigma (median 1; 0: a perfect profile). The simulation ends jobs at their real run time either way.
    runtime_error: float = 0.0
    lending: LendingProfile = field(default_factory=lambda: LendingProfile(thresholds=Thresholds(0.4, 0.6, 0.8)))
    # False: the static split baseline: per group, just enough online nodes for the run's inference peak
    # (workload.static_split), the rest offline for training; nodes never move.
    lend: bool = True
    tick_s: float = 60.0
    # A scheduling cycle every this many ticks (and only when jobs arrived, finished, were killed or
    # nodes moved since the last one); the training scheduler dominates the run time.
    schedule_every_min: int = 5
    # A cycle sees the running jobs and, per GPU model, the first this many pending jobs that may use lent nodes and
    # the first this many that may only use the fixed pool (None: all), as a queue manager hands a scheduler the
    # head of its queues (experiments/colocation_sim/queue.py); it spares the static split re-trying its whole queue (~13.5k
    # jobs by day 7) every cycle. A job further back that would fit waits until it reaches a head. 7 days, seed 0,
    # against the whole queue: GPU utilization 43.8% vs 43.7% (lending), 39.1% (static), lent share 94.0% vs
    # 94.4%, jobs finished 20583 vs 20588 (static 10629 vs 10826), in a seventh of the CPU time.
    queue_window: int | None = 32

    def with_(self, **overrides: object) -> SimConfig:
        return replace(self, **overrides)

    @property
    def minutes(self) -> int:
        return int(self.days * 86400 // self.tick_s)

    def llm(self) -> SimConfig:
        """A multi-node LLM service beside the training load: one service whose replica is a group of 2 pods of
        8 GPUs (2 whole G3 nodes), on ServeGen m-large traffic, a group starting in 10 minutes."""
        return self.with_(groups=(GroupSpec("G3", "G3", 36, 1, 8.0, replica_cpu_milli=32000,
                                            replica_memory_mib=131072, group_size=2),),
                          traffic="servegen-m-large", startup_s=600.0)

    def small(self) -> SimConfig:
        """A quick configuration for tests: fewer nodes and services."""
        return self.with_(groups=(GroupSpec("T4", "T4", 24, 2, 1.0),
                                  GroupSpec("CPU", "", 12, 1, 8000.0, replica_memory_mib=16384)))
