"""A 1-day run of the small co-location simulation keeps its invariants."""

from pathlib import Path

import pytest

from cluster.types import JobStatus, JobView, Pool
from colocation.policy.calibration import MIN_ESTIMATE_S, PRIOR_FACTOR, WINDOW, EstimateSource, nearest_rank
from colocation.policy.pools import long_bar_s, preferred_pool, stated_lend_bar_s
from experiments.colocation_sim import CoLocationSim, SimConfig
from experiments.colocation_sim.config import SIM_START
from experiments.colocation_sim.queue import HOUR, PendingQueue
from experiments.colocation_sim.report import simulate, summary
from experiments.colocation_sim.run import Kill
from tidal.settings import TRACES_DIR


@pytest.fixture(scope="module")
def sim():
    s = CoLocationSim(SimConfig(Path(TRACES_DIR), days=1).small())
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
    s = CoLocationSim(SimConfig(Path(TRACES_DIR), days=1, lend=False).small())
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
    window = 64  # the small lending day never queues this many jobs: a cycle still sees every pending job
    assert max(sim.metrics.training_pending) < window
    whole, bounded = CoLocationSim(sim.cfg.with_(queue_window=None)), CoLocationSim(sim.cfg.with_(queue_window=window))
    whole.run()
    bounded.run()
    assert bounded.metrics == whole.metrics
    assert bounded.training.jobs == whole.training.jobs and bounded.training.done.keys() == whole.training.done.keys()


@pytest.mark.parametrize("run", ["sim", "static"])
def test_the_pending_queue_is_the_pending_jobs_in_submit_order(run, request):
    s = request.getfixturevalue(run)
    pending = sorted((j.submitted_at, j.id) for j in s.training.jobs.values() if j.status is JobStatus.PENDING)
    assert sorted(s.queue.head(None, 0.0)) == sorted(job_id for _, job_id in pending)
    assert len(s.queue) == len(pending)
    # and the jobs a cycle sees besides the heads are exactly the running ones
    assert s.holding == {j.id for j in s.training.jobs.values() if j.status is not JobStatus.PENDING}
    for bar in (HOUR, 12 * HOUR):  # a head is the oldest jobs of its model and pool, whatever the bar
        head = set(s.queue.head(3, bar))
        for model in {j.gpu_model for j in s.training.jobs.values()}:
            for short in (True, False):
                jobs = s.training.jobs
                mine = [job_id for at, job_id in pending if jobs[job_id].gpu_model == model
                        and short is (job_id not in s.killed_jobs and jobs[job_id].expected_duration_s <= bar)]
                assert [i for i in mine if i in head] == mine[:3]


@pytest.mark.parametrize("run", ["sim", "static"])
def test_the_queue_counts_the_jobs_preferred_pool_sends_to_lent_nodes(run, request):
    s = request.getfixturevalue(run)
    pending = [j for j in s.training.jobs.values() if j.status is JobStatus.PENDING]
    for hour in (3, 7.9, 8, 12, 18, 23):  # night bars (time to 08:00 + 1 h) and the day's 12 h
        now = SIM_START + hour * HOUR
        bar = long_bar_s(now, s.cfg.lending)
        for model in {j.gpu_model for j in pending}:
            assert s.queue.short_count(model, bar) == sum(
                1 for j in pending if j.gpu_model == model
                and preferred_pool(j, now, s.cfg.lending).preferred is Pool.COLOCATION)


def test_exact_estimates_calibrate_to_one(sim):
    assert sim.finished_runs and sim.runtime.factor(EstimateSource.STATED).value == 1.0


def test_wrong_estimates_are_calibrated_on_the_finished_jobs_and_the_queue_counts_with_them():
    s = CoLocationSim(SimConfig(Path(TRACES_DIR), days=1, runtime_error=0.5).small())
    s.run()
    assert len(s.finished_runs) == min(WINDOW, len(s.training.done))
    ratios = [r.real_s / r.estimate_s for r in s.finished_runs if r.estimate_s >= MIN_ESTIMATE_S]
    factor = s.runtime.factor(EstimateSource.STATED)
    assert factor.value == nearest_rank(ratios, 0.9) > 1.3 and factor.finished == len(ratios)
    assert s.lending_now.runtime == s.runtime
    pending = [j for j in s.training.jobs.values() if j.status is JobStatus.PENDING and j.id not in s.killed_jobs]
    for hour in (3, 12, 23):
        now = SIM_START + hour * HOUR
        for model in {j.gpu_model for j in pending}:
            assert s.queue.short_count(model, stated_lend_bar_s(now, s.lending_now, model)) == sum(
                1 for j in pending if j.gpu_model == model
                and preferred_pool(j, now, s.lending_now).preferred is Pool.COLOCATION)


def _job(job_id: int, at: float, model: str | None = "T4", run_h: float = 1.0) -> JobView:
    return JobView(job_id, f"j{job_id}", "t", "training", "pytorch", model, 1.0 if model else 0.0, 1000, 1024,
                   JobStatus.PENDING, submitted_at=at, expected_duration_s=run_h * HOUR)


def test_the_queue_heads_are_the_oldest_jobs_of_each_model_and_pool_and_a_requeued_job_gets_its_place_back():
    q = PendingQueue()
    jobs = [_job(1, 10.0), _job(2, 20.0, run_h=0.5), _job(3, 30.0), _job(4, 5.0, None), _job(5, 25.0, None)]
    for j in jobs:
        q.add(j)
    assert q.head(2, 12 * HOUR) == [1, 2, 4, 5]
    q.remove(1)  # started
    assert q.head(1, 12 * HOUR) == [2, 4]
    q.add(jobs[0])  # preempted: same submit time, back at the front
    assert q.head(1, 12 * HOUR) == [1, 4] and sorted(q.head(None, 0.0)) == [1, 2, 3, 4, 5] and len(q) == 5
    with pytest.raises(KeyError):
        q.remove(9)


def test_long_jobs_do_not_hide_the_short_ones_behind_them():
    q = PendingQueue()
    for i in range(1, 6):
        q.add(_job(i, float(i), run_h=20.0))  # long at any hour: fixed pool only
    q.add(_job(6, 6.0, run_h=2.5))  # short by day, long in the small hours
    q.add(_job(7, 7.0, run_h=0.5))
    q.add(_job(8, 0.5, run_h=0.5), pinned=True)  # killed by a take-back: fixed pool only
    assert q.head(2, 12 * HOUR) == [6, 7, 8, 1]  # the short head, then the fixed-pool head
    assert q.head(2, 2 * HOUR) == [7, 8, 1]  # at 06:00 (bar 3 h) the 2.5 h job is long: behind the pinned one
    assert q.short_count("T4", 12 * HOUR) == 2 and q.short_count("T4", 2 * HOUR) == 1
    assert q.short_count("T4", 2.5 * HOUR) == 2  # long means run time > bar


def test_the_two_runs_side_by_side_report_what_each_run_alone_does(sim, static, tmp_path):
    shown: dict[str, list[int]] = {}

    def bar(label: str, total: int):
        shown[label] = []
        return shown[label].append
    figures, _ = simulate(sim.cfg, tmp_path, "test", bar, processes=2)
    assert figures == summary(sim.outcome(), static.outcome())
    assert shown == {"lending": list(range(sim.cfg.minutes)), "static": list(range(sim.cfg.minutes))}


def test_a_take_back_of_one_gang_worker_requeues_the_whole_gang_once():
    """The sim's acting on a gang (docs/concepts/gangs-and-reservations.md#preempting-and-taking-back-gangs): the
    take-back's eviction of one worker ends the gang's run,
    its other workers are evicted at once, the job goes back to the queue whole (pinned to the fixed pool), once."""
    from colocation.policy import EvictTraining
    from scheduler.policy import CycleResult
    from tests.unit.test_simulated_gangs import admit

    s = CoLocationSim(SimConfig(Path(TRACES_DIR), days=1).small())
    model = next(n.gpu_model for n in s.backend.nodes() if n.gpu_model)
    free = [n for n in s.backend.nodes() if n.gpu_model == model and n.state.offline and not n.pods][:2]
    assert len(free) == 2
    job = JobView(10**6, "gang", "gang", "training", "pytorch", model, 1.0, 1000, 1024, JobStatus.PENDING, SIM_START,
                  expected_duration_s=3600.0, workers=2)
    s.training.submit(job, 3600.0)
    s.estimates[job.id] = (3600.0, EstimateSource.STATED)  # what arrivals register for the policy
    s.queue.add(job)
    result = CycleResult(SIM_START, (admit(job.id, (free[0].name, (0,)), (free[1].name, (0,)), model=model),))
    s.apply(result)
    assert s.training.pods_of(job.id) == ("job-1000000", "job-1000000-w1")
    s.take_back_of[free[1].name] = (SIM_START - 900, "online-usage-above-max")
    s.clock.set(SIM_START + 600)
    s.execute(EvictTraining(free[1].name, "job-1000000-w1"), SIM_START + 600)
    # what the policy knew, once per job: run 10 min of an expected hour × the prior (no job finished yet), decided
    # 25 min before the eviction
    assert s.metrics.kills == [Kill(600.0, PRIOR_FACTOR * 3600.0 - 600.0, 1500.0, "online-usage-above-max")]
    assert s.backend.pod("job-1000000") is None and s.backend.pod("job-1000000-w1") is None
    requeued = s.training.jobs[job.id]
    assert requeued.status is JobStatus.PENDING and requeued.peers == () and requeued.preferred_pool is Pool.FIXED
    assert s.metrics.killed == 1 and s.training.requeues[job.id] == 1 and job.id in s.killed_jobs
    assert len(s.queue) == 1  # nothing else arrived: the gang, back in the queue once


def test_an_llm_service_scales_whole_groups_of_whole_nodes():
    """The LLM scenario on a smaller cluster for 6 hours: a replica is 2 pods of 8 GPUs, so the ReplicaSet always
    holds whole groups, a group counts only with both pods ready, and every episode short of groups is measured."""
    from experiments.colocation_sim.config import GroupSpec

    cfg = SimConfig(Path(TRACES_DIR), days=1).llm()
    cfg = cfg.with_(groups=(GroupSpec("G3", "G3", 16, 1, 8.0, replica_cpu_milli=32000, replica_memory_mib=131072,
                                      group_size=2),))
    s = CoLocationSim(cfg)
    (service,) = s.services
    assert service.size == 2 and service.request == 16.0 and service.template.gpus == 8
    sizes = set()
    for minute in range(360):
        s.tick(minute)
        (rs,) = [r for r in s.backend.replicasets() if r.name == service.name]
        sizes.add(rs.replicas)
        assert rs.replicas % 2 == 0
    assert len(sizes) > 1  # it scaled
    m = s.metrics
    assert m.over_one_gpu == 0 and m.serving_drops == 0
    assert all(w <= 3600 for w in m.group_wait_s)
    assert {"group_waits", "group_wait_mean_s", "group_wait_p95_s", "group_wait_max_s"} <= m.summary(0.25).keys()
