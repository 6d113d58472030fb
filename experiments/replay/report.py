"""report.md, report.json (deterministic: no wall-clock figures), timings.json and PNG plots."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import fields
from enum import Enum
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.replay import mapping as mp  # noqa: E402
from experiments.replay.engine import (CLOCK_SHIFT_S, NOISE_POLICY, NOISE_RUN, VARIANTS, NoiseFloor,  # noqa: E402
                                     PolicyRun, Setup)
from experiments.replay.metrics import HEADLINE, KINDS  # noqa: E402
from experiments.replay.tree import POOL_KEPT_BY_VC  # noqa: E402
from scheduler.policy import get_profile  # noqa: E402

PLOTS = {
    "alloc_share": "alloc_share.png",
    "fragmentation": "unallocated_at_first_failure.png",
    "waits": "queue_wait.png",
    "preemptions": "preemptions_fallbacks.png",
    "util_by_model": "util_by_gpu_model.png",
    "waits_by_size": "queue_wait_by_size.png",
    "fairness": "fairness.png",
}
COLORS = {"tidal": "#1f77b4", "fifo": "#7f7f7f", "quota-borrowing": "#ff7f0e", "tidal-no-reservations": "#2ca02c",
          "tidal-fair": "#d62728"}
STYLES = {"tidal": "-", "fifo": "--", "quota-borrowing": ":", "tidal-no-reservations": "-.", "tidal-fair": "-"}  # curves that coincide stay visible
JSON_KEYS = ("gpu_alloc_share", "unallocated_gpu_hours", "wait_p95_s", "wait_p95_own_s", "preemptions")
QUOTA_KEYS = ("fairness", "reclaims", "longest_wait_by_kind", "small_wait_p95_s")  # what quota policies are judged on


def summary_json(runs: Sequence[PolicyRun]) -> dict:
    """What `--json PATH` writes: the headline figures per policy, with timings."""
    return {r.policy: {**{k: r.figures[k] for k in JSON_KEYS},
                       "by_size": r.figures["by_size"],
                       **{k: r.figures.get(k) for k in QUOTA_KEYS},
                       **({"replicates": r.figures["replicates"]} if "replicates" in r.figures else {}),
                       "events_per_s": round(r.events_per_s, 1), "wall_s": round(r.wall_s, 3),
                       "mode": r.mode,
                       "unallocated_gpus_at_first_failure": r.figures["unallocated_gpus_at_first_failure"]}
            for r in runs}


def mapping_rules(setup: Setup) -> dict:
    opt = setup.options
    rules = Counter_of(mp.run_time_rule(p) for p in setup.pods)
    tree = setup.mapping.hierarchy
    return {
        "departments": {d: round(s, 6) for d, s in setup.mapping.shares.items()},
        "department_rule": "SHA-256 of the pod name picks a department with probability = its quota share"
                           + (f" (salted with seed {setup.mapping.seed})" if setup.mapping.seed else ""),
        "own_quota": "share x cluster capacity, per GPU model, CPU and memory" if tree is None else
                     f"the Helios-derived tree (experiments/replay/tree.py): a VC owns {POOL_KEPT_BY_VC:g} x its share "
                     "x capacity, its division the rest of its VCs' shares as a pool it keeps for them (lend limit), "
                     "borrowing at most its own quota; weights in proportion to size",
        "tree": None if tree is None else {d: list(vcs) for d, vcs in tree.divisions.items()},
        "borrowed_quota": f"{setup.mapping.borrow_ratio:g} x cluster capacity per department (idle capacity only)",
        "qos": "LS/Guaranteed: department's own quota (then borrowed, may reclaim); BE/Burstable: account "
               "'<dept>/be' with no own quota (borrowed only, idle capacity, preemptible)",
        "gpu_spec": "each distinct gpu_spec is framework 'spec:<models>' certified on those models; the one with "
                    "the most GPUs in the cluster (that the pod fits on) = user's choice, the others = fallbacks "
                    "(tidal only); no spec = framework 'any', any model, no choice",
        "run_time": ("deletion - scheduled; never scheduled: deletion - creation; never ended: until trace end; "
                     f"at least {mp.MIN_RUN_S:g} s; restarts from zero after a preemption"
                     if not opt.demo_speedup else
                     f"the demo's (cluster.simulated.traces.demo_run_s): (deletion - scheduled) / "
                     f"{opt.demo_speedup:g}, within 2 min - 2 h; never ran or never ended: 5 min; restarts from zero "
                     "after a preemption"),
        "run_time_rules_used": rules,
        "arrival": (f"creation_time / load_factor ({opt.load_factor:g})" if setup.gangs is None else
                    f"creation_time x {setup.spread:.4g} (the gangs' growth of offered GPU-time) / load_factor "
                    f"({opt.load_factor:g})"),
        "gangs": gang_rule(setup),
        "expected_duration": "the run time (users' estimates exact): what reservations and backfill read",
        "clock": (f"event-driven; cycle on arrival, or on finish/recheck while jobs pend; cycles >= "
                  f"{opt.min_cycle_s:g} s apart; recheck every {opt.recheck_s:g} s while jobs pend"
                  if setup.mode == "timeline" else
                  f"inflate: batches of max(1, unallocated GPUs // {opt.inflate_divisor:g}) GPU pods sampled "
                  f"with replacement (seed {opt.seed}), one cycle per batch, {opt.inflate_step_s:g} s apart; "
                  f"stop at the first GPU pod that cannot be placed"),
    }


def gang_rule(setup: Setup) -> str:
    g = setup.gangs
    if g is None:
        return "none: every pod is a one-worker job"
    return (f"the demo's rule (cluster.simulated.traces.gang_plan): pods of whole GPUs become gangs of 2-16 workers "
            f"of the pod's shape (by a hash of the name; at most what one GPU model of the cluster holds) until gangs "
            f"hold {100 * g.target_share:.1f}% of the offered GPU-time, the share of GPUs held by jobs of >= 8 GPUs "
            f"in Helios ({setup.options.gang_source or 'given'}): {len(g.workers):,} gangs, "
            f"{100 * g.share:.1f}% of GPU-time, offered GPU-time x {g.growth:.3g}")


def longest_waits(runs: Sequence[PolicyRun]) -> list[str]:
    """Each size class's longest waiters per policy, and what they waited for (timeline replays)."""
    rows = [(r.policy, key, w) for r in runs for key, ws in r.figures.get("longest_waits", {}).items() for w in ws]
    if not rows:
        return []
    lines = ["## The longest waits, and what they waited for", "",
             "Per size class, its longest waiters: the quota kind they last ran on, and their wait by the reason "
             "each cycle gave until the next (quota-exhausted: no own or borrowed quota left; no-idle-capacity: "
             "borrowed quota has room, but borrowed work runs on idle capacity only; no-capacity: quota has room, "
             "no node fits even by preempting; reserved: a gang holding the nodes that free soonest). Passed by: "
             "jobs lower in the queue admitted while it waited (on any node).", "",
             "| policy | size | job | shape | ran on | wait s | waited for | passed by |",
             "|---|---|---|---|---|---|---|---|"]
    for policy, key, w in rows:
        worker = f"{w['gpus_per_worker']:g} {w['model'] or 'GPU'}" if w["gpus_per_worker"] else "CPU only"
        shape = f"{w['workers']} × {worker}" if w["workers"] > 1 else worker
        why = ", ".join(f"{k} {100 * v:.0f}%" for k, v in w["waited_for"].items()) or "–"
        lines.append(f"| {policy} | {key} | {w['job']} | {shape} | {w['kind'] or 'never started'} | "
                     f"{_f(w['wait_s'], 0)} | {why} | {w['passed_by']:,} |")
    return [*lines, ""]


def quota_marks(setup: Setup, runs: Sequence[PolicyRun]) -> list[str]:
    """What quota policies are judged on (issue 41): fairness, reclaims, the longest wait per quota kind."""
    lines = ["## Fair shares and reclaims", "",
             "A department's fair share: its quota (share x the cluster's GPUs) as far as it wants it (GPUs held + "
             "pending), then what the others leave, split in proportion to quota, none above its demand. Jain's "
             "index of GPUs held / fair share over the departments with a fair share (1: all equally served), a "
             "time mean over the arrival window, and over the contended time alone (the departments want more GPUs "
             "than the cluster has: only then can shares differ). Reclaims: preempted-reclaim (own-quota work taking "
             "back borrowed capacity) per borrowed admission, and the GPU-hours of work they threw away.", "",
             "| policy | Jain's index | while contended | reclaims | borrowed admissions (jobs) | "
             "reclaims / borrowed admission | GPU-h lost to reclaims | p95 wait ≤ 1 GPU s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        f, c = r.figures, r.figures["reclaims"]
        lines.append(f"| {r.policy} | {_f(f['fairness']['jain_mean'], 3)} | "
                     f"{_f(f['fairness']['jain_contended_mean'], 3)} | {c['preemptions']:,} | "
                     f"{c['borrowed_admissions']:,} ({c['borrowed_jobs']:,}) | {_f(c['per_borrowed_admission'], 3)} | "
                     f"{_f(c['gpu_hours_lost'])} | {_f(f['small_wait_p95_s'])} |")
    lines += ["", "Longest wait per size class by the quota kind of the job's last admission (s):", "",
              "| policy | size | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    for r in runs:
        for size, row in r.figures["longest_wait_by_kind"].items():
            lines.append(f"| {r.policy} | {size} | " + " | ".join(_f(row[k], 0) for k in KINDS) + " |")
    departments = list(setup.mapping.shares)
    lines += ["", "Usage / fair share per department (time mean while it had a fair share):", "",
              "| department | quota share | " + " | ".join(r.policy for r in runs) + " |",
              "|---|---|" + "---|" * len(runs)]
    for d in departments:
        lines.append(f"| {d} | {_f(setup.mapping.shares[d], 1, True)} | " + " | ".join(
            _f(r.figures["fairness"]["usage_over_fair_share"].get(d), 3) for r in runs) + " |")
    replicated = [r for r in runs if "replicates" in r.figures]
    if replicated:
        n = replicated[0].figures["replicates"]["n"]
        lines += ["", f"Over {n} replicates (seeds {', '.join(map(str, replicated[0].figures['replicates']['seeds']))}"
                  "), mean ± sd (min – max):", "", "| policy | " + " | ".join(HEADLINE) + " |",
                  "|---|" + "---|" * len(HEADLINE)]
        for r in replicated:
            marks = r.figures["replicates"]["marks"]
            lines.append(f"| {r.policy} | " + " | ".join(spread_text(marks[m]) for m in HEADLINE) + " |")
    return [*lines, ""]


def spread_text(m: dict) -> str:
    """A replicated mark as mean ± sd (min – max)."""
    if m["mean"] is None:
        return "–"
    digits = 3 if abs(m["mean"]) < 10 else 0
    return f"{_f(m['mean'], digits)} ± {_f(m['sd'], digits)} ({_f(m['min'], digits)} – {_f(m['max'], digits)})"


def reservations_verdict(runs: Sequence[PolicyRun], noise: NoiseFloor | None = None) -> list[str]:
    """What reservations buy: tidal against the same profile with them off, on the size classes; with `noise`, what
    that comparison cannot tell from chance (noise_change)."""
    by = {r.policy: marks_of(r.figures) for r in runs}
    change = reservations_change({r.policy: r.figures for r in runs})
    if change is None:
        return []
    on, off = by["tidal"], by["tidal-no-reservations"]
    replicates = runs[0].figures.get("replicates")
    over = [] if replicates is None else [
        f"- over {replicates['n']} replays of each, the k-th with seed + k and its cycles k x {CLOCK_SHIFT_S:g} s "
        "further apart: "
        "p95 of all their waits together, max the mean of each replay's longest wait"]
    big_on, big_off = on[">8"]["wait"]["max"], off[">8"]["wait"]["max"]
    lines = [*over, f"- jobs of more than 8 GPUs, max wait: {_f(big_on)} s with reservations, {_f(big_off)} s without "
             f"({change_text(change['max >8'])})"]
    for key in ("<=1", "2-8"):
        a, b = on[key]["wait"]["p95"], off[key]["wait"]["p95"]
        lines.append(f"- jobs of {key} GPUs, p95 wait: {_f(a)} s with reservations, {_f(b)} s without "
                     f"({change_text(change[f'p95 {key}'])})")
    if noise is not None:
        moves = ", ".join(f"{mark} by {change_text(x)}" for mark, x in noise.changes.items())
        lines.append(f"- noise floor: {NOISE_RUN} changes {moves}: a change of that size cannot be told from chance")
    return ["## What reservations buy (tidal vs tidal-no-reservations)", "", *lines, ""]


# What reservations are judged on (issue 25): the small classes' p95 wait, the largest class's longest wait.
RESERVATION_MARKS = (("<=1", "p95"), ("2-8", "p95"), (">8", "max"))


def marks_of(figures: dict) -> dict:
    """The size classes a run's marks are read from: over its replicates when it has several, else its own."""
    return figures.get("replicates", figures)["by_size"]


def marks_change(on: dict, off: dict) -> dict[str, float | None]:
    """Per mark, `on`'s relative change against `off` (the figures of two runs, each with its `by_size`, as
    summary_json has them, and its `replicates` when it has several; a mark's None: no such jobs)."""
    on, off = marks_of(on), marks_of(off)
    return {f"{stat} {size}": _relative(on[size]["wait"][stat], off[size]["wait"][stat])
            for size, stat in RESERVATION_MARKS}


def reservations_change(figures: dict) -> dict[str, float | None] | None:
    """Per mark, tidal's relative change against tidal-no-reservations in one replay's figures per policy (None: one
    of them did not run)."""
    on, off = figures.get("tidal"), figures.get("tidal-no-reservations")
    return None if on is None or off is None else marks_change(on, off)


def noise_change(figures: dict, noise: dict) -> dict[str, float | None] | None:
    """Per mark, the noise floor: NOISE_POLICY replayed with its cycles CLOCK_SHIFT_S further apart (`noise`, its
    figures) against the same policy in `figures` (None: it did not run)."""
    off = figures.get(NOISE_POLICY)
    return None if off is None else marks_change(noise, off)


def reservations_across(changes: dict[float, dict[str, float | None]]) -> list[str]:
    """A markdown table of the marks' changes at each load factor (what reservations change, or the noise floor),
    with the median of each mark: one replay is one sample of a chaotic system (a class's p95 moves by tens of
    percent with the load factor)."""
    marks = [f"{stat} {size}" for size, stat in RESERVATION_MARKS]
    lines = ["| load factor | " + " | ".join(marks) + " |", "|---" * (len(marks) + 1) + "|"]
    lines += [f"| {lf:g} | " + " | ".join(change_text(c[m]) for m in marks) + " |" for lf, c in changes.items()]
    medians = [statistics.median(known) if (known := [c[m] for c in changes.values() if c[m] is not None]) else None
               for m in marks]
    lines.append("| median | " + " | ".join(change_text(m) for m in medians) + " |")
    return lines


def _relative(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else 0.0 if a == b else math.inf if not b else (a - b) / b


def change_text(x: float | None) -> str:
    return "–" if x is None else "∞" if x == math.inf else f"{100 * x:+.1f}%"


def variant_change(profile) -> str:
    """What a replay variant changes in the tidal profile ("reservations=False")."""
    base = profile_dict(get_profile("tidal"))
    return ", ".join(f"{k}={v}" for k, v in profile_dict(profile).items() if k != "name" and base[k] != v)


def profile_dict(profile) -> dict:
    """The profile a run used, field by field (so a report says exactly what ran)."""
    def plain(v):
        if isinstance(v, Enum):
            return v.value
        if isinstance(v, tuple):
            return [plain(x) for x in v]
        return v
    return {f.name: plain(getattr(profile, f.name)) for f in fields(profile)}


def Counter_of(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def report_json(setup: Setup, runs: Sequence[PolicyRun], noise: NoiseFloor | None = None) -> dict:
    trace = setup.trace
    return {
        "trace": trace.name,
        "pods_file": str(trace.path),
        "mode": setup.mode,
        "timed": trace.timed,
        "load_factor": setup.options.load_factor,
        "nodes": len(setup.nodes),
        "gpus": sum(setup.capacity_by_model.values()),
        "gpus_by_model": setup.capacity_by_model,
        "pods": len(trace.pods),
        "pods_replayed": len(setup.pods),
        "unplaceable": [{"line": u.line, "pod": u.name, "why": u.why} for u in setup.unplaceable],
        "mapping": mapping_rules(setup),
        "gangs": None if setup.gangs is None else {
            "jobs": len(setup.gangs.workers), "target_share": round(setup.gangs.target_share, 6),
            "share": round(setup.gangs.share, 6), "gpu_time_growth": round(setup.gangs.growth, 6),
            "source": setup.options.gang_source},
        "policies": {r.policy: {**r.figures, "extra": r.extra, "profile": profile_dict(r.profile),
                                "timeline": r.timeline, "fairness_timeline": r.fairness} for r in runs},
        "noise_floor": None if noise is None else {"policy": NOISE_POLICY, "cycles_further_apart_s": CLOCK_SHIFT_S,
                                                   "by_size": marks_of(noise.run.figures),
                                                   "changes": noise.changes},
    }


def write_report(out: Path, setup: Setup, runs: Sequence[PolicyRun], command: str,
                 wall_s: float | None = None, noise: NoiseFloor | None = None) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = report_json(setup, runs, noise)
    (out / "report.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    (out / "timings.json").write_text(json.dumps(summary_json(runs), indent=1) + "\n")
    paths = {k: out / v for k, v in PLOTS.items()}
    _plot_alloc(paths["alloc_share"], setup, runs)
    _plot_fragmentation(paths["fragmentation"], setup, runs)
    _plot_waits(paths["waits"], setup, runs)
    _plot_preemptions(paths["preemptions"], runs)
    _plot_util(paths["util_by_model"], setup, runs)
    _plot_waits_by_size(paths["waits_by_size"], runs)
    _plot_fairness(paths["fairness"], setup, runs)
    (out / "report.md").write_text(_markdown(setup, runs, data, command, wall_s, noise))
    return {"report.md": out / "report.md", "report.json": out / "report.json", **paths}


# -- markdown -----------------------------------------------------------------------------------
def _f(x, digits: int = 1, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.{digits}f}%" if pct else f"{x:,.{digits}f}"


def _markdown(setup: Setup, runs: Sequence[PolicyRun], data: dict, command: str, wall_s: float | None,
              noise: NoiseFloor | None = None) -> str:
    t, opt = setup.trace, setup.options
    inflate = setup.mode == "inflate"
    lines = [f"# Trace replay: {t.name} ({setup.mode}{'' if inflate else f', load factor {opt.load_factor:g}'})", "",
             f"`{command}`", "",
             f"- pods: `{t.path}` — {len(t.pods):,} pods, {len(setup.pods):,} replayed, "
             f"{len(setup.unplaceable):,} unplaceable (listed below)",
             f"- cluster: {len(setup.nodes):,} nodes, {data['gpus']:,} GPUs "
             f"({', '.join(f'{m} {c}' for m, c in setup.capacity_by_model.items())})",
             f"- policies: {', '.join(r.policy for r in runs)} — the profile objects of "
             "`scheduler.policy.get_profile(name)`, as loaded by the live loop (replay's variants: "
             + ", ".join(f"{n} = tidal with {variant_change(v)}" for n, v in VARIANTS.items()) + ")",
             f"- wall time of all policies: {wall_s:.1f} s" if wall_s is not None else "", ""]
    if not t.timed:
        lines += ["**This pod list has no time columns** (no creation/scheduled/deletion times), so only the "
                  "inflate experiment is possible; it ran instead of a timeline replay.", ""]
    lines += ["## Headline figures", ""]
    if inflate:
        lines += ["| policy | GPU share allocated at first failure | unallocated GPUs then | pods submitted | "
                  "preemptions | model fallbacks | wall s | events/s |", "|---|---|---|---|---|---|---|---|"]
        for r in runs:
            f = r.figures
            lines.append(f"| {r.policy} | {_f(f['gpu_alloc_share'], 2, True)} | "
                         f"{_f(f['unallocated_gpus_at_first_failure'])} | {r.extra['pods_submitted']:,} | "
                         f"{f['preemptions']:,} | {f['gpu_model_fallbacks']:,} | {r.wall_s:.1f} | "
                         f"{r.events_per_s:,.0f} |")
        ff = [(r.policy, r.figures["first_failure"]) for r in runs]
        lines += ["", "First GPU pod that could not be placed: " + "; ".join(
            f"{p}: {x['pod']} ({x['reason']})" for p, x in ff if x), ""]
    else:
        lines += ["| policy | mean GPU share allocated | peak | unallocated GPU-h while GPU pods waited | "
                  "wait p50 / p95 / p99 s | own-quota (LS) p95 s | preemptions | model fallbacks | "
                  "unallocated GPUs at first failure | cycles | wall s | events/s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in runs:
            f = r.figures
            lines.append(
                f"| {r.policy} | {_f(f['gpu_alloc_share'], 3, True)} | {_f(f['peak_gpu_alloc_share'], 2, True)} | "
                f"{_f(f['unallocated_gpu_hours'])} | {_f(f['wait_p50_s'])} / {_f(f['wait_p95_s'])} / "
                f"{_f(f['wait_p99_s'])} | {_f(f['wait_p95_own_s'])} | {f['preemptions']:,} | "
                f"{f['gpu_model_fallbacks']:,} | {_f(f['unallocated_gpus_at_first_failure'])} | {f['cycles']:,} | "
                f"{r.wall_s:.1f} | {r.events_per_s:,.0f} |")
        lines += ["", "Events = arrivals + admissions + finishes + preemptions; events/s = events / wall time of "
                  "that policy's replay (scheduling cycles included).", ""]
    lines += ["## Queue wait per quota kind", "",
              "Class = what the pod is entitled to (QoS): own = LS/Guaranteed, best-effort = BE/Burstable. "
              "Kind = quota of its last admission (fifo has no quotas). Pods still waiting at the end count "
              "with their wait so far.", "",
              "| policy | group | n | p50 s | p95 s | p99 s |", "|---|---|---|---|---|---|"]
    for r in runs:
        for group, w in [*(("class " + k, v) for k, v in r.figures["waits_by_class"].items()),
                         *(("kind " + k, v) for k, v in r.figures["waits_by_quota_kind"].items())]:
            if w["n"]:
                lines.append(f"| {r.policy} | {group} | {w['n']:,} | {_f(w['p50'])} | {_f(w['p95'])} | "
                             f"{_f(w['p99'])} |")
    lines += ["", "## Queueing time and job completion time per job size", "",
              "Size = total GPUs of the job (every worker of a gang). A gang is one job: its wait and completion "
              "count once. JCT = finish - submit (finished jobs). Jobs still waiting at the end count with their "
              "wait so far.", "",
              "| policy | size | jobs | wait p50 s | wait p95 s | wait max s | finished | JCT p50 s | JCT p95 s | "
              "JCT max s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for key, c in r.figures["by_size"].items():
            w, j = c["wait"], c["jct"]
            lines.append(f"| {r.policy} | {key} | {c['n']:,} | {_f(w['p50'])} | {_f(w['p95'])} | {_f(w['max'])} | "
                         f"{j['n']:,} | {_f(j['p50'])} | {_f(j['p95'])} | {_f(j['max'])} |")
    lines += ["", f"Gangs: {gang_rule(setup)}. Gangs that held a reservation: "
              + ", ".join(f"{r.policy} {r.figures['gangs_reserved']:,}" for r in runs) + ".", ""]
    lines += longest_waits(runs)
    if not inflate:
        lines += quota_marks(setup, runs)
    lines += reservations_verdict(runs, noise)
    lines += ["## Preemptions, fallbacks, utilization per GPU model", "",
              "| policy | preemptions (by reason) | jobs preempted | GPU-h lost | fallbacks / jobs with a "
              "chosen model | never started | " + " | ".join(setup.capacity_by_model) + " |",
              "|---|---|---|---|---|---|" + "---|" * len(setup.capacity_by_model)]
    for r in runs:
        f = r.figures
        reasons = ", ".join(f"{k} {v}" for k, v in f["preemptions_by_reason"].items()) or "–"
        lines.append(f"| {r.policy} | {f['preemptions']} ({reasons}) | {f['jobs_preempted']} | "
                     f"{f['preempted_gpu_hours_lost']:.1f} | {f['gpu_model_fallbacks']} / "
                     f"{f['jobs_with_preferred_model']} | {f['jobs_never_started']} | "
                     + " | ".join(_f(f["util_by_gpu_model"].get(m), 2, True) for m in setup.capacity_by_model)
                     + " |")
    lines += ["", ("Utilization per model = allocated share of that model's GPUs at the first failure."
                   if inflate else "Utilization per model = time-mean allocated share of that model's GPUs."), ""]
    lines += ["## Plots", ""] + [f"![{k}]({v})" for k, v in PLOTS.items()] + [""]
    rules = data["mapping"]
    lines += ["## Mapping (trace → Tidal)", ""]
    if rules["tree"]:
        lines.append("- **tree**: " + "; ".join(f"{d}: {', '.join(vcs)}" for d, vcs in rules["tree"].items()))
    for key in ("department_rule", "own_quota", "borrowed_quota", "qos", "gpu_spec", "run_time", "arrival", "gangs",
                "expected_duration", "clock"):
        lines.append(f"- **{key.replace('_', ' ')}**: {rules[key]}")
    lines.append(f"- **run-time rules used**: {rules['run_time_rules_used']}")
    lines.append(f"- **departments** ({len(rules['departments'])}, Helios-shaped shares): " + ", ".join(
        f"{d} {100 * s:.1f}%" for d, s in rules["departments"].items()))
    lines += ["- CPU-only pods run on CPU-only nodes only (the scheduler's model: a pod without GPUs is placed "
              "on the CPU group).", "- The trace has no run history: right-sizing and the utilization term of the "
              "score are inert; tidal differs from quota-borrowing here by aging and GPU-model fallback.", ""]
    lines += [f"## Unplaceable pods ({len(setup.unplaceable)})", ""]
    if setup.unplaceable:
        lines += [f"- `{t.path}:{u.line}` {u.name}: {u.why}" for u in setup.unplaceable[:200]]
        if len(setup.unplaceable) > 200:
            lines.append(f"- … {len(setup.unplaceable) - 200} more in report.json")
    else:
        lines.append("None: every pod fits some node of the cluster.")
    return "\n".join(lines) + "\n"


# -- plots --------------------------------------------------------------------------------------
def figure(title: str, width: float = 9, height: float = 4.5):
    fig, ax = plt.subplots(figsize=(width, height), dpi=110)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig, ax


def save_figure(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def _plot_alloc(path: Path, setup: Setup, runs: Sequence[PolicyRun]) -> None:
    inflate = setup.mode == "inflate"
    fig, ax = figure(f"Allocated GPUs as share of capacity — {setup.trace.name}")
    for i, r in enumerate(runs):
        xs = [p[0] for p in r.timeline]
        ys = [100 * p[1] for p in r.timeline]
        if inflate:
            ax.step(xs, ys, where="post", label=r.policy, color=COLORS.get(r.policy),
                    linestyle=STYLES.get(r.policy, "-"), linewidth=1.6)
            share = 100 * r.figures["gpu_alloc_share"]  # the first failure: where this policy stopped
            ax.plot([xs[-1]], [share], "o", color=COLORS.get(r.policy), markersize=7)
            ax.annotate(f"{r.policy}: {share:.1f}%", (xs[-1], share), textcoords="offset points",
                        xytext=(-10, 8 + 11 * i), ha="right", fontsize=8, color=COLORS.get(r.policy))
        else:
            ax.step([x / 86400 for x in xs], ys, where="post", label=r.policy, color=COLORS.get(r.policy),
                    linestyle=STYLES.get(r.policy, "-"), linewidth=1.2, alpha=0.9)
    ax.set_xlabel("virtual time (s, 10 s per submitted batch)" if inflate else "virtual time (days)")
    ax.set_ylabel("allocated GPUs (% of capacity)")
    ax.set_ylim(bottom=0)
    ax.legend()
    save_figure(fig, path)


def _bars(ax, groups: Sequence[str], series: dict[str, Sequence[float]], fmt: str = "{:.0f}") -> None:
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, [v or 0 for v in values], width, label=name, color=COLORS.get(name))
        for b, v in zip(bars, values):
            ax.annotate("–" if v is None else fmt.format(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)), groups)


def _plot_fragmentation(path: Path, setup: Setup, runs: Sequence[PolicyRun]) -> None:
    fig, ax = figure("Unallocated GPUs when the first GPU pod could not be placed (FGD measure)", 8, 4.5)
    values = [r.figures["unallocated_gpus_at_first_failure"] for r in runs]
    bars = ax.bar([r.policy for r in runs], [v or 0 for v in values], color=[COLORS.get(r.policy) for r in runs])
    for b, v, r in zip(bars, values, runs):
        share = r.figures["first_failure"]["alloc_share"] if r.figures["first_failure"] else None
        label = "never" if v is None else f"{v:,.1f} GPUs\n({100 * share:.1f}% allocated)"
        ax.annotate(label, (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("unallocated GPUs")
    ax.margins(y=0.25)
    save_figure(fig, path)


def _plot_waits(path: Path, setup: Setup, runs: Sequence[PolicyRun]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110, sharey=True)
    for ax, cls, title in zip(axes, ("own", "best_effort"), ("own-quota class (LS/Guaranteed)",
                                                             "best-effort class (BE/Burstable)")):
        ax.set_title(f"Queue wait — {title}")
        ax.grid(True, alpha=0.3)
        _bars(ax, ["p50", "p95", "p99"], {r.policy: [r.figures["waits_by_class"][cls][q] for q in ("p50", "p95", "p99")]
                                        for r in runs})
        ax.set_ylabel("wait (virtual s)")
        ax.legend()
    save_figure(fig, path)


def _plot_preemptions(path: Path, runs: Sequence[PolicyRun]) -> None:
    fig, ax = figure("Preemptions and GPU-model fallbacks", 8, 4.5)
    _bars(ax, ["preemptions", "jobs preempted", "model fallbacks"],
          {r.policy: [r.figures["preemptions"], r.figures["jobs_preempted"], r.figures["gpu_model_fallbacks"]]
           for r in runs})
    ax.set_ylabel("count")
    ax.margins(y=0.15)
    ax.legend()
    save_figure(fig, path)


def _plot_util(path: Path, setup: Setup, runs: Sequence[PolicyRun]) -> None:
    models = list(setup.capacity_by_model)
    what = "at first failure" if setup.mode == "inflate" else "time mean"
    fig, ax = figure(f"GPU allocation per GPU model ({what})", 10, 4.5)
    _bars(ax, [f"{m}\n({setup.capacity_by_model[m]} GPUs)" for m in models],
          {r.policy: [100 * r.figures["util_by_gpu_model"][m] for m in models] for r in runs}, "{:.1f}")
    ax.set_ylabel("allocated (% of the model's GPUs)")
    ax.margins(y=0.15)
    ax.legend()
    save_figure(fig, path)


def _plot_waits_by_size(path: Path, runs: Sequence[PolicyRun]) -> None:
    classes = [key for key in runs[0].figures["by_size"]] if runs else []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=110)
    for ax, stat in zip(axes, ("p95", "max")):
        ax.set_title(f"Queue wait {stat} per job size (total GPUs)")
        ax.grid(True, alpha=0.3)
        _bars(ax, classes, {r.policy: [r.figures["by_size"][k]["wait"][stat] for k in classes] for r in runs})
        ax.set_ylabel("wait (virtual s)")
        ax.margins(y=0.15)
        ax.legend()
    save_figure(fig, path)


def _plot_fairness(path: Path, setup: Setup, runs: Sequence[PolicyRun]) -> None:
    """Jain's index of usage / fair share over time, and each department's time mean of usage / fair share."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), dpi=110, gridspec_kw={"width_ratios": [3, 2]})
    left, right = axes
    left.set_title("Jain's index of usage / fair share")
    left.grid(True, alpha=0.3)
    for r in runs:
        points = [(t / 86400, v) for t, v in r.fairness if v is not None]
        if points:
            left.step(*zip(*points), where="post", label=r.policy, color=COLORS.get(r.policy),
                      linestyle=STYLES.get(r.policy, "-"), linewidth=1.0, alpha=0.8)
    left.set_xlabel("virtual time (days)")
    left.set_ylim(0, 1.02)
    if left.get_legend_handles_labels()[0]:  # an inflate run measures no fairness
        left.legend()
    departments = list(setup.mapping.shares)
    right.set_title("Usage / fair share per department (time mean)")
    right.grid(True, alpha=0.3)
    _bars(right, range(len(departments)), {r.policy: [r.figures["fairness"]["usage_over_fair_share"].get(d)
                                                       for d in departments] for r in runs}, "")
    right.set_xticks(range(len(departments)), departments, rotation=90, fontsize=7)
    right.axhline(1.0, color="black", linewidth=0.8)
    right.legend()
    save_figure(fig, path)
