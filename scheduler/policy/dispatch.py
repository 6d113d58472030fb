"""Acting on a cycle's decisions, written once: `dispatch` walks them in order and calls the caller's `Effects`.

The order is decided here only: victims first (their Preempt decisions come before the admission that needs their
room), and an admission whose victims' pods still hold their room waits for the next cycle. What each step does is
the caller's: the live loop acts on the database and the cluster (scheduler/live.py), simulated training on the
simulated backend (experiments/simulated_training.py), and replay and the co-location simulation wrap the latter
with their bookkeeping (Kueue's scheduler the same way orchestrates while pluggable steps act).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from scheduler.policy.decisions import Admit, CycleResult, Preempt, Reserve, StillPending


class Effects(Protocol):
    def preempt(self, decision: Preempt) -> bool:
        """Requeue the victim and stop its pods; True while one of them still shuts down (it keeps its room)."""

    def admit(self, decision: Admit) -> bool:
        """Bind every worker or none; True when bound."""

    def wait_for_victims(self, decision: Admit, victims: tuple[int, ...]) -> None:
        """The admission waits: the pods of `victims` (job ids) still hold the room it needs."""

    def reserve(self, decision: Reserve) -> None:
        """A gang that cannot start now holds nodes."""

    def pending(self, decision: StillPending) -> None:
        """A job still waits (decisions come in queue order)."""


@dataclass
class Acted:
    """How many decisions of each kind were acted on."""

    admitted: int = 0  # bound
    preempted: int = 0
    waiting: int = 0  # admissions waiting for their victims' pods
    reserved: int = 0
    pending: int = 0


def dispatch(result: CycleResult, effects: Effects) -> Acted:
    """Carry out `result`'s decisions in order through `effects`."""
    acted = Acted()
    stopping: set[int] = set()  # victims whose pods still hold their room (graceful termination)
    for decision in result.decisions:
        match decision:
            case Preempt():
                if effects.preempt(decision):
                    stopping.add(decision.job_id)
                acted.preempted += 1
            case Admit():
                if victims := stopping.intersection(decision.preempting):
                    effects.wait_for_victims(decision, tuple(sorted(victims)))
                    acted.waiting += 1
                elif effects.admit(decision):
                    acted.admitted += 1
            case Reserve():
                effects.reserve(decision)
                acted.reserved += 1
            case StillPending():
                effects.pending(decision)
                acted.pending += 1
    return acted
