"""YAML job files: the API's submission fields (name, department, image, command, framework, gpu_model, gpus,
cpu_milli, memory_mib, workers, topology, preemptible, task_key, expected_duration_s), with Kubernetes quantities `cpu` and
`memory` besides `cpu_milli` and `memory_mib`. Whatever is wrong names the file's line."""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tidal_cli import quantities

API_FIELDS = ("name", "task_key", "department", "image", "command", "framework", "gpu_model", "gpus", "cpu_milli",
              "memory_mib", "expected_duration_s", "workers", "topology", "preemptible")
QUANTITY_FIELDS = {"cpu": "cpu_milli", "memory": "memory_mib"}
EXAMPLE = """\
name: resnet50
department: ml-search
image: registry/resnet:1
command: python train.py --epochs 90   # or a list: [python, train.py, --epochs, "90"]
framework: pytorch-2.1
gpu_model: T4    # or leave it out: any model the framework is certified on
gpus: 1          # a fraction of one GPU (0.5) or whole GPUs
cpu: 4           # or 4000m, or cpu_milli: 4000
memory: 16Gi     # or 512Mi, 1G, or memory_mib: 16384
workers: 1       # more than 1: a gang, per-worker resources
"""


class JobFileError(ValueError):
    """A job file that cannot be read; the message names the file and line."""


@dataclass
class JobFile:
    payload: dict[str, Any]  # in the API's fields
    lines: dict[str, int] = field(default_factory=dict)  # API field -> the line it came from
    path: str = ""

    def where(self, api_field: str) -> str:
        line = self.lines.get(api_field)
        return f"{self.path}:{line}" if line else ""


def load(path: str | Path) -> JobFile:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise JobFileError(f"{path}: cannot read it ({exc.strerror or exc})") from exc
    return parse(text, str(path))


def parse(text: str, path: str = "<job file>") -> JobFile:
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise JobFileError(f"{path}: empty; a job file is a mapping of fields, e.g.:\n{EXAMPLE}")
        if not isinstance(root, yaml.MappingNode):
            raise JobFileError(f"{path}:{_line(root)}: a job file is a mapping of fields (name: …, image: …)")
        job = JobFile(payload={}, path=path)
        for key_node, value_node in root.value:
            _take(job, loader, key_node, value_node)
        return job
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        said = " ".join(part for part in (exc.context, exc.problem) if part)  # "expected a single document … but found"
        raise JobFileError(f"{path}{line}: not valid YAML: {said}") from None
    except yaml.YAMLError as exc:
        raise JobFileError(f"{path}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _take(job: JobFile, loader: yaml.SafeLoader, key_node: yaml.Node, value_node: yaml.Node) -> None:
    line = _line(key_node)
    key = loader.construct_object(key_node, deep=True)
    value = loader.construct_object(value_node, deep=True)
    where = f"{job.path}:{line}"
    if not isinstance(key, str) or (key not in API_FIELDS and key not in QUANTITY_FIELDS):
        known = ", ".join((*API_FIELDS, *QUANTITY_FIELDS))
        raise JobFileError(f"{where}: unknown field {key!r} (known: {known})")
    target = QUANTITY_FIELDS.get(key, key)
    if target in job.payload:
        raise JobFileError(f"{where}: {key} repeats {_spelled(target)} (line {job.lines[target]}); give one")
    if key in QUANTITY_FIELDS:
        try:
            value = quantities.cpu_milli(value) if key == "cpu" else quantities.memory_mib(value)
        except quantities.QuantityError as exc:
            raise JobFileError(f"{where}: {exc}") from None
    elif key == "command" and isinstance(value, list):
        if not value or not all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool) for arg in value):
            raise JobFileError(f"{where}: command: a string, or a list of words (strings or numbers)")
        value = shlex.join(str(arg) for arg in value)
    job.payload[target] = value
    job.lines[target] = line


def _spelled(api_field: str) -> str:
    quantity = next((q for q, f in QUANTITY_FIELDS.items() if f == api_field), None)
    return f"{api_field} (or {quantity})" if quantity else api_field


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1
