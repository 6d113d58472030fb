"""Services whose replica is a group of pods (a leader and N-1 workers across nodes), after Kubernetes'
LeaderWorkerSet: placed whole or not at all, ready when every pod is, recreated whole when one fails (with back-off),
recreated or kept as its restart policy says when a container restarts in place, scaled by whole groups (scale-in
removes the highest index), rolled by groups with max_surge / max_unavailable, and moved create-before-delete off a
node that stops being online-normal (docs/concepts/service-groups.md).

Moving: a group with a pod on a node being lent (or cordoned) gets a stand-in, a new group at a fresh index above the
wanted ones (and above the surge range), and is removed only once the stand-in is ready; the stand-in then keeps the
index it has, standing in for the hole the moved group left (a hole below the wanted count is filled by a spare group
above it before anything is placed), so a move places one group, not two.

Pure: `plan()` reads what the cluster shows of one service's groups, the nodes, and what was stored about each
group (restarts, back-off, the restarts in place already acted on), and returns actions with reasons;
colocation/groups.py acts and records. Placement goes through the training gang placer (scheduler/policy/gang.py) on
the nodes the service may use.

Pod naming and environment are LeaderWorkerSet's: the leader is `<service>-<group>`, worker w `<service>-<group>-<w>`;
every pod gets LWS_LEADER_ADDRESS (the leader's DNS name under the group's headless Service), LWS_GROUP_SIZE,
LWS_WORKER_INDEX (0: the leader) and LWS_GROUP_INDEX.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from itertools import count

from cluster.types import BLOCK_LABEL, GPU_EPS, GpuShare, NodeState, NodeView, Topology
from scheduler.policy.framework import PodRequest
from scheduler.policy.gang import pick, room as gang_room
from scheduler.policy.nodes import NodeTable

BACKOFF_BASE_S = 10.0  # the first recreation waits this long, each further one twice as long ...
BACKOFF_MAX_S = 300.0  # ... up to this (a kubelet's CrashLoopBackOff: 10 s doubling to 5 min)
BACKOFF_RESET_S = 600.0  # a group ready this long forgets its restarts (as a kubelet resets its back-off)


def leader_name(service: str, group: int) -> str:
    return f"{service}-{group}"


def pod_name(service: str, group: int, worker: int) -> str:
    return leader_name(service, group) if worker == 0 else f"{service}-{group}-{worker}"


def group_service(service: str, group: int) -> str:
    """The group's headless Service: every pod resolves as `<pod>.<this>`."""
    return f"{service}-group-{group}"


def lws_env(service: str, group: int, worker: int, size: int) -> dict[str, str]:
    return {"LWS_LEADER_ADDRESS": f"{leader_name(service, group)}.{group_service(service, group)}",
            "LWS_GROUP_SIZE": str(size), "LWS_WORKER_INDEX": str(worker), "LWS_GROUP_INDEX": str(group)}


class RestartPolicy(str, Enum):
    """What a container restarted in place (its kubelet's restartCount went up) does to its group: LeaderWorkerSet's
    leaderWorkerTemplate.restartPolicy, spelled as LWS spells it; the service model's choices too. A pod that is
    missing recreates its group under either (docs/concepts/service-groups.md#lifecycle)."""

    RECREATE_GROUP = "RecreateGroupOnPodRestart"  # the group is recreated whole, with back-off (LWS's default)
    NONE = "None"  # the pod restarts in place; the group is kept, not ready until that pod is ready again

    @classmethod
    def values(cls) -> list[str]:
        """The spellings, in order: the model's check constraint and the service's validation both list them."""
        return [p.value for p in cls]


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """What one service's groups look like and how they roll."""

    service: str
    size: int  # pods per group
    gpu_model: str | None
    gpus: float  # per pod: whole GPUs (or none) once size > 1
    cpu_milli: int
    memory_mib: int
    resource_group: str  # "" : any online node
    revision: str  # a hash of the pod template: a group of another revision is rolled
    exclusive: bool = False  # all pods in one BLOCK_LABEL value, no other group's pods there
    max_surge: int = 0
    max_unavailable: int = 1
    restart_policy: RestartPolicy = RestartPolicy.RECREATE_GROUP


@dataclass(frozen=True, slots=True)
class GroupPod:
    name: str
    worker: int
    node: str
    ready: bool
    terminating: bool
    restarts: int = 0  # its container restarted in place


@dataclass(frozen=True, slots=True)
class ObservedGroup:
    """The pods the cluster shows of one group (any revision)."""

    index: int
    revision: str
    pods: tuple[GroupPod, ...]

    def complete(self, size: int) -> bool:
        return len(self.pods) == size and not any(p.terminating for p in self.pods)

    def ready(self, size: int) -> bool:
        """LeaderWorkerSet's ready: every pod of the group ready."""
        return self.complete(size) and all(p.ready for p in self.pods)

    @property
    def going(self) -> bool:
        return all(p.terminating for p in self.pods)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(p.node for p in sorted(self.pods, key=lambda p: p.worker))


@dataclass(frozen=True, slots=True)
class GroupMemory:
    """What is stored about one group between ticks."""

    restarts: int = 0
    backoff_until: float = 0.0
    pod_restarts: Mapping[str, int] = field(default_factory=dict)  # each pod's restart count already acted on


class Reason(str, Enum):
    PLACED = "group-placed"
    NO_ROOM = "group-pending"
    RECREATED = "group-recreated"
    BACKING_OFF = "group-backoff"
    SCALED_IN = "group-removed"
    ROLLED = "group-rolled"
    SURGE = "group-surge"
    NO_SURGE_ROOM = "rollout-no-surge-room"
    BIND_REFUSED = "group-bind-refused"  # the cluster refused one pod: the pods already bound are removed
    MOVING = "group-moving"  # a node of the group is being lent: a stand-in group is placed first
    MOVED = "group-moved"  # its stand-in is ready: the group leaves the node whole
    POD_RESTARTED = "group-pod-restarted"  # restart policy None: a container restarted in place, the group kept


@dataclass(frozen=True, slots=True)
class Place:
    index: int
    nodes: tuple[str, ...]  # worker w on nodes[w]
    shares: tuple[tuple[GpuShare, ...], ...]
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Remove:
    index: int
    pods: tuple[str, ...]
    reason: Reason
    message: str
    failed: bool = False  # a pod failed: the group's restarts grow and it backs off


@dataclass(frozen=True, slots=True)
class Note:
    """Nothing to do for now, and why (recorded when it changes)."""

    index: int | None
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class KeptInPlace:
    """Restart policy None: `pod`'s container restarted in place and its group is kept (recorded once per restart)."""

    index: int
    pod: str
    restarts: int
    reason: Reason
    message: str


Action = Place | Remove | Note | KeptInPlace


@dataclass
class _Room:
    """Nodes as placement sees them, updated as this plan places groups (what it removes is free from the next
    tick: on Kubernetes a removed pod holds its resources while it terminates)."""

    nodes: dict[str, NodeView]
    owner: dict[str, set[tuple[str, int]]] = field(default_factory=lambda: defaultdict(set))  # block -> groups

    def take(self, node: str, shares: Sequence[GpuShare], cpu: int, mem: int) -> None:
        n = self.nodes[node]
        used = list(n.used_shares())
        for s in shares:
            used[s.index] += s.share
        self.nodes[node] = replace(n, gpu_used=tuple(used), cpu_used=n.cpu_used + cpu, memory_used=n.memory_used + mem)


def observe(pods: Iterable[tuple[int, str, GroupPod]]) -> dict[int, ObservedGroup]:
    """(group index, revision, pod) triples of one service as its groups."""
    by_index: dict[int, list[GroupPod]] = defaultdict(list)
    revision: dict[int, str] = {}
    for index, rev, pod in pods:
        by_index[index].append(pod)
        revision.setdefault(index, rev)
    return {i: ObservedGroup(i, revision[i], tuple(sorted(p, key=lambda x: x.worker))) for i, p in by_index.items()}


def plan(spec: GroupSpec, desired: int, groups: Mapping[int, ObservedGroup], nodes: Sequence[NodeView],
         memory: Mapping[int, GroupMemory], now: float, other_groups_on: Mapping[str, set[tuple[str, int]]]) -> list[Action]:
    """One tick's actions for one service: recreate broken groups (after their back-off), place missing ones, remove
    extra ones (highest index first), roll groups of an older revision. `other_groups_on`: node -> the groups of other
    services on it (exclusive topology keeps them out of a group's block)."""
    actions: list[Action] = []
    room = _Room({n.name: n for n in nodes})
    for node, owners in other_groups_on.items():
        block = room.nodes[node].labels.get(BLOCK_LABEL, "") if node in room.nodes else ""
        room.owner[block] |= owners
    for g in groups.values():
        for p in g.pods:
            if p.node in room.nodes:
                room.owner[room.nodes[p.node].labels.get(BLOCK_LABEL, "")].add((spec.service, g.index))
    live: dict[int, ObservedGroup] = {}
    for index, g in sorted(groups.items()):
        if g.going:
            continue  # its pods are terminating: the index is free once they are gone
        mem = memory.get(index, GroupMemory())
        if not g.complete(spec.size):
            gone = spec.size - len([p for p in g.pods if not p.terminating])
            actions.append(Remove(index, tuple(p.name for p in g.pods if not p.terminating), Reason.RECREATED,
                                  f"group {index} of {spec.service} is recreated whole: {gone} of its {spec.size} "
                                  f"pods failed or went away (restart {mem.restarts + 1})", failed=True))
            continue
        restarted = [p for p in g.pods if p.restarts > mem.pod_restarts.get(p.name, 0)]
        if restarted and spec.restart_policy is RestartPolicy.RECREATE_GROUP:
            actions.append(Remove(index, tuple(p.name for p in g.pods), Reason.RECREATED,
                                  f"group {index} of {spec.service} is recreated whole: the container of "
                                  f"{restarted[0].name} restarted in place, and a group restarts whole "
                                  f"(LeaderWorkerSet's RecreateGroupOnPodRestart; restart {mem.restarts + 1})",
                                  failed=True))
            continue
        actions += [KeptInPlace(index, p.name, p.restarts, Reason.POD_RESTARTED,
                                f"group {index} of {spec.service} kept: the container of {p.name} on {p.node} "
                                f"restarted in place (restart {p.restarts}); the group is not ready until that pod "
                                f"is ready again (restart policy None)") for p in restarted]
        live[index] = g
    busy = {i for i, g in groups.items() if i not in live}  # still terminating, or being removed now
    old = sorted((i for i, g in live.items() if g.revision != spec.revision and i < desired), reverse=True)
    ready = {i for i, g in live.items() if g.ready(spec.size)}
    stand_in = _stand_ins(spec, desired, live, busy, room)
    actions += _moves(spec, stand_in, live, ready, room, set(groups) | {desired + spec.max_surge - 1})
    busy |= {a.index for a in actions if isinstance(a, Remove)}
    # scale in: every group above the desired count goes, the highest index first; a surge group stays while the
    # rollout it stands in for is not done (old groups left, or their replacements not ready yet), a stand-in while
    # it stands in
    surge_range = range(desired, desired + spec.max_surge)

    def down(i: int) -> bool:
        return i not in ready and stand_in.get(i) not in ready

    rolling = bool(old) or any(down(i) for i in range(desired))
    standing = set(stand_in.values())
    for index in sorted(live, reverse=True):
        if index >= desired and index not in standing and not (
                index in surge_range and rolling and live[index].revision == spec.revision):
            g = live.pop(index)
            actions.append(Remove(index, tuple(p.name for p in g.pods), Reason.SCALED_IN,
                                  f"group {index} of {spec.service} removed: {desired} groups wanted"))
            busy.add(index)
    unavailable = sum(1 for i in range(desired) if down(i))
    surge_ready = sum(1 for i in surge_range if i in live and i in ready and live[i].revision == spec.revision)
    budget = max(spec.max_unavailable, 0) + surge_ready - unavailable
    # missing groups below the desired count (a new service, scale out, a recreated group past its back-off)
    for index in range(desired):
        if index in live or index in busy or index in stand_in:
            continue
        mem = memory.get(index, GroupMemory())
        if mem.backoff_until > now:
            actions.append(Note(index, Reason.BACKING_OFF,
                                f"group {index} of {spec.service} waits {mem.backoff_until - now:.0f} s before "
                                f"restart {mem.restarts} (back-off stops a restart loop)"))
            continue
        actions.append(_place(spec, index, room, Reason.PLACED, f"group {index} of {spec.service}"))
    # a rolling update: surge groups first, then old groups replaced from the highest index down
    if old:
        surge_missing = [i for i in surge_range if i not in live and i not in busy]
        surged = [_place(spec, i, room, Reason.SURGE, f"surge group {i} of {spec.service}") for i in surge_missing]
        actions += [a for a in surged if isinstance(a, Place)]
        room_for_surge = spec.max_surge > 0 and (any(isinstance(a, Place) for a in surged) or any(
            i in live for i in surge_range))
        if spec.max_surge > 0 and not room_for_surge:
            actions.append(Note(None, Reason.NO_SURGE_ROOM,
                                f"rollout of {spec.service}: no room for a surge group, rolling at max_unavailable "
                                f"{max(spec.max_unavailable, 1)} instead"))
        if spec.max_unavailable < 1 and not room_for_surge:
            budget += 1  # never hang: with no room to surge, one group at a time
        for index in old:
            if budget <= 0:
                break
            g = live.pop(index)
            actions.append(Remove(index, tuple(p.name for p in g.pods), Reason.ROLLED,
                                  f"group {index} of {spec.service} rolled to revision {spec.revision}"))
            budget -= 1
    return actions


def leaving(group: ObservedGroup, nodes: Mapping[str, NodeView]) -> tuple[str, ...]:
    """The nodes of `group` that are no longer online-normal (being lent, or cordoned): it must move off them."""
    return tuple(sorted({p.node for p in group.pods if p.node in nodes
                         and nodes[p.node].state is not NodeState.ONLINE_NORMAL}))


def _stand_ins(spec: GroupSpec, desired: int, live: Mapping[int, ObservedGroup], busy: set[int],
               room: _Room) -> dict[int, int]:
    """{group index: the index of the spare group standing in for it}: for each hole below `desired` and each group
    moving off a node, lowest first, a live group of this revision above the wanted ones and the surge range."""
    above = desired + spec.max_surge
    moving = [i for i in sorted(live) if leaving(live[i], room.nodes)]
    spares = [i for i in sorted(live) if i >= above and i not in moving and live[i].revision == spec.revision]
    holes = [i for i in range(desired) if i not in live and i not in busy]
    return dict(zip(holes + moving, spares))


def _moves(spec: GroupSpec, stand_in: dict[int, int], live: dict[int, ObservedGroup], ready: set[int], room: _Room,
           taken: set[int]) -> list[Action]:
    """Create-before-delete for each group moving off a node: a stand-in group placed first (at an index above every
    one `taken`), the moving group removed whole once its stand-in is ready. Fills `stand_in` with the stand-ins it
    places."""
    actions: list[Action] = []
    fresh = count(max(taken | set(stand_in.values())) + 1)
    for index in sorted(live):
        nodes = leaving(live[index], room.nodes)
        if not nodes:
            continue
        off = ", ".join(nodes)
        j = stand_in.get(index)
        if j is None:
            j = next(fresh)
            placed = _place(spec, j, room, Reason.MOVING, f"group {j} of {spec.service}, standing in for group "
                                                          f"{index} that leaves {off},")
            if isinstance(placed, Place):
                stand_in[index] = j
                actions.append(placed)
            else:
                actions.append(Note(index, Reason.NO_ROOM, f"group {index} of {spec.service} cannot leave {off} yet: "
                                                           f"no room for a stand-in of {spec.size} pods"))
        elif j in ready:
            g = live.pop(index)
            actions.append(Remove(index, tuple(p.name for p in g.pods), Reason.MOVED,
                                  f"group {index} of {spec.service} leaves {off} whole: group {j} stands in for it, "
                                  f"ready on {', '.join(live[j].nodes)}"))
        else:
            actions.append(Note(index, Reason.MOVING, f"group {index} of {spec.service} keeps serving on {off} until "
                                                      f"group {j}, standing in for it, is ready"))
    return actions


def _place(spec: GroupSpec, index: int, room: _Room, reason: Reason, what: str) -> Place | Note:
    chosen = place_group(spec, room, index)
    if chosen is None:
        return Note(index, Reason.NO_ROOM, f"{what} waits: no room for {spec.size} pods of "
                                           f"{_shape(spec)} together{' in one block' if spec.exclusive else ''}")
    nodes, shares = chosen
    block = room.nodes[nodes[0]].labels.get(BLOCK_LABEL, "")
    for node, s in zip(nodes, shares, strict=True):
        room.take(node, s, spec.cpu_milli, spec.memory_mib)
    room.owner[block].add((spec.service, index))
    return Place(index, nodes, shares, reason, f"{what} placed whole: leader on {nodes[0]}"
                 + (f", workers on {', '.join(nodes[1:])}" if len(nodes) > 1 else ""))


def _shape(spec: GroupSpec) -> str:
    gpus = f"{spec.gpus:g} {spec.gpu_model} GPU, " if spec.gpu_model and spec.gpus else ""
    return f"{gpus}{spec.cpu_milli} mCPU, {spec.memory_mib} MiB"


def eligible(spec: GroupSpec, nodes: Iterable[NodeView]) -> list[NodeView]:
    """Online-normal nodes of the service's resource group and GPU model."""
    return [n for n in nodes if n.state is NodeState.ONLINE_NORMAL and n.gpu_model == spec.gpu_model
            and (not spec.resource_group or n.resource_group == spec.resource_group)]


def place_group(spec: GroupSpec, space: _Room, index: int) -> tuple[tuple[str, ...], tuple[tuple[GpuShare, ...], ...]] | None:
    """Nodes and GPU indices for every pod of a group at once, or None; exclusive: within one block no other group
    uses."""
    candidates = eligible(spec, space.nodes.values())
    if not candidates:
        return None
    # the gang placer places on nodes that take training: present the online nodes this service may use so
    as_placeable = [replace(n, state=NodeState.OFFLINE_NORMAL) for n in candidates]
    table = NodeTable(spec.gpu_model, as_placeable)
    request = PodRequest(spec.gpu_model, spec.gpus if spec.gpu_model else 0.0, spec.cpu_milli, spec.memory_mib)
    blocks: list[str | None] = [None]
    if spec.exclusive:
        mine = (spec.service, index)
        blocks = [b for b in table.block_names if b and space.owner.get(b, set()) <= {mine}]
    for block in blocks:
        allowed = None if block is None else table.block == table.block_names.index(block)
        rows = pick(table, gang_room(table, request, allowed, Topology.PACK), spec.size)
        if rows is not None:
            names = tuple(table.names[r] for r in rows)
            return names, _shares(spec, names, space)
    return None


def _shares(spec: GroupSpec, nodes: Sequence[str], room: _Room) -> tuple[tuple[GpuShare, ...], ...]:
    """Free whole GPUs (lowest index first) for each pod; a pod of a fraction of a GPU (a group of one) shares the
    least used GPU it fits on."""
    taken: dict[str, list[float]] = {}
    out = []
    for node in nodes:
        used = taken.setdefault(node, list(room.nodes[node].used_shares()))
        if not spec.gpu_model or spec.gpus <= 0:
            out.append(())
        elif spec.gpus < 1:
            i = min((i for i, u in enumerate(used) if u + spec.gpus <= 1 + GPU_EPS), key=lambda i: (-used[i], i))
            used[i] += spec.gpus
            out.append((GpuShare(i, spec.gpus),))
        else:
            free = [i for i, u in enumerate(used) if u <= GPU_EPS][: int(spec.gpus)]
            for i in free:
                used[i] = 1.0
            out.append(tuple(GpuShare(i, 1.0) for i in free))
    return tuple(out)


def backoff_after(restarts: int) -> float:
    """Seconds a group waits before its `restarts`-th recreation."""
    return min(BACKOFF_BASE_S * 2 ** max(restarts - 1, 0), BACKOFF_MAX_S)


def fits_somewhere(spec: GroupSpec, nodes: Iterable[NodeView]) -> bool:
    """Whether any block (any node at all, without exclusive topology) of the service's GPU model could ever hold one
    group: the nodes as if empty and online (the validation of docs/concepts/service-groups.md#the-group)."""
    empty = [replace(n, state=NodeState.ONLINE_NORMAL, gpu_used=(), cpu_used=0, memory_used=0, pods=())
             for n in nodes if n.gpu_model == spec.gpu_model]
    probe = replace(spec, resource_group="")
    return place_group(probe, _Room({n.name: n for n in empty}), 0) is not None
