"""What the lending policy looks at, per resource group, frozen at `now`.

Online quota usage of a group (one dominant unit per group: GPUs for a GPU group, CPU
millicores for the CPU group):

    usage = demand / capacity
    demand   = sum of the requests of the group's inference pods, on any node, except pods
               already detached from their ReplicaSet (their replacement is counted instead);
               pending online pods are not in it (they drive take-backs separately)
    capacity = sum of the capacities of the group's online-normal nodes

`usage` is what operators see. Decisions use `projected_usage`, the same demand over the capacity
of the nodes *heading* online: online-normal nodes not being lent, plus nodes on their way online
(online-unnormal, or with a take-back record not yet applied). So a take-back in flight is not
repeated and a lend in flight is not counted twice. No capacity: usage is 0 with no demand, else inf.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from math import inf

from cluster.types import NodeState, NodeView, Pool
from colocation.policy.profile import Thresholds
from colocation.policy.states import Direction, heads_online


@dataclass(frozen=True, slots=True)
class InferencePod:
    name: str
    request: float  # in the group's unit
    detached: bool = False  # create-before-delete in progress: its replacement exists


@dataclass(frozen=True, slots=True)
class TrainingPod:
    name: str
    job_id: int | None
    started_at: float
    workers: int = 1  # of its job: a gang dies whole when one worker's node is taken back
    expected_end: float | None = None  # epoch s its job is expected to end (None: unknown, counts as killed)

    def end(self, now: float) -> float:
        """When it is expected to end, seen at `now`: unknown (inf) without an estimate, or once `now` is past it
        (the estimate was short: the job still runs, and when it will end nobody knows)."""
        if self.expected_end is None or self.expected_end <= now:
            return inf
        return self.expected_end

    def runs_at(self, t: float, now: float) -> bool:
        """Still running at `t`, seen at `now` (so a take-back evicting then kills it)."""
        return self.end(now) > t


@dataclass(frozen=True, slots=True)
class PendingPod:
    """An online pod no node could take. `replacement`: created by our own migration (ignored)."""

    name: str
    request: float
    replacement: bool = False
    group: str = ""  # the service group it belongs to ("group 1 of llm"): its pods need room together


@dataclass(frozen=True, slots=True)
class GroupNode:
    name: str
    state: NodeState
    pool: Pool
    capacity: float  # in the group's unit
    inference: tuple[InferencePod, ...] = ()
    training: tuple[TrainingPod, ...] = ()
    # what its inference pods take, detached ones aside; summed once (every decision reads it, some many times)
    load: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "load", sum(p.request for p in self.inference if not p.detached))

    @property
    def pod_count(self) -> int:
        return len(self.inference) + len(self.training)

    @classmethod
    def of(cls, node: NodeView, inference: Iterable[InferencePod] = (),
           training: Iterable[TrainingPod] = ()) -> GroupNode:
        return cls(node.name, node.state, node.pool, capacity(node), tuple(inference), tuple(training))


def capacity(node: NodeView) -> float:
    """A node's capacity in its group's unit: GPUs, or CPU millicores for a CPU-only node."""
    return in_group_unit(node.gpu_count, node.cpu_milli, gpu=bool(node.gpu_model))


def in_group_unit(gpus: float, cpu_milli: int, *, gpu: bool) -> float:
    """An amount in its group's one unit (the module's docstring): GPUs in a GPU group, else CPU millicores."""
    return float(gpus) if gpu else float(cpu_milli)


def unit_name(*, gpu: bool) -> str:
    return "GPU" if gpu else "millicore"


@dataclass(frozen=True, slots=True)
class Converting:
    """An open transition record (the node may not be marked unnormal yet)."""

    node: str
    direction: Direction


@dataclass(frozen=True, slots=True)
class GroupView:
    name: str
    nodes: tuple[GroupNode, ...]
    thresholds: Thresholds | None = None  # None: the profile's default
    pending_training: int = 0  # training jobs waiting for this group's hardware
    pending_online: tuple[PendingPod, ...] = ()
    converting: tuple[Converting, ...] = ()
    unit: str = "GPU"  # for messages only
    startup_s: float = 0.0  # the longest start-up of a replica (a group of pods) of the services it serves
    largest_replica: float = 0.0  # what the largest replica of its services takes (a group: all its pods)
    last_take_back: float | None = None  # epoch s the group's latest take-back was decided (hysteresis of lending)

    def direction_of(self, node: GroupNode) -> Direction | None:
        """The conversion a node is in: an open record, or (after a crash lost it) its unnormal state."""
        for c in self.converting:
            if c.node == node.name:
                return c.direction
        if node.state is NodeState.OFFLINE_UNNORMAL:
            return Direction.LEND
        if node.state is NodeState.ONLINE_UNNORMAL:
            return Direction.TAKE_BACK
        return None

    def in_flight(self) -> dict[str, Direction]:
        out = {n.name: d for n in self.nodes if (d := self.direction_of(n)) is not None}
        # records for nodes absent from the view still take a slot
        out.update({c.node: c.direction for c in self.converting if c.node not in out})
        return out

    def lent(self) -> list[GroupNode]:
        """Offline-normal co-location nodes not converting: lent to training, what a take-back can choose from."""
        flight = self.in_flight()
        return [n for n in self.nodes if n.pool is Pool.COLOCATION and n.state is NodeState.OFFLINE_NORMAL
                and n.name not in flight]

    @property
    def ready_capacity(self) -> float:
        """What online pods can be placed on now: online-normal nodes not being lent (cordoned take-backs are not
        yet ready)."""
        flight = self.in_flight()
        return sum(n.capacity for n in self.nodes
                   if n.state is NodeState.ONLINE_NORMAL and flight.get(n.name) is not Direction.LEND)

    @property
    def demand(self) -> float:
        return sum(n.load for n in self.nodes)

    @property
    def online_capacity(self) -> float:
        return sum(n.capacity for n in self.nodes if n.state is NodeState.ONLINE_NORMAL)

    @property
    def projected_capacity(self) -> float:
        return sum(n.capacity for n in self.nodes if heads_online(n.state, self.direction_of(n)))

    @property
    def usage(self) -> float:
        return ratio(self.demand, self.online_capacity)

    @property
    def projected_usage(self) -> float:
        return ratio(self.demand, self.projected_capacity)

    def next_replica_over(self, max_rate: float) -> bool:
        """Would one more of its largest replica put projected usage over `max_rate` (and so start a take-back)?"""
        return ratio(self.demand + self.largest_replica, self.projected_capacity) > max_rate

    @property
    def urgent_pending(self) -> tuple[PendingPod, ...]:
        return tuple(p for p in self.pending_online if not p.replacement)


def ratio(demand: float, cap: float) -> float:
    if cap <= 0:
        return 0.0 if demand <= 0 else inf
    return demand / cap
