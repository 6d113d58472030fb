"""Reclaim by own quota, higher priority preempts lower (aging only when the profile says), one node, least work
lost, protection."""

from cluster.types import QuotaKind
from experiments.builders.scheduling import MIN, JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import Reason
from tests.unit.helpers import admit, cycle, pending, victims

B = QuotaKind.BORROWED


def borrowed_fleet() -> SnapshotBuilder:
    """a owns 4 T4 and uses none; b borrows; two 4-GPU nodes."""
    return SnapshotBuilder().node(NodeBuilder("n1"), NodeBuilder("n2")).quota("a", "T4", own=4) \
        .quota("b", "T4", own=0, borrowed=8)


def test_own_quota_reclaims_from_borrowed_jobs_in_one_cycle():
    snap = borrowed_fleet().job(
        JobBuilder(10).dept("b").gpus(4).running("n1", 0, 1, 2, 3, kind=B, ran=2 * 3600),
        JobBuilder(11).dept("b").gpus(4).running("n2", 0, 1, 2, 3, kind=B, ran=3600),
        JobBuilder(1).dept("a").gpus(2)).build()
    result = cycle(snap)
    assert victims(result) == {11}  # least work lost
    d = admit(result, 1)
    assert (d.node, d.preempting, d.quota_kind) == ("n2", (11,), QuotaKind.OWN)
    p = result.preempted[0]
    assert (p.reason, p.for_job_id, p.requeue) == (Reason.PREEMPTED_RECLAIM, 1, True)
    assert "requeued with its original submit time" in p.message
    assert result.decisions.index(p) < result.decisions.index(d)  # evict before bind


def test_reclaim_ignores_min_runtime():
    snap = borrowed_fleet().job(
        JobBuilder(10).dept("b").gpus(4).running("n1", 0, 1, 2, 3, kind=B, ran=10),
        JobBuilder(11).dept("b").gpus(4).running("n2", 0, 1, 2, 3, kind=B, ran=20),
        JobBuilder(1).dept("a").gpus(4)).build()
    assert victims(cycle(snap)) == {10}


def test_victims_free_the_whole_need_on_one_node():
    # n1: two 1-GPU borrowed jobs (ran 100 s each) + 2 free; n2: one 4-GPU borrowed job (ran 1000 s).
    # A 4-GPU own job: on n1 evicting both young jobs frees 4 -> lost 200 s < 1000 s on n2.
    snap = borrowed_fleet().job(
        JobBuilder(10).dept("b").gpus(1).running("n1", 0, kind=B, ran=100),
        JobBuilder(11).dept("b").gpus(1).running("n1", 1, kind=B, ran=100),
        JobBuilder(12).dept("b").gpus(4).running("n2", 0, 1, 2, 3, kind=B, ran=1000),
        JobBuilder(1).dept("a").gpus(4)).build()
    result = cycle(snap)
    assert victims(result) == {10, 11}
    assert admit(result, 1).node == "n1"


def test_never_scatters_partial_frees_across_nodes():
    # 2 GPUs free on each node, 2 GPUs borrowed on each: a 4-GPU job needs one node's borrowed job only.
    snap = borrowed_fleet().job(
        JobBuilder(10).dept("b").gpus(2).running("n1", 0, 1, kind=B, ran=500),
        JobBuilder(11).dept("b").gpus(2).running("n2", 0, 1, kind=B, ran=400),
        JobBuilder(1).dept("a").gpus(4)).build()
    result = cycle(snap)
    assert victims(result) == {11}
    assert admit(result, 1).node == "n2"


def test_no_unneeded_victims():
    # n1 holds borrowed jobs of 1, 1 and 2 GPUs; a 2-GPU job needs only the cheapest sufficient set.
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4).quota("b", "T4", own=0, borrowed=8) \
        .job(JobBuilder(10).dept("b").gpus(1).running("n1", 0, kind=B, ran=100),
             JobBuilder(11).dept("b").gpus(2).running("n1", 1, 2, kind=B, ran=150),
             JobBuilder(12).dept("b").gpus(1).running("n1", 3, kind=B, ran=300),
             JobBuilder(1).dept("a").gpus(2)).build()
    # Greedy takes 10 (100 s) then 11 (150 s); 10 turns out unneeded and is given back.
    assert victims(cycle(snap)) == {11}


def test_higher_priority_preempts_lower_own_job():
    # Both on own quota of their departments; the pending job's profile meets the utilization target (+20), the
    # runner's does not (-20), and it ran 20 min (past the 300 s protection).
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4).quota("b", "T4", own=4) \
        .job(JobBuilder(10).dept("b").gpus(4).util(0.2).running("n1", 0, 1, 2, 3, ran=20 * MIN),
             JobBuilder(1).dept("a").gpus(4).util(0.8)).build()
    result = cycle(snap)
    assert victims(result) == {10}
    p = result.preempted[0]
    assert p.reason is Reason.PREEMPTED_PRIORITY and "for higher priority 1000020 > 999980 (base + utilization" in p.message


def aged_against_fresh(ran: float = 20 * MIN) -> SnapshotBuilder:
    """The pending job has waited 80 min (aging +25); the runner waited nothing."""
    return SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4).quota("b", "T4", own=4) \
        .job(JobBuilder(10).dept("b").gpus(4).waited(0).running("n1", 0, 1, 2, 3, ran=ran),
             JobBuilder(1).dept("a").gpus(4).waited(80 * MIN))


def test_aging_orders_the_queue_but_does_not_evict_running_work():
    """A victim requeued with its submit time would have aged the most and evict back: aging alone never preempts
    (Kueue's habit), unless the profile says it may."""
    snap = aged_against_fresh().build()
    assert not cycle(snap).preempted
    result = cycle(snap, aging_preempts=True)
    assert victims(result) == {10} and "for higher score 1000025 > 1000000" in result.preempted[0].message


def test_min_runtime_protects_young_jobs_from_priority_preemption():
    snap = aged_against_fresh(ran=299).build()
    assert not cycle(snap, aging_preempts=True).preempted
    assert victims(cycle(snap, aging_preempts=True, min_runtime_s=200)) == {10}


def test_equal_score_does_not_preempt():
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4).quota("b", "T4", own=4) \
        .job(JobBuilder(10).dept("b").gpus(4).waited(0).running("n1", 0, 1, 2, 3, ran=3600),
             JobBuilder(1).dept("a").gpus(4).waited(0)).build()
    assert not cycle(snap).preempted


def test_borrowed_work_never_preempts():
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=0, borrowed=8) \
        .quota("b", "T4", own=0, borrowed=8) \
        .job(JobBuilder(10).dept("b").gpus(4).util(0.1).running("n1", 0, 1, 2, 3, kind=B, ran=3600),
             JobBuilder(1).dept("a").gpus(4).util(0.9).waited(80 * MIN)).build()
    result = cycle(snap)
    assert not result.preempted
    assert pending(result, 1).reason is Reason.NO_IDLE_CAPACITY


def test_preemption_prefers_borrowed_over_own_victims():
    snap = SnapshotBuilder().node(NodeBuilder("n1"), NodeBuilder("n2")).quota("a", "T4", own=8) \
        .quota("b", "T4", own=4, borrowed=4) \
        .job(JobBuilder(10).dept("b").gpus(4).waited(0).running("n1", 0, 1, 2, 3, ran=600),
             JobBuilder(11).dept("b").gpus(4).waited(0).running("n2", 0, 1, 2, 3, kind=B, ran=7200),
             JobBuilder(1).dept("a").gpus(4).waited(80 * MIN)).build()
    assert victims(cycle(snap)) == {11}


def test_profile_without_preemption():
    snap = borrowed_fleet().job(
        JobBuilder(10).dept("b").gpus(4).running("n1", 0, 1, 2, 3, kind=B),
        JobBuilder(11).dept("b").gpus(4).running("n2", 0, 1, 2, 3, kind=B),
        JobBuilder(1).dept("a").gpus(2)).build()
    assert pending(cycle(snap, preemption=False), 1).reason is Reason.NO_CAPACITY
