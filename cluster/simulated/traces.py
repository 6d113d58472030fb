"""Build simulated nodes and quotas from public traces (read in place, never copied into the repo).

Validated Alibaba node and pod lists: cluster/simulated/alibaba.py."""

from __future__ import annotations

import csv
from pathlib import Path

from cluster.types import NodeState, NodeView, Pool

CPU_GROUP = "CPU"


def alibaba_node(row: dict[str, str], *, name: str | None = None,
                 state: NodeState = NodeState.OFFLINE_NORMAL, pool: Pool = Pool.COLOCATION) -> NodeView:
    model = row["model"].strip() or None
    gpus = int(row["gpu"]) if model else 0
    return NodeView(name=name or row["sn"], resource_group=model or CPU_GROUP, gpu_model=model,
                    gpu_count=gpus, cpu_milli=int(row["cpu_milli"]), memory_mib=int(row["memory_mib"]),
                    pool=pool, state=state)


def helios_shares(path: str | Path) -> dict[str, float]:
    """GPU quota shares of the Helios Earth virtual clusters on the last day of the file (VCs with a quota),
    largest first."""
    with open(path, newline="") as f:
        last = list(csv.DictReader(f))[-1]
    sizes = {k: float(v) for k, v in last.items() if k.startswith("vc") and v and float(v) > 0}
    total = sum(sizes.values())
    return {k: v / total for k, v in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))}
