"""Plugin interfaces, after the kube-scheduler framework, vectorized over a NodeTable.

kube-scheduler calls Filter once per node and returns a Status per node; with 5,000 nodes and
10,000 pending jobs per cycle that is 50M calls. Here a Filter returns a boolean mask over
all candidate nodes of one GPU model at once and a Score returns one value per surviving
node (higher is better, roughly 0..1 so weights compare). Nothing raises: job-level
outcomes are values (quota.QuotaCheck, decisions with a Reason code and a sentence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cluster.types import Pool
from scheduler.policy.nodes import NodeTable


@dataclass(slots=True)
class PodRequest:
    """What one placement needs, on one GPU model (None: CPU-only). Treated as immutable, but not
    frozen: one is built per model tried for every job of every cycle, and a frozen dataclass takes
    about 4x as long to construct."""

    gpu_model: str | None
    gpus: float
    cpu_milli: int
    memory_mib: int
    pool: Pool | None = None  # preferred pool hook; None: any pool
    ends_at: float = math.inf  # when it is expected to end: it may use rows reserved for a gang starting later
    borrowed: bool = False  # on borrowed quota: it may also use rows held for an own-quota gang, which reclaims it

    @property
    def fractional(self) -> bool:
        return 0 < self.gpus < 1

    def dims(self) -> tuple[float, int, int]:
        return (self.gpus, self.cpu_milli, self.memory_mib)

    def __str__(self) -> str:
        return self.describe(f"{self.cpu_milli}")

    def describe(self, cpu: str) -> str:
        """As str(), the CPU written as `cpu`."""
        gpu = f"{self.gpus:g} {self.gpu_model} GPU{'s' if self.gpus > 1 else ''}, " if self.gpus else ""
        return f"{gpu}{cpu}m CPU, {self.memory_mib} MiB"


class FilterPlugin(Protocol):
    name: str

    def filter(self, req: PodRequest, table: NodeTable) -> np.ndarray | None:
        """Boolean mask over table rows: True where the node may take the request; None when
        this request is not restricted (every node passes, without building a mask)."""
        ...


class ScorePlugin(Protocol):
    name: str

    def applies(self, req: PodRequest) -> bool:
        """Whether the plugin ranks this request at all (when not, it would give every row the same
        score, so it is left out)."""
        ...

    def score(self, req: PodRequest, table: NodeTable, rows: np.ndarray) -> np.ndarray:
        """One float per row in `rows` (all feasible), higher is better, about 0..1; only called
        when the plugin applies to `req`."""
        ...
