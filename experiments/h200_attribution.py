"""How good is splitting a shared GPU's SM active by per-pod GPU util? Checked on the H200 time-slicing pairs
(docs/reference/gpu-metrics.md#shared-gpus).

`python -m experiments.h200_attribution`: for every pair window of ts and ts2 (../shared/traces/h200-workloads,
`*_windows.csv`, `*_interference.csv`), each pod's attributed SM active (the window's device SM active split by the
pods' per-process util, streaming/attribution.py) beside what the pod should have done: its alone SM active in the
same command times the share of its alone throughput it kept. Prints a Markdown table and the mean absolute
error of the split against that of the unsplit device figure (what each pod reads without attribution).
No Django: the split is a pure function.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from streaming.attribution import DeviceReading, attribute

TRACES = Path(os.environ.get("TIDAL_TRACES_DIR", Path(__file__).resolve().parents[2] / "shared" / "traces"))
RUNS = ("ts", "ts2")  # time-slicing; under MPS the per-process util reads 0 and the split is even


@dataclass(frozen=True, slots=True)
class Check:
    run: str
    pair: str
    workload: str
    device: float  # the pair window's SM active: what the pod reads unattributed
    util: float  # the pod's per-process util, %
    attributed: float
    expected: float  # alone SM active x kept throughput


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def checks(folder: Path) -> list[Check]:
    out = []
    for run in RUNS:
        windows = _rows(folder / f"{run}_windows.csv")
        alone = {r["workload"]: float(r["sm_active_mean"]) for r in windows if "+" not in r["workloads"]}
        kept = {}
        for r in _rows(folder / f"{run}_interference.csv"):
            kept[(r["workload_a"], r["workload_b"], r["workload_a"])] = float(r["a_ratio"])
            kept[(r["workload_a"], r["workload_b"], r["workload_b"])] = float(r["b_ratio"])
        for pair in sorted({r["workloads"] for r in windows if r["workloads"].count("+") == 1}):
            rows = [r for r in windows if r["workloads"] == pair]
            a, b = pair.split("+")
            split = attribute(DeviceReading(("ns", r["workload"]), "GPU", {
                "gpu_util": float(r["proc_sm_util_mean"]), "sm_active": float(r["sm_active_mean"])}) for r in rows)
            out += [Check(run, pair, r["workload"], float(r["sm_active_mean"]), float(r["proc_sm_util_mean"]),
                          split[("ns", r["workload"])].values["sm_active"],
                          alone[r["workload"]] * kept[(a, b, r["workload"])]) for r in rows]
    return out


def table(folder: Path) -> str:
    found = checks(folder)
    lines = ["| run | pair | pod | per-pod util | device SM active (unsplit) | attributed | alone × kept | error |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c.run} | {c.pair.replace('+', ' + ')} | {c.workload} | {c.util:.0f} % | {c.device:.3f} | "
              f"{c.attributed:.3f} | {c.expected:.3f} | {c.attributed - c.expected:+.3f} |" for c in found]
    split = sum(abs(c.attributed - c.expected) for c in found) / len(found)
    unsplit = sum(abs(c.device - c.expected) for c in found) / len(found)
    return "\n".join(lines) + (f"\n\nMean absolute error over {len(found)} pods: split {split:.3f}, "
                               f"unsplit {unsplit:.3f}.")


def main() -> None:
    print(table(TRACES / "h200-workloads"))


if __name__ == "__main__":
    main()
