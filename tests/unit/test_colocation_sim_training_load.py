"""The trace-shaped training load of the co-location simulation (experiments/colocation_sim/training_load.py) and the Lyra
metrics of a run (experiments/colocation_sim/run.py Metrics)."""

from bisect import bisect_left
from pathlib import Path

import pytest

from experiments.colocation_sim.run import Metrics
from experiments.colocation_sim.training_load import (HOUR, MIN_RUN_S, WEEK_H, GroupTarget, NodeShape, build, sources,
                                          week_profile)
from tidal.settings import TRACES_DIR

TRACES = Path(TRACES_DIR)
T4 = NodeShape(2, 104000, 524288)
CPU = NodeShape(0, 32000, 262144)


def targets(nodes: int = 10) -> list[GroupTarget]:
    return [GroupTarget("T4", "T4", T4, (T4,) * nodes, 2.0 * nodes),
            GroupTarget("CPU", None, CPU, (CPU,) * 4, 4 * 32000.0)]


@pytest.fixture(scope="module")
def load():
    return build(TRACES, targets(), 0.75, 7, seed=0)


def test_week_profile_follows_the_trace_hours_over_its_dense_weeks():
    # 3 dense weeks: 5 pods at 10:00 each day, 1 at 03:00; before them a sparse week with pods at 20:00 only
    created = [d * 86400 + 20 * HOUR for d in range(7)][:1]
    for d in range(7, 28):
        created += [d * 86400 + 10 * HOUR + 60 * k for k in range(5)] + [d * 86400 + 3 * HOUR]
    created.append(28 * 86400 + 1)  # the trace ends early on day 28: days 0-27 are whole
    week, weeks, used = week_profile(created)
    assert weeks == 3 and used == 6 * 21  # the sparse first week is left out
    assert len(week) == WEEK_H and sum(week) / WEEK_H == pytest.approx(1.0)
    assert week[10] > week[3] > week[6] == 0.0
    assert week[20] == 0.0


def test_week_profile_of_the_alibaba_trace_has_a_daily_rhythm():
    week = sources(TRACES).week
    by_hour = [sum(week[d * 24 + h] for d in range(7)) for h in range(24)]
    assert max(by_hour) > 2 * min(by_hour)  # busy and quiet hours of the day


def test_arrivals_follow_the_profile(load):
    week = load.sources.week
    hours = sorted(range(WEEK_H), key=lambda h: week[h])
    quiet, busy = set(hours[:WEEK_H // 4]), set(hours[-WEEK_H // 4:])
    counts = [0] * WEEK_H
    for j in load.jobs:
        counts[int(j.at // HOUR) % WEEK_H] += 1
    assert sum(counts[h] for h in busy) > 1.5 * sum(counts[h] for h in quiet)


def test_run_times_come_from_philly(load):
    runtimes = load.sources.runtimes
    for j in load.jobs:
        assert j.run_s >= MIN_RUN_S
        if j.run_s > MIN_RUN_S:
            i = bisect_left(runtimes, j.run_s)
            assert runtimes[i] == j.run_s
    assert sum(j.run_s > 12 * HOUR for j in load.jobs) > 0  # Philly's long tail is there


@pytest.mark.parametrize("factor", [0.3, 0.75, 1.2])
def test_the_offered_gpu_hours_are_the_factor_times_the_capacity(factor):
    tl = build(TRACES, targets(), factor, 7, seed=1)
    span = 7 * 86400
    for g in tl.groups:
        jobs = [j for j in tl.jobs if j.group == g.group]
        units = sum((j.shape.gpus or j.shape.cpu_milli) * j.workers * min(j.run_s, span - j.at) for j in jobs) / HOUR
        assert units == pytest.approx(g.offered)
        assert g.offered == pytest.approx(factor * g.capacity, rel=0.02)
        assert all(0 <= j.at < span for j in jobs)


def test_gangs_hold_the_helios_share_of_the_gpu_hours_and_fit_the_training_nodes(load):
    t4 = next(g for g in load.groups if g.group == "T4")
    assert t4.gangs > 0 and t4.gang_share == pytest.approx(load.sources.gang_share, abs=0.1)
    for j in load.jobs:
        if j.workers > 1:
            assert 2 <= j.workers <= 16 and float(j.shape.gpus).is_integer() and j.model == "T4"
            assert j.workers * j.shape.gpus <= 10 * T4.gpu_count  # the training nodes hold it whole
    assert all(j.workers == 1 for j in load.jobs if j.group == "CPU")


def test_departments_come_from_the_helios_quotas(load):
    names = {name for name, _ in load.sources.departments}
    assert {j.department for j in load.jobs} <= names and len({j.department for j in load.jobs}) > 3


def test_the_load_is_deterministic_for_a_seed(load):
    assert build(TRACES, targets(), 0.75, 7, seed=0) == load
    assert build(TRACES, targets(), 0.75, 7, seed=2).jobs != load.jobs


def test_the_description_names_the_sources(load):
    text = load.describe()
    for word in ("Alibaba GPU 2023", "Philly", "Helios", "0.75", "gangs"):
        assert word in text


def test_lyra_metrics_of_a_hand_made_run():
    m = Metrics(minutes=4, tick_s=60.0)
    m.queue_wait_s = [0.0, 60.0, 120.0, 3600.0]
    m.jct_s = [600.0, 660.0, 720.0, 7200.0]
    m.online_short = [0, 2, 0, 1]
    m.lent_gpus = [8.0, 8.0, 16.0, 0.0]
    m.lent_node_minutes = 120  # 2 node-hours
    m.killed = 1
    f = m.summary(4 / 1440)
    assert f["queue_wait_mean_s"] == pytest.approx(945.0) and f["queue_wait_p95_s"] == 3600.0
    assert f["jct_mean_s"] == pytest.approx(2295.0)
    assert f["online_short_minutes"] == 2
    assert f["gpu_hours_lent"] == pytest.approx(32 / 60)
    assert f["kills_per_lent_node_hour"] == pytest.approx(0.5)


@pytest.mark.parametrize("sigma", [0.0, 0.5])
def test_the_policys_runtime_estimate_is_the_run_time_times_a_lognormal_error(sigma):
    """The jobs end at their real run time; the policy sees the estimate (the stated duration), exact only at 0."""
    from experiments.colocation_sim import SimConfig
    from experiments.colocation_sim.world import build_jobs, build_nodes

    cfg = SimConfig(Path(TRACES_DIR), days=1, runtime_error=sigma).small()
    nodes = build_nodes(cfg)
    arrivals, _ = build_jobs(cfg, nodes, 0.0)
    exact, _ = build_jobs(cfg.with_(runtime_error=0.0), nodes, 0.0)
    assert [a.run_s for a in arrivals] == [a.run_s for a in exact]  # the real run times do not move
    ratios = sorted(a.job.expected_duration_s / a.run_s for a in arrivals)
    if sigma == 0:
        assert set(ratios) == {1.0}
    else:
        assert 0.8 < ratios[len(ratios) // 2] < 1.25 and ratios[0] < 0.7 and ratios[-1] > 1.4
