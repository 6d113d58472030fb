"""`python manage.py replay --nodes NODES.csv --pods PODS.csv [--policy tidal] [--policy fifo] ...`

Thin: parses options, turns trace errors into CommandError, shows progress bars; the work is in
scheduler/replay/ (no Django there).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from scheduler.policy import PROFILES
from scheduler.replay import DEFAULT_POLICIES, Options, TraceError, load, replay
from scheduler.replay.report import summary_json
from cluster.simulated.alibaba import trace_name

ALIBABA = "alibaba-gpu-2023"


def _pods_path(value: str) -> Path:
    """A path, or the name of a pod list in the traces folder (`default`, `gpuspec10`, ...)."""
    path = Path(value)
    if path.exists() or os.sep in value or value.endswith(".csv"):
        return path
    return Path(settings.TRACES_DIR) / ALIBABA / f"openb_pod_list_{value}.csv"


class Command(BaseCommand):
    help = "Replay a recorded cluster trace with one or more scheduling policies and write a report."

    def add_arguments(self, parser: CommandParser) -> None:
        traces = Path(settings.TRACES_DIR)
        parser.add_argument("--nodes", default=str(traces / ALIBABA / "openb_node_list_all_node.csv"),
                            help="node list (Alibaba 2023 schema: sn,cpu_milli,memory_mib,gpu,model)")
        parser.add_argument("--pods", default="default",
                            help="pod list (Alibaba 2023 schema), or a pod list name such as default, gpuspec10")
        parser.add_argument("--policy", action="append", choices=sorted(PROFILES), dest="policies",
                            help=f"repeatable; default: {', '.join(DEFAULT_POLICIES)}")
        parser.add_argument("--out", help="report folder (default: out/replay-<trace>[-lfX][-inflate])")
        parser.add_argument("--json", dest="json_path", help="also write the headline figures per policy here")
        parser.add_argument("--load-factor", type=float, default=1.0,
                            help="compress inter-arrival times this many times (run times unchanged)")
        parser.add_argument("--inflate", action="store_true",
                            help="FGD experiment: submit sampled pods until the first cannot be placed")
        parser.add_argument("--seed", type=int, default=0, help="sampling seed for --inflate")
        parser.add_argument("--min-cycle-s", type=float, default=10.0,
                            help="minimum virtual time between scheduling cycles")
        parser.add_argument("--recheck-s", type=float, default=600.0,
                            help="while jobs wait, run a cycle at least this often (virtual s)")
        parser.add_argument("--quotas", default=str(traces / "helios" / "Earth_gpu_number.csv"),
                            help="Helios per-VC GPU quota file shaping the departments ('equal': 10 equal ones)")
        parser.add_argument("--borrow-ratio", type=float, default=1.0,
                            help="borrowed quota per department as a share of cluster capacity")
        parser.add_argument("--workers", type=int, default=min(3, os.cpu_count() or 1),
                            help="policies replayed in parallel processes (1: one after the other)")

    def handle(self, *args: object, **opts: object) -> None:
        if not opts["load_factor"] > 0:
            raise CommandError(f"--load-factor must be > 0, got {opts['load_factor']}")
        if opts["min_cycle_s"] < 0 or opts["recheck_s"] <= 0 or opts["borrow_ratio"] < 0:
            raise CommandError("--min-cycle-s must be >= 0, --recheck-s > 0, --borrow-ratio >= 0")
        pods = _pods_path(str(opts["pods"]))
        policies = opts["policies"] or list(DEFAULT_POLICIES)
        options = Options(load_factor=opts["load_factor"], min_cycle_s=opts["min_cycle_s"],
                          recheck_s=opts["recheck_s"], inflate=opts["inflate"], seed=opts["seed"])
        quotas = None if opts["quotas"] == "equal" else opts["quotas"]
        try:
            setup = load(opts["nodes"], pods, quotas, options, borrow_ratio=opts["borrow_ratio"])
        except TraceError as e:
            raise CommandError(str(e)) from None
        out = Path(opts["out"]) if opts["out"] else Path(settings.BASE_DIR) / "out" / self._folder(pods, setup, options)
        command = "python manage.py replay " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else "replay"
        self.stdout.write(f"{setup.trace.name}: {len(setup.pods):,} pods ({len(setup.unplaceable)} unplaceable), "
                          f"{len(setup.nodes):,} nodes, {setup.mode} mode, policies {', '.join(policies)}")
        bars: list[tqdm] = []

        def bar(name: str, total: float):
            b = tqdm(total=round(total), desc=f"{name:>15}", unit=" pods" if setup.mode == "timeline" else " GPUs",
                     position=len(bars), leave=True, disable=None, mininterval=0.5)
            bars.append(b)
            return lambda value: b.update(max(0, round(value) - b.n))

        tqdm.monitor_interval = 0  # no monitor thread: workers are forked
        try:
            outcome = replay(setup, policies, out, command, workers=opts["workers"], bar=bar)
        finally:
            for b in bars:
                b.close()
        figures = summary_json(outcome.runs)
        if opts["json_path"]:
            Path(opts["json_path"]).parent.mkdir(parents=True, exist_ok=True)
            Path(opts["json_path"]).write_text(json.dumps(figures, indent=2) + "\n")
        for name, f in figures.items():
            self.stdout.write(f"{name:>15}: GPU share {f['gpu_alloc_share']:.4f}, wait p95 {f['wait_p95_s']} s "
                              f"(own {f['wait_p95_own_s']} s), preemptions {f['preemptions']}, "
                              f"{f['events_per_s']:,.0f} events/s, {f['wall_s']:.1f} s")
        self.stdout.write(f"report: {outcome.files['report.md']} (all policies: {outcome.wall_s:.1f} s)")

    @staticmethod
    def _folder(pods: Path, setup, options: Options) -> str:
        name = f"replay-{trace_name(pods)}"
        if setup.mode == "timeline" and options.load_factor != 1:
            name += f"-lf{options.load_factor:g}"
        if setup.mode == "inflate":
            name += "-inflate"
        return name
