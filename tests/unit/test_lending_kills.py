"""The lending rules that keep take-backs from killing training (issue 42: a group service beside training):
a forecast take-back waits for the nodes' jobs until the forecast needs the nodes, and picks the nodes that finish
soonest; a take-back frees room for a whole replica; when one more replica would pass maxRate, lent nodes take no new
job and idle ones come back; no lend right after a take-back.

Default thresholds: minRate 40%, expectRate 60%, maxRate 80%; nodes have 4 GPUs; grace 15 min. NOW is 14:00 UTC.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from colocation.policy import (DEFAULT, DemandForecast, Hold, Lend, LendReason, TakeBack, TrainingPod, decide_group,
                               take_back_at)
from experiments.builders.colocation import NOW, G, N, online_fleet

MIN = 60.0
H = 3600.0
ON = DEFAULT.with_(forecast=True, drain_s=30 * MIN, busy_windows=())
CALM = online_fleet((2,), (2,), (2,))  # 6 of 12 GPUs: 50%


def job(job_id: int, ends_in_s: float | None, workers: int = 1) -> TrainingPod:
    return TrainingPod(f"job{job_id}", job_id, NOW - 600, workers, None if ends_in_s is None else NOW + ends_in_s)


def lent(name: str, *pods: TrainingPod) -> N:
    node = N(name).offline()
    node._n = replace(node._n, training=pods)  # builders are values: this one is fresh
    return node


def flat(*points: tuple[float, float], base: float, minutes: int = 600) -> DemandForecast:
    values = [base] * minutes
    for offset, demand in sorted(points):
        values[int(offset):] = [demand] * (minutes - int(offset))
    return DemandForecast("t4", NOW, tuple(values), "seasonal")


# ---- a forecast take-back waits for its nodes' jobs, up to when the forecast needs the nodes ----------------------

@pytest.mark.parametrize("startup_s,points,evict_in_s", [
    (0, ((25, 11),), 600 * MIN),  # 11 of 12 GPUs always fit: the forecast's end, not the job's expected end
    (0, ((25, 11), (40, 13)), 40 * MIN),  # 13 > 12 at 14:40: the node must be back by then
    (10 * MIN, ((25, 11), (40, 13)), 30 * MIN),  # ... and the group's replica must start by then
    (20 * MIN, ((25, 11), (40, 13)), 25 * MIN),  # never before the rise (nor the grace)
])
def test_a_forecast_take_back_evicts_when_the_forecast_needs_the_node(startup_s, points, evict_in_s):
    g = G().nodes(*CALM, lent("t4-4", job(1, H))).replica(0, startup_s)
    d = decide_group(g.build(), NOW, ON, flat(*points, base=6))
    assert isinstance(d, TakeBack) and d.reason is LendReason.FORECAST_RISE
    assert d.evict_at == NOW + evict_in_s


@pytest.mark.parametrize("nodes,chosen,why", [
    ((lent("t4-4", job(1, 50 * MIN)), lent("t4-5", job(2, 20 * MIN))), "t4-5",
     "both end before the forecast needs the nodes: the one free soonest"),
    ((lent("t4-4", job(1, 3 * H)), lent("t4-5", job(2, 50 * MIN), job(3, 55 * MIN))), "t4-5",
     "two jobs that end in time beat one that would die"),
    ((lent("t4-4", job(1, None)), lent("t4-5", job(2, 2 * H))), "t4-5", "an unknown end never ends"),
    ((lent("t4-4"), lent("t4-5", job(2, MIN))), "t4-4", "an idle node first"),
])
def test_a_forecast_take_back_picks_the_nodes_that_finish_soonest(nodes, chosen, why):
    # the rise at 14:25 (11 of 12 GPUs; 11/16 <= expectRate 70%: one node back), over 12 GPUs at 15:00: the node
    # is needed then
    g = G().nodes(*CALM, *nodes).rates(0.4, 0.7, 0.8)
    d = decide_group(g.build(), NOW, ON, flat((25, 11), (60, 13), base=6))
    assert isinstance(d, TakeBack) and d.nodes == (chosen,), why


# ---- a take-back frees room for a whole replica -----------------------------------------------------------------

@pytest.mark.parametrize("largest,taken", [
    (0, 1),  # 10/16 = 63%: one node, today's rule ... (expectRate 65%)
    (4, 1),  # 16 - 10 = 6 free: a 4-GPU replica fits
    (8, 2),  # a 2-node group of 2 x 4 GPUs needs 8 free: 2 nodes
])
def test_a_take_back_frees_room_for_a_whole_replica(largest, taken):
    g = G().nodes(*online_fleet((4,), (4,), (2,)), lent("t4-4"), lent("t4-5"), lent("t4-6")).rates(0.4, 0.65, 0.8)
    d = decide_group(g.replica(largest).build(), NOW)  # 10/12 = 83% > maxRate
    assert isinstance(d, TakeBack) and len(d.nodes) == taken


# ---- when the next replica would pass maxRate: no new job on lent nodes, idle lent nodes come back ---------------

@pytest.mark.parametrize("largest,nodes,predicted", [
    (2, (lent("t4-4", job(1, H)),), NOW),  # (8 + 2)/12 = 83% > maxRate: the next scale-out takes a node back
    (1, (lent("t4-4", job(1, H)),), None),  # (8 + 1)/12 = 75%: room for it; the forecast (flat 50%) sees nothing
    (2, (), None),  # nothing lent: nothing to protect
])
def test_when_the_next_replica_would_pass_max_rate_the_predicted_take_back_is_now(largest, nodes, predicted):
    g = G().nodes(*online_fleet((3,), (2,), (3,)), *nodes).replica(largest).build()  # 8/12 = 67%
    assert take_back_at(g, flat(base=6), NOW, ON) == predicted


@pytest.mark.parametrize("nodes,largest,profile,expected", [
    ((lent("t4-4"), lent("t4-5", job(1, H))), 2, ON, ("t4-4",)),  # the idle one only: it kills nothing
    ((lent("t4-4", job(1, H)),), 2, ON, None),  # none idle: a busy node waits for a real trigger
    ((lent("t4-4"), lent("t4-5")), 2, ON, ("t4-4",)),  # 8/16 = 50% <= expectRate, 8 free: enough
    ((lent("t4-4"), lent("t4-5")), 12, ON, ("t4-4", "t4-5")),  # room for a 12-GPU replica: both
    ((lent("t4-4"), lent("t4-5")), 1, ON, None),  # (8 + 1)/12 = 75%: the next replica fits under maxRate
    ((lent("t4-4"),), 2, DEFAULT, None),  # threshold lending: lent nodes still take jobs, idle ones wait for them
])
def test_idle_lent_nodes_come_back_when_the_next_replica_would_pass_max_rate(nodes, largest, profile, expected):
    g = G().nodes(*online_fleet((3,), (2,), (3,)), *nodes).replica(largest)  # 8/12 = 67%
    d = decide_group(g.build(), NOW, profile, flat(base=8))
    if expected is None:
        assert d is None
    else:
        assert isinstance(d, TakeBack) and d.reason is LendReason.IDLE_LENT and d.nodes == expected
        assert d.evict_at == NOW and d.message.startswith(  # the usage that replica would make: (8 + largest) / 12
            f"take back {', '.join(expected)}: idle lent nodes; one more replica ({largest} GPU) would put online usage "
            f"{(8 + largest) / 12:.0%} over maxRate 80%")


# ---- hysteresis: no lend right after a take-back -------------------------------------------------------------

@pytest.mark.parametrize("ago_s,lends", [(None, True), (10 * MIN, False), (59 * MIN, False), (H, True), (3 * H, True)])
def test_no_lend_within_relend_after_s_of_a_take_back(ago_s, lends):
    g = G().nodes(*online_fleet((1,), (1,), (), (), ())).training_pending(4)  # 2 of 20 GPUs: lend
    if ago_s is not None:
        g = g.took_back(NOW - ago_s)
    d = decide_group(g.build(), NOW)
    if lends:
        assert isinstance(d, Lend)
    else:
        assert isinstance(d, Hold) and d.reason is LendReason.RECENT_TAKE_BACK
        assert "no lend within 1.0 h of one" in d.message


# ---- robust to runtime estimates that are wrong -----------------------------------------------------------------

FULL = online_fleet((4,), (4,), (4,))  # 12 of 12 GPUs: 100%


URGENT = G().nodes(*FULL, lent("t4-4", job(1, H)), lent("t4-5"), lent("t4-6", job(2, 2 * H))).pending(4).replica(4)


def test_an_urgent_take_back_with_a_forecast_evicts_only_the_machines_its_pending_pods_need():
    # expectRate would take two lent nodes (12 of 20 GPUs); one 4-GPU pod waits: the idle node alone evicts now, the
    # headroom is left to the forecast rules (graceful)
    d = decide_group(URGENT.build(), NOW, ON, flat(base=12))
    assert isinstance(d, TakeBack) and d.reason is LendReason.ONLINE_PENDING
    assert d.nodes == ("t4-5",) and d.evict_at == NOW
    assert ("now only what the pending pods need: 1 of the 2 machines expectRate wants (the rest waits for a "
            "graceful take-back)") in d.message


def test_an_urgent_take_back_without_a_forecast_takes_the_headroom_at_once():
    # threshold lending: nothing else would see the next scale-out coming
    d = decide_group(URGENT.build(), NOW, DEFAULT)
    assert isinstance(d, TakeBack) and d.nodes == ("t4-5", "t4-4") and d.evict_at == NOW
    assert "the pending pods need" not in d.message


def test_a_job_past_its_expected_end_counts_as_running():
    # the job on t4-4 outran its estimate by 10 minutes: it still runs, and has run 5 h; an urgent take-back of one
    # node kills the 10-minute-old job on t4-5 instead (less work lost), not the one that only looks finished
    overdue = TrainingPod("job1", 1, NOW - 5 * H, 1, NOW - 10 * MIN)
    fresh = TrainingPod("job2", 2, NOW - 10 * MIN, 1, NOW + H)
    assert overdue.runs_at(NOW, NOW) and overdue.end(NOW) == float("inf")
    g = G().nodes(*FULL, lent("t4-4", overdue), lent("t4-5", fresh)).pending(4)
    d = decide_group(g.build(), NOW, ON, flat(base=12))
    assert isinstance(d, TakeBack) and d.nodes == ("t4-5",)


def test_a_forecast_take_back_waits_for_a_job_that_outran_its_estimate_until_the_forecast_needs_the_node():
    # the rise at 14:25 (11 of 12 GPUs), 13 > 12 GPUs at 15:30: the job expected to have ended 5 minutes ago may
    # run until then
    g = G().nodes(*CALM, lent("t4-4", job(1, -5 * MIN)))
    d = decide_group(g.build(), NOW, ON, flat((25, 11), (90, 13), base=6))
    assert isinstance(d, TakeBack) and d.reason is LendReason.FORECAST_RISE and d.evict_at == NOW + 90 * MIN
    assert "evicting what still runs at 15:30: 1 training jobs" in d.message
