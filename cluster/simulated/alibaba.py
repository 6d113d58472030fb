"""Read and validate Alibaba GPU 2023 ("openb") node and pod lists.

Every fatal problem is a TraceError naming `file:line` (the header is line 1). Nothing is
replayed from a file with a fatal row. A pod that is well formed but fits no node of the
cluster is not fatal: `unplaceable()` lists it (with its line) for the report.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster.simulated.traces import CPU_GROUP
from cluster.types import NodeState, NodeView, Pool

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")
QOS = ("LS", "BE", "Burstable", "Guaranteed")
PHASES = ("Running", "Succeeded", "Failed", "Pending")


class TraceError(ValueError):
    """A fatal problem in a trace file, at a line."""

    def __init__(self, path: str | Path, line: int, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        super().__init__(f"{path}:{line}: {problem}")


@dataclass(frozen=True, slots=True)
class PodRow:
    line: int
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: float  # whole GPUs (num_gpu > 1), a share of one GPU (gpu_milli / 1000), or 0
    gpu_spec: tuple[str, ...]  # allowed GPU models, first = the one the user chose; () = any
    qos: str  # "" when the file has no qos column
    phase: str
    creation: float | None  # None: the file has no time columns
    scheduled: float | None  # None: never scheduled in the trace
    deletion: float | None  # None: never ended in the trace


@dataclass(frozen=True, slots=True)
class PodTrace:
    path: Path
    name: str  # e.g. "default" for openb_pod_list_default.csv
    pods: tuple[PodRow, ...]
    timed: bool  # has creation times: the timeline replay is possible

    @property
    def end(self) -> float:
        """The last time the trace mentions (the end of the recording)."""
        times = [t for p in self.pods for t in (p.creation, p.scheduled, p.deletion) if t is not None]
        return max(times, default=0.0)


def trace_name(path: str | Path) -> str:
    stem = Path(path).stem
    return stem.removeprefix("openb_pod_list_")


def _rows(path: Path, known: Sequence[str], required: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        f = open(path, newline="", encoding="utf-8-sig")
    except OSError as e:
        raise TraceError(path, 0, f"cannot open: {e.strerror}") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if not header:
                raise TraceError(path, 1, "empty file: no header row")
            header = [h.strip() for h in header]
            unknown = [h for h in header if h not in known]
            if unknown:
                raise TraceError(path, 1, f"unknown column(s) {', '.join(map(repr, unknown))}; "
                                          f"expected {', '.join(known)}")
            missing = [c for c in required if c not in header]
            if missing:
                raise TraceError(path, 1, f"missing column(s) {', '.join(missing)}")
            if len(set(header)) != len(header):
                raise TraceError(path, 1, "duplicate column name")
            previous = reader.line_num
            for fields in reader:
                line, previous = previous + 1, reader.line_num  # where the row starts
                if not fields or all(not x.strip() for x in fields):
                    continue
                if len(fields) != len(header):
                    raise TraceError(path, line, f"malformed row: {len(fields)} fields, header has {len(header)}")
                yield line, {h: v.strip() for h, v in zip(header, fields)}
        except csv.Error as e:
            raise TraceError(path, reader.line_num, f"malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise TraceError(path, reader.line_num + 1, f"not UTF-8 text: {e.reason}") from None


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    raw = row[column]
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(path, line, f"{column} {raw!r} is not a whole number") from None
    if value < 0:
        raise TraceError(path, line, f"{column} is negative ({value})")
    return value


def number(path: Path, line: int, name: str, text: str) -> float:
    """A finite, non-negative number from a trace cell, or a TraceError naming file, line and cell."""
    try:
        value = float(text)
    except ValueError:
        raise TraceError(path, line, f"{name} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(path, line, f"{name} {text!r} must be finite and >= 0")
    return value


def _time(path: Path, line: int, row: dict[str, str], column: str) -> float | None:
    raw = row.get(column, "")
    return None if raw == "" else number(path, line, column, raw)


def _new_name(path: Path, line: int, name: str, seen: set[str], what: str) -> str:
    """A row's name: present and not seen before in the file (then remembered)."""
    if not name:
        raise TraceError(path, line, f"empty {what} name")
    if name in seen:
        raise TraceError(path, line, f"duplicate {what} {name}")
    seen.add(name)
    return name


def read_nodes(path: str | Path) -> list[NodeView]:
    """Nodes (offline-normal, co-location pool: all of the trace cluster runs training)."""
    path = Path(path)
    nodes: list[NodeView] = []
    seen: set[str] = set()
    for line, row in _rows(path, NODE_COLUMNS, NODE_COLUMNS):
        name = _new_name(path, line, row["sn"], seen, "node")
        cpu, mem, gpus = (_int(path, line, row, c) for c in ("cpu_milli", "memory_mib", "gpu"))
        model = row["model"] or None
        if model is None and gpus:
            raise TraceError(path, line, f"{gpus} GPUs but no GPU model")
        if model is not None and not gpus:
            raise TraceError(path, line, f"GPU model {model} but 0 GPUs")
        if cpu == 0 or mem == 0:
            raise TraceError(path, line, "a node needs CPU and memory (cpu_milli and memory_mib > 0)")
        nodes.append(NodeView(name=name, resource_group=model or CPU_GROUP, gpu_model=model, gpu_count=gpus,
                              cpu_milli=cpu, memory_mib=mem, pool=Pool.COLOCATION, state=NodeState.OFFLINE_NORMAL))
    if not nodes:
        raise TraceError(path, 1, "no nodes")
    return nodes


def read_pods(path: str | Path) -> PodTrace:
    path = Path(path)
    pods: list[PodRow] = []
    seen: set[str] = set()
    timed: bool | None = None
    for line, row in _rows(path, POD_REQUIRED + POD_OPTIONAL, POD_REQUIRED):
        if timed is None:
            present = [c for c in TIME_COLUMNS if c in row]
            if present and len(present) != len(TIME_COLUMNS):
                raise TraceError(path, 1, f"time columns must come together: has {', '.join(present)}")
            timed = bool(present)
        name = _new_name(path, line, row["name"], seen, "pod")
        cpu, mem, num_gpu, milli = (_int(path, line, row, c) for c in ("cpu_milli", "memory_mib", "num_gpu",
                                                                        "gpu_milli"))
        if num_gpu == 0:
            if milli:
                raise TraceError(path, line, f"gpu_milli {milli} without a GPU (num_gpu 0)")
            gpus = 0.0
        elif num_gpu == 1:
            if not 0 < milli <= 1000:
                raise TraceError(path, line, f"gpu_milli must be 1..1000 for one GPU, got {milli}")
            gpus = milli / 1000
        else:
            if milli != 1000:
                raise TraceError(path, line, f"{num_gpu} GPUs must be whole (gpu_milli 1000), got {milli}")
            gpus = float(num_gpu)
        spec = tuple(dict.fromkeys(m.strip() for m in row.get("gpu_spec", "").split("|") if m.strip()))
        if spec and not gpus:
            raise TraceError(path, line, f"gpu_spec {row['gpu_spec']} on a pod without GPUs")
        qos = row.get("qos", "")
        if "qos" in row and qos not in QOS:
            raise TraceError(path, line, f"unknown qos {qos!r}; expected one of {', '.join(QOS)}")
        phase = row.get("pod_phase", "")
        if "pod_phase" in row and phase and phase not in PHASES:
            raise TraceError(path, line, f"unknown pod_phase {phase!r}; expected one of {', '.join(PHASES)}")
        creation = _time(path, line, row, "creation_time")
        scheduled = _time(path, line, row, "scheduled_time")
        deletion = _time(path, line, row, "deletion_time")
        if timed and creation is None:
            raise TraceError(path, line, "empty creation_time")
        if scheduled is not None and scheduled < creation:
            raise TraceError(path, line, f"scheduled_time {scheduled:g} before creation_time {creation:g}")
        if deletion is not None and deletion < (scheduled if scheduled is not None else creation):
            raise TraceError(path, line, f"deletion_time {deletion:g} before it was "
                                         f"{'scheduled' if scheduled is not None else 'created'}")
        pods.append(PodRow(line, name, cpu, mem, gpus, spec, qos, phase, creation, scheduled, deletion))
    if not pods:
        raise TraceError(path, 1, "no pods")
    return PodTrace(path, trace_name(path), tuple(pods), bool(timed))


@dataclass(frozen=True, slots=True)
class Unplaceable:
    line: int
    name: str
    why: str


class Shapes:
    """The node shapes of a cluster per GPU model: can a pod fit an empty node of a model?"""

    def __init__(self, nodes: Sequence[NodeView]) -> None:
        self.by_model: dict[str | None, set[tuple[int, int, int]]] = {}
        self.gpus: dict[str | None, int] = {}
        for n in nodes:
            self.by_model.setdefault(n.gpu_model, set()).add((n.gpu_count, n.cpu_milli, n.memory_mib))
            self.gpus[n.gpu_model] = self.gpus.get(n.gpu_model, 0) + n.gpu_count
        self.gpu_models = sorted(m for m in self.by_model if m)

    def fits(self, pod: PodRow, model: str | None) -> bool:
        need = math.ceil(pod.gpus)
        return any(g >= need and c >= pod.cpu_milli and m >= pod.memory_mib
                   for g, c, m in self.by_model.get(model, ()))

    def candidates(self, pod: PodRow) -> list[str | None]:
        """Models the scheduler may put the pod on: CPU-only nodes for a CPU pod, else its allowed models."""
        if not pod.gpus:
            return [None]
        return [m for m in (pod.gpu_spec or self.gpu_models) if m in self.by_model]

    def preferred(self, pod: PodRow) -> str | None:
        """The user's model: of the gpu_spec models the pod fits on, the one with the most GPUs in the
        cluster (gpu_spec lists models alphabetically, so its first one says nothing about choice)."""
        fitting = [m for m in pod.gpu_spec if self.fits(pod, m)]
        return min(fitting, key=lambda m: (-self.gpus.get(m, 0), m), default=None)


def unplaceable(pods: Sequence[PodRow], shapes: Shapes) -> list[Unplaceable]:
    """Pods that fit no node of the cluster even when it is empty (the scheduler's model: a CPU-only
    pod runs on CPU-only nodes, a GPU pod on a node of one of its allowed models)."""
    out: list[Unplaceable] = []
    for p in pods:
        models = shapes.candidates(p)
        if not models:
            out.append(Unplaceable(p.line, p.name, f"no node has an allowed GPU model ({'|'.join(p.gpu_spec)})"))
        elif not any(shapes.fits(p, m) for m in models):
            where = "CPU-only node" if not p.gpus else f"node of {'|'.join(str(m) for m in models)}"
            out.append(Unplaceable(p.line, p.name, f"no {where} is large enough for {p.gpus:g} GPU, "
                                                   f"{p.cpu_milli}m CPU, {p.memory_mib} MiB"))
    return out
