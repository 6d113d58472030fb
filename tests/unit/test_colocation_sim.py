"""A 1-day run of the small co-location simulation keeps its invariants."""

from pathlib import Path

import pytest

from cluster.types import JobStatus, JobView, Pool
from colocation.sim import CoLocationSim, SimConfig
from colocation.sim.queue import PendingQueue
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


@pytest.fixture(scope="module")
def static():
    s = CoLocationSim(SimConfig(Path(TRACES_DIR), days=1, training_load=0.1, lend=False).small())
    s.run()
    return s


def test_static_split_sizes_the_online_side_for_the_inference_peak_and_never_moves(static):
    m = static.metrics
    assert sum(m.transitions.values()) == 0 and m.killed == 0
    for g, n in static.static_online.items():
        assert 0 < n < sum(1 for node in static.backend.nodes() if node.resource_group == g)
        assert set(m.online_nodes[g]) == {n}
    assert m.summary(1)["online_pending_minutes"] == 0  # enough online nodes for the peak
    nodes = {n.name: n for n in static.backend.nodes()}
    for p in static.backend.pods():
        if p.kind == "training":
            assert nodes[p.node].pool is Pool.FIXED and nodes[p.node].state is static.initial[p.node][0]
    assert m.finished > 0 and m.summary(1)["lent_share"] == 0


def test_both_runs_serve_the_same_load_and_jobs(sim, static):
    assert [a.job.name for a in sim.arrivals] == [a.job.name for a in static.arrivals]
    assert [s.name for s in sim.services] == [s.name for s in static.services]
    assert static.load.qps(0, 600) == sim.load.qps(0, 600)


def test_a_queue_window_never_reached_decides_as_the_whole_queue(sim):
    assert sim.cfg.queue_window is None
    window = 64  # the small lending day never queues this many jobs: a cycle still sees every pending job
    assert max(sim.metrics.training_pending) < window
    bounded = CoLocationSim(sim.cfg.with_(queue_window=window))
    bounded.run()
    assert bounded.metrics == sim.metrics
    assert bounded.training.jobs == sim.training.jobs and bounded.training.done.keys() == sim.training.done.keys()


@pytest.mark.parametrize("run", ["sim", "static"])
def test_the_pending_queue_is_the_pending_jobs_in_submit_order(run, request):
    s = request.getfixturevalue(run)
    for model in {j.gpu_model for j in s.training.jobs.values()}:
        pending = sorted((j.submitted_at, j.id) for j in s.training.jobs.values()
                         if j.status is JobStatus.PENDING and j.gpu_model == model)
        assert list(s.queue.lane(model)) == [job_id for _, job_id in pending]
    assert len(s.queue) == sum(1 for j in s.training.jobs.values() if j.status is JobStatus.PENDING)


def _job(job_id: int, at: float, model: str | None = "T4") -> JobView:
    return JobView(job_id, f"j{job_id}", "t", "training", "pytorch", model, 1.0 if model else 0.0, 1000, 1024,
                   JobStatus.PENDING, submitted_at=at)


def test_the_queue_head_is_the_oldest_jobs_of_each_model_and_a_requeued_job_gets_its_place_back():
    q = PendingQueue()
    jobs = [_job(1, 10.0), _job(2, 20.0), _job(3, 30.0), _job(4, 5.0, None), _job(5, 25.0, None)]
    for j in jobs:
        q.add(j)
    assert q.head(2) == [1, 2, 4, 5]
    q.remove(jobs[0])  # started
    assert q.head(1) == [2, 4]
    q.add(jobs[0])  # preempted: same submit time, back at the front
    assert q.head(1) == [1, 4] and q.head(None) == [1, 2, 3, 4, 5] and len(q) == 5
    with pytest.raises(KeyError):
        q.remove(_job(9, 1.0))
