"""The simulated training log (cluster/simulated/podlog.py) and the simulated cluster serving it: deterministic, in
time order, the framework's banner, the SIGTERM lines of an eviction, tail/since reading only what they keep; and
the archive's size cap (scheduler/logs.py's pure part)."""
import pytest

from cluster.backend import FRAMEWORK_LABEL, KIND_LABEL, TRAINING, WORKER_LABEL, BackendError, PodSpec
from cluster.clock import VirtualClock
from cluster.simulated import SimulatedCluster
from cluster.simulated.podlog import (
    EVICTED, FAILED, SUCCEEDED, PodLogSource, pod_log_count, pod_log_lines, pod_log_text, source_of, style_of, timestamp,
)
from cluster.types import GpuShare
from experiments.builders.scheduling import NodeBuilder
from scheduler.logs import keep_tail, pod_address, archive_path

T0 = 1_764_000_000.0


def source(**fields) -> PodLogSource:
    return PodLogSource(**{"name": "job-7-1", "started_at": T0, "framework": "pytorch-2.1", "image": "reg/resnet:1",
                           "command": "python train.py", "gpus": 2, "gpu_model": "T4", **fields})


def stamp(line: str) -> str:
    return line.split(" ", 1)[0]


def test_the_same_pod_and_times_give_the_same_text_and_another_pod_another():
    assert pod_log_text(source(), T0 + 3600) == pod_log_text(source(), T0 + 3600)
    assert pod_log_text(source(name="job-8-1"), T0 + 3600) != pod_log_text(source(), T0 + 3600)


def test_lines_come_in_time_order_at_a_training_cadence_and_never_change_once_written():
    lines = pod_log_lines(source(), T0 + 3600)
    assert [stamp(line) for line in lines] == sorted(stamp(line) for line in lines)
    assert 3600 / 15 <= len(lines) <= 3600 / 6 + 30  # a progress line every 6-15 s, plus the banner and epochs
    assert any("val_loss" in line for line in lines) and any("loss" in line and "step" in line for line in lines)
    for now in range(int(T0), int(T0) + 3600, 97):  # what was written stays as it was: a prefix of later text
        earlier = pod_log_lines(source(), now)
        assert lines[:len(earlier)] == earlier
        assert pod_log_count(source(), now) == len(earlier)


def test_nothing_before_the_pod_starts():
    assert pod_log_lines(source(), T0 - 1) == [] and pod_log_count(source(), T0 - 1) == 0


@pytest.mark.parametrize("framework, banner", [
    ("pytorch-2.1", "torchrun --nnodes=1"),
    ("tensorflow-2.15", "TensorFlow 2.15.0"),
    ("paddlepaddle-2.6", "paddle.distributed.launch"),
    ("caffe-1.0", "Initializing solver"),
])
def test_each_framework_has_its_banner(framework, banner):
    text = pod_log_text(source(framework=framework), T0 + 600)
    assert banner in text.splitlines()[0] + text.splitlines()[1]


def test_the_style_is_guessed_from_the_environment_when_no_framework_is_named():
    assert style_of("", env={"TF_CONFIG": "{}"}) == "tensorflow"
    assert style_of("", env={"PADDLE_TRAINER_ID": "1"}) == "paddle"
    assert style_of("", image="nvcr.io/pytorch:23") == "pytorch"


def test_an_eviction_ends_with_sigterm_at_its_time_and_nothing_after():
    ended = source(ended_at=T0 + 1800, end=EVICTED, reason="preempted for job 9")
    lines = pod_log_lines(ended, T0 + 7200)
    assert lines == pod_log_lines(ended, T0 + 1800)  # nothing is written after the end
    sigterm = [line for line in lines if "SIGTERM" in line]
    assert sigterm[0].endswith("Received SIGTERM (signal 15): preempted for job 9")
    assert stamp(sigterm[0]).startswith("2025-11-24T16:30:00")  # T0 + 1800 s
    assert "exiting with code 143" in lines[-1]
    assert lines[:-3] == pod_log_lines(source(), T0 + 1800)  # the running log, then the SIGTERM lines


def test_success_and_failure_have_their_last_lines():
    assert "exiting with code 0" in pod_log_lines(source(ended_at=T0 + 900, end=SUCCEEDED), T0 + 901)[-1]
    failed = pod_log_lines(source(ended_at=T0 + 900, end=FAILED, reason="CUDA out of memory"), T0 + 901)
    assert "RuntimeError: CUDA out of memory" in "\n".join(failed[-5:])


def test_tail_and_since_keep_the_same_lines_as_filtering_the_whole_log():
    ended = source(ended_at=T0 + 5000, end=EVICTED)
    whole = pod_log_lines(ended, T0 + 9000)
    for tail in (0, 1, 3, 4, 50, len(whole), len(whole) + 10):
        assert pod_log_lines(ended, T0 + 9000, tail=tail) == (whole[-tail:] if tail else [])
    for since in (T0 - 10, T0, T0 + 3.5, T0 + 700.25, T0 + 4999, T0 + 5000, T0 + 5001):
        kept = [line for line in whole if stamp(line) >= timestamp(since)]
        assert pod_log_lines(ended, T0 + 9000, since=since) == kept
        assert pod_log_lines(ended, T0 + 9000, since=since, tail=5) == kept[-5:]


def test_a_month_long_log_tail_is_made_without_the_rest():
    lines = pod_log_lines(source(), T0 + 30 * 86400, tail=100)
    assert len(lines) == 100 and "epoch" in lines[-1]


def test_a_gang_worker_shows_its_rank_and_world():
    spec = PodSpec("job-9-1-2", 9, "A100", (GpuShare(0, 1.0), GpuShare(1, 1.0)), 8000, 32768,
                   labels={WORKER_LABEL: "2", FRAMEWORK_LABEL: "pytorch-2.1"}, env={"WORLD_SIZE": "4"})
    text = pod_log_text(source_of(spec, T0), T0 + 300)
    assert "--nnodes=4 --node_rank=2 --nproc_per_node=2" in text and "[rank2] world size 8" in text


# --- the simulated cluster serves it ------------------------------------------------------------------------


def training(name: str) -> PodSpec:
    return PodSpec(name, 7, "T4", (GpuShare(0, 1.0),), 1000, 1024,
                   labels={KIND_LABEL: TRAINING, FRAMEWORK_LABEL: "tensorflow-2.15"})


def test_the_simulated_cluster_serves_a_running_pods_log_and_keeps_it_after_an_eviction():
    clock = VirtualClock(T0)
    sim = SimulatedCluster([NodeBuilder("n1", gpus=2).build()], clock)
    sim.bind(training("job-7-1"), "n1")
    clock.advance(600)
    live = sim.pod_logs("job-7-1")
    assert "TensorFlow" in live and live.endswith("\n")
    assert sim.pod_logs("job-7-1", tail=2).splitlines() == live.splitlines()[-2:]
    assert all(stamp(line) >= "2025-11-24T16:08" for line in sim.pod_logs("job-7-1", since=120).splitlines())
    sim.evict("job-7-1", "taken back for inference")
    clock.advance(600)
    after = sim.pod_logs("job-7-1")
    assert after.startswith(live) and "SIGTERM (signal 15): taken back for inference" in after
    with pytest.raises(BackendError, match="not found"):
        sim.pod_logs("job-8-1")


def test_a_pod_past_its_run_time_reads_as_finished_before_the_cluster_advances():
    clock = VirtualClock(T0)
    sim = SimulatedCluster([NodeBuilder("n1", gpus=2).build()], clock, lambda pod: 300.0)
    sim.bind(training("job-7-1"), "n1")
    clock.advance(400)
    before = sim.pod_logs("job-7-1")
    assert "exiting with code 0" in before
    sim.advance()
    assert sim.pod_logs("job-7-1") == before


def test_following_yields_the_lines_so_far_then_new_ones_until_the_pod_ends():
    clock = VirtualClock(T0)
    sim = SimulatedCluster([NodeBuilder("n1", gpus=2).build()], clock)
    sim.bind(training("job-7-1"), "n1")
    clock.advance(120)
    follow = sim.follow_pod_logs("job-7-1", poll_s=0)
    first = [next(follow) for _ in range(len(sim.pod_logs("job-7-1").splitlines()))]
    clock.advance(300)
    sim.evict("job-7-1", "preempted")
    rest = list(follow)  # ends: the pod ended
    assert first + rest == sim.pod_logs("job-7-1").splitlines() and "SIGTERM" in rest[-3]


# --- the archive's pure part ----------------------------------------------------------------------------------


def test_the_size_cap_keeps_the_tail_from_a_line_start():
    text = "".join(f"line {i}\n" for i in range(1000))
    kept = keep_tail(text, 100)
    assert len(kept.encode()) <= 100 and text.endswith(kept) and kept.startswith("line ")
    assert keep_tail(text, 10**9) == text and keep_tail("", 10) == ""


def test_pods_map_to_predictable_archive_paths():
    assert pod_address("job-7-2") == (7, 2, 0) and pod_address("job-7-2-3") == (7, 2, 3)
    assert pod_address("svc-0") is None and pod_address("job-x-1") is None
    assert archive_path(7, 2, 3) == "jobs/7/run-2/worker-3.log"
