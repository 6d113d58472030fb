"""`python manage.py replay --nodes NODES.csv --pods PODS.csv [--policy tidal] [--policy fifo] ...`

Thin: parses options, turns trace errors into CommandError, shows progress bars; the work is in
experiments/replay/ (no Django there).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from cluster.simulated.alibaba import trace_name
from cluster.simulated.traces import gang_share
from experiments.replay import (DEFAULT_POLICIES, GANG_POLICIES, NOISE_POLICY, NOISE_RUN, TREES, VARIANTS, Options,
                             Setup, TraceError, load, replay)
from experiments.replay.report import change_text, reservations_across, reservations_change, summary_json
from experiments.traces import ALIBABA, pods_path
from scheduler.policy import PROFILES



def _sizes(by_size: dict) -> str:
    """The size classes' waits on one line."""
    return "; ".join(f"{k} GPUs n={c['n']} wait p50/p95/max {c['wait']['p50']}/{c['wait']['p95']}/{c['wait']['max']} s"
                     for k, c in by_size.items() if c["n"])


def _marks(figures: dict) -> str:
    """Fairness and reclaims on one line."""
    r = figures["reclaims"]
    return (f"Jain's index of usage / fair share {figures['fairness']['jain_mean']} (while contended "
            f"{figures['fairness']['jain_contended_mean']}); reclaims {r['preemptions']} per "
            f"{r['borrowed_admissions']} borrowed admissions = {r['per_borrowed_admission']}, "
            f"{r['gpu_hours_lost']} GPU-h lost")


def _load_factors(value: object) -> list[float]:
    """`--load-factor`: one factor or several, comma-separated, each > 0."""
    factors = []
    for part in str(value).split(","):
        try:
            factor = float(part)
        except ValueError:
            raise CommandError(f"--load-factor must be numbers separated by commas, got {value!r}") from None
        if not factor > 0 or math.isinf(factor):
            raise CommandError(f"--load-factor must be > 0, got {part.strip()}")
        factors.append(factor)
    return list(dict.fromkeys(factors))


class Command(BaseCommand):
    help = "Replay a recorded cluster trace with one or more scheduling policies and write a report."

    def add_arguments(self, parser: CommandParser) -> None:
        traces = Path(settings.TRACES_DIR)
        parser.add_argument("--nodes", default=str(traces / ALIBABA / "openb_node_list_all_node.csv"),
                            help="node list (Alibaba 2023 schema: sn,cpu_milli,memory_mib,gpu,model)")
        parser.add_argument("--pods", default="default",
                            help="pod list (Alibaba 2023 schema), or a pod list name such as default, gpuspec10")
        parser.add_argument("--policy", action="append", choices=sorted({*PROFILES, *VARIANTS}), dest="policies",
                            help=f"repeatable; default: {', '.join(DEFAULT_POLICIES)} "
                                 f"(with gangs: {', '.join(GANG_POLICIES)})")
        parser.add_argument("--demo", action="store_true",
                            help="the demo's workload: --gangs, run times sped up TIDAL_DEMO_SPEEDUP times (2 min - 2 h), "
                                 "arrivals TIDAL_DEMO_SPEEDUP x load factor times, on 1 node in 10 (--every 10)")
        parser.add_argument("--every", type=int, default=None,
                            help="keep one node in this many of the node list (default 1; 10 with --demo)")
        parser.add_argument("--gangs", action="store_true",
                            help="the demo-shaped workload: pods become gangs of 2-16 workers (the demo's rule) until "
                                 "they hold the share of GPUs that jobs of >= 8 GPUs hold in Helios")
        parser.add_argument("--gang-share", type=float, default=None,
                            help="gangs hold this share of the offered GPU-time instead of Helios' (implies --gangs)")
        parser.add_argument("--out", help="report folder (default: out/replay-<trace>[-lfX][-inflate])")
        parser.add_argument("--json", dest="json_path", help="also write the headline figures per policy here")
        parser.add_argument("--load-factor", default="1",
                            help="compress inter-arrival times this many times (run times unchanged); several, "
                                 "comma-separated (16,18,20): one replay each, and what reservations change at each "
                                 "and in the median")
        parser.add_argument("--replicates", type=int, default=1,
                            help="replay each policy this many times, the k-th with seed --seed + k (which department "
                                 "each pod is drawn for) and its cycles k x 0.1 s further apart; the size classes' "
                                 "marks are then read over all of them (p95 of their waits together, the mean of "
                                 "their longest waits), the headline marks as mean and spread")
        parser.add_argument("--noise-floor", action="store_true",
                            help=f"also replay {NOISE_RUN}: what that moves each figure of what reservations "
                                 "change is what one replay cannot tell from chance (needs tidal and "
                                 "tidal-no-reservations)")
        parser.add_argument("--inflate", action="store_true",
                            help="FGD experiment: submit sampled pods until the first cannot be placed")
        parser.add_argument("--seed", type=int, default=0,
                            help="sampling seed for --inflate; salts which department each pod is drawn for (0: the "
                                 "pod name alone)")
        parser.add_argument("--min-cycle-s", type=float, default=10.0,
                            help="minimum virtual time between scheduling cycles")
        parser.add_argument("--recheck-s", type=float, default=600.0,
                            help="while jobs wait, run a cycle at least this often (virtual s)")
        parser.add_argument("--quotas", default=str(traces / "helios" / "Earth_gpu_number.csv"),
                            help="Helios per-VC GPU quota file shaping the departments ('equal': 10 equal ones)")
        parser.add_argument("--tree", choices=TREES, default="flat",
                            help="departments: flat (each Helios VC a department under the root), or helios: the "
                                 "VCs grouped into divisions by size, with division pools, lend and borrow limits and "
                                 "weights (docs: Replay a trace)")
        parser.add_argument("--borrow-ratio", type=float, default=1.0,
                            help="borrowed quota per department as a share of cluster capacity")
        parser.add_argument("--workers", type=int, default=min(3, os.cpu_count() or 1),
                            help="policies replayed in parallel processes (1: one after the other)")

    def handle(self, *args: object, **opts: object) -> None:
        factors = _load_factors(opts["load_factor"])
        if opts["min_cycle_s"] < 0 or opts["recheck_s"] <= 0 or opts["borrow_ratio"] < 0:
            raise CommandError("--min-cycle-s must be >= 0, --recheck-s > 0, --borrow-ratio >= 0")
        if opts["seed"] < 0:
            raise CommandError(f"--seed must be >= 0, got {opts['seed']}")
        if opts["replicates"] < 1 or opts["replicates"] > 1 and opts["inflate"]:
            raise CommandError(f"--replicates must be >= 1, and 1 with --inflate (got {opts['replicates']})")
        if opts["demo"]:
            opts["gangs"] = True
        every = opts["every"] or (10 if opts["demo"] else 1)
        if every < 1:
            raise CommandError(f"--every must be >= 1, got {every}")
        share, source = self._gang_share(opts)
        pods = pods_path(str(opts["pods"]))
        policies = opts["policies"] or list(DEFAULT_POLICIES if share is None else GANG_POLICIES)
        if opts["noise_floor"] and not {"tidal", NOISE_POLICY} <= set(policies):
            raise CommandError(f"--noise-floor reads what reservations change: replay both tidal and {NOISE_POLICY} "
                               f"(policies given: {', '.join(policies)})")
        options = Options(load_factor=factors[0], min_cycle_s=opts["min_cycle_s"],
                          recheck_s=opts["recheck_s"], inflate=opts["inflate"], seed=opts["seed"],
                          gang_share=share, gang_source=source, replicates=opts["replicates"],
                          demo_speedup=float(settings.TIDAL_DEMO_SPEEDUP) if opts["demo"] else None)
        quotas = None if opts["quotas"] == "equal" else opts["quotas"]
        try:
            setup = load(opts["nodes"], pods, quotas, options, borrow_ratio=opts["borrow_ratio"], every=every,
                         tree=opts["tree"])
        except TraceError as e:
            raise CommandError(str(e)) from None
        except ValueError as e:  # a quota tree the quota file cannot give
            raise CommandError(f"--tree {opts['tree']}: {e}") from None
        # the trace is read once: a load factor only changes the arrival times
        figures, floors = {}, {}
        for lf in factors:
            figures[lf], floors[lf] = self._replay(opts, replace(setup, options=replace(options, load_factor=lf)),
                                                   pods, policies, several=len(factors) > 1)
        if len(factors) == 1:
            written = figures[factors[0]]
            if opts["noise_floor"]:
                written = {**written, "noise_floor": floors[factors[0]]}
        else:
            changes = {lf: reservations_change(f) for lf, f in figures.items()}
            written = {"load_factors": {f"{lf:g}": f for lf, f in figures.items()}}
            if all(c is not None for c in changes.values()):
                self.stdout.write("What reservations change (tidal against tidal-no-reservations):")
                self.stdout.write("\n".join(reservations_across(changes)))
                written["reservations"] = {f"{lf:g}": c for lf, c in changes.items()}
            if opts["noise_floor"]:
                self.stdout.write(f"Noise floor ({NOISE_RUN}, against itself):")
                self.stdout.write("\n".join(reservations_across(floors)))
                written["noise_floor"] = {f"{lf:g}": c for lf, c in floors.items()}
        if opts["json_path"]:
            Path(opts["json_path"]).parent.mkdir(parents=True, exist_ok=True)
            Path(opts["json_path"]).write_text(json.dumps(written, indent=2) + "\n")

    def _replay(self, opts: dict, setup: Setup, pods: Path, policies: list[str], several: bool
                ) -> tuple[dict, dict | None]:
        """One replay of `setup`: its report written, its figures printed and returned (summary_json), with the noise
        floor's changes (noise_change; None without --noise-floor)."""
        options = setup.options
        if opts["out"]:
            out = Path(opts["out"]) / f"lf{options.load_factor:g}" if several else Path(opts["out"])
        else:
            out = Path(settings.BASE_DIR) / "out" / self._folder(pods, setup, options)
        command = "python manage.py replay " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else "replay"
        self.stdout.write(f"{setup.trace.name}: {len(setup.pods):,} pods ({len(setup.unplaceable)} unplaceable), "
                          f"{len(setup.nodes):,} nodes, {setup.mode} mode, policies {', '.join(policies)}")
        if setup.gangs is not None:
            g = setup.gangs
            self.stdout.write(f"gangs: {len(g.workers):,} pods run as gangs of 2-16 workers, holding "
                              f"{100 * g.share:.1f}% of the offered GPU-time (target {100 * g.target_share:.1f}%: "
                              f"{options.gang_source}); arrivals spread x{g.growth:.3g}")
        bars: list[tqdm] = []

        def bar(name: str, total: float):
            b = tqdm(total=round(total), desc=f"{name:>15}", unit=" pods" if setup.mode == "timeline" else " GPUs",
                     position=len(bars), leave=True, disable=None, mininterval=0.5)
            bars.append(b)
            return lambda value: b.update(max(0, round(value) - b.n))

        tqdm.monitor_interval = 0  # no monitor thread: workers are forked
        try:
            outcome = replay(setup, policies, out, command, workers=opts["workers"], bar=bar,
                             noise=opts["noise_floor"])
        finally:
            for b in bars:
                b.close()
        figures = summary_json(outcome.runs)
        for name, f in figures.items():
            self.stdout.write(f"{name:>15}: GPU share {f['gpu_alloc_share']:.4f}, wait p95 {f['wait_p95_s']} s "
                              f"(own {f['wait_p95_own_s']} s), preemptions {f['preemptions']}, "
                              f"{f['events_per_s']:,.0f} events/s, {f['wall_s']:.1f} s")
            self.stdout.write(f"{'':>15}  {_sizes(f['by_size'])}")
            self.stdout.write(f"{'':>15}  {_marks(f)}")
            if "replicates" in f:
                self.stdout.write(f"{'':>15}  over {f['replicates']['n']} replays (max: the mean of their longest): "
                                  f"{_sizes(f['replicates']['by_size'])}")
                self.stdout.write(f"{'':>15}  marks over them, mean ± sd: " + "; ".join(
                    f"{name} {m['mean']} ± {m['sd']}" for name, m in f["replicates"]["marks"].items()))
        floor = None if outcome.noise is None else outcome.noise.changes
        if floor is not None:
            self.stdout.write(f"{'noise floor':>15}: {NOISE_RUN} changes "
                              + ", ".join(f"{m} {change_text(x)}" for m, x in floor.items()))
        self.stdout.write(f"report: {outcome.files['report.md']} (all policies: {outcome.wall_s:.1f} s)")
        return figures, floor

    @staticmethod
    def _gang_share(opts: dict) -> tuple[float | None, str]:
        if opts["gang_share"] is not None:
            if not 0 <= opts["gang_share"] < 1:
                raise CommandError(f"--gang-share must be in [0, 1), got {opts['gang_share']}")
            return opts["gang_share"], "--gang-share"
        if opts["gangs"]:
            return gang_share(Path(settings.TRACES_DIR) / "helios")
        return None, ""

    @staticmethod
    def _folder(pods: Path, setup, options: Options) -> str:
        name = f"replay-{trace_name(pods)}"
        if setup.gangs is not None:
            name += "-demo" if options.demo_speedup else "-gangs"
        if setup.mapping.hierarchy is not None:
            name += "-tree"
        if setup.mode == "timeline" and options.load_factor != 1:
            name += f"-lf{options.load_factor:g}"
        if setup.mode == "inflate":
            name += "-inflate"
        return name
