"""`python manage.py fragmentation --pods default [--nodes CSV] [--seeds 42-51] [--tune 1.3]
[--policies random,dotprod,clustering,packing,bestfit,fgd] [--processes N] [--json PATH] [--out DIR]
[--interference DIR]`

The FGD experiment (USENIX ATC'23) on an Alibaba 2023 pod list. Thin: parses options, turns bad input into
CommandError, shows a progress bar; the work is in experiments/fragmentation/ (no Django there).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from cluster.simulated.alibaba import TraceError, trace_name
from scheduler import interference_tables
from experiments.fragmentation.experiment import (DEFAULT_POLICIES, DEFAULT_TUNE, Remote, RunResult, Setup, load,
                                                result_of, run, summary)
from experiments.fragmentation.report import write_report
from experiments.fragmentation.scorers import SCORERS
from experiments.tasks import fragmentation_run
from experiments.traces import ALIBABA, pods_path


CELERY_RUN_TIMEOUT_S = 600  # one run is seconds; a run that long means no worker took it


def parse_seeds(text: str) -> tuple[int, ...]:
    """"42-51", "42,45,50" or a mix ("1-3,7"): distinct seeds in the order given."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", part)
        if not m:
            raise CommandError(f"--seeds: {part!r} is not a seed or a range like 42-51")
        lo, hi = int(m[1]), int(m[2] if m[2] is not None else m[1])
        if hi < lo:
            raise CommandError(f"--seeds: range {part!r} runs backwards")
        if hi - lo >= 10_000:
            raise CommandError(f"--seeds: range {part!r} has more than 10,000 seeds")
        seeds += [s for s in range(lo, hi + 1) if s not in seeds]
    return tuple(seeds)


def parse_policies(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not names:
        raise CommandError("--policies: no policy named")
    unknown = [p for p in names if p not in SCORERS]
    if unknown:
        raise CommandError(f"--policies: unknown polic{'y' if len(unknown) == 1 else 'ies'} "
                           f"{', '.join(unknown)}; known: {', '.join(SCORERS)}")
    return names


def _num(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _on_celery(setup: Setup, interference: str | None) -> Remote:
    """Each run as a `experiments.fragmentation_run` task, results in the order sent (the heaviest first)."""
    def remote(tasks: Sequence[tuple[str, int]]) -> Iterator[RunResult]:
        queue = fragmentation_run.app.conf.task_default_queue
        sent = [fragmentation_run.apply_async((str(setup.nodes_path), str(setup.pods_path), setup.tune,
                                               list(setup.seeds), policy, seed, interference), queue=queue)
                for policy, seed in tasks]
        for result in sent:
            yield result_of(result.get(timeout=CELERY_RUN_TIMEOUT_S))
    return remote


class Command(BaseCommand):
    help = ("FGD placement experiment: pods arrive one at a time until tune x GPU capacity; unallocated GPU % "
            "per policy at arrived = 100 %, curves and plots.")

    def add_arguments(self, parser: CommandParser) -> None:
        traces = Path(settings.TRACES_DIR)
        parser.add_argument("--pods", default="default",
                            help="pod list (Alibaba 2023 schema), or a pod list name such as default, gpushare40")
        parser.add_argument("--nodes", default=str(traces / ALIBABA / "openb_node_list_gpu_node.csv"),
                            help="node list (default: the trace's GPU nodes)")
        parser.add_argument("--seeds", default="42-51", help="seeds: a range 42-51 and/or a list 42,43")
        parser.add_argument("--tune", type=float, default=DEFAULT_TUNE,
                            help="arrivals total this many times the cluster's GPU capacity")
        parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES),
                            help=f"comma-separated; known: {', '.join(SCORERS)}")
        parser.add_argument("--processes", type=int, default=min(2, os.cpu_count() or 1),
                            help="runs (policy x seed) in parallel processes (1: one after the other)")
        parser.add_argument("--celery", action="store_true",
                            help="runs go to the Celery workers (each reads the lists itself) instead of processes")
        parser.add_argument("--json", dest="json_path", help="also write the per-policy figures here")
        parser.add_argument("--out", help="report folder (default: out/fragmentation-<trace>)")
        parser.add_argument("--interference", default=str(traces / interference_tables.TRACE),
                            help="the H200 measurements the interference model is read from (goodput, and the "
                                 "tidal-interference policy); skipped when the folder does not exist")

    def handle(self, *args: object, **opts: object) -> None:
        tune = opts["tune"]
        if not tune > 0 or tune != tune or tune == float("inf"):
            raise CommandError(f"--tune must be a number > 0, got {tune}")
        if opts["processes"] < 1:
            raise CommandError(f"--processes must be >= 1, got {opts['processes']}")
        seeds = parse_seeds(str(opts["seeds"]))
        policies = parse_policies(str(opts["policies"]))
        pods = pods_path(str(opts["pods"]))
        folder = Path(str(opts["interference"]))
        model = interference_tables.load(folder) if folder.is_dir() else None
        if model is None and any(SCORERS[p].needs_interference for p in policies):
            raise CommandError(f"--interference: no folder {folder}; the tidal-interference policy needs it")
        try:
            setup = load(opts["nodes"], pods, tune, seeds, model)
        except TraceError as e:
            raise CommandError(str(e)) from None
        out = (Path(opts["out"]) if opts["out"]
               else Path(settings.BASE_DIR) / "out" / f"fragmentation-{trace_name(pods)}")
        command = "python manage.py fragmentation " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else "fragmentation"
        self.stdout.write(f"{setup.trace}: {len(setup.pods):,} pods, {len(setup.nodes):,} nodes "
                          f"({setup.capacity_gpus:,} GPUs), tune {setup.tune:g}, seeds {len(seeds)}, "
                          f"policies {', '.join(policies)}, "
                          + ("on the Celery workers" if opts["celery"] else f"{opts['processes']} process(es)"))
        bars: list[tqdm] = []

        def bar(total: int):
            b = tqdm(total=total, desc="pods placed", unit=" pods", disable=None, mininterval=0.5, leave=True)
            bars.append(b)
            return b.update

        tqdm.monitor_interval = 0  # no monitor thread: workers are forked
        try:
            remote = _on_celery(setup, str(folder) if model else None) if opts["celery"] else None
            outcome = run(setup, policies, processes=opts["processes"], bar=bar, remote=remote)
        finally:
            for b in bars:
                b.close()
        files = write_report(out, outcome, command)
        figures = summary(outcome)
        if opts["json_path"]:
            Path(opts["json_path"]).parent.mkdir(parents=True, exist_ok=True)
            Path(opts["json_path"]).write_text(json.dumps(figures, indent=2) + "\n")
        for name, f in figures["policies"].items():
            a = f["at100"]
            good = f.get("goodput")
            self.stdout.write(f"{name:>12}: unallocated at 100 % arrived {_num(a['mean'])} ± {_num(a['sd'])} "
                              f"(median {_num(a['median'])}), frag % at 60/80/90: "
                              + "/".join(_num(v, 1) for v in f["frag_pct"].values())
                              + (f", goodput {_num(good['at100']['mean'])} %, refused pairs placed "
                                 f"{good['refused_pairs_at_end']:g}, overruled {good['overruled']:g}" if good else ""))
        self.stdout.write(f"report: {files['report.md']} ({outcome.wall_s:.1f} s)")
