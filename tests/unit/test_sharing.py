"""The live cycle's share placement with the interference model (scheduler/policy/sharing.py): the jobs on a GPU and
the share must be predicted to get on, and the admission sentence names the predicted slowdown."""
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.types import GpuShare, RunProfile
from scheduler import interference_tables as h200
from experiments.builders.scheduling import JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import get_profile, schedule
from scheduler.policy.decisions import Admit
from scheduler.policy.interference import Signature, refusal, share
from scheduler.policy.sharing import rule, signature

MODEL = h200.load()
SIGS = dict(MODEL.table("time-slicing").signatures)
TIDAL = get_profile("tidal")


def run_of(sig: Signature) -> RunProfile:
    return RunProfile(0.9, sig.fb_fraction, 500, 500, mean_sm_active=sig.sm_active,
                      mean_tensor_active=sig.tensor_active, mean_dram_active=sig.dram_active)


def job(job_id: int, kind: str | None, gpus: float = 0.5) -> JobBuilder:
    b = JobBuilder(job_id).gpus(gpus)
    return b if kind is None else b._set(history=(run_of(SIGS[kind]),))


def admitted(result, job_id: int) -> Admit:
    return next(d for d in result.decisions if isinstance(d, Admit) and d.job_id == job_id)


def two_shared_gpus(new_kind: str | None):
    # GPU 0 holds GPT-2 training, GPU 1 ResNet-50 at batch 32, half a GPU each: the least GPU loss alone ties them
    # and takes GPU 0
    return (SnapshotBuilder().node(NodeBuilder("n1", gpus=2)).quota("a", "T4", own=4)
            .job(job(1, "gpt2s-train").running("n1", 0, share=0.5), job(2, "resnet50-bs32").running("n1", 1, share=0.5),
                 job(3, new_kind)).build())


def test_a_job_history_gives_its_signature():
    assert signature(job(1, "dlrm-embed").build()) == SIGS["dlrm-embed"]
    assert signature(JobBuilder(1).util(0.5).build()) is None  # no SM active, tensor or DRAM: no signature


def test_a_share_is_kept_off_a_partner_predicted_below_one_and_says_why():
    snap = two_shared_gpus("dlrm-embed")
    assert admitted(schedule(snap, TIDAL), 3).gpu_shares == (GpuShare(0, 0.5),)  # without the model
    d = admitted(schedule(snap, TIDAL, interference=MODEL), 3)
    assert d.gpu_shares == (GpuShare(1, 0.5),)
    assert "sharing GPU 1: predicted to keep 0.61 of its solo speed, its partner 0.84 (combined 1.45; measured " \
           "dlrm-embed + resnet50-bs32)" in d.message
    assert "kept off the GPU least GPU loss alone takes: predicted combined throughput 0.94 < 1" in d.message


def test_a_job_without_a_profile_gets_the_default_and_places_as_least_loss_does():
    d = admitted(schedule(two_shared_gpus(None), TIDAL, interference=MODEL), 3)
    assert d.gpu_shares == (GpuShare(0, 0.5),)
    assert "combined 1.00; no measured pair near: default" in d.message


def test_a_share_refused_everywhere_waits_rather_than_preempt_into_a_refused_pairing():
    # GPT-2 training holds half of the only GPU, and ranks lower: DLRM beside it is refused (0.94 combined), so DLRM
    # waits (without the model it preempts, then shares the GPU with nobody refused: the model changes nothing there)
    snap = (SnapshotBuilder().node(NodeBuilder("n1", gpus=1)).quota("a", "T4", own=4)
            .job(job(1, "gpt2s-train").running("n1", 0, share=0.5), job(2, "dlrm-embed", 0.25)).build())
    waits = schedule(snap, TIDAL.with_(preemption=False), interference=MODEL).decisions
    assert not any(isinstance(d, Admit) for d in waits)
    assert "every T4 GPU with room for 0.25 of a GPU holds a job predicted to share badly with it" in waits[0].message
    assert any(isinstance(d, Admit) for d in schedule(snap, TIDAL.with_(preemption=False)).decisions)


def test_the_latency_bound_refuses_a_serving_job_past_it():
    # the live signature (from a job's runs) is a batch job's; a serving one is declared: here, by hand
    bert, decode = SIGS["bert-server"], SIGS["gpt2m-decode"]
    assert refusal(share(MODEL, decode, [bert]), rule(TIDAL)) is not None  # p99 x1.52 and x2.11 past x1.5
    assert refusal(share(MODEL, SIGS["resnet50-bs32"], [bert]), rule(TIDAL)) is None  # x1.12


kinds = st.sampled_from([None, *SIGS])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(kinds, st.sampled_from([0.25, 0.5])), min_size=1, max_size=10), kinds, st.floats(1.0, 2.5))
def test_no_admission_ever_pairs_jobs_the_model_refuses(running, new, bound):
    profile = TIDAL.with_(sharing_p99_bound=bound)
    b = SnapshotBuilder().node(NodeBuilder("n1", gpus=2), NodeBuilder("n2", gpus=2)).quota("a", "T4", own=16)
    used = {}
    for i, (kind, size) in enumerate(running):
        key = next(((n, g) for n in ("n1", "n2") for g in (0, 1) if used.get((n, g), 0) + size <= 1), None)
        if key is None:
            break
        used[key] = used.get(key, 0) + size
        b.job(job(10 + i, kind, size).running(key[0], key[1], share=size))
    for j in range(3):
        b.job(job(100 + j, new, 0.25))
    snap = b.build()
    result = schedule(snap, profile, interference=MODEL)
    placed = {job.id: (job.allocation.node, job.allocation.gpu_shares[0].index) for job in snap.jobs if job.allocation}
    placed.update({d.job_id: (d.node, d.gpu_shares[0].index) for d in result.decisions if isinstance(d, Admit)})
    sig = {j.id: signature(j) for j in snap.jobs}
    for d in result.decisions:
        if isinstance(d, Admit):
            partners = [sig[i] for i, at in placed.items() if at == placed[d.job_id] and i != d.job_id and i < d.job_id]
            if partners:
                assert refusal(share(MODEL, sig[d.job_id], partners), rule(profile)) is None
