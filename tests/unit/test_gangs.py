"""Gangs in the pure cycle: all workers or none, pack and spread over topology blocks, quota for the whole gang,
reservations with backfill, and whole-gang preemption."""

from __future__ import annotations

from cluster.types import QuotaKind, Topology
from experiments.builders.scheduling import NOW, JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import schedule
from scheduler.policy.decisions import Admit, Reason, Reserve, StillPending
from scheduler.policy.profile import TIDAL

HOUR = 3600.0


def g2(name: str, block: str, gpus: int = 8) -> NodeBuilder:
    return NodeBuilder(name, "G2", gpus).block(block)


def cluster(*nodes: NodeBuilder) -> SnapshotBuilder:
    return SnapshotBuilder().node(*nodes).quota("a", "G2", 1000).quota("b", "G2", 1000).certify("pytorch", "G2")


def job(gpus: int = 8, workers: int = 1, topology: Topology = Topology.PACK) -> JobBuilder:
    return JobBuilder().model("G2").gpus(gpus).workers(workers, topology)


def of(result, job_id: int, kind: type):
    return [d for d in result.decisions if isinstance(d, kind) and d.job_id == job_id]


def test_a_gang_of_whole_nodes_goes_to_one_block():
    snap = cluster(g2("a1", "a"), g2("a2", "a"), g2("b1", "b"), g2("b2", "b"), g2("b3", "b"), g2("b4", "b"),
                   g2("c1", "c")).job(gang := job(8, 4)).build()
    (admit,) = of(schedule(snap, TIDAL), gang.build().id, Admit)
    assert len(admit.workers) == 4
    assert sorted(w.node for w in admit.workers) == ["b1", "b2", "b3", "b4"]
    assert all(len(w.gpu_shares) == 8 for w in admit.workers)
    assert "block b" in admit.message and "4 workers on 4 nodes" in admit.message


def test_pack_takes_the_fewest_nodes_and_spread_one_node_per_worker():
    nodes = [g2(f"n{i}", "a") for i in range(4)]
    packed = job(2, 4)
    spread = job(2, 4, Topology.SPREAD)
    (p,) = of(schedule(cluster(*nodes).job(packed).build(), TIDAL), packed.build().id, Admit)
    assert {w.node for w in p.workers} == {p.node} and len({s.index for w in p.workers for s in w.gpu_shares}) == 8
    (s,) = of(schedule(cluster(*nodes).job(spread).build(), TIDAL), spread.build().id, Admit)
    assert len({w.node for w in s.workers}) == 4


def test_pack_fills_the_tightest_node_last():
    # 3 workers of 2 GPUs: an empty node takes 4, then the one with exactly 2 free (not the empty one) takes the rest
    busy = JobBuilder().model("G2").gpus(6).running("tight", 0, 1, 2, 3, 4, 5)
    snap = cluster(g2("empty1", "a"), g2("empty2", "a"), g2("tight", "a")).job(busy, gang := job(2, 5)).build()
    (admit,) = of(schedule(snap, TIDAL), gang.build().id, Admit)
    nodes = [w.node for w in admit.workers]
    assert sorted(set(nodes)) == ["empty1", "tight"] and nodes.count("tight") == 1


def test_a_gang_that_cannot_start_whole_takes_nothing_and_says_what_is_missing():
    # 16 GPUs free, as the gang of 4 x 4 needs, but in pieces: room for 3 workers only
    busy = [JobBuilder().model("G2").gpus(n).running(node, *range(n)) for node, n in (("a1", 6), ("b1", 4), ("b2", 6))]
    gang = job(4, 4)
    small = job(2)  # after the gang in the queue
    snap = cluster(g2("a1", "a"), g2("a2", "a"), g2("b1", "b"), g2("b2", "b")).job(*busy, gang, small).build()
    result = schedule(snap, TIDAL)
    assert not of(result, gang.build().id, Admit)
    (pending,) = of(result, gang.build().id, StillPending)
    assert "needs 4 workers of 4 G2 GPUs" in pending.message and "room for 3" in pending.message
    assert "block a has room for 2, block b has room for 1" in pending.message
    assert of(result, small.build().id, Admit)  # the gang left the tables as they were


def test_a_gang_larger_than_the_free_gpus_says_so():
    busy = JobBuilder().model("G2").gpus(8).running("a1", *range(8))
    gang = job(8, 3)
    result = schedule(cluster(g2("a1", "a"), g2("a2", "a"), g2("b1", "b")).job(busy, gang).build(), TIDAL)
    (pending,) = of(result, gang.build().id, StillPending)
    assert "needs 3 workers of 8 G2 GPUs" in pending.message and "24 whole G2 GPUs, 16 free" in pending.message


def test_the_whole_gang_is_charged_to_the_quota():
    snap = SnapshotBuilder().node(*(g2(f"n{i}", "a") for i in range(4))).quota("a", "G2", 16).certify(
        "pytorch", "G2").job(gang := job(8, 3), fits := job(8, 2)).build()
    result = schedule(snap, TIDAL)
    (pending,) = of(result, gang.build().id, StillPending)
    assert pending.reason is Reason.QUOTA_EXHAUSTED and "24" in pending.message
    assert len(of(result, fits.build().id, Admit)[0].workers) == 2


def test_a_fraction_of_a_gpu_per_worker_is_refused():
    import pytest

    with pytest.raises(ValueError, match="whole GPUs"):
        job(1, 2).gpus(0.5).build()


def test_the_first_waiting_gang_reserves_the_nodes_that_free_soonest_and_only_short_jobs_backfill():
    # four full nodes: n0, n1 end in 1 h, n2, n3 in 5 h; the gang needs two whole nodes
    running = [JobBuilder().model("G2").gpus(8).duration(HOUR * (1 if i < 2 else 5)).running(f"n{i}", *range(8),
                                                                                            ran=0)
               for i in range(4)]
    holder = JobBuilder().model("G2").gpus(4).duration(HOUR).running("n4", 0, 1, 2, 3, ran=0)
    gang = job(8, 2).waited(3 * HOUR)
    long_small = job(2).duration(3 * HOUR).waited(HOUR)
    short_small = job(2).duration(HOUR / 2).waited(HOUR)
    unknown_small = job(2).waited(HOUR)
    snap = cluster(*(g2(f"n{i}", "a") for i in range(5))).job(*running, holder, gang, long_small, short_small,
                                                               unknown_small).build()
    result = schedule(snap, TIDAL)
    (reserve,) = of(result, gang.build().id, Reserve)
    assert reserve.start_at == NOW + HOUR and set(reserve.nodes) == {"n0", "n1"}  # fuller than n4 at the start
    (pending,) = of(result, gang.build().id, StillPending)
    assert pending.reason is Reason.RESERVED and "expected start" in pending.message and "n0, n1" in pending.message
    # n4's free room is not reserved: the first two small jobs in the queue take it
    assert {d.job_id for d in result.admitted} == {long_small.build().id, short_small.build().id}


def _gang_behind_a_busy_pair(*waiting: JobBuilder) -> tuple[SnapshotBuilder, JobBuilder]:
    """n0 has 4 GPUs free now and the rest in 1 h, n1 is free in 1 h: what a gang of 8+8, waiting first, needs."""
    a = JobBuilder().model("G2").gpus(4).duration(HOUR).running("n0", 0, 1, 2, 3, ran=0)
    b = JobBuilder().model("G2").gpus(8).duration(HOUR).running("n1", *range(8), ran=0)
    gang = job(8, 2).waited(3 * HOUR)
    return cluster(g2("n0", "a"), g2("n1", "a")).job(a, b, gang, *waiting), gang


def test_backfill_is_refused_on_reserved_nodes_to_jobs_ending_after_the_reservation():
    long_small = job(4).duration(2 * HOUR).waited(HOUR)
    snap, gang = _gang_behind_a_busy_pair(long_small)
    result = schedule(snap.build(), TIDAL)
    (reserve,) = of(result, gang.build().id, Reserve)
    assert set(reserve.nodes) == {"n0", "n1"} and reserve.start_at == NOW + HOUR
    (pending,) = of(result, long_small.build().id, StillPending)
    assert not of(result, long_small.build().id, Admit)
    short_small = job(4).duration(HOUR / 2).waited(HOUR)
    result = schedule(_gang_behind_a_busy_pair(short_small)[0].build(), TIDAL)
    assert of(result, short_small.build().id, Admit)[0].node == "n0"


def _own_gang_and_a_borrower(waiting: JobBuilder) -> SnapshotBuilder:
    """_gang_behind_a_busy_pair's nodes and gang (a's own quota), and department b, which owns nothing and borrows."""
    a = JobBuilder().model("G2").gpus(4).duration(HOUR).running("n0", 0, 1, 2, 3, ran=0)
    b = JobBuilder().model("G2").gpus(8).duration(HOUR).running("n1", *range(8), ran=0)
    return SnapshotBuilder().node(g2("n0", "a"), g2("n1", "a")).quota("a", "G2", 100).quota("b", "G2", 0, 100).certify(
        "pytorch", "G2").job(a, b, job(8, 2).waited(3 * HOUR), waiting)


def test_borrowed_jobs_may_use_the_rows_of_an_own_quota_gang_which_reclaims_them_when_it_starts():
    borrowed = job(4).dept("b").duration(2 * HOUR).waited(HOUR)
    result = schedule(_own_gang_and_a_borrower(borrowed).build(), TIDAL)
    (reserve,) = result.reserved
    assert set(reserve.nodes) == {"n0", "n1"} and "borrowed ones, which it reclaims when it starts" in reserve.message
    (admit,) = of(result, borrowed.build().id, Admit)
    assert admit.node == "n0" and admit.quota_kind is QuotaKind.BORROWED
    own = job(4).duration(2 * HOUR).waited(HOUR)  # a's own job, ending after the gang's start: kept off
    result = schedule(_own_gang_and_a_borrower(own).build(), TIDAL)
    assert result.reserved and not of(result, own.build().id, Admit)


def test_without_reservations_the_small_job_takes_the_room():
    from dataclasses import replace

    long_small = job(4).duration(2 * HOUR).waited(HOUR)
    result = schedule(_gang_behind_a_busy_pair(long_small)[0].build(), replace(TIDAL, reservations=False))
    assert not result.reserved and of(result, long_small.build().id, Admit)


def test_an_own_quota_gang_preempts_borrowed_jobs_on_several_nodes():
    borrowed = [JobBuilder().dept("b").model("G2").gpus(8).running(f"n{i}", *range(8), kind=QuotaKind.BORROWED)
                for i in range(3)]
    snap = SnapshotBuilder().node(*(g2(f"n{i}", "a") for i in range(3))).quota("a", "G2", 16).quota(
        "b", "G2", 0, 100).certify("pytorch", "G2").job(*borrowed, gang := job(8, 2)).build()
    result = schedule(snap, TIDAL)
    (admit,) = of(result, gang.build().id, Admit)
    assert len(admit.preempting) == 2 and len({w.node for w in admit.workers}) == 2
    assert {p.job_id for p in result.preempted} == set(admit.preempting)
    assert all(p.reason is Reason.PREEMPTED_RECLAIM for p in result.preempted)


def test_preempting_a_worker_preempts_its_whole_gang():
    victim = JobBuilder().dept("b").model("G2").gpus(4).running_gang(
        ("n0", (0, 1, 2, 3)), ("n1", (0, 1, 2, 3)), kind=QuotaKind.BORROWED)
    fill = [JobBuilder().dept("a").model("G2").gpus(4).running(f"n{i}", 4, 5, 6, 7) for i in range(2)]
    snap = SnapshotBuilder().node(g2("n0", "a"), g2("n1", "a")).quota("a", "G2", 16).quota(
        "b", "G2", 0, 100).certify("pytorch", "G2").job(victim, *fill, first := job(4), second := job(4)).build()
    result = schedule(snap, TIDAL)
    (preempt,) = result.preempted
    assert preempt.job_id == victim.build().id and "all 2 workers" in preempt.message
    # both workers' room came free: the second small job fits without preempting anybody else
    assert {d.job_id for d in result.admitted} == {first.build().id, second.build().id}
    assert [d.preempting for d in result.admitted if d.preempting] == [(victim.build().id,)]


def test_a_gang_that_cannot_free_enough_preempts_nobody():
    borrowed = JobBuilder().dept("b").model("G2").gpus(8).running("n0", *range(8), kind=QuotaKind.BORROWED)
    own = JobBuilder().dept("a").model("G2").gpus(8).running("n1", *range(8))
    snap = SnapshotBuilder().node(g2("n0", "a"), g2("n1", "a")).quota("a", "G2", 24).quota(
        "b", "G2", 0, 100).certify("pytorch", "G2").job(borrowed, own, gang := job(8, 2)).build()
    result = schedule(snap, TIDAL)
    assert not result.preempted and not result.admitted
    assert of(result, gang.build().id, StillPending)


def test_a_long_gang_goes_to_the_fixed_pool_whole():
    from cluster.types import Pool
    from colocation.policy.profile import DEFAULT

    nodes = [g2("c0", "a"), g2("c1", "a"), g2("f0", "b").pool(Pool.FIXED), g2("f1", "b").pool(Pool.FIXED)]
    long_gang, short_gang = job(8, 2).duration(20 * HOUR), job(8, 2).duration(HOUR / 2)
    result = schedule(cluster(*nodes).job(long_gang, short_gang).build(), TIDAL, DEFAULT)
    assert {w.node for w in of(result, long_gang.build().id, Admit)[0].workers} == {"f0", "f1"}
    assert {w.node for w in of(result, short_gang.build().id, Admit)[0].workers} == {"c0", "c1"}


def test_each_of_the_first_waiting_gangs_reserves_its_own_nodes():
    # n0, n1 free in 1 h; n2 (4 GPUs busy) and n3 free in 2 h. Gang A takes n0, n1 from 1 h; gang B n2, n3 from 2 h.
    ends = {"n0": HOUR, "n1": HOUR, "n2": 2 * HOUR, "n3": 2 * HOUR}
    busy = [JobBuilder().model("G2").gpus(4 if n == "n2" else 8).duration(e).running(n, *range(4 if n == "n2" else 8),
                                                                                     ran=0)
            for n, e in ends.items()]
    first, second = job(8, 2).waited(3 * HOUR), job(8, 2).waited(2 * HOUR)
    fits_before_b = job(4).duration(1.5 * HOUR).waited(HOUR)
    result = schedule(cluster(*(g2(n, "a") for n in ends)).job(*busy, first, second, fits_before_b).build(), TIDAL)
    (a,) = of(result, first.build().id, Reserve)
    (b,) = of(result, second.build().id, Reserve)
    assert (set(a.nodes), a.start_at) == ({"n0", "n1"}, NOW + HOUR)
    assert (set(b.nodes), b.start_at) == ({"n2", "n3"}, NOW + 2 * HOUR)
    assert of(result, fits_before_b.build().id, Admit)[0].node == "n2"  # ends before B starts there
    too_long = job(4).duration(3 * HOUR).waited(HOUR)
    result = schedule(cluster(*(g2(n, "a") for n in ends)).job(*busy, first, second, too_long).build(), TIDAL)
    assert not of(result, too_long.build().id, Admit)
