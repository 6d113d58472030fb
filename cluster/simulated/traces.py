"""Build simulated nodes from public traces (read in place, never copied into the repo)."""

from __future__ import annotations

import csv
from pathlib import Path

from cluster.types import NodeState, NodeView, Pool

CPU_GROUP = "CPU"


def load_alibaba_nodes(path: str | Path, *, state: NodeState = NodeState.OFFLINE_NORMAL,
                       pool: Pool = Pool.COLOCATION) -> list[NodeView]:
    """Nodes from the Alibaba GPU 2023 node list (`sn,cpu_milli,memory_mib,gpu,model`).

    An empty model is a CPU-only node. The resource group is the GPU model (or "CPU").
    """
    with open(path, newline="") as f:
        return [alibaba_node(row, state=state, pool=pool) for row in csv.DictReader(f)]


def alibaba_node(row: dict[str, str], *, name: str | None = None,
                 state: NodeState = NodeState.OFFLINE_NORMAL, pool: Pool = Pool.COLOCATION) -> NodeView:
    model = row["model"].strip() or None
    gpus = int(row["gpu"]) if model else 0
    return NodeView(name=name or row["sn"], resource_group=model or CPU_GROUP, gpu_model=model,
                    gpu_count=gpus, cpu_milli=int(row["cpu_milli"]), memory_mib=int(row["memory_mib"]),
                    pool=pool, state=state)
