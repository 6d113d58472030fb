"""The LLM front: SLO attainment (higher is better) against GPU-hours per million tokens (lower is better), one
point per setting, and whether one policy's points cover another's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Point:
    policy: str  # "tidal", "hpa" or "kpa"
    setting: str
    attainment: float  # share of requests within both SLO targets
    gpu_hours_per_mtok: float


def covers(q: Point, p: Point) -> bool:
    """q is at least as good as p on both axes."""
    return q.attainment >= p.attainment and q.gpu_hours_per_mtok <= p.gpu_hours_per_mtok


def covering(p: Point, others: Sequence[Point]) -> Point | None:
    """The cheapest point of `others` that covers `p`, or None."""
    return min((q for q in others if covers(q, p)), key=lambda q: q.gpu_hours_per_mtok, default=None)


def dominates(front: Sequence[Point], other: Sequence[Point]) -> bool:
    """Every point of `other` is covered by a point of `front`."""
    return all(covering(p, front) is not None for p in other)


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both axes, cheapest first."""
    keep = [p for p in points if not any(covers(q, p) and (q.attainment, q.gpu_hours_per_mtok)
                                         != (p.attainment, p.gpu_hours_per_mtok) for q in points)]
    return sorted(keep, key=lambda p: p.gpu_hours_per_mtok)
