"""A 1-day run of the small co-location simulation keeps its invariants."""

from pathlib import Path

import pytest

from cluster.types import Pool
from colocation.sim import CoLocationSim, SimConfig
from tidal.settings import TRACES_DIR


@pytest.fixture(scope="module")
def sim():
    s = CoLocationSim(SimConfig(Path(TRACES_DIR), days=1, training_load=0.1).small())
    s.run()
    return s


def test_migrations_lose_no_serving_pod_and_transitions_end_normal(sim):
    m = sim.metrics
    assert sum(m.transitions.values()) > 0  # it did lend and take back
    assert m.serving_drops == 0  # every ReplicaSet keeps its ready replicas minus those being replaced
    assert m.unnormal_after_done == 0
    assert m.conflicts == 0
    assert 0 < m.max_converting <= 3


def test_fixed_pool_never_moves_and_gpus_never_oversubscribed(sim):
    assert sim.metrics.fixed_pool_moves == 0
    for n in sim.backend.nodes():
        if n.pool is Pool.FIXED:
            assert n.state is sim.initial[n.name][0]
    assert sim.metrics.over_one_gpu == 0


def test_training_only_on_offline_nodes_and_figures_in_range(sim):
    nodes = {n.name: n for n in sim.backend.nodes()}
    for p in sim.backend.pods():
        if p.kind == "training":
            assert nodes[p.node].state.offline
    f = sim.metrics.summary(1)
    assert 0 <= f["lent_share"] <= 1 and 0 <= f["kill_rate"] <= 1 and sim.metrics.finished > 0
