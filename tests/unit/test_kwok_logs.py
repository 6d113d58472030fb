"""The kwok log writer's pure part (cluster/simulated/kwok_logs.py): what a kwok pod's container logs, read from the
pod as the API server stores it, and the CRI lines it appends. Writing and serving them through the API server:
tests/integration/test_job_logs.py."""
from cluster.backend import KIND_LABEL, RUNTIME_LABEL, TRAINING
from cluster.simulated import podlog
from cluster.simulated.kwok_logs import EVICTION_REASON, cri_lines, log_source

STARTED = "2026-11-28T03:00:00Z"
T0 = 1_795_834_800.0  # STARTED


def pod(labels: dict | None = None, *, started: bool = True, deleted: str | None = None, reason: str = "") -> dict:
    metadata = {"name": "job-7-1", "namespace": "tidal-workloads", "uid": "u-1",
                "labels": {KIND_LABEL: TRAINING, **(labels or {})},
                "annotations": {EVICTION_REASON: reason} if reason else {}}
    if deleted:
        metadata["deletionTimestamp"] = deleted
    return {"metadata": metadata,
            "spec": {"nodeName": "t4-0", "containers": [{"name": "main", "image": "reg/resnet:1",
                                                         "command": ["python", "train.py"]}]},
            "status": {"phase": "Running", "startTime": STARTED} if started else {"phase": "Pending"}}


def test_a_pod_not_started_logs_nothing_yet():
    assert log_source(pod(started=False)) is None


def test_a_running_pod_logs_from_its_start_until_it_ends():
    source = log_source(pod())
    assert source.started_at == T0 and source.ended_at is None and source.end == ""
    assert "torchrun --nnodes=1" in podlog.pod_log_lines(source, T0 + 1)[0]


def test_a_pod_with_a_run_time_ends_with_success_then():
    source = log_source(pod({RUNTIME_LABEL: "30"}))
    assert (source.ended_at, source.end) == (T0 + 30, podlog.SUCCEEDED)
    assert not podlog.pod_log_lines(source, T0 + 29)[-1].endswith("exiting with code 0")
    assert podlog.pod_log_lines(source, T0 + 31)[-1].endswith("exiting with code 0")


def test_a_pod_being_deleted_ends_with_the_sigterm_of_its_eviction_reason():
    source = log_source(pod(deleted="2026-11-28T03:01:00Z", reason="preempted for job 9"))
    assert (source.ended_at, source.end) == (T0 + 60, podlog.EVICTED)
    assert any("Received SIGTERM (signal 15): preempted for job 9" in line
               for line in podlog.pod_log_lines(source, T0 + 61))


def test_cri_lines_carry_each_lines_own_time_for_since():
    lines = podlog.pod_log_lines(log_source(pod()), T0 + 60)
    written = cri_lines(lines).splitlines()
    assert len(written) == len(lines)
    for line, cri in zip(lines, written):
        assert cri == f"{line.split(' ', 1)[0]} stdout F {line}"


def test_appending_what_fell_due_since_the_last_pass_gives_the_whole_log():
    source, text, written = log_source(pod({RUNTIME_LABEL: "600"})), [], 0
    for now in range(int(T0), int(T0) + 700, 7):  # a writer's passes
        count = podlog.pod_log_count(source, now)
        if count > written:
            text += podlog.pod_log_lines(source, now, tail=count - written)
            written = count
    assert text == podlog.pod_log_lines(source, T0 + 700) and text[-1].endswith("exiting with code 0")
