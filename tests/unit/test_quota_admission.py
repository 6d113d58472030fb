"""Own quota first; borrowed quota only on capacity nobody uses; reasons with numbers."""

from cluster.types import CPU_KEY, QuotaKind
from experiments.builders.scheduling import JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import Reason
from tests.unit.helpers import admit, cycle, pending


def test_own_quota_when_it_has_room():
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4, borrowed=4) \
        .job(JobBuilder(1).gpus(2)).build()
    d = admit(cycle(snap), 1)
    assert (d.quota_kind, d.reason, d.score.base) == (QuotaKind.OWN, Reason.ADMITTED_OWN, 1_000_000)


def test_borrowed_quota_when_own_is_full():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=8)).quota("a", "T4", own=2, borrowed=4) \
        .job(JobBuilder(1).gpus(2).running("n1", 0, 1), JobBuilder(2).gpus(2)).build()
    d = admit(cycle(snap), 2)
    assert (d.quota_kind, d.reason, d.score.base) == (QuotaKind.BORROWED, Reason.ADMITTED_BORROWED, 1_000)


def test_both_quotas_full_gives_numbers():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=8)).quota("a", "T4", own=2, borrowed=2) \
        .job(JobBuilder(1).gpus(2).running("n1", 0, 1), JobBuilder(3).gpus(2).running("n1", 2, 3,
             kind=QuotaKind.BORROWED), JobBuilder(2).gpus(2)).build()
    d = pending(cycle(snap), 2)
    assert d.reason is Reason.QUOTA_EXHAUSTED
    assert d.message == ("pending: own T4 quota 2/2 used, needs 2; borrowed T4 quota 2/2 used, needs 2")


def test_cpu_quota_counts_too():
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4, unlimited_cpu_memory=False) \
        .quota("a", CPU_KEY, own=500, unlimited_cpu_memory=False).quota("a", "memory", own=10**6) \
        .job(JobBuilder(1).cpu(1000)).build()
    d = pending(cycle(snap), 1)
    assert "own CPU quota 0m/500m used, needs 1000m" in d.message


def test_borrowed_needs_really_idle_capacity():
    # Department b owns the whole T4 fleet and uses none of it *right now* on paper (its job runs
    # on own quota, filling the node). a may borrow 4 but nothing is idle: it waits, no preemption.
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=0, borrowed=4) \
        .quota("b", "T4", own=8).job(JobBuilder(1).dept("b").gpus(4).running("n1", 0, 1, 2, 3),
                                     JobBuilder(2).dept("a").gpus(1)).build()
    result = cycle(snap)
    d = pending(result, 2)
    assert d.reason is Reason.NO_IDLE_CAPACITY
    assert "borrowed quota runs on idle capacity only" in d.message
    assert not result.preempted


def test_unused_own_quota_of_others_is_not_idle_capacity():
    # b's own quota (8) is unused, but the only node is busy with c's borrowed work.
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=0, borrowed=4) \
        .quota("b", "T4", own=8).quota("c", "T4", own=0, borrowed=4) \
        .job(JobBuilder(1).dept("c").gpus(4).running("n1", 0, 1, 2, 3, kind=QuotaKind.BORROWED),
             JobBuilder(2).dept("a").gpus(1)).build()
    assert pending(cycle(snap), 2).reason is Reason.NO_IDLE_CAPACITY


def test_admissions_in_one_cycle_share_the_quota():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=8)).quota("a", "T4", own=3) \
        .job(JobBuilder(1).gpus(2), JobBuilder(2).gpus(2)).build()
    result = cycle(snap)
    assert [d.job_id for d in result.admitted] == [1]
    assert pending(result, 2).reason is Reason.QUOTA_EXHAUSTED


def test_fifo_profile_ignores_quotas():
    snap = SnapshotBuilder().node(NodeBuilder("n1")).job(JobBuilder(1).gpus(2)).build()
    d = admit(cycle(snap, "fifo"), 1)
    assert (d.quota_kind, d.reason) == (None, Reason.ADMITTED)
