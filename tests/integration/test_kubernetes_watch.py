"""The Kubernetes backend's watches on the real control plane, as they really behave: a watch kept away from the API
server (its connection cut by the fault proxy, then refused) while etcd is compacted past the resourceVersion it
would resume from gets 410 Gone when it comes back, relists, and reports what changed meanwhile once — no change
missed, none repeated."""
import base64
import json
import logging
import os
import urllib.request

import pytest

from cluster.backend import EventKind
from cluster.kubernetes.backend import KubernetesCluster, KubeSettings
from cluster.types import NodeState, NodeView, Pool
from tests.integration.faultproxy import FaultProxy
from tests.integration.kubecluster import kwok_cluster, wait_for

NODES = (NodeView("n1", "cpu", None, 0, 8000, 32768, Pool.COLOCATION, NodeState.ONLINE_NORMAL),)


def etcd(path: str, body: dict) -> dict:
    """etcd's v3 JSON gateway, on the control plane `platform/stack.sh env` names (TIDAL_ETCD_URL)."""
    url = os.environ.get("TIDAL_ETCD_URL") or pytest.fail("TIDAL_ETCD_URL unset: export platform/stack.sh env")
    request = urllib.request.Request(f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def compact_etcd() -> int:
    """Compact etcd's history up to its current revision; that revision."""
    revision = int(etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def state_changes(events) -> list[str]:
    return [e.detail for e in events if e.kind is EventKind.NODE_STATE_CHANGED and e.node == "n1"]


def test_a_watch_resumed_after_etcd_compaction_gets_410_relists_and_reports_each_change_once(caplog):
    caplog.set_level(logging.INFO, logger="cluster.kubernetes.watch")
    with kwok_cluster(NODES) as cluster, FaultProxy(cluster.api.configuration) as proxy:
        backend = KubernetesCluster(proxy.api_client(), KubeSettings())
        writer = KubernetesCluster(cluster.api, KubeSettings())  # another client: its writes are not ours to wait on
        try:
            seen = backend.drain_events()  # starts the watches; their first list is the baseline
            wait_for(lambda: backend._nodes_watch.resource_version is not None)
            writer.set_node_state("n1", NodeState.ONLINE_UNNORMAL)  # seen live by the watch
            wait_for(lambda: seen.extend(backend.drain_events()) or state_changes(seen))
            assert state_changes(seen) == ["online-normal->online-unnormal"]
            relists = backend._nodes_watch.relists

            proxy.stop()  # the watch's connection is cut; it retries from the resourceVersion it had
            for state in [NodeState.ONLINE_NORMAL, NodeState.ONLINE_UNNORMAL] * 3 + [NodeState.OFFLINE_UNNORMAL]:
                writer.set_node_state("n1", state)
            compact_etcd()  # the history it would resume from is gone
            proxy.start()

            wait_for(lambda: backend._nodes_watch.relists > relists, what="the watch relisting")
            assert any(r.getMessage().startswith("watch nodes: 410") for r in caplog.records)  # Gone, not a retry
            wait_for(lambda: seen.extend(backend.drain_events()) or len(state_changes(seen)) >= 2)
            writer.set_node_state("n1", NodeState.OFFLINE_NORMAL)  # and the resumed watch sees the next change live
            wait_for(lambda: seen.extend(backend.drain_events()) or len(state_changes(seen)) >= 3)
            assert state_changes(seen + backend.drain_events()) == [
                "online-normal->online-unnormal",  # live, before the cut
                "online-unnormal->offline-unnormal",  # the net change while away, from the relist's diff, once
                "offline-unnormal->offline-normal",  # live again
            ]
        finally:
            backend.stop()
            writer.stop()
