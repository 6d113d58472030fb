"""Report of a co-location simulation: report.md, PNG plots (Agg), summary JSON."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from colocation.sim.run import CoLocationSim  # noqa: E402


def by_hour(values: list[float], hours: list[int]) -> list[float]:
    sums, counts = [0.0] * 24, [0] * 24
    for v, h in zip(values, hours):
        sums[h] += v
        counts[h] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


def summary(sim: CoLocationSim, static: CoLocationSim) -> dict[str, float]:
    out = sim.metrics.summary(sim.cfg.days)
    out["gpu_util_mean_static"] = static.metrics.summary(static.cfg.days)["gpu_util_mean"]
    return out


def write(sim: CoLocationSim, static: CoLocationSim, out: Path, command: str, wall_s: float) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    m, s = sim.metrics, static.metrics
    figures = summary(sim, static)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(range(24), [100 * v for v in by_hour(m.gpu_util, m.hours)], marker="o", label="lending")
    ax.plot(range(24), [100 * v for v in by_hour(s.gpu_util, s.hours)], marker="s", label="static split")
    ax.set(xlabel="hour of day (UTC)", ylabel="GPU utilization %", title="GPU utilization by hour of day")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "gpu_util_by_hour.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(10, 4))
    days = [i / 1440 for i in range(len(m.pending_online))]
    for g, series in m.online_nodes.items():
        ax.plot(days, series, label=f"{g} online nodes")
    ax.set(xlabel="day", ylabel="nodes", title="Online nodes per group (lending)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "online_nodes.png", dpi=100)
    plt.close(fig)
    lines = [
        "# Co-location simulation", "", f"`{command}` — {wall_s:.1f} s wall", "",
        "| figure | lending | static split |", "|---|---|---|",
        f"| training jobs finished on lent nodes | {figures['lent_share']:.1%} | - |",
        f"| kill rate on lent nodes | {figures['kill_rate']:.2%} | - |",
        f"| minutes with online pods pending | {figures['online_pending_minutes']} "
        f"({figures['online_pending_minutes_outside_take_back']} outside take-back windows) | "
        f"{s.summary(static.cfg.days)['online_pending_minutes']} |",
        f"| transitions per day | {figures['transitions_per_day']:.1f} | 0 |",
        f"| GPU utilization mean | {figures['gpu_util_mean']:.1%} | {figures['gpu_util_mean_static']:.1%} |",
        "", f"Jobs submitted {m.jobs_submitted}, finished {m.finished}, killed by take-backs {m.killed}, "
        f"preempted by the scheduler {m.preempted}; load factors {m.load_factors}.",
        f"Decisions: {dict(m.decisions)}.", "",
        "![GPU utilization by hour](gpu_util_by_hour.png)", "", "![online nodes](online_nodes.png)", "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    return figures


def write_json(figures: dict[str, float], path: Path) -> None:
    keys = ("lent_share", "kill_rate", "online_pending_minutes", "transitions_per_day", "gpu_util_mean",
            "gpu_util_mean_static")
    path.write_text(json.dumps({k: figures[k] for k in keys}, indent=2))
