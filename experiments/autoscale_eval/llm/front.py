"""The LLM front: SLO attainment (higher is better) against GPU-hours per million tokens (lower is better), one
point per setting, and whether one policy's points cover another's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from experiments.autoscale_eval.front import covering, covers, dominates
from experiments.autoscale_eval.front import pareto as _pareto

__all__ = ["Point", "covering", "covers", "dominates", "pareto"]


@dataclass(frozen=True, slots=True)
class Point:
    policy: str  # "tidal", "hpa" or "kpa"
    setting: str
    attainment: float  # share of requests within both SLO targets
    gpu_hours_per_mtok: float

    @property
    def objectives(self) -> tuple[float, float]:
        return 1.0 - self.attainment, self.gpu_hours_per_mtok


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both axes, cheapest first."""
    return sorted(_pareto(points), key=lambda p: p.gpu_hours_per_mtok)
