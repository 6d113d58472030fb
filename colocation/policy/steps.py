"""A node conversion as a pure step machine: the controller executes one action at a time.

    lend:      mark offline-unnormal -> per inference pod: detach from its ReplicaSet (a
               replacement is created elsewhere), delete it once the replacement is ready
               -> mark offline-normal -> done
    take back: mark online-unnormal (cordon: no new training lands) -> wait until the record's
               `evict_at` while training pods run (graceful: those that end meanwhile are not killed)
               -> evict each training pod still there (requeued to the fixed pool)
               -> wait until they are gone -> mark online-normal -> done

The next action is derived from what is observed on the node (state, pods); the persisted record
only says which direction and how far we got. So a crash between acting and persisting is harmless:
the next tick observes the effect and moves on, never repeating a destructive step. Every action
names the step to persist after executing it; the record's step is for display and a guard against
a hand-made revert, never the source of truth. Done is only returned once the node is normal again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import MappingProxyType
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from enum import Enum

from cluster.types import NodeState, Pool
from colocation.policy.states import Direction, Event, transition


class Step(str, Enum):
    """The last step executed; a new record is PLANNED. The controller persists `action.step`."""

    PLANNED = "planned"
    MARK_UNNORMAL = "mark-unnormal"
    DRAIN = "drain"  # migrate inference pods / evict training pods, wait until gone
    MARK_NORMAL = "mark-normal"
    DONE = "done"


class PodKind(str, Enum):
    INFERENCE = "inference"
    TRAINING = "training"


@dataclass(frozen=True, slots=True)
class NodePod:
    name: str
    kind: PodKind
    detached: bool = False  # inference: taken out of its ReplicaSet, replacement requested
    replacement_ready: bool = False  # inference: that replacement is running and ready
    terminating: bool = False  # deletion or eviction requested, not gone yet (graceful termination)


@dataclass(frozen=True, slots=True)
class NodeNow:
    """The node as observed now."""

    name: str
    state: NodeState
    pool: Pool
    pods: tuple[NodePod, ...] = ()


@dataclass(frozen=True, slots=True)
class TransitionRecord:
    """What the controller persists per conversion."""

    node: str
    direction: Direction
    step: Step = Step.PLANNED
    started_at: float = 0.0
    # take-back: training pods still running are evicted only from here on (graceful: jobs that end before it are
    # not killed; the node is online-unnormal meanwhile, so nothing new lands on it); 0: at once
    evict_at: float = 0.0


@dataclass(frozen=True, slots=True)
class SetState:
    node: str
    event: Event
    state: NodeState
    step: Step  # persist after executing (every action below does the same)


@dataclass(frozen=True, slots=True)
class DetachPod:
    """Create-before-delete, part 1: detach from the ReplicaSet so a replacement starts elsewhere."""

    node: str
    pod: str
    step: Step = Step.DRAIN


@dataclass(frozen=True, slots=True)
class DeletePod:
    """Create-before-delete, part 2: only ever emitted once the replacement is ready."""

    node: str
    pod: str
    step: Step = Step.DRAIN


@dataclass(frozen=True, slots=True)
class EvictTraining:
    node: str
    pod: str
    requeue_pool: Pool = Pool.FIXED  # killed by a take-back: back to the queue at once, fixed pool
    step: Step = Step.DRAIN


@dataclass(frozen=True, slots=True)
class Wait:
    node: str
    reason: str
    step: Step = Step.DRAIN


@dataclass(frozen=True, slots=True)
class Done:
    node: str
    step: Step = Step.DONE


@dataclass(frozen=True, slots=True)
class Conflict:
    """The node is not where this conversion could have left it (changed by hand?): alert, don't act."""

    node: str
    reason: str
    step: Step


Action = SetState | DetachPod | DeletePod | EvictTraining | Wait | Done | Conflict

_START = MappingProxyType({Direction.LEND: Event.LEND, Direction.TAKE_BACK: Event.TAKE_BACK})
_FINISH = MappingProxyType({Direction.LEND: Event.LEND_DONE, Direction.TAKE_BACK: Event.TAKE_BACK_DONE})


def _set(node: NodeNow, event: Event, step: Step) -> SetState | Conflict:
    result = transition(node.state, event, node.pool)
    if not result.ok:
        return Conflict(node.name, result.reason, step)
    return SetState(node.name, event, result.new_state, step)


def next_action(record: TransitionRecord, node: NodeNow, now: float) -> Action:
    """The one thing to do next for this conversion, given the node as observed at `now`."""
    d = record.direction
    started = record.step is not Step.PLANNED
    source = NodeState.ONLINE_NORMAL if d is Direction.LEND else NodeState.OFFLINE_NORMAL
    middle = NodeState.OFFLINE_UNNORMAL if d is Direction.LEND else NodeState.ONLINE_UNNORMAL
    if node.state is d.target:
        return Done(node.name)
    if node.state is source:
        if started:
            return Conflict(node.name, f"{node.name} is back to {source.value} after the "
                                       f"{d.value} was marked unnormal (aborted by hand?)", record.step)
        return _set(node, _START[d], Step.MARK_UNNORMAL)
    if node.state is not middle:
        return Conflict(node.name, f"{node.name} is {node.state.value}, not on the way {d.value}", record.step)
    drain = _drain_lend(node) if d is Direction.LEND else _drain_take_back(node, record.evict_at, now)
    return drain or _set(node, _FINISH[d], Step.MARK_NORMAL)


def _drain_lend(node: NodeNow) -> Action | None:
    waiting, stopping = [], []
    for pod in node.pods:
        if pod.kind is not PodKind.INFERENCE:
            continue  # training may stay: the node is heading offline
        if pod.terminating:
            stopping.append(pod.name)  # deleted, shutting down: it holds its resources until it is gone
        elif not pod.detached:
            return DetachPod(node.name, pod.name)
        elif pod.replacement_ready:
            return DeletePod(node.name, pod.name)
        else:
            waiting.append(pod.name)
    reasons = ([f"replacements of {', '.join(waiting)} not ready yet"] if waiting else []) + \
        ([f"{', '.join(stopping)} still shutting down"] if stopping else [])
    return Wait(node.name, "; ".join(reasons)) if reasons else None


def _drain_take_back(node: NodeNow, evict_at: float, now: float) -> Action | None:
    waiting, running = [], []
    for pod in node.pods:
        if pod.kind is not PodKind.TRAINING:
            continue
        if pod.terminating:
            waiting.append(pod.name)
        elif now >= evict_at:
            return EvictTraining(node.name, pod.name)
        else:
            running.append(pod.name)
    if running:  # cordoned (online-unnormal): what ends before the deadline is not killed
        return Wait(node.name, f"cordoned: {len(running)} training pods may finish until {hhmm(evict_at)}")
    if waiting:
        return Wait(node.name, f"evicted training pods {', '.join(waiting)} still terminating")
    return None


def hhmm(t: float) -> str:
    """A deadline as operators read it in a waiting sentence (the step machine knows no site time zone: UTC)."""
    return f"{datetime.fromtimestamp(t, timezone.utc):%H:%M} UTC"


def expected_after(node: NodeNow, action: Action) -> NodeNow:
    """The node as the action should leave it, so a controller can run several actions per tick
    without re-reading the cluster (replacement readiness and pod exits are the cluster's to report)."""
    if isinstance(action, SetState):
        return replace(node, state=action.state)
    if isinstance(action, DetachPod):
        return replace(node, pods=tuple(replace(p, detached=True) if p.name == action.pod else p
                                        for p in node.pods))
    if isinstance(action, EvictTraining):
        return replace(node, pods=tuple(replace(p, terminating=True) if p.name == action.pod else p
                                        for p in node.pods))
    if isinstance(action, DeletePod):
        return replace(node, pods=tuple(p for p in node.pods if p.name != action.pod))
    return node


def is_final(action: Action) -> bool:
    """Stop executing for this tick: nothing more can happen until the cluster moves."""
    return isinstance(action, (Wait, Done, Conflict))


def drive(record: TransitionRecord, observed: Callable[[], NodeNow], now: float, limit: int) -> Iterator[Action]:
    """The record's next actions, one at a time, until one is final or `limit` ran (the rest waits for the next
    tick). The caller executes each action before asking for the next, which is planned on the node as `observed`
    then sees it; the caller may stop early (an action the cluster refused). The live controller and the
    co-location simulation drive the step machine with this, each with its own per-tick limit."""
    for _ in range(limit):
        action = next_action(record, observed(), now)
        yield action
        if is_final(action):
            return
        record = replace(record, step=action.step)
