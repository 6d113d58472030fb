"""The node state machine (docs/concepts/lending.md#the-node-state-machine): four states, every legal transition in one table.

A conversion is two transitions: LEND = online-normal -> offline-unnormal (cordon, pods move away)
then LEND_DONE = offline-unnormal -> offline-normal; TAKE_BACK / TAKE_BACK_DONE likewise towards
online. The aborts put a node that is half-way back where it came from (operator action; the step
machine never emits them). Fixed-pool nodes are never lent, so they have no LEND / TAKE_BACK at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from enum import Enum

from cluster.types import NodeState, Pool

ON_N, ON_U = NodeState.ONLINE_NORMAL, NodeState.ONLINE_UNNORMAL
OFF_N, OFF_U = NodeState.OFFLINE_NORMAL, NodeState.OFFLINE_UNNORMAL


class Direction(str, Enum):
    LEND = "online-to-offline"  # inference machine lent to training
    TAKE_BACK = "offline-to-online"  # training machine taken back by inference

    @property
    def target(self) -> NodeState:
        """Where a conversion in this direction ends."""
        return OFF_N if self is Direction.LEND else ON_N


class Event(str, Enum):
    LEND = "lend"
    LEND_DONE = "lend-done"
    TAKE_BACK = "take-back"
    TAKE_BACK_DONE = "take-back-done"
    ABORT_LEND = "abort-lend"
    ABORT_TAKE_BACK = "abort-take-back"


TRANSITIONS: Mapping[tuple[NodeState, Event], NodeState] = MappingProxyType({
    (ON_N, Event.LEND): OFF_U,
    (OFF_U, Event.LEND_DONE): OFF_N,
    (OFF_N, Event.TAKE_BACK): ON_U,
    (ON_U, Event.TAKE_BACK_DONE): ON_N,
    (OFF_U, Event.ABORT_LEND): ON_N,
    (ON_U, Event.ABORT_TAKE_BACK): OFF_N,
})

# Events that start a conversion: refused on fixed-pool nodes whatever their state.
_STARTS = frozenset({Event.LEND, Event.TAKE_BACK})


@dataclass(frozen=True, slots=True)
class TransitionResult:
    ok: bool
    new_state: NodeState  # the unchanged state when refused
    reason: str


def transition(state: NodeState, event: Event, pool: Pool = Pool.COLOCATION) -> TransitionResult:
    """Apply `event` to a node in `state`; an illegal event is refused with a reason, never raised."""
    if event in _STARTS and pool is Pool.FIXED:
        return TransitionResult(False, state, f"{event.value} refused: fixed-pool nodes are never lent")
    new = TRANSITIONS.get((state, event))
    if new is None:
        legal = ", ".join(e.value for (s, e) in TRANSITIONS if s is state) or "none"
        return TransitionResult(False, state,
                                f"{event.value} refused in state {state.value} (legal here: {legal})")
    return TransitionResult(True, new, f"{state.value} -> {new.value} on {event.value}")


def heads_online(state: NodeState, converting: Direction | None = None) -> bool:
    """True when the node is, or is on its way to being, online (capacity inference can count on)."""
    if converting is not None:
        return converting is Direction.TAKE_BACK
    return not state.offline
