"""Two-objective fronts of the autoscaling evaluations: a point's `objectives` are (loss, cost), both lower-better
(overloaded minutes and replica-hours; or the share of requests missing their SLO and GPU-hours per million tokens),
and one policy's front dominates another's when every point of the other is covered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class Scored(Protocol):
    @property
    def objectives(self) -> tuple[float, float]: ...


P = TypeVar("P", bound=Scored)


def covers(q: Scored, p: Scored) -> bool:
    """q is at least as good as p on both objectives."""
    (q_loss, q_cost), (p_loss, p_cost) = q.objectives, p.objectives
    return q_loss <= p_loss and q_cost <= p_cost


def covering(p: Scored, others: Sequence[P]) -> P | None:
    """The cheapest point of `others` that covers `p` (then the lowest loss), or None."""
    return min((q for q in others if covers(q, p)), key=lambda q: q.objectives[::-1], default=None)


def dominates(front: Sequence[Scored], other: Sequence[Scored]) -> bool:
    """Every point of `other` is covered by a point of `front`."""
    return all(covering(p, front) is not None for p in other)


def pareto(points: Sequence[P]) -> list[P]:
    """The points no other point beats on both objectives, lowest loss first."""
    return sorted((p for p in points if not any(covers(q, p) and q.objectives != p.objectives for q in points)),
                  key=lambda p: p.objectives)
