"""A property of the group tick on the simulated cluster (docs/concepts/service-groups.md#placement): whatever happens
to the pods, the nodes and the replica count, no group holds GPUs with fewer pods placed than its size once a tick has
run, so a partial group never outlives one placement cycle."""
from __future__ import annotations

import itertools
import time
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.backend import GROUP_LABEL, SERVICE_LABEL, BackendError, bind_in_order
from cluster.clock import VirtualClock
from cluster.simulated.engine import SimulatedCluster
from cluster.types import NodeState, NodeView, Pool
from colocation import groups

NODES = tuple(NodeView(f"s-{i}", "t4", "T4", 2, 32000, 131072, Pool.COLOCATION, NodeState.ONLINE_NORMAL,
                       labels={"tidal.io/block": f"b{i // 3}"}) for i in range(6))
SIZE = 2
names = itertools.count()

step = st.one_of(
    st.tuples(st.just("kill"), st.integers(0, 20)),
    st.tuples(st.just("scale"), st.integers(0, 3)),
    st.tuples(st.just("refuse"), st.integers(0, 3)),
    st.tuples(st.just("cordon"), st.integers(0, 5)),
    st.tuples(st.just("uncordon"), st.integers(0, 5)),
    st.tuples(st.just("resize"), st.sampled_from([4000, 8000])),
    st.tuples(st.just("wait"), st.sampled_from([1, 15, 60])),
)


class Refusing:
    """The cluster refusing the n-th bind from now (a fault at the bind, as a proxy would inject one)."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self.cluster, self.refuse_in = cluster, -1

    def __getattr__(self, name: str):
        return getattr(self.cluster, name)

    def bind(self, pod, node) -> None:
        self.refuse_in -= 1
        if self.refuse_in == 0:
            raise BackendError("refused")
        self.cluster.bind(pod, node)

    def bind_many(self, pods) -> dict[str, BackendError]:
        """Each pod as `bind` above, in order (the engine's bind_many would bind around the refusal)."""
        return bind_in_order(self.bind, pods)


def partial_groups(cluster: SimulatedCluster, service: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for p in cluster.pods():
        if p.spec.labels.get(SERVICE_LABEL) == service and not p.terminating:
            index = int(p.spec.labels[GROUP_LABEL])
            counts[index] = counts.get(index, 0) + 1
    return {i: n for i, n in counts.items() if n != SIZE}


@pytest.mark.django_db
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=15), exclusive=st.booleans())
def test_no_group_holds_gpus_partially_placed_after_a_tick(world, steps, exclusive):
    service = world.service(name=f"llm-{next(names)}", gpu_model=world.gpu_models["T4"], gpus_per_replica=Decimal(2),
                            group_size=SIZE, replicas=2, min_replicas=0, max_replicas=3, startup_s=5,
                            exclusive_topology=exclusive, max_surge=1)
    clock = VirtualClock(1_000_000.0)
    cluster = SimulatedCluster(NODES, clock)
    backend = Refusing(cluster)
    desired, now = 2, time.time()
    for kind, value in steps:
        if kind == "kill":
            pods = [p.spec.name for p in cluster.pods()]
            if pods:
                cluster.evict(pods[value % len(pods)], "killed")
        elif kind == "scale":
            desired = value
        elif kind == "refuse":
            backend.refuse_in = value + 1
        elif kind in ("cordon", "uncordon"):
            cluster.set_node_state(NODES[value].name, NodeState.ONLINE_UNNORMAL if kind == "cordon"
                                   else NodeState.ONLINE_NORMAL)
        elif kind == "resize":
            service.cpu_milli_per_replica = value
            service.save()
        else:
            now += value
            clock.advance(value)
            cluster.advance()
        groups.reconcile(backend, service, desired, "t4", now)
        assert partial_groups(cluster, service.name) == {}, (kind, value)
        mine = [p for p in cluster.pods() if p.spec.labels.get(SERVICE_LABEL) == service.name]
        held = {p.spec.labels[GROUP_LABEL] for p in mine}
        cordoned = {n.name for n in cluster.nodes() if n.state is not NodeState.ONLINE_NORMAL}
        moving = {p.spec.labels[GROUP_LABEL] for p in mine if p.node in cordoned}
        # the desired groups, at most max_surge 1 more during a rollout, and a stand-in per group moving off a node
        assert len(held) <= desired + 1 + len(moving)
