"""The LLM evaluation end to end: read the ServeGen-format trace, sweep the three policies at each start-up time,
write report.md, figures.json and front.png (matplotlib, Agg)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.autoscale_eval.llm.front import covering, dominates, pareto  # noqa: E402
from experiments.autoscale_eval.llm.replica import GroupModel  # noqa: E402
from experiments.autoscale_eval.llm.run import Slo  # noqa: E402
from experiments.autoscale_eval.llm.servegen import DAY_MIN, Workload, read  # noqa: E402
from experiments.autoscale_eval.llm.sweep import Sweep, sweep  # noqa: E402

COLORS = {"tidal": "tab:green", "hpa": "tab:orange", "kpa": "tab:purple"}
FRONT_PLOT = "front.png"


@dataclass(frozen=True)
class LlmConfig:
    trace_path: Path
    days: int | None = 14  # None, or more than the trace holds: all it holds
    startups: tuple[int, ...] = (3, 10)
    model: GroupModel = GroupModel()
    slo: Slo = Slo()
    seed: int = 0


def evaluate(cfg: LlmConfig, out: Path, command: str, tick: Callable[[], None] | None = None) -> dict:
    began = time.monotonic()
    full = read(cfg.trace_path, cfg.seed)
    held = full.minutes / DAY_MIN
    w = evaluated(full, cfg.days)
    sweeps = [sweep(w, replace(cfg.model, startup_min=s), cfg.slo, tick) for s in cfg.startups]
    m = cfg.model
    figures = {"trace": w.name, "days": round(w.minutes / DAY_MIN, 2), "trace_days": round(held, 2),
               "tokens": w.tokens, "group": {"gpus": m.gpus, "gpu": m.gpu, "tp": m.tp, "pp": m.pp,
                                             "params_b": m.model.params_b,
                                             "prefill_tokens_s": round(m.prefill_tokens_s),
                                             "decode_step_ms": round(1e3 * m.step_s, 2)},
               "slo": {"ttft_s": cfg.slo.ttft_s, "tpot_s": cfg.slo.tpot_s},
               "sweeps": [_sweep_figures(s) for s in sweeps]}
    out.mkdir(parents=True, exist_ok=True)
    plot_fronts(out / FRONT_PLOT, f"{w.name}: SLO attainment against GPU-hours per million tokens", sweeps)
    figures["wall_s"] = round(time.monotonic() - began, 1)
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    (out / "report.md").write_text(markdown(figures, sweeps, command))
    return figures


def evaluated(full: Workload, days: int | None) -> Workload:
    """The first `days` whole days, or all the trace holds when that is less (part of a day included)."""
    return full.days(days if days and days < full.minutes / DAY_MIN else None)


def _sweep_figures(s: Sweep) -> dict:
    tidal = s.of("tidal")
    return {"startup_min": s.startup_min,
            "points": [[p.policy, p.setting, p.attainment, p.gpu_hours_per_mtok] for p in s.points],
            "tidal_dominates_hpa": dominates(tidal, s.of("hpa")),
            "tidal_dominates_kpa": dominates(tidal, s.of("kpa"))}


def markdown(figures: dict, sweeps: Sequence[Sweep], command: str) -> str:
    g, slo = figures["group"], figures["slo"]
    lines = [f"# LLM autoscaling — {figures['trace']}", "", f"`{command}` — {figures['wall_s']} s wall", "",
             f"{figures['days']} days evaluated (the trace holds {figures['trace_days']}); a replica is a group of "
             f"{g['gpus']} × {g['gpu']} (TP {g['tp']} × PP {g['pp']}) serving a {g['params_b']:g}B model: "
             f"{g['prefill_tokens_s']:,} prompt tokens/s, a {g['decode_step_ms']} ms decode step; SLO: TTFT "
             f"{slo['ttft_s']:g} s, TPOT {slo['tpot_s'] * 1e3:g} ms.", ""]
    for s, f in zip(sweeps, figures["sweeps"]):
        lines += [f"## Start-up {s.startup_min} min", "", "| policy | setting | SLO attainment | GPU-h per M tokens |"
                  " covered by tidal |", "|---|---|---|---|---|"]
        for p in s.points:
            q = covering(p, s.of("tidal")) if p.policy != "tidal" else None
            cover = "" if p.policy == "tidal" else (f"{q.setting}" if q else "**no**")
            lines.append(f"| {p.policy} | {p.setting} | {p.attainment:.2%} | {p.gpu_hours_per_mtok:.4f} | {cover} |")
        lines += ["", f"Tidal's front dominates HPA's: **{'yes' if f['tidal_dominates_hpa'] else 'no'}**; "
                      f"the KPA's: **{'yes' if f['tidal_dominates_kpa'] else 'no'}**.", ""]
    lines += [f"Plot: `{FRONT_PLOT}`.", ""]
    return "\n".join(lines)


def plot_fronts(path: Path, title: str, sweeps: Sequence[Sweep]) -> None:
    fig, axes = plt.subplots(1, len(sweeps), figsize=(6 * len(sweeps), 4.8), dpi=100, squeeze=False)
    for ax, s in zip(axes[0], sweeps):
        for policy, color in COLORS.items():
            pts = s.of(policy)
            ax.scatter([p.gpu_hours_per_mtok for p in pts], [100 * p.attainment for p in pts], s=12, color=color,
                       alpha=0.4)
            front = pareto(pts)
            ax.plot([p.gpu_hours_per_mtok for p in front], [100 * p.attainment for p in front], marker="o",
                    markersize=3, color=color, linewidth=1, label=f"{policy} front")
        ax.set(title=f"start-up {s.startup_min} min", xlabel="GPU-hours per million tokens",
               ylabel="SLO attainment (% of requests)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
