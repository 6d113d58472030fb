"""The interference model's tables (scheduler/policy/interference.py) read from the H200 measurements
(../shared/traces/h200-workloads, its README): solo signatures and the measured pairs, per sharing mode. The live
loop reads them once per process (`cached`, from the traces folder); the FGD experiment when it starts.

- Signatures: each workload's solo window (`solo_windows.csv`; `stream-copy` and `gpt2m-decode` from
  `solo2_windows.csv`, where the decode server was re-measured with its warm-up fixed): SM active, tensor and DRAM
  activity, the process's peak framebuffer over the card's. The two servers are latency-sensitive.
- Time-slicing: the pairs of `ts_interference.csv` and `ts2_interference.csv`; where both measured a pair (three with
  `gpt2m-decode`), ts2's, whose decode server was warmed at every batch size (the README's caveats).
- MPS: `mps_interference.csv`.
Each side keeps `ratio` of its alone throughput, clamped to at most 1, and its p99 grows by `p99_ratio`, clamped to
at least 1: sharing never speeds a job up, and readings beyond that are the decode server's first-use stalls in its
alone window (README, caveats on `gpt2m-decode`).
"""

from __future__ import annotations

import csv
import os
from functools import lru_cache
from pathlib import Path

from scheduler.policy.interference import MPS, TIME_SLICING, Model, Pair, Signature, Slowdown, Table

TRACE = "h200-workloads"  # the measurements' folder in the traces folder
FOLDER = Path(os.environ.get("TIDAL_TRACES_DIR", Path(__file__).resolve().parents[2] / "shared" / "traces")) / TRACE
H200_FB_MIB = 143_771  # SOURCE.md
SERVERS = frozenset({"bert-server", "gpt2m-decode"})
SOLO2 = frozenset({"stream-copy", "gpt2m-decode"})
WORKLOADS = ("resnet50-bs32", "resnet50-bs256", "gpt2s-train", "resnet18-dataloader", "dlrm-embed", "stream-copy",
             "bert-server", "gpt2m-decode", "notebook-idle")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def signatures(folder: Path = FOLDER) -> tuple[tuple[str, Signature], ...]:
    solo = {(r["run"], r["workload"]): r for name in ("solo", "solo2") for r in _rows(folder / f"{name}_windows.csv")
            if r["mode"] == "solo"}
    out = []
    for w in WORKLOADS:
        r = solo[("solo2" if w in SOLO2 else "solo", w)]
        out.append((w, Signature(float(r["sm_active_mean"]), float(r["tensor_active_mean"]),
                                 float(r["dram_active_mean"]), float(r["proc_fb_used_mib_max"]) / H200_FB_MIB,
                                 w in SERVERS)))
    return tuple(out)


def _side(row: dict[str, str], side: str) -> Slowdown:
    return Slowdown(min(1.0, float(row[f"{side}_ratio"])), max(1.0, float(row[f"{side}_p99_ratio"])))


def pairs(*paths: Path) -> tuple[Pair, ...]:
    """The pairs of the files, a later file's measurement of a pair replacing an earlier one's."""
    found: dict[frozenset[str], Pair] = {}
    for path in paths:
        for r in _rows(path):
            found[frozenset((r["workload_a"], r["workload_b"]))] = Pair(r["workload_a"], r["workload_b"],
                                                                         _side(r, "a"), _side(r, "b"))
    return tuple(found.values())


def load(folder: Path = FOLDER) -> Model:
    sigs = signatures(folder)
    return Model((Table(TIME_SLICING, sigs, pairs(folder / "ts_interference.csv", folder / "ts2_interference.csv")),
                  Table(MPS, sigs, pairs(folder / "mps_interference.csv"))))


@lru_cache(maxsize=1)
def cached(folder: str) -> Model | None:
    """The model of `folder`, read once per process; None when there is no such folder (shares are then placed by
    least GPU loss alone)."""
    return load(Path(folder)) if Path(folder).is_dir() else None


def main() -> None:
    """Print the model's time-slicing predictions for every pair of the nine workloads (a Markdown table)."""
    model = load()
    sigs = dict(model.tables[0].signatures)
    print("| a + b | a keeps | b keeps | combined | a p99 x | b p99 x | from |\n|---|---|---|---|---|---|---|")
    for i, a in enumerate(WORKLOADS):
        for b in WORKLOADS[i + 1:]:
            p = model.predict(sigs[a], sigs[b])
            print(f"| {a} + {b} | {p.a.kept:.2f} | {p.b.kept:.2f} | {p.combined:.2f} | {p.a.p99:.2f} | "
                  f"{p.b.p99:.2f} | {p.basis} |")


if __name__ == "__main__":
    main()
