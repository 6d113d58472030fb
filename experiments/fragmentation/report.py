"""report.md, report.json and PNG plots of an FGD experiment (plot helpers shared with experiments/replay)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from experiments.fragmentation.experiment import CURVE, FRAG_AT, HEADLINE, Outcome, details, summary
from experiments.replay.report import figure, save_figure

PLOTS = {
    "curve": "unallocated_vs_arrived.png",
    "at100": "unallocated_at_100.png",
    "frag": "fragmentation_vs_arrived.png",
}
# Unallocated GPU % at arrived = 100 %, mean of seeds 42-51, on openb_node_list_gpu_node.csv (Weng et al., ATC'23;
# the artifact's experiments/analysis/expected_results/analysis_allo_discrete.csv gives the same means).
PUBLISHED = {
    "default": {"random": 13.70, "dotprod": 9.38, "clustering": 8.35, "packing": 8.22, "bestfit": 7.14, "fgd": 4.77},
    "cpu050": {"random": 10.98, "dotprod": 6.97, "clustering": 6.48, "packing": 6.54, "bestfit": 6.44, "fgd": 5.00},
    "gpushare40": {"random": 15.14, "dotprod": 10.70, "clustering": 10.24, "packing": 10.23, "bestfit": 8.56,
                   "fgd": 6.04},
    "gpuspec10": {"random": 13.74, "dotprod": 9.83, "clustering": 8.04, "packing": 7.76, "bestfit": 6.90,
                  "fgd": 5.34},
    "multigpu20": {"random": 13.08, "dotprod": 8.15, "clustering": 6.66, "packing": 6.50, "bestfit": 6.27,
                   "fgd": 4.47},
}
PUBLISHED_CLUSTER = (1213, 6212)  # nodes, GPUs of the node list the published figures used
COLORS = {"random": "#7f7f7f", "dotprod": "#9467bd", "clustering": "#2ca02c", "packing": "#ff7f0e",
          "bestfit": "#1f77b4", "fgd": "#d62728", "tidal": "#17becf", "tidal-interference": "#8c564b"}

RULES = [
    "Cluster: the node list's GPU nodes, 1,000 milli-GPU per GPU; CPU-only pods land on GPU nodes.",
    "Arrivals per seed: the pod list sorted by name, shuffled, then tuned to the tune ratio x GPU capacity "
    "(pods dropped at random when above; drawn with replacement and appended until the next one would pass it "
    "when below — compared, as the artifact's tuneUpPods does, with that pod's milli-GPU per GPU). One pod at a "
    "time, no departures, a pod no node takes is dropped.",
    "Filter (all policies): GPU model in gpu_spec (empty = any), CPU and memory fit, whole-GPU pods need that "
    "many fully free GPUs, a share one GPU with enough left.",
    "Scores are the artifact's integers 0-100 (kube-scheduler framework); nodes whose scores are equal are "
    "tied, and ties go to the first node of a per-seed random node order (the artifact's forked selectHost: "
    "smallest name, names prefixed with a random permutation).",
    "GPUs inside a node: random: a random GPU a share fits on; fgd: the GPU whose fragmentation grows least; "
    "the others best fit (the fullest GPU a share fits on). Whole GPUs: the lowest-index free ones.",
    "FGD target workload: shapes (CPU, milli-GPU per GPU, GPUs, allowed models) of the pod list, most frequent "
    "first, covering 95 % of its pods (CPU-only included); fragmentation per the artifact's frag.go.",
    "Per seed, a value at an integer arrived % is the mean over the pod events whose arrived % rounds to it "
    "(else to it +-1) of the allocated % (2 decimals); unallocated = 100 - allocated. Across seeds: mean, "
    "sample sd and median at 100 %; the curves are medians with the 25-75 % band.",
    "Fragmentation % = fragmented milli-GPU (the target workload's measure, summed over nodes) / idle milli-GPU.",
]


def published_for(outcome: Outcome) -> dict[str, float] | None:
    s = outcome.setup
    if (len(s.nodes), s.capacity_gpus) != PUBLISHED_CLUSTER or s.tune != 1.3:
        return None
    return PUBLISHED.get(s.trace)


def report_json(outcome: Outcome) -> dict:
    s = outcome.setup
    return {**summary(outcome),
            "trace": s.trace, "pods_csv": str(s.pods_path), "nodes_csv": str(s.nodes_path),
            "pods_in_list": len(s.pods), "tune": s.tune, "seeds": list(s.seeds),
            "target_workload": {"shapes": len(s.workload.shapes), "pods_covered": s.workload.weight,
                                "pods": s.workload.pods},
            "published_at100_mean": published_for(outcome),
            "details": details(outcome)}


def write_report(out: Path, outcome: Outcome, command: str) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = report_json(outcome)
    (out / "report.json").write_text(json.dumps(data, indent=1) + "\n")
    paths = {k: out / v for k, v in PLOTS.items()}
    _plot_curve(paths["curve"], outcome, data)
    _plot_at100(paths["at100"], outcome, data)
    _plot_frag(paths["frag"], outcome, data)
    (out / "report.md").write_text(_markdown(outcome, data, command))
    return {"report.md": out / "report.md", "report.json": out / "report.json", **paths}


def _f(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _markdown(outcome: Outcome, data: dict, command: str) -> str:
    s = outcome.setup
    published = published_for(outcome)
    lines = [f"# FGD experiment: {s.trace}", "", f"`{command}`", "",
             f"- pods: `{s.pods_path}` — {len(s.pods):,} pods; tuned to {s.tune:g} x capacity per seed "
             f"({min(r.pods for r in outcome.runs.values()):,}–{max(r.pods for r in outcome.runs.values()):,} "
             "arrivals)",
             f"- cluster: `{s.nodes_path}` — {len(s.nodes):,} nodes, {s.capacity_gpus:,} GPUs",
             f"- seeds: {', '.join(map(str, s.seeds))}",
             f"- FGD target workload: {len(s.workload.shapes)} shapes covering {s.workload.weight:,} of "
             f"{s.workload.pods:,} pods",
             f"- wall time: {outcome.wall_s:.1f} s on {outcome.processes} process(es)", "",
             f"## Unallocated GPU % at arrived = {HEADLINE} %", ""]
    cols = ["policy", "mean ± sd", "median"] + (["published (mean)", "ours − published"] if published else [])
    cols += [f"frag % at {a} %" for a in FRAG_AT] + ["run s (all seeds)"]
    lines += ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    for p, v in data["policies"].items():
        a = v["at100"]
        row = f"| {p} | {_f(a['mean'])} ± {_f(a['sd'])} | {_f(a['median'])} |"
        if published:
            pub = published.get(p)
            diff = None if pub is None or a["mean"] is None else a["mean"] - pub
            row += f" {_f(pub)} | {'–' if diff is None else f'{diff:+.2f}'} |"
        row += " " + " | ".join(_f(v["frag_pct"][str(x)], 1) for x in FRAG_AT)
        row += f" | {data['details'][p]['run_s']:.1f} |"
        lines.append(row)
    lines += ["", "Published: Weng et al., USENIX ATC'23, mean of seeds 42-51 (the artifact's expected results)."
              if published else "No published figure for this pod list / cluster / tune.", ""]
    lines += _goodput(data)
    lines += [
              f"## Curve: median unallocated GPU % per arrived % ({CURVE[0]}–{CURVE[1]})", "",
              "| arrived % | " + " | ".join(data["policies"]) + " |", "|---" * (len(data["policies"]) + 1) + "|"]
    for a in range(CURVE[0], CURVE[1] + 1, 5):
        lines.append(f"| {a} | " + " | ".join(_f(v["curve"][str(a)]) for v in data["policies"].values()) + " |")
    lines += ["", "## Plots", ""] + [f"![{k}]({v})" for k, v in PLOTS.items()] + ["", "## Rules", ""]
    lines += [f"- {r}" for r in RULES] + [""]
    return "\n".join(lines)


def _goodput(data: dict) -> list[str]:
    """The goodput table (experiments/fragmentation/goodput.py), when the run had the interference model."""
    rows = [(p, v["goodput"]) for p, v in data["policies"].items() if "goodput" in v]
    if not rows:
        return []
    lines = ["## Goodput (useful GPU work once shares slow each other)", "",
             "Share pods are given measured H200 workloads (seeded, uniformly); each share's work is scaled by the "
             "fraction of its solo speed the interference model predicts it keeps on its GPU.", "",
             "| policy | goodput % at 100 % arrived | goodput % at the end | refused pairs placed (end) | "
             "shares overruled by the model |", "|---|---|---|---|---|"]
    for p, g in rows:
        lines.append(f"| {p} | {_f(g['at100']['mean'])} ± {_f(g['at100']['sd'])} | {_f(g['at_end']['mean'])} ± "
                     f"{_f(g['at_end']['sd'])} | {g['refused_pairs_at_end']:g} | {g['overruled']:g} |")
    return lines + [""]


def _band(data: dict, policy: str, key: str, lo: int, hi: int) -> tuple[list[int], list[float], list[float],
                                                                          list[float]]:
    band = data["details"][policy][key]
    xs = [a for a in range(lo, hi + 1) if str(a) in band]
    return xs, [band[str(a)][0] for a in xs], [band[str(a)][1] for a in xs], [band[str(a)][2] for a in xs]


def _plot_curve(path: Path, outcome: Outcome, data: dict) -> None:
    fig, ax = figure(f"Unallocated GPUs vs arrived workload — {outcome.setup.trace} (median, 25–75 % band)")
    top = int(np.ceil(100 * outcome.setup.tune))
    for p in data["policies"]:
        xs, lo, mid, hi = _band(data, p, "unallocated_band", CURVE[0], top)
        ax.plot(xs, mid, label=p, color=COLORS.get(p), linewidth=1.6)
        ax.fill_between(xs, lo, hi, color=COLORS.get(p), alpha=0.2, linewidth=0)
    ax.axvline(HEADLINE, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("arrived GPU request (% of capacity)")
    ax.set_ylabel("unallocated GPUs (% of capacity)")
    ax.legend()
    save_figure(fig, path)


def _plot_at100(path: Path, outcome: Outcome, data: dict) -> None:
    published = published_for(outcome)
    fig, ax = figure(f"Unallocated GPUs at arrived = {HEADLINE} % — {outcome.setup.trace} (mean ± sd)", 8, 4.5)
    names = list(data["policies"])
    means = [data["policies"][p]["at100"]["mean"] or 0 for p in names]
    sds = [data["policies"][p]["at100"]["sd"] or 0 for p in names]
    bars = ax.bar(names, means, yerr=sds, capsize=4, color=[COLORS.get(p) for p in names])
    for b, m in zip(bars, means):
        ax.annotate(f"{m:.2f}", (b.get_x() + b.get_width() / 2, b.get_height()), xytext=(0, 6),
                    textcoords="offset points", ha="center", va="bottom", fontsize=9)
    if published:
        xs = [i for i, p in enumerate(names) if p in published]
        ax.plot(xs, [published[names[i]] for i in xs], "D", color="white", markeredgecolor="black",
                markersize=7, linestyle="none", label="published (ATC'23)")
        ax.legend()
    ax.set_ylabel("unallocated GPUs (% of capacity)")
    ax.margins(y=0.15)
    save_figure(fig, path)


def _plot_frag(path: Path, outcome: Outcome, data: dict) -> None:
    fig, ax = figure(f"Fragmented share of idle GPUs vs arrived workload — {outcome.setup.trace} (median)")
    top = int(np.ceil(100 * outcome.setup.tune))
    for p in data["policies"]:
        xs, lo, mid, hi = _band(data, p, "frag_band", 0, top)
        ax.plot(xs, mid, label=p, color=COLORS.get(p), linewidth=1.4)
        ax.fill_between(xs, lo, hi, color=COLORS.get(p), alpha=0.15, linewidth=0)
    for a in FRAG_AT:
        ax.axvline(a, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel("arrived GPU request (% of capacity)")
    ax.set_ylabel("fragmentation (% of idle GPUs)")
    ax.set_ylim(0, 100)
    ax.legend()
    save_figure(fig, path)
