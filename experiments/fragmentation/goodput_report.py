"""Goodput of interference-aware `tidal` against today's, over several FGD traces, from the `--json` files of
`manage.py fragmentation --policies tidal,tidal-interference` (docs/results/2026-11-29-interference-goodput.md).

`python -m experiments.fragmentation.goodput_report OUT.png TRACE=JSON ...` prints the Markdown table and writes the
plot: goodput and unallocated GPU % at 100 % arrived, per trace, mean ± sd over the seeds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from experiments.fragmentation.report import COLORS
from experiments.replay.report import figure, save_figure

BASE, AWARE = "tidal", "tidal-interference"


def rows(runs: dict[str, dict]) -> list[str]:
    lines = ["| trace | policy | unallocated GPU % at 100 % | goodput % at 100 % | goodput % at the end | "
             "pairs placed that the model refuses (end) | shares the model kept off least loss's GPU |",
             "|---|---|---|---|---|---|---|"]
    for trace, data in runs.items():
        for policy in (BASE, AWARE):
            p = data["policies"][policy]
            g, u = p["goodput"], p["at100"]
            lines.append(f"| {trace} | {policy} | {u['mean']:.2f} ± {u['sd']:.2f} | {g['at100']['mean']:.2f} ± "
                         f"{g['at100']['sd']:.2f} | {g['at_end']['mean']:.2f} ± {g['at_end']['sd']:.2f} | "
                         f"{g['refused_pairs_at_end']:g} | {g['overruled']:g} |")
        base, aware = data["policies"][BASE], data["policies"][AWARE]
        lines.append(f"| {trace} | **difference** | **{aware['at100']['mean'] - base['at100']['mean']:+.2f}** | "
                     f"**{aware['goodput']['at100']['mean'] - base['goodput']['at100']['mean']:+.2f}** | "
                     f"{aware['goodput']['at_end']['mean'] - base['goodput']['at_end']['mean']:+.2f} | | |")
    return lines


def plot(runs: dict[str, dict], path: Path) -> None:
    fig, ax = figure("Goodput and unallocated GPUs at arrived = 100 % (mean ± sd over seeds 42-51)", 9, 4.5)
    traces = list(runs)
    x = np.arange(len(traces))
    for i, policy in enumerate((BASE, AWARE)):
        good = [runs[t]["policies"][policy]["goodput"]["at100"] for t in traces]
        free = [runs[t]["policies"][policy]["at100"] for t in traces]
        bars = ax.bar(x + (i - 0.5) * 0.38, [g["mean"] for g in good], 0.38, yerr=[g["sd"] for g in good],
                      capsize=3, color=COLORS[policy], label=f"{policy}: goodput %")
        for b, g, f in zip(bars, good, free):
            ax.annotate(f"{g['mean']:.2f}\n({f['mean']:.2f} unalloc.)", (b.get_x() + b.get_width() / 2, b.get_height()),
                        xytext=(0, 4), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, traces)
    ax.set_ylabel("useful GPU work (% of capacity)")
    lows = [runs[t]["policies"][p]["goodput"]["at100"]["mean"] for t in traces for p in (BASE, AWARE)]
    ax.set_ylim(min(lows) - 8, 100)
    ax.legend(loc="upper right")
    save_figure(fig, path)


def main(argv: Sequence[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: python -m experiments.fragmentation.goodput_report OUT.png TRACE=JSON ...")
    runs = {}
    for arg in argv[1:]:
        trace, _, path = arg.partition("=")
        runs[trace] = json.loads(Path(path).read_text())
    print("\n".join(rows(runs)))
    plot(runs, Path(argv[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
