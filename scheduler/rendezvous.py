"""How the workers of a gang find each other: the environment each worker's pod gets, by the job's framework.

Pure (no Django, no cluster): the live loop passes the gang's pod names (rank order) and its headless Service. On
Kubernetes a pod bound with `hostname=<pod>` and `subdomain=<service>` resolves as `<pod>.<service>` inside its
namespace once the headless Service exists (what Kubeflow's training operator does), so rank 0's name is a stable
rendezvous address before any pod has an IP.

- torchrun (PyTorch DDP): MASTER_ADDR/MASTER_PORT (rank 0), WORLD_SIZE (workers), NODE_RANK/RANK (this worker's
  rank), NPROC_PER_NODE (GPUs per worker, at least 1), and the same as torchrun's PET_* variables, which torchrun
  reads as its arguments, so `torchrun train.py` needs no flags (as Kubeflow's PyTorchJob sets them).
- TensorFlow (MultiWorkerMirroredStrategy): TF_CONFIG, JSON with every worker's host:port and this worker's index.
- PaddlePaddle (fleet collective): PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT, PADDLE_TRAINER_ID,
  PADDLE_TRAINERS_NUM.
Any other framework (Caffe, Horovod images launched by torchrun-style scripts, ...) gets the torchrun set: it is the
most widely read convention (MASTER_ADDR/RANK/WORLD_SIZE are also what torch.distributed's env:// and many MPI
wrappers read), and a job that needs something else still has the rank and the peers' names there.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

TORCH_PORT = 29500  # torchrun's default master port
TF_PORT = 2222  # the port TensorFlow's distributed examples and Kubeflow's TFJob use
PADDLE_PORT = 6170  # paddle.distributed.launch's default start port


@dataclass(frozen=True, slots=True)
class Gang:
    """What every worker's environment is made from."""

    framework: str  # the job's framework as "name-version" (str(Framework)) or just its name
    pods: tuple[str, ...]  # every worker's pod name, rank 0 first
    service: str  # the headless Service whose subdomain the pods share
    gpus_per_worker: float

    def __post_init__(self) -> None:
        if not self.pods:
            raise ValueError("a gang has at least one worker")

    @property
    def size(self) -> int:
        return len(self.pods)

    def host(self, rank: int) -> str:
        """A worker's stable DNS name in its namespace."""
        return f"{self.pods[rank]}.{self.service}"

    def endpoints(self, port: int) -> list[str]:
        return [f"{self.host(rank)}:{port}" for rank in range(self.size)]


def framework_name(framework: str) -> str:
    """"pytorch-2.1" -> "pytorch" (versions hold no dash: Framework's name-version)."""
    name, dash, version = framework.strip().lower().rpartition("-")
    return name if dash and version and version[0].isdigit() else framework.strip().lower()


def _torchrun(gang: Gang, rank: int) -> dict[str, str]:
    master, nproc = gang.host(0), str(max(1, int(gang.gpus_per_worker)))
    values = {"MASTER_ADDR": master, "MASTER_PORT": str(TORCH_PORT), "WORLD_SIZE": str(gang.size),
              "NODE_RANK": str(rank), "RANK": str(rank), "NPROC_PER_NODE": nproc}
    torchrun_args = {"PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(TORCH_PORT), "PET_NNODES": str(gang.size),
                     "PET_NODE_RANK": str(rank), "PET_NPROC_PER_NODE": nproc}
    return {**values, **torchrun_args}


def _tensorflow(gang: Gang, rank: int) -> dict[str, str]:
    config = {"cluster": {"worker": gang.endpoints(TF_PORT)}, "task": {"type": "worker", "index": rank}}
    return {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}


def _paddle(gang: Gang, rank: int) -> dict[str, str]:
    endpoints = gang.endpoints(PADDLE_PORT)
    return {"PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints), "PADDLE_CURRENT_ENDPOINT": endpoints[rank],
            "PADDLE_TRAINER_ID": str(rank), "PADDLE_TRAINERS_NUM": str(gang.size)}


_BY_FRAMEWORK: dict[str, Callable[[Gang, int], dict[str, str]]] = {
    "pytorch": _torchrun, "torch": _torchrun,
    "tensorflow": _tensorflow, "tf": _tensorflow,
    "paddlepaddle": _paddle, "paddle": _paddle,
}


def worker_env(gang: Gang, rank: int) -> dict[str, str]:
    """The rendezvous environment of worker `rank`; unknown frameworks get torchrun's (see the module doc)."""
    if not 0 <= rank < gang.size:
        raise ValueError(f"rank {rank} is not a worker of a gang of {gang.size}")
    return _BY_FRAMEWORK.get(framework_name(gang.framework), _torchrun)(gang, rank)


def gang_env(gang: Gang) -> list[dict[str, str]]:
    """Every worker's environment, rank 0 first."""
    return [worker_env(gang, rank) for rank in range(gang.size)]

