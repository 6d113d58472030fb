"""Tiny hand-made Alibaba-schema traces for the replay tests (written to tmp_path)."""
from pathlib import Path

from cluster.simulated.alibaba import read_nodes, read_pods
from experiments.replay import Options, mapping as mp
from experiments.replay.engine import build_setup

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def write(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def pod(name, gpus, created, run, qos="LS", cpu=1000, mem=1024, spec="", milli=None):
    """A pod row: `gpus` whole (or a fraction of one), created at `created`, scheduled at once, runs `run` s."""
    num, gm = (1, int(gpus * 1000)) if 0 < gpus < 1 else (int(gpus), 1000 if gpus else 0)
    if milli is not None:
        gm = milli
    return f"{name},{cpu},{mem},{num},{gm},{spec},{qos},Succeeded,{created},{created + run},{created}"


def cluster(tmp_path: Path, rows: list[str] | None = None) -> Path:
    """One T4 node with 2 GPUs and one CPU-only node."""
    return write(tmp_path / "nodes.csv", NODE_HEADER,
                 rows or ["t4-0,8000,16384,2,T4", "cpu-0,4000,8192,0,"])


def setup_for(nodes: Path, pods: Path, **options):
    """One department 'd' owning the whole cluster: LS pods run under 'd', BE pods under 'd/be'."""
    return build_setup(read_pods(pods), read_nodes(nodes), mp.Mapping({"d": 1.0}), Options(**options))
