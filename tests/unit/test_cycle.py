"""Queue order, strict FCFS, positions and the requeue round trip through the acting layer."""

from cluster.clock import VirtualClock
from cluster.types import JobStatus, QuotaKind
from experiments.builders.scheduling import MIN, NOW, JobBuilder, NodeBuilder, SnapshotBuilder
from experiments.simulated_training import SimulatedTraining
from scheduler.policy import Reason, get_profile
from tests.unit.helpers import admit, cycle, pending


def test_queue_order_own_before_borrowed_then_aging():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=1)).quota("a", "T4", own=0, borrowed=8) \
        .quota("b", "T4", own=8).job(JobBuilder(1).dept("a").waited(80 * MIN),
                                     JobBuilder(2).dept("b").waited(0)).build()
    result = cycle(snap)
    assert admit(result, 2).reason is Reason.ADMITTED_OWN
    assert pending(result, 1).position == 1


def test_older_job_first_among_equal_scores():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=1)).quota("a", "T4", own=8) \
        .job(JobBuilder(1).waited(60), JobBuilder(2).waited(120)).build()
    assert [d.job_id for d in cycle(snap).admitted] == [2]


def test_fifo_head_of_line_blocks():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=2)).job(
        JobBuilder(1).gpus(4).waited(300), JobBuilder(2).gpus(1).waited(100)).build()
    result = cycle(snap, "fifo")
    assert pending(result, 2).reason is Reason.BLOCKED
    assert not result.admitted


def test_tidal_lets_smaller_jobs_pass_a_blocked_one():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=2)).quota("a", "T4", own=8).job(
        JobBuilder(1).gpus(4).waited(300), JobBuilder(2).gpus(1).waited(100)).build()
    assert admit(cycle(snap), 2).node == "n1"


def test_preempted_job_is_requeued_with_submit_time_and_history():
    clock = VirtualClock(NOW)
    snap = SnapshotBuilder().node(NodeBuilder("n1")).quota("a", "T4", own=4).quota("b", "T4", own=0, borrowed=4)
    sim = SimulatedTraining(snap.nodes, snap.quotas, {}, clock)
    victim = JobBuilder(10).dept("b").gpus(4).history((0.4, 0.4, 100, 100)).waited(50).build()
    sim.submit(victim)
    sim.step(get_profile("tidal"))
    assert sim.jobs[10].quota_kind is QuotaKind.BORROWED
    clock.advance(60)
    sim.submit(JobBuilder(1).dept("a").gpus(4).build())
    result = sim.step(get_profile("tidal"))
    assert [p.job_id for p in result.preempted] == [10]
    requeued = sim.jobs[10]
    assert (requeued.status, requeued.submitted_at, requeued.history) == (
        JobStatus.PENDING, victim.submitted_at, victim.history)
    assert requeued.allocation is None and sim.preemptions[10] == 1
    assert {p.spec.job_id for p in sim.backend.pods()} == {1}
