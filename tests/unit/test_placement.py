"""Heterogeneous models, fractional best fit, whole GPUs on one node, filters."""

import pytest

from cluster.types import GpuShare, NodeState, Pool, QuotaKind
from colocation.policy import DEFAULT
from experiments.builders.scheduling import JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import Reason, get_profile, schedule
from scheduler.policy.workload import Shape, TargetWorkload
from tests.unit.helpers import admit, cycle, pending


def fleet() -> SnapshotBuilder:
    """T4 (1 node x 4), A100 (2 nodes x 8), P40 (1 node x 8); pytorch certified on T4/A100/P40."""
    snap = SnapshotBuilder().node(NodeBuilder("t4-1", "T4", 4), NodeBuilder("a100-1", "A100", 8),
                                  NodeBuilder("a100-2", "A100", 8), NodeBuilder("p40-1", "P40", 8))
    snap.certify("pytorch", "T4", "A100", "P40").certify("caffe", "T4", "P40")
    for model in ("T4", "A100", "P40"):
        snap.quota("a", model, own=100)
    return snap


def test_preferred_model_first():
    d = admit(cycle(fleet().job(JobBuilder(1).model("T4").gpus(2)).build()), 1)
    assert (d.gpu_model, d.node) == ("T4", "t4-1")


def test_falls_back_to_compatible_model_with_most_idle_capacity():
    # T4 is full; A100 has 16 idle GPUs, P40 8: the job goes to A100.
    snap = fleet().job(JobBuilder(9).model("T4").gpus(4).running("t4-1", 0, 1, 2, 3),
                       JobBuilder(1).model("T4").gpus(2)).build()
    d = admit(cycle(snap), 1)
    assert d.gpu_model == "A100"
    assert "A100 instead of T4" in d.message


def test_fallback_only_to_certified_models():
    # caffe is not certified on A100, so P40 is used although A100 has more idle GPUs.
    snap = fleet().job(JobBuilder(9).model("T4").gpus(4).running("t4-1", 0, 1, 2, 3),
                       JobBuilder(1).framework("caffe").model("T4").gpus(2)).build()
    assert admit(cycle(snap), 1).gpu_model == "P40"


def test_quota_of_model_actually_used_is_charged():
    # a has no T4 quota left but A100 quota: A100 is used and charged, a second A100 job then
    # finds the A100 quota used up.
    snap = SnapshotBuilder().node(NodeBuilder("t4-1", "T4", 4), NodeBuilder("a100-1", "A100", 8)) \
        .certify("pytorch", "T4", "A100").quota("a", "T4", own=0).quota("a", "A100", own=4) \
        .job(JobBuilder(1).model("T4").gpus(4).waited(60), JobBuilder(2).model("T4").gpus(1)).build()
    result = cycle(snap)
    assert admit(result, 1).gpu_model == "A100"
    assert "own A100 quota 4/4 used" in pending(result, 2).message


def test_no_fallback_in_baseline_profile():
    snap = fleet().job(JobBuilder(9).model("T4").gpus(4).running("t4-1", 0, 1, 2, 3),
                       JobBuilder(1).model("T4").gpus(2)).build()
    assert pending(cycle(snap, "quota-borrowing", preemption=False), 1).reason is Reason.NO_CAPACITY


def test_uncertified_preferred_model_is_refused_without_fallback():
    snap = fleet().job(JobBuilder(1).framework("caffe").model("A100").gpus(1)).build()
    d = pending(cycle(snap, model_fallback=False), 1)
    assert d.reason is Reason.NO_COMPATIBLE_MODEL


def test_fractional_best_fit_keeps_whole_gpus_free():
    # GPU 1 has 0.5 used, GPU 2 has 0.75 used: a 0.25 job fills GPU 2 exactly, GPUs 0 and 3 stay whole.
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(0, 0.5, 0.75, 0)).quota("a", "T4", own=4) \
        .job(JobBuilder(1).gpus(0.25)).build()
    assert admit(cycle(snap), 1).gpu_shares == (GpuShare(2, 0.25),)


def test_fractional_best_fit_across_nodes():
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(0.25), NodeBuilder("n2").used(0.5)) \
        .quota("a", "T4", own=4).job(JobBuilder(1).gpus(0.5)).build()
    d = admit(cycle(snap), 1)
    assert (d.node, d.gpu_shares) == ("n2", (GpuShare(0, 0.5),))


def test_fraction_never_pushes_a_gpu_over_one():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=2).used(0.75, 0.75)).quota("a", "T4", own=4) \
        .job(JobBuilder(1).gpus(0.5)).build()
    assert pending(cycle(snap), 1).reason is Reason.NO_CAPACITY


def test_multi_gpu_job_gets_whole_gpus_on_one_node():
    # 2 whole GPUs free on each of n1, n2 (the others partly used): a 3-GPU job fits on neither.
    # n3 has 4 free: the job takes 3 whole GPUs there.
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(0.5, 0.5), NodeBuilder("n2").used(0.1, 0.1),
                                  NodeBuilder("n3")).quota("a", "T4", own=8) \
        .job(JobBuilder(1).gpus(3)).build()
    d = admit(cycle(snap), 1)
    assert d.node == "n3"
    assert d.gpu_shares == (GpuShare(0, 1.0), GpuShare(1, 1.0), GpuShare(2, 1.0))


def test_whole_gpu_jobs_pack_fuller_nodes():
    snap = SnapshotBuilder().node(NodeBuilder("n1"), NodeBuilder("n2").used(1, 1)).quota("a", "T4", own=8) \
        .job(JobBuilder(1).gpus(1)).build()
    assert admit(cycle(snap), 1).node == "n2"


def test_fifo_is_first_fit():
    snap = SnapshotBuilder().node(NodeBuilder("n1"), NodeBuilder("n2").used(1, 1)).job(JobBuilder(1).gpus(1)).build()
    assert admit(cycle(snap, "fifo"), 1).node == "n1"


@pytest.mark.parametrize("state", [NodeState.OFFLINE_UNNORMAL, NodeState.ONLINE_NORMAL, NodeState.ONLINE_UNNORMAL])
def test_only_offline_normal_nodes_take_training(state):
    snap = SnapshotBuilder().node(NodeBuilder("n1").state(state)).quota("a", "T4", own=4) \
        .job(JobBuilder(1)).build()
    assert pending(cycle(snap), 1).reason is Reason.NO_CAPACITY


def test_cpu_and_memory_must_fit():
    snap = SnapshotBuilder().node(NodeBuilder("n1").cpu(2000), NodeBuilder("n2").memory(512)) \
        .quota("a", "T4", own=4).job(JobBuilder(1).cpu(3000).memory(1024)).build()
    assert pending(cycle(snap), 1).reason is Reason.NO_CAPACITY


def test_preferred_pool_hook():
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(1), NodeBuilder("n2").pool(Pool.FIXED)) \
        .quota("a", "T4", own=8).job(JobBuilder(1).pool(Pool.FIXED), JobBuilder(2).pool(Pool.COLOCATION)).build()
    result = cycle(snap)
    assert admit(result, 1).node == "n2" and admit(result, 2).node == "n1"


def test_with_a_lending_profile_the_cycle_chooses_each_pending_jobs_pool():
    # Whatever the hour: 30 min is short (co-location first), 20 h long (fixed only; here from its past runs),
    # and a short job pinned to the fixed pool stays there. n1 is co-location, n2 fixed, each with room for all.
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4), NodeBuilder("n2", gpus=4).pool(Pool.FIXED)) \
        .quota("a", "T4", own=8).job(
            JobBuilder(1)._set(expected_duration_s=1800.0), JobBuilder(2)._set(past_run_s=(20 * 3600.0,)),
            JobBuilder(3)._set(expected_duration_s=1800.0).pool(Pool.FIXED)).build()
    result = schedule(snap, get_profile("tidal"), DEFAULT)
    assert [admit(result, i).node for i in (1, 2, 3)] == ["n1", "n2", "n2"]
    unpinned = schedule(snap, get_profile("tidal"))  # no lending: only job 3 names a pool
    assert admit(unpinned, 2).node == admit(unpinned, 1).node


def test_short_jobs_go_to_the_colocation_pool_first_then_the_fixed_pool():
    # n2 (fixed, half used) would win on packing; the co-location pool still comes first while it has room.
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=1), NodeBuilder("n2", gpus=2).pool(Pool.FIXED).used(1)) \
        .quota("a", "T4", own=8).job(JobBuilder(1).pool(Pool.COLOCATION), JobBuilder(2).pool(Pool.COLOCATION)).build()
    result = cycle(snap)
    assert admit(result, 1).node == "n1" and admit(result, 2).node == "n2"


def test_fixed_pool_jobs_never_land_on_the_colocation_pool():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4), NodeBuilder("n2", gpus=1).pool(Pool.FIXED).used(1)) \
        .quota("a", "T4", own=8).job(JobBuilder(1).pool(Pool.FIXED)).build()
    assert pending(cycle(snap), 1).reason is Reason.NO_CAPACITY


def test_cpu_only_job_goes_to_cpu_node():
    snap = SnapshotBuilder().node(NodeBuilder("t4"), NodeBuilder("cpu", model=None, gpus=0)) \
        .quota("a", "T4", own=4).job(JobBuilder(1).gpus(0).model(None)).build()
    d = admit(cycle(snap), 1)
    assert (d.node, d.gpu_model, d.gpu_shares) == ("cpu", None, ())


def test_rightsized_request_is_placed_and_charged_original_kept():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=8)).quota("a", "T4", own=2) \
        .job(JobBuilder(1).gpus(8).cpu(8000).history((0.2, 0.2, 1000, 2000))).build()
    d = admit(cycle(snap), 1)
    assert (d.requested.gpus, d.rightsized.gpus, len(d.gpu_shares)) == (8, 2, 2)
    assert (d.rightsized.cpu_request_milli, d.rightsized.cpu_limit_milli) == (2000, 4000)
    assert d.quota_kind is QuotaKind.OWN and "right-sized from 8 GPU" in d.message


def test_a_waiting_job_is_told_when_the_free_gpus_exist_only_as_fragments():
    # 2 free T4 GPUs, one on each node: a 2-GPU job fits nowhere, and the sentence says why.
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(1, 1, 1), NodeBuilder("n2").used(1, 1, 1)) \
        .quota("a", "T4", own=8).job(JobBuilder(1).gpus(2)).build()
    message = pending(cycle(snap), 1).message
    assert "most free on one node: 1 whole GPU, " in message
    assert "2 T4 GPUs free across the cluster, at most 1 on any node; this job needs 2 on one node" in message


def test_a_waiting_share_is_told_when_the_idle_gpu_is_split_across_gpus():
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(0.7, 0.7, 1, 1)) \
        .quota("a", "T4", own=8).job(JobBuilder(1).gpus(0.5)).build()
    assert "0.60 T4 GPUs idle across the cluster, at most 0.30 of any one GPU; this job needs 0.5 of one GPU" \
        in pending(cycle(snap), 1).message


def test_no_fragment_clause_when_the_cluster_lacks_the_gpus_anyway():
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(1, 1, 1)).quota("a", "T4", own=8) \
        .job(JobBuilder(1).gpus(2)).build()
    assert "across the cluster" not in pending(cycle(snap), 1).message


def test_the_target_workload_decides_which_free_gpus_to_keep():
    # n1 has 2 free GPUs, n2 3. For 1-GPU work both choices keep every free GPU usable: the fuller n1 wins the
    # tie. When the cluster's typical jobs ask 2 GPUs, taking one of n1's leaves a single, useless GPU there;
    # n2 keeps a pair.
    snap = SnapshotBuilder().node(NodeBuilder("n1").used(1, 1), NodeBuilder("n2").used(1)).quota("a", "T4", own=8) \
        .job(JobBuilder(1).gpus(1)).build()
    one = TargetWorkload((Shape(4000, 1000, 1),), (10,), 10)
    two = TargetWorkload((Shape(4000, 1000, 2),), (10,), 10)
    assert admit(schedule(snap, get_profile("tidal"), workload=one), 1).node == "n1"
    assert admit(schedule(snap, get_profile("tidal"), workload=two), 1).node == "n2"


def test_an_open_model_job_goes_where_it_loses_the_fewest_gpus():
    """No model named: the last free T4 (a node then full, nothing stranded) beats opening an idle 8-GPU node,
    although A100 has the most idle GPUs (where a named model's fallback would go)."""
    snap = fleet().job(JobBuilder(9).model("T4").gpus(3).running("t4-1", 0, 1, 2),
                       JobBuilder(1).model(None).gpus(1)).build()
    d = admit(cycle(snap), 1)
    assert (d.gpu_model, d.node) == ("T4", "t4-1")
    named = fleet().job(JobBuilder(9).model("T4").gpus(3).running("t4-1", 0, 1, 2),
                        JobBuilder(1).model("A100").gpus(1)).build()
    assert admit(cycle(named), 1).gpu_model == "A100"
