"""A gang's rendezvous environment, by framework (scheduler/rendezvous.py)."""
import json

import pytest

from scheduler.rendezvous import PADDLE_PORT, TF_PORT, TORCH_PORT, Gang, framework_name, gang_env, worker_env

PODS = ("job-7-2-0", "job-7-2-1", "job-7-2-2", "job-7-2-3")


def gang(framework: str, gpus: float = 8, pods: tuple[str, ...] = PODS) -> Gang:
    return Gang(framework=framework, pods=pods, service="gang-7-2", gpus_per_worker=gpus)


def test_torchrun_workers_meet_at_rank_zeros_stable_name():
    envs = gang_env(gang("pytorch-2.1"))
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["NODE_RANK"] for e in envs] == ["0", "1", "2", "3"]
    for env in envs:
        assert env["MASTER_ADDR"] == "job-7-2-0.gang-7-2"
        assert env["MASTER_PORT"] == str(TORCH_PORT)
        assert env["WORLD_SIZE"] == "4" and env["NPROC_PER_NODE"] == "8"
    # torchrun reads its arguments from PET_*: `torchrun train.py` needs no flags
    assert {k: v for k, v in envs[2].items() if k.startswith("PET_")} == {
        "PET_MASTER_ADDR": "job-7-2-0.gang-7-2", "PET_MASTER_PORT": str(TORCH_PORT), "PET_NNODES": "4",
        "PET_NODE_RANK": "2", "PET_NPROC_PER_NODE": "8"}


def test_a_cpu_worker_still_runs_one_process():
    assert worker_env(gang("pytorch-2.1", gpus=0), 1)["NPROC_PER_NODE"] == "1"


def test_tensorflow_gets_a_tf_config_listing_every_worker():
    envs = gang_env(gang("tensorflow-2.15", gpus=2))
    assert all(set(e) == {"TF_CONFIG"} for e in envs)
    configs = [json.loads(e["TF_CONFIG"]) for e in envs]
    workers = [f"{pod}.gang-7-2:{TF_PORT}" for pod in PODS]
    assert [c["cluster"] for c in configs] == [{"worker": workers}] * 4
    assert [c["task"] for c in configs] == [{"type": "worker", "index": i} for i in range(4)]


def test_paddle_gets_its_trainer_endpoints_and_id():
    env = worker_env(gang("paddlepaddle-2.5"), 3)
    endpoints = [f"{pod}.gang-7-2:{PADDLE_PORT}" for pod in PODS]
    assert env == {"PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints), "PADDLE_CURRENT_ENDPOINT": endpoints[3],
                   "PADDLE_TRAINER_ID": "3", "PADDLE_TRAINERS_NUM": "4"}


def test_an_unknown_framework_gets_the_torchrun_set():
    assert worker_env(gang("caffe-1.0"), 1) == worker_env(gang("pytorch-2.1"), 1)
    assert "MASTER_ADDR" in worker_env(gang("horovod"), 0)


@pytest.mark.parametrize("given, name", [
    ("pytorch-2.1", "pytorch"), ("PyTorch-1.13", "pytorch"), ("tensorflow", "tensorflow"),
    ("paddlepaddle-2.5", "paddlepaddle"), ("my-framework", "my-framework"), ("my-framework-3", "my-framework"),
])
def test_framework_name_drops_the_version_only(given, name):
    assert framework_name(given) == name


def test_a_rank_outside_the_gang_and_an_empty_gang_are_refused():
    with pytest.raises(ValueError, match="rank 4"):
        worker_env(gang("pytorch-2.1"), 4)
    with pytest.raises(ValueError, match="at least one worker"):
        gang("pytorch-2.1", pods=())
