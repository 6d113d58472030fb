"""Real GPU shapes for the simulated cluster: each workload's 1-Hz device series measured alone on an NVIDIA H200
(data/h200-shapes/README.md says how the committed table is derived from ../shared/traces/h200-workloads).

A simulated pod follows one workload by kind, chosen by a stable hash so every run of a task follows the same one:
- a training pod holding whole GPUs: a saturating or launch-bound job (ResNet-50 at batch 256 or 32, GPT-2
  training, the DLRM-like embedding job, the DRAM-bandwidth-bound copy job);
- a training pod holding a fraction of one GPU (the notebook-sized requests of the Alibaba pod list): the idle
  notebook, the data-loader-bound ResNet-18 or ResNet-50 at batch 32;
- an inference pod: the BERT server or the GPT-2 decode server; a pod of a service group (an LLM across nodes)
  the GPT-2 decode server.
A pod reads second (elapsed s) of its workload's series, wrapping around. Pure: no Django; the table is read once.

`python -m cluster.simulated.h200 ../shared/traces/h200-workloads > data/h200-shapes/workloads.csv` derives it.
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TABLE = Path(__file__).resolve().parents[2] / "data" / "h200-shapes" / "workloads.csv"
SOURCE = "h200-workloads"  # the `shape` label of a simulated pod's DCGM series: h200-workloads/<workload>
# table column <- dcgm-exporter field (GPU util in %, the rest ratios 0..1)
FIELDS = {"gpu_util": "DCGM_FI_DEV_GPU_UTIL", "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
          "sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY", "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
          "dram_active": "DCGM_FI_PROF_DRAM_ACTIVE"}
PROFILING = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
WHOLE_GPU = ("resnet50-bs256", "gpt2s-train", "dlrm-embed", "stream-copy", "resnet50-bs32")
FRACTION = ("notebook-idle", "resnet18-dataloader", "resnet50-bs32")
SERVING = ("bert-server", "gpt2m-decode")
LLM_SERVING = "gpt2m-decode"
# (run file, workload): each workload's solo steady window; stream-copy ran alone only in the second command
SOLO_RUNS = {"stream-copy": "solo2"}


@dataclass(frozen=True, slots=True)
class Activity:
    """What a pod's GPU does in one second: utilization 0..1 and the DCGM profiling ratios."""

    gpu_util: float
    sm_active: float
    sm_occupancy: float
    tensor_active: float
    dram_active: float

    def scaled_to(self, util: float, mean_util: float) -> Activity:
        """The same work at GPU util `util` instead of the workload's `mean_util` (a server under another load)."""
        k = util / mean_util if mean_util > 0 else 0.0
        return Activity(util, *(min(1.0, getattr(self, f) * k) for f in PROFILING))


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    seconds: tuple[Activity, ...]

    @property
    def mean_util(self) -> float:
        return sum(a.gpu_util for a in self.seconds) / len(self.seconds)

    def at(self, elapsed_ms: int) -> Activity:
        return self.seconds[elapsed_ms // 1000 % len(self.seconds)]

    def sm_active_at(self, util: float) -> float:
        """Its mean SM active at GPU util `util` instead of its own mean (a server under another load)."""
        mean_sm = sum(a.sm_active for a in self.seconds) / len(self.seconds)
        return min(1.0, util * mean_sm / self.mean_util) if self.mean_util > 0 else 0.0


@lru_cache(maxsize=2)
def load(path: str | Path = TABLE) -> dict[str, Workload]:
    """The committed table: {workload: its seconds in order}."""
    rows: dict[str, list[tuple[int, Activity]]] = defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            rows[row["workload"]].append((int(row["second"]), Activity(
                float(row["gpu_util"]) / 100, *(float(row[field]) for field in PROFILING))))
    return {name: Workload(name, tuple(a for _, a in sorted(seconds))) for name, seconds in rows.items()}


def workload_for(key: str, *, inference: bool, gpus: float, pick, llm: bool = False) -> str:
    """The workload a pod follows: by kind, then `pick(key, count)` (a stable hash) among that kind's. An LLM served
    by groups of pods decodes tokens: the GPT-2 decode server, whatever its name hashes to."""
    if inference and llm:
        return LLM_SERVING
    kinds = SERVING if inference else WHOLE_GPU if gpus >= 1 else FRACTION
    return kinds[pick(key, len(kinds))]


# -- deriving the table from the traces ---------------------------------------------------------------------

def derive(folder: Path) -> Iterator[list[str]]:
    """CSV rows (header first) of every workload's steady solo window, one per second, device-wide series."""
    yield ["workload", "second", *FIELDS]
    names = sorted({*WHOLE_GPU, *FRACTION, *SERVING})
    for name in names:
        samples: dict[str, dict[str, str]] = defaultdict(dict)
        with open(folder / f"{SOLO_RUNS.get(name, 'solo')}_metrics.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["pod"] == f"{name}-0" and row["phase"] == "steady" and row["metric"] in FIELDS.values():
                    samples[row["timestamp_s"]][row["metric"]] = row["value"]
        for second, ts in enumerate(sorted(samples, key=float)):
            yield [name, str(second), *(_short(samples[ts][metric]) for metric in FIELDS.values())]


def _short(value: str) -> str:
    return f"{float(value):.4g}"


def main(argv: Sequence[str]) -> None:
    csv.writer(sys.stdout, lineterminator="\n").writerows(derive(Path(argv[0])))


if __name__ == "__main__":
    main(sys.argv[1:])
