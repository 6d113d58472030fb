"""Held-out pod lists derived from one trace's pods, deterministic by seed, to check a placement rule beyond the
five published traces (the artifact's other variants are not used: a rule is not tuned against them).

Each variant resamples the base list's own pods, so CPU, memory and GPU sizes stay the trace's:
    share<P>   P % of the whole 1-GPU pods (drawn at random) turned into shares: replaced by copies of the list's
               share pods (drawn at random); share100 leaves shares, multi-GPU and CPU-only pods
    multi<P>   P % of the GPU pods ask several GPUs: 1-GPU pods replaced by copies of the multi-GPU pods
    spec<P>    P % of the GPU pods get a gpu_spec: one GPU model drawn in proportion to the cluster's GPUs of
               that model, and with probability 1/3 a second one (as the trace's gpuspec lists mix single models
               and sets)
    cpu<F>     CPU-only pods multiplied by F (x2: each one doubled; x0.5: half of them dropped at random)

`variant(pods, name, seed, gpu_models)` returns the new list; `setup_for(name, nodes_csv, pods_csv)` a Setup for
the experiment; `python -m experiments.fragmentation.variants TRACE_DIR OUT_DIR` writes every variant of VARIANTS
of TRACE_DIR/openb_pod_list_default.csv as OUT_DIR/openb_pod_list_default~<name>.csv, for
`manage.py fragmentation --pods PATH`.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from experiments.fragmentation.state import PodRequest
from scheduler.policy.workload import TargetWorkload

VARIANTS = ("share40", "share60", "share80", "share100", "multi20", "multi30", "multi50", "spec10", "spec20",
            "spec33", "cpu2", "cpu0.5")
SEED = 2023  # one fixed seed per variant list; the experiment's seeds then shuffle it as any trace
SECOND_MODEL = 1 / 3


def _gpu_pods(pods: Sequence[PodRequest]) -> list[int]:
    return [i for i, p in enumerate(pods) if p.gpu_count]


def _resample(pods: list[PodRequest], target_share: float, is_kind, can_become, rng: np.random.Generator
              ) -> list[PodRequest]:
    """Replace pods that `can_become` (drawn at random) by copies of pods that are `is_kind` until `target_share`
    of the GPU pods are of that kind."""
    donors = [p for p in pods if is_kind(p)]
    if not donors:
        raise ValueError("the base list has no pod of the kind to copy")
    gpu = _gpu_pods(pods)
    want = round(target_share * len(gpu)) - sum(is_kind(pods[i]) for i in gpu)
    spare = [i for i in gpu if can_become(pods[i])]
    for i in rng.permutation(spare)[:max(want, 0)].tolist():
        pods[i] = donors[int(rng.integers(len(donors)))]
    return pods


def variant(pods: Sequence[PodRequest], name: str, seed: int = SEED, gpu_models: dict[str, int] | None = None
            ) -> list[PodRequest]:
    """The variant `name` (see the module docstring) of `pods`; `gpu_models`: GPUs per model (for spec<P>)."""
    rng = np.random.default_rng([seed, sum(map(ord, name))])
    out = list(pods)
    m = re.fullmatch(r"(share|multi|spec|cpu)(\d+(?:\.\d+)?)", name)
    if not m:
        raise ValueError(f"unknown variant {name!r}; e.g. {', '.join(VARIANTS)}")
    kind, x = m[1], float(m[2])
    if kind == "share":
        shares = [p for p in out if p.share]
        whole = [i for i, p in enumerate(out) if p.gpu_count == 1 and not p.share]
        for i in rng.permutation(whole)[:round(x / 100 * len(whole))].tolist():
            out[i] = shares[int(rng.integers(len(shares)))]
        return out
    if kind == "multi":
        return _resample(out, x / 100, lambda p: p.gpu_count > 1, lambda p: p.gpu_count == 1, rng)
    if kind == "spec":
        if not gpu_models:
            raise ValueError("spec variants need the cluster's GPUs per model")
        names = sorted(gpu_models)
        weights = np.array([gpu_models[n] for n in names], dtype=float)
        weights /= weights.sum()
        gpu = [i for i in _gpu_pods(out) if not out[i].models]
        for i in rng.permutation(gpu)[:round(x / 100 * len(_gpu_pods(out)))].tolist():
            first = names[int(rng.choice(len(names), p=weights))]
            chosen = {first}
            if rng.random() < SECOND_MODEL:
                chosen.add(names[int(rng.choice(len(names), p=weights))])
            out[i] = replace(out[i], models=tuple(sorted(chosen)))
        return out
    cpu_only = [i for i, p in enumerate(out) if not p.gpu_count]
    if x >= 1:
        copies = int(x) - 1
        return out + [out[i] for i in cpu_only for _ in range(copies)]
    drop = set(rng.permutation(cpu_only)[:round((1 - x) * len(cpu_only))].tolist())
    return [p for i, p in enumerate(out) if i not in drop]


def setup_for(name: str, nodes_csv: str | Path, pods_csv: str | Path, seeds: Sequence[int] | None = None,
              seed: int = SEED):
    """An experiment Setup whose pods are the variant `name` of the pod list at `pods_csv`."""
    from experiments.fragmentation import experiment as ex  # experiment imports nothing from here

    base = ex.load(nodes_csv, pods_csv, seeds=seeds or ex.DEFAULT_SEEDS)
    models: dict[str, int] = {}
    for n in base.nodes:
        if n.gpu_model and n.gpu_count:
            models[n.gpu_model] = models.get(n.gpu_model, 0) + n.gpu_count
    pods = tuple(variant(base.pods, name, seed, models))
    return replace(base, trace=f"{base.trace}~{name}", pods=pods, workload=TargetWorkload.from_pods(pods))


def write_csv(pods: Sequence[PodRequest], path: str | Path) -> Path:
    """The Alibaba pod-list columns the reader needs; names keep the list's order when sorted."""
    path = Path(path)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for i, p in enumerate(pods):
            w.writerow([f"v-pod-{i:06d}", p.cpu_milli, p.memory_mib, p.gpu_count,
                        p.gpu_milli if p.gpu_count else 0, "|".join(p.models)])
    return path


def main(argv: Sequence[str]) -> None:
    if len(argv) != 2:
        raise SystemExit("usage: python -m experiments.fragmentation.variants TRACE_DIR OUT_DIR")
    traces, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in VARIANTS:
        s = setup_for(name, traces / "openb_node_list_gpu_node.csv", traces / "openb_pod_list_default.csv")
        print(write_csv(s.pods, out / f"openb_pod_list_{s.trace}.csv"))


if __name__ == "__main__":
    main(sys.argv[1:])
