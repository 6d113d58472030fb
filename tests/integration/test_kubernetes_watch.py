"""The Kubernetes backend's watches against the Kubernetes API emulator: a watch kept away from the server (connection
lost, then 503s) reconnects with backoff; having fallen behind the server's history (410 Gone) it relists and still
reports what changed meanwhile."""
import time

from cluster.backend import EventKind
from cluster.emulator import Emulator
from cluster.kubernetes.backend import KubernetesCluster, KubeSettings
from cluster.types import NodeState, NodeView, Pool

NODES = (NodeView("n1", "cpu", None, 0, 8000, 32768, Pool.COLOCATION, NodeState.ONLINE_NORMAL),)


def wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_watch_that_fell_behind_relists_and_reports_the_change_it_missed():
    with Emulator(nodes=NODES, history=5, actors=False) as emu:
        backend = KubernetesCluster(emu.api_client(), KubeSettings())
        try:
            backend.drain_events()  # starts the watches; their first list is the baseline
            wait_for(lambda: backend._nodes_watch.resource_version is not None)
            emu.fail("GET", r"/api/v1/nodes$", 503)  # the watch cannot come back (reads of one node still work)
            emu.stop()  # its connection drops
            emu.start()
            states = [NodeState.ONLINE_UNNORMAL, NodeState.ONLINE_NORMAL] * 4 + [NodeState.OFFLINE_UNNORMAL]
            for state in states:  # more changes than the server keeps while the watch is away
                backend.set_node_state("n1", state)
            emu.clear_faults()  # it resumes from its old resourceVersion, which the server no longer keeps
            wait_for(lambda: backend._nodes_watch.relists >= 2)  # on its own (a read would ask it to relist at once)
            seen = []
            wait_for(lambda: seen.extend(backend.drain_events()) or any(
                e.kind is EventKind.NODE_STATE_CHANGED and e.detail.endswith("->offline-unnormal") for e in seen))
        finally:
            backend.stop()
