"""Right-sizing on the real H200 workloads (docs/results/2026-11-29-h200-rightsizing.md).

`python -m experiments.h200_rightsizing [--gpus 8]`: each workload's solo window (../shared/traces/h200-workloads,
solo_windows.csv; stream-copy from solo2_windows.csv) becomes one past run (mean GPU util, mean SM active, peak
framebuffer over the card's 143,771 MiB), and the scheduler's own rule (scheduler.policy.rightsize, profile
`tidal`) sizes a job that asked for `--gpus` GPUs, once with SM active and once as if the exporter lacked it.
Prints a Markdown table. No Django: the rule is a pure function.
"""

from __future__ import annotations

import argparse
import csv
import os
from dataclasses import replace
from pathlib import Path

from cluster.types import RunProfile
from experiments.builders.scheduling import JobBuilder
from scheduler.policy import get_profile, rightsize

TRACES = Path(os.environ.get("TIDAL_TRACES_DIR", Path(__file__).resolve().parents[2] / "shared" / "traces"))
H200_FB_MIB = 143_771  # SOURCE.md
SOLO = (("solo", "resnet50-bs32"), ("solo", "resnet50-bs256"), ("solo", "gpt2s-train"),
        ("solo", "resnet18-dataloader"), ("solo", "dlrm-embed"), ("solo2", "stream-copy"), ("solo", "bert-server"),
        ("solo", "gpt2m-decode"), ("solo", "notebook-idle"))


def runs(folder: Path) -> dict[str, RunProfile]:
    """One RunProfile per workload from its solo window (CPU is not in the traces: 0)."""
    out = {}
    for run, workload in SOLO:
        with open(folder / f"{run}_windows.csv", newline="") as f:
            row = next(r for r in csv.DictReader(f) if r["workload"] == workload and r["mode"] == "solo")
        out[workload] = RunProfile(float(row["gpu_util_mean"]) / 100, float(row["fb_used_mib_max"]) / H200_FB_MIB,
                                   0.0, 0.0, mean_sm_active=float(row["sm_active_mean"]))
    return out


def table(gpus: float, folder: Path) -> str:
    profile = get_profile("tidal")
    lines = [f"| workload | GPU util | SM active | peak FB of the card | {gpus:g} GPUs asked: on GPU util | "
             "on SM active (what Tidal does) | sized on |", "|---|---|---|---|---|---|---|"]
    for workload, run in runs(folder).items():
        job = JobBuilder().gpus(gpus).build()
        on_sm = rightsize(replace(job, history=(run,)), profile)
        on_util = rightsize(replace(job, history=(replace(run, mean_sm_active=None),)), profile)
        lines.append(f"| {workload} | {run.mean_gpu_util:.1%} | {run.mean_sm_active:.3f} | {run.peak_gpu_mem_util:.1%} "
                     f"| {on_util.gpus:g} | {on_sm.gpus:g} | {on_sm.basis} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=float, default=8.0)
    args = parser.parse_args()
    print(table(args.gpus, TRACES / "h200-workloads"))


if __name__ == "__main__":
    main()
