"""Hierarchical quotas and fair sharing (issue 41): the acceptance's scenarios as table tests of the pure policy.

Units are T4 GPUs; every job asks for whole GPUs. "O{a, b}" is a root O with children a and b; a node's own is
additive (a parent's own is a pool its subtree shares on top of its children's). Where the issue writes a parent's
figure as the total of its children ("D1 own 6{T1 3, T2 3}"), the parent here has own 0 and the same total.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from cluster.types import JobStatus, QuotaKind, QuotaNodeView
from experiments.builders.cluster import BUILTIN_SHAPES, queued_cluster
from experiments.builders.scheduling import JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import Reason, get_profile, schedule
from scheduler.policy.cache import CycleCache
from tests.unit.helpers import cycle, pending, victims

FAIR = {"fair_sharing": True}


def nodes(snap: SnapshotBuilder, count: int, gpus: int) -> SnapshotBuilder:
    return snap.node(*(NodeBuilder(f"n{i}", gpus=gpus) for i in range(1, count + 1)))


def run(snap: SnapshotBuilder, **overrides):
    return cycle(snap.build(), **overrides)


def running(job_id: int, dept: str, node: str, *gpus: int, kind: QuotaKind = QuotaKind.OWN,
            ran: float = 3600.0) -> JobBuilder:
    return JobBuilder(job_id).dept(dept).gpus(len(gpus)).running(node, *gpus, kind=kind, ran=ran)


def admitted(result) -> list[int]:
    return [d.job_id for d in result.admitted]


def flat_abc(snap: SnapshotBuilder, weight_a: float = 1.0) -> SnapshotBuilder:
    """O{a, b, c own 3}."""
    return snap.tree_node("O").tree_node("a", "O", own=3, weight=weight_a).tree_node("b", "O", own=3) \
        .tree_node("c", "O", own=3)


@pytest.mark.parametrize("overrides", [{}, FAIR], ids=["classic", "fair-sharing"])
def test_1_own_work_reclaims_one_job_of_the_department_that_uses_the_most(overrides):
    snap = flat_abc(nodes(SnapshotBuilder(), 3, 3)).job(
        *(running(10 + g, "a", "n1", g) for g in range(3)),
        *(running(20 + g, "b", "n2", g) for g in range(3)),
        running(23, "b", "n3", 0, kind=QuotaKind.BORROWED), running(24, "b", "n3", 1, kind=QuotaKind.BORROWED),
        running(30, "c", "n3", 2), JobBuilder(1).dept("c"))
    result = run(snap, **overrides)
    assert admitted(result) == [1]
    assert len(victims(result)) == 1 and victims(result) <= {23, 24}


@pytest.mark.parametrize("overrides", [{}, FAIR], ids=["classic", "fair-sharing"])
def test_2_a_borrower_does_not_preempt_to_only_switch_the_imbalance(overrides):
    snap = flat_abc(nodes(SnapshotBuilder(), 3, 3)).job(
        *(running(10 + g, "a", "n1", g) for g in range(3)),
        *(running(20 + g, "b", "n2", g) for g in range(3)),
        running(23, "b", "n3", 0, kind=QuotaKind.BORROWED), running(24, "b", "n3", 1, kind=QuotaKind.BORROWED),
        JobBuilder(1).dept("a").gpus(2))
    result = run(snap, **overrides)
    assert not result.preempted
    assert pending(result, 1).reason is Reason.NO_IDLE_CAPACITY


def test_3_a_heavier_weight_preempts_by_fair_share():
    # a weighs 2 and b uses 6 (borrows 3): a's share after borrowing 2 (2/2) stays at b's after losing two (1/1)
    snap = flat_abc(nodes(SnapshotBuilder(), 3, 3), weight_a=2).job(
        *(running(10 + g, "a", "n1", g) for g in range(3)),
        *(running(20 + g, "b", "n2", g) for g in range(3)),
        *(running(23 + g, "b", "n3", g, kind=QuotaKind.BORROWED) for g in range(3)),
        JobBuilder(1).dept("a").gpus(2))
    result = run(snap, **FAIR)
    assert admitted(result) == [1]
    assert len(victims(result)) == 2 and victims(result) <= {23, 24, 25}
    assert {d.reason for d in result.preempted} == {Reason.PREEMPTED_FAIR_SHARE}
    assert not run(snap).preempted  # without fair sharing, borrowed work never preempts


def four_leaves(snap: SnapshotBuilder, d1_borrow: float = float("inf")) -> SnapshotBuilder:
    """O{D1{T1 own 4, T2 own 4}, D2{T3 own 8}}."""
    return snap.tree_node("O").tree_node("D1", "O", borrow=d1_borrow).tree_node("T1", "D1", own=4) \
        .tree_node("T2", "D1", own=4).tree_node("D2", "O").tree_node("T3", "D2", own=8)


def test_4_a_division_borrow_limit_caps_what_its_teams_take_from_outside():
    snap = four_leaves(nodes(SnapshotBuilder(), 4, 4), d1_borrow=2).job(
        *(JobBuilder(i).dept("T1") for i in range(1, 13)))
    result = run(snap)
    assert len(result.admitted) == 10  # 4 own, 4 lent by T2 inside D1, 2 borrowed by D1 from D2
    kinds = [d.quota_kind for d in result.admitted]
    assert kinds.count(QuotaKind.OWN) == 4 and kinds.count(QuotaKind.BORROWED) == 6
    assert "department D1 may borrow at most 2 T4; 2 borrowed, needs 1" in pending(result, 12).message


def test_5_a_lend_limit_keeps_own_quota_that_comes_back_without_preemption():
    snap = nodes(SnapshotBuilder(), 1, 10).tree_node("O").tree_node("T1", "O", own=10, lend=4) \
        .tree_node("T2", "O", own=0).job(*(JobBuilder(i).dept("T2") for i in range(1, 7)))
    first = run(snap)
    assert admitted(first) == [1, 2, 3, 4]
    assert all(d.quota_kind is QuotaKind.BORROWED for d in first.admitted)
    later = nodes(SnapshotBuilder(), 1, 10).tree_node("O").tree_node("T1", "O", own=10, lend=4) \
        .tree_node("T2", "O", own=0).job(*(running(i, "T2", "n1", i - 1, kind=QuotaKind.BORROWED)
                                           for i in range(1, 5)),
                                         *(JobBuilder(i).dept("T1") for i in range(11, 17)))
    second = run(later)
    assert admitted(second) == list(range(11, 17)) and not second.preempted


def test_6_a_division_pool_gives_its_team_hierarchical_advantage():
    # T1 owns nothing but D1's pool is its own; T4 borrows from the root: T1 reclaims at any priority
    snap = nodes(SnapshotBuilder(), 1, 2).tree_node("O").tree_node("D1", "O", own=2).tree_node("T1", "D1") \
        .tree_node("T4", "O").job(JobBuilder(9).dept("T4").gpus(2).util(0.9).running("n1", 0, 1,
                                                                                        kind=QuotaKind.BORROWED),
                                  JobBuilder(1).dept("T1").gpus(2).util(0.1))
    result = run(snap)
    assert admitted(result) == [1] and victims(result) == {9}
    assert result.admitted[0].quota_kind is QuotaKind.OWN
    assert result.preempted[0].reason is Reason.PREEMPTED_RECLAIM


def test_7_only_own_quota_reclaims_and_only_from_who_borrows():
    snap = four_leaves(nodes(SnapshotBuilder(), 4, 4)).job(
        *(running(10 + g, "T1", "n1", g) for g in range(4)),
        running(14, "T1", "n2", 0, kind=QuotaKind.BORROWED), running(15, "T1", "n2", 1, kind=QuotaKind.BORROWED),
        running(16, "T2", "n2", 2), running(17, "T2", "n2", 3),
        *(running(20 + g, "T3", "n3", g) for g in range(4)), *(running(24 + g, "T3", "n4", g) for g in range(4)),
        JobBuilder(1).dept("T3").gpus(2), JobBuilder(2).dept("T2").gpus(2))
    result = run(snap)
    assert pending(result, 1).reason is Reason.NO_IDLE_CAPACITY  # D2 is within its quota, nothing idle
    assert admitted(result) == [2] and victims(result) == {14, 15}


def test_8_a_division_takes_its_quota_back_from_both_teams_that_borrowed_it():
    snap = nodes(SnapshotBuilder(), 3, 4).tree_node("O").tree_node("D1", "O").tree_node("T1", "D1", own=3) \
        .tree_node("T2", "D1", own=3).tree_node("D2", "O").tree_node("T3", "D2", own=6).job(
            *(running(10 + g, "T1", "n1", g, kind=QuotaKind.OWN if g < 3 else QuotaKind.BORROWED) for g in range(4)),
            running(14, "T1", "n2", 0, kind=QuotaKind.BORROWED), running(15, "T1", "n2", 1, kind=QuotaKind.BORROWED),
            running(20, "T2", "n2", 2), running(21, "T2", "n2", 3),
            *(running(22 + g, "T2", "n3", g, kind=QuotaKind.OWN if g < 1 else QuotaKind.BORROWED) for g in range(4)),
            *(JobBuilder(i).dept("T3") for i in range(1, 7)))
    result = run(snap)
    assert len(result.admitted) == 6
    assert victims(result) == {13, 14, 15, 23, 24, 25}  # three borrowed jobs of each team


@pytest.mark.parametrize("a_wants, expected", [(12, (4, 8)), (3, (3, 9))], ids=["both-want-12", "a-wants-3"])
def test_9_idle_capacity_is_shared_by_weight(a_wants, expected):
    snap = nodes(SnapshotBuilder(), 3, 4).tree_node("O").tree_node("A", "O", own=2, weight=1) \
        .tree_node("B", "O", own=2, weight=3) \
        .job(*(JobBuilder(100 + i).dept("B").waited(3600) for i in range(12)),  # B's queued first
             *(JobBuilder(200 + i).dept("A") for i in range(a_wants)))
    got = [d.job_id // 100 for d in run(snap, **FAIR).admitted]
    assert (got.count(2), got.count(1)) == expected
    assert [d.job_id // 100 for d in run(snap).admitted].count(1) == 12  # without: B, queued first, takes all


def test_10_a_non_preemptible_job_is_admitted_on_own_quota_only():
    snap = nodes(SnapshotBuilder(), 1, 4).tree_node("O").tree_node("T1", "O", own=1).tree_node("T2", "O", own=1) \
        .job(running(10, "T1", "n1", 0), running(20, "T2", "n1", 1),
             JobBuilder(1).dept("T1").not_preemptible(), JobBuilder(2).dept("T2"))
    result = run(snap)
    assert pending(result, 1).reason is Reason.QUOTA_EXHAUSTED
    assert admitted(result) == [2] and result.admitted[0].quota_kind is QuotaKind.BORROWED


def test_10_a_non_preemptible_job_is_never_a_victim():
    snap = nodes(SnapshotBuilder(), 1, 1).tree_node("O").tree_node("T1", "O", own=1).tree_node("T2", "O") \
        .job(JobBuilder(9).dept("T2").not_preemptible().running("n1", 0, kind=QuotaKind.BORROWED),
             JobBuilder(1).dept("T1"))
    result = run(snap)
    assert not result.preempted and pending(result, 1).reason is Reason.NO_CAPACITY


@pytest.mark.parametrize("fence", [False, True], ids=["open", "fenced"])
def test_11_a_fence_keeps_a_subtree_s_preemption_inside_it(fence):
    # only D2's work is over its quota: T1's own job reclaims it, unless D1 is fenced; then it preempts inside D1 only
    snap = nodes(SnapshotBuilder(), 1, 4).tree_node("O").tree_node("D1", "O", fence=fence) \
        .tree_node("T1", "D1", own=2).tree_node("T2", "D1").tree_node("D2", "O").tree_node("T3", "D2").job(
            *(running(30 + g, "T3", "n1", g, kind=QuotaKind.BORROWED) for g in range(4)),
            JobBuilder(1).dept("T1").gpus(2))
    result = run(snap)
    if fence:
        assert not result.preempted and pending(result, 1).reason is Reason.NO_CAPACITY
    else:
        assert admitted(result) == [1] and len(victims(result)) == 2


def test_11_a_fenced_subtree_still_reclaims_inside_itself():
    snap = nodes(SnapshotBuilder(), 1, 4).tree_node("O").tree_node("D1", "O", fence=True) \
        .tree_node("T1", "D1", own=2).tree_node("T2", "D1").tree_node("D2", "O").tree_node("T3", "D2").job(
            running(20, "T2", "n1", 0, kind=QuotaKind.BORROWED), running(21, "T2", "n1", 1, kind=QuotaKind.BORROWED),
            *(running(30 + g, "T3", "n1", g, kind=QuotaKind.BORROWED, ran=60) for g in (2, 3)),
            JobBuilder(1).dept("T1").gpus(2))
    result = run(snap)
    assert admitted(result) == [1] and victims(result) == {20, 21}


def flat_pair(snap: SnapshotBuilder, tree: bool) -> SnapshotBuilder:
    """O{D1 own 4 borrow 4, D2 own 4}, as flat departments or as a tree of one level."""
    if tree:
        return snap.tree_node("O").tree_node("D1", "O", own=4, borrow=4).tree_node("D2", "O", own=4, borrow=0)
    return snap.quota("D1", "T4", own=4, borrowed=4).quota("D2", "T4", own=4)


@pytest.mark.parametrize("profile", ["tidal", "quota-borrowing"])
def test_12_a_one_level_tree_decides_as_flat_departments(profile):
    def decisions(tree: bool) -> list[str]:
        snap = flat_pair(nodes(SnapshotBuilder(), 2, 4), tree).job(
            running(10, "D1", "n1", 0, 1), running(11, "D1", "n1", 2, 3, kind=QuotaKind.BORROWED, ran=60),
            running(12, "D1", "n2", 0, 1), running(13, "D1", "n2", 2, kind=QuotaKind.BORROWED, ran=7200),
            *(JobBuilder(i).dept("D2").gpus(1 + i % 2) for i in range(1, 5)),
            *(JobBuilder(i).dept("D1").gpus(1 + i % 3) for i in range(5, 9)))
        return [repr(d) for d in run(snap, profile=profile).decisions]
    flat = decisions(False)
    assert flat == decisions(True)
    assert any("Preempt(" in line for line in flat) and any("borrowed quota" in line for line in flat)


@pytest.mark.parametrize("profile", ["tidal", "quota-borrowing"])
def test_12_the_golden_cluster_as_a_one_level_tree_decides_bit_for_bit(profile):
    """The golden cycle's generated cluster (test_cycle_golden.py), each department a leaf under one root."""
    def lines(tree: bool) -> list[str]:
        sim, clock, arrive = queued_cluster(200, BUILTIN_SHAPES, random.Random(11), 600, borrow_ratio=0.1,
                                            runtime_s=(300, 2 * 3600), batch=50)
        cache, out = CycleCache(), []
        for c in range(4):
            sim.finish_elapsed()
            snap = sim.snapshot()
            if tree:
                leaves = sorted({q.department for q in snap.quotas})
                snap = dataclasses.replace(snap, tree=(QuotaNodeView("O", None),
                                                       *(QuotaNodeView(d, "O") for d in leaves)))
            result = schedule(snap, get_profile(profile), cache=cache)
            out += [f"{c} {d!r}" for d in result.decisions]
            sim.apply(result)
            clock.advance(300.0)
            arrive(max(0, 600 - sum(j.status is JobStatus.PENDING for j in sim.jobs.values())))
        return out
    flat = lines(False)
    assert flat == lines(True)
    assert len(flat) > 1000


def test_young_borrowed_work_is_reclaimed_last():
    def victim(min_runtime: float) -> set[int]:
        snap = nodes(SnapshotBuilder(), 2, 1).tree_node("O").tree_node("T1", "O", own=1) \
            .tree_node("T2", "O", reclaim_min_runtime_s=min_runtime) \
            .job(running(8, "T2", "n1", 0, kind=QuotaKind.BORROWED, ran=30),
                 running(9, "T2", "n2", 0, kind=QuotaKind.BORROWED, ran=3600), JobBuilder(1).dept("T1"))
        return victims(run(snap))
    assert victim(0) == {8}  # least work lost
    assert victim(600) == {9}  # the job that only just started is the last victim


def test_own_work_takes_back_what_its_division_borrowed_past_its_limit_even_with_idle_nodes():
    # D1 may borrow 2 from outside; T1 took T2's 4 and 2 more. T2's own jobs reclaim T1's borrowed work instead of
    # taking idle nodes, which would leave D1 borrowing 6.
    snap = four_leaves(nodes(SnapshotBuilder(), 5, 4), d1_borrow=2).job(
        *(running(10 + g, "T1", "n1", g) for g in range(4)),
        *(running(20 + g, "T1", "n2", g, kind=QuotaKind.BORROWED) for g in range(4)),
        *(running(30 + g, "T1", "n3", g, kind=QuotaKind.BORROWED) for g in range(2)),
        *(JobBuilder(i).dept("T2") for i in range(1, 5)))
    result = run(snap)
    assert admitted(result) == [1, 2, 3, 4] and len(victims(result)) == 4
    assert victims(result) <= {20, 21, 22, 23, 30, 31}


def test_own_work_never_reclaims_what_a_division_lends_inside_itself():
    # D1 uses its 8 (T1 borrows 2 of T2's); T4 borrows 2 from the root. T3's own job takes T4's back, not T1's, though
    # T1's borrowed jobs lose less work: evicting them would push D1 below its own.
    snap = four_leaves(nodes(SnapshotBuilder(), 4, 4)).tree_node("T4", "O").job(
        *(running(10 + g, "T1", "n1", g) for g in range(4)),
        running(14, "T1", "n2", 0, kind=QuotaKind.BORROWED, ran=60),
        running(15, "T1", "n2", 1, kind=QuotaKind.BORROWED, ran=60),
        running(16, "T2", "n2", 2), running(17, "T2", "n2", 3),
        *(running(20 + g, "T3", "n3", g) for g in range(4)), running(24, "T3", "n4", 0), running(25, "T3", "n4", 1),
        running(40, "T4", "n4", 2, kind=QuotaKind.BORROWED, ran=7200),
        running(41, "T4", "n4", 3, kind=QuotaKind.BORROWED, ran=7200),
        JobBuilder(1).dept("T3").gpus(2))
    result = run(snap)
    assert admitted(result) == [1] and victims(result) == {40, 41}
    assert {d.reason for d in result.preempted} == {Reason.PREEMPTED_RECLAIM}


def test_a_division_stops_giving_victims_once_back_at_its_quota():
    # D2 owns 2 (its team T3 none) and runs 3 borrowed jobs of T3: 1 past its quota. T1's own jobs may take only
    # that one back; the second waits rather than push D2 below its own.
    snap = nodes(SnapshotBuilder(), 1, 4).tree_node("O").tree_node("D1", "O").tree_node("T1", "D1", own=3) \
        .tree_node("D2", "O", own=2).tree_node("T3", "D2").job(
            running(20, "T3", "n1", 0, kind=QuotaKind.BORROWED), running(21, "T3", "n1", 1, kind=QuotaKind.BORROWED),
            running(22, "T3", "n1", 2, kind=QuotaKind.BORROWED, ran=60), running(10, "T1", "n1", 3),
            JobBuilder(1).dept("T1"), JobBuilder(2).dept("T1"))
    result = run(snap)
    assert admitted(result) == [1] and victims(result) == {22}
    assert pending(result, 2).reason is Reason.NO_CAPACITY


@pytest.mark.parametrize("workers", [1, 2])
def test_an_own_gang_takes_back_what_its_division_borrowed_past_its_limit(workers):
    # as above, T2's own work a gang of 4 GPUs: whole borrowed jobs of T1 are reclaimed (T1's youngest first) until
    # D1 is back within its borrow limit, wherever they ran; the gang then starts on the idle nodes
    snap = four_leaves(nodes(SnapshotBuilder(), 5, 4), d1_borrow=2).job(
        *(running(10 + g, "T1", "n1", g) for g in range(4)),
        *(running(20 + g, "T1", "n2", g, kind=QuotaKind.BORROWED, ran=600 + g) for g in range(4)),
        *(running(30 + g, "T1", "n3", g, kind=QuotaKind.BORROWED) for g in range(2)),
        JobBuilder(1).dept("T2").gpus(4 // workers).workers(workers))
    result = run(snap)
    assert admitted(result) == [1] and result.admitted[0].quota_kind is QuotaKind.OWN
    assert victims(result) == {20, 21, 22, 23}
    assert {d.reason for d in result.preempted} == {Reason.PREEMPTED_RECLAIM}


def test_young_borrowed_work_is_the_last_victim_beyond_the_nodes_examined():
    # nine nodes whose borrowed job only just started, one whose borrowed job ran long: past preemption_max_nodes (8)
    snap = nodes(SnapshotBuilder(), 10, 1).tree_node("O").tree_node("T1", "O", own=1) \
        .tree_node("T2", "O", reclaim_min_runtime_s=600) \
        .job(*(running(20 + i, "T2", f"n{i}", 0, kind=QuotaKind.BORROWED, ran=30) for i in range(1, 10)),
             running(40, "T2", "n10", 0, kind=QuotaKind.BORROWED, ran=3600), JobBuilder(1).dept("T1"))
    assert victims(run(snap)) == {40}


def protected(snap: SnapshotBuilder, t1_own: float, t3_own: float = 0.0, window: float = 300.0) -> SnapshotBuilder:
    """O{T1, T2 (borrowed work only), T3}; T2 protects its borrowed work for `window` s (reclaim_min_runtime_s)."""
    return snap.tree_node("O").tree_node("T1", "O", own=t1_own) \
        .tree_node("T2", "O", reclaim_min_runtime_s=window).tree_node("T3", "O", own=t3_own)


@pytest.mark.parametrize("workers", [1, 2], ids=["single", "gang"])
def test_borrowed_work_leaves_idle_gpus_to_own_work_waiting_for_them(workers):
    # T1's own 8-GPU job waits for n1's other half to end; T2's borrowed job (one pod or a gang) would take that idle
    # half and be reclaimed as soon as the own job fits: it waits
    def snapshot(window: float) -> SnapshotBuilder:
        return protected(nodes(SnapshotBuilder(), 1, 8), t1_own=8, t3_own=4, window=window).job(
            running(30, "T3", "n1", 0, 1, 2, 3), JobBuilder(1).dept("T1").gpus(8),
            JobBuilder(2).dept("T2").gpus(2 // workers).workers(workers))
    result = run(snapshot(300))
    assert pending(result, 1).reason is Reason.NO_CAPACITY
    assert pending(result, 2).reason is Reason.NO_IDLE_CAPACITY and not result.admitted
    assert ("idle T4 GPUs are kept for own-quota work (8 GPUs waiting, 0 arrived in the last 300 s): borrowed work "
            "there would be reclaimed before it ran 300 s") in pending(result, 2).message
    assert admitted(run(snapshot(0))) == [2]  # no protection asked: today's rule, borrowed work takes idle GPUs


def test_borrowed_work_leaves_idle_gpus_to_own_work_forecast_from_its_arrivals():
    # T1's own job of 4 GPUs arrived 60 s ago: as much own work is expected within T2's 300 s, so T2's borrowed job
    # leaves the 4 idle GPUs to it; 600 s ago, nothing is expected and it is admitted
    def snapshot(ran: float) -> SnapshotBuilder:
        return protected(nodes(SnapshotBuilder(), 1, 8), t1_own=8).job(
            running(30, "T1", "n1", 0, 1, 2, 3, ran=ran), JobBuilder(2).dept("T2"))
    result = run(snapshot(60))
    assert not result.admitted and "(0 GPUs waiting, 4 arrived in the last 300 s)" in pending(result, 2).message
    assert admitted(run(snapshot(600))) == [2]


def test_own_work_admitted_in_the_cycle_counts_as_arrived():
    # T1's own job of 4 GPUs arrives and starts in this cycle: T2's borrowed job does not take the other 4
    result = run(protected(nodes(SnapshotBuilder(), 1, 8), t1_own=8).job(
        JobBuilder(1).dept("T1").gpus(4), JobBuilder(2).dept("T2")))
    assert admitted(result) == [1] and "(0 GPUs waiting, 4 arrived" in pending(result, 2).message


def test_borrowed_work_takes_idle_gpus_beyond_what_own_work_needs():
    # 12 idle GPUs, T1's own 8-GPU job waits for a whole node (none is free): a 2-GPU borrowed job leaves 10, enough
    snap = protected(nodes(SnapshotBuilder(), 3, 8), t1_own=8, t3_own=12).job(
        *(running(30 + n, "T3", f"n{n}", 0, 1, 2, 3) for n in (1, 2, 3)), JobBuilder(1).dept("T1").gpus(8),
        JobBuilder(2).dept("T2").gpus(2), JobBuilder(3).dept("T2").gpus(4))
    result = run(snap)
    assert admitted(result) == [2] and pending(result, 3).reason is Reason.NO_IDLE_CAPACITY


def test_with_fair_sharing_victims_come_from_the_highest_share_subtree_first():
    # B borrows 3, C borrows 1: A's own job takes back a GPU of B's (though C's borrowed job lost less work); without
    # fair sharing, least work lost decides
    snap = nodes(SnapshotBuilder(), 2, 4).tree_node("O").tree_node("A", "O", own=4).tree_node("B", "O", own=2) \
        .tree_node("C", "O", own=2).job(
            running(20, "B", "n1", 0), running(21, "B", "n1", 1),
            running(22, "B", "n1", 2, kind=QuotaKind.BORROWED), running(23, "B", "n1", 3, kind=QuotaKind.BORROWED),
            running(30, "C", "n2", 0), running(31, "C", "n2", 1),
            running(32, "C", "n2", 2, kind=QuotaKind.BORROWED, ran=600),
            running(24, "B", "n2", 3, kind=QuotaKind.BORROWED), JobBuilder(1).dept("A"))
    assert victims(run(snap)) == {32}
    fair = run(snap, **FAIR)
    assert admitted(fair) == [1] and len(victims(fair)) == 1 and victims(fair) <= {22, 23, 24}


def test_fair_share_preemption_keeps_the_preemptor_at_or_below_the_victim_after():
    # b borrows 3 (a 2-GPU job and a 1-GPU one); a (equal weight) borrowing 2 would end at 2, above b's 1 after:
    # refused (Kueue's LessThanInitialShare would allow it, being below b's 3 before; it is not used), and so are
    # two 1-GPU victims.
    def snap(split: bool) -> SnapshotBuilder:
        borrowed = [running(23 + g, "b", "n3", g, kind=QuotaKind.BORROWED) for g in range(3)] if split else \
            [JobBuilder(23).dept("b").gpus(2).running("n3", 0, 1, kind=QuotaKind.BORROWED),
             running(25, "b", "n3", 2, kind=QuotaKind.BORROWED)]
        return flat_abc(nodes(SnapshotBuilder(), 3, 3)).job(
            *(running(10 + g, "a", "n1", g) for g in range(3)), *(running(20 + g, "b", "n2", g) for g in range(3)),
            *borrowed, JobBuilder(1).dept("a").gpus(2))
    assert not run(snap(False), **FAIR).preempted
    assert not run(snap(True), **FAIR).preempted


def division_borrow_limit() -> SnapshotBuilder:
    """Scenario 4: T1's twelfth job, with D1 at its borrow limit."""
    return four_leaves(nodes(SnapshotBuilder(), 4, 4), d1_borrow=2).job(
        *(JobBuilder(i).dept("T1") for i in range(1, 13)))


def one_lender() -> SnapshotBuilder:
    """Scenario 5: T2's fifth job, with all T1 may lend lent."""
    return nodes(SnapshotBuilder(), 1, 10).tree_node("O").tree_node("T1", "O", own=10, lend=4) \
        .tree_node("T2", "O", own=0).job(*(JobBuilder(i).dept("T2") for i in range(1, 6)))


def two_lenders() -> SnapshotBuilder:
    """T1 lends 2 of its 4 and T3 1 of its 4: T2 gets 3, its fourth job waits."""
    return nodes(SnapshotBuilder(), 2, 4).tree_node("O").tree_node("T1", "O", own=4, lend=2) \
        .tree_node("T2", "O", own=0).tree_node("T3", "O", own=4, lend=1) \
        .job(*(JobBuilder(i).dept("T2") for i in range(1, 5)))


def nothing_left_to_lend() -> SnapshotBuilder:
    """T1 keeps its 2 (lend limit 0) and uses them; T2 borrows the 2 no quota covers; T1's next borrowed job waits for
    the tree's pool, no other level's lend limit in the way."""
    return nodes(SnapshotBuilder(), 1, 4).tree_node("O").tree_node("T1", "O", own=2, lend=0) \
        .tree_node("T2", "O", own=0).job(running(10, "T1", "n1", 0, 1), running(11, "T2", "n1", 2, 3,
                                                                              kind=QuotaKind.BORROWED),
                                         JobBuilder(1).dept("T1"))


@pytest.mark.parametrize("snap, job, sentence", [
    (division_borrow_limit, 12, "department D1 may borrow at most 2 T4; 2 borrowed, needs 1"),
    (one_lender, 5, "department T1 lends at most 4 T4; 4 lent, needs 1"),
    (two_lenders, 4, "departments T1 and T3 lend at most 3 T4 together; 3 lent, needs 1"),
    (nothing_left_to_lend, 1, "the tree lends at most 2 T4; 2 lent, needs 1"),
], ids=["borrow-limit", "lend-limit", "two-lenders", "pool"])
def test_why_a_job_waits_names_the_level_that_blocks_it_with_its_limit_and_figure(snap, job, sentence):
    message = pending(run(snap()), job).message
    assert sentence in message, message
