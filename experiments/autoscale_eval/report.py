"""The evaluation's outputs: the JSON figures, report.md and the PNG plots (matplotlib, Agg)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cluster.simulated.inference import DAY_MIN  # noqa: E402
from experiments.autoscale_eval.front import covering, dominates, pareto  # noqa: E402
from experiments.autoscale_eval.sweep import tidal_rates  # noqa: E402

COLORS = {"static": "tab:gray", "hpa": "tab:orange", "reactive": "tab:blue", "tidal": "tab:green"}
PLOTS = ("load_replicas.png", "load_replicas_day.png", "forecast_h5.png")
FRONT_PLOT = "front.png"


def _figure(title: str, rows: int = 1, width: float = 11, height: float = 4.5):
    fig, axes = plt.subplots(rows, 1, figsize=(width, height), dpi=100, sharex=True, squeeze=False)
    axes[0][0].set_title(title)
    for (ax,) in axes:
        ax.grid(True, alpha=0.3)
    return fig, [a for (a,) in axes]


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def plot_load_replicas(path: Path, title: str, demand: np.ndarray, replicas: dict[str, np.ndarray],
                       capacity: float, first_day: int, sl: slice = slice(None)) -> None:
    """Demand (top) and the replicas each policy provisioned (bottom), x in days of the trace."""
    x = (np.arange(len(demand))[sl] / DAY_MIN) + first_day
    fig, (top, bottom) = _figure(title, rows=2, height=6.5)
    top.plot(x, demand[sl] / capacity, color="black", linewidth=0.6, label="demand (replicas at utilization 1.0)")
    top.set(ylabel="load (replica-equivalents)")
    top.legend(loc="upper right")
    for name, r in replicas.items():
        bottom.step(x, r[sl], where="post", color=COLORS.get(name), linewidth=0.9, label=name)
    bottom.set(xlabel="day of the trace (local time)", ylabel="replicas")
    bottom.legend(loc="upper right", ncol=4)
    _save(fig, path)


def plot_forecast(path: Path, title: str, actual: np.ndarray, h5: np.ndarray, first_day: float) -> None:
    """The work five minutes ahead against what the forecast said five minutes before."""
    x = np.arange(len(actual)) / DAY_MIN + first_day
    fig, (ax,) = _figure(title)
    ax.plot(x, actual, color="black", linewidth=0.7, label="actual")
    ax.plot(x, h5, color="tab:green", linewidth=0.7, alpha=0.8, label="XGBoost forecast made 5 minutes earlier")
    ax.set(xlabel="day of the trace (local time)", ylabel="utilization at the notional replica count")
    ax.legend(loc="upper right")
    _save(fig, path)


def plot_front(path: Path, title: str, front) -> None:
    """Overloaded minutes (x) against replica-hours (y): HPA's targets as a line, every tidal setting as a dot,
    tidal's Pareto front as a line and, when scale to zero was tried, its front without it dashed. Labelled: HPA's
    targets and the tidal point covering each (expectRate/headroom/band, /z30 for scale to zero after 30 idle
    minutes); lower-left is better."""
    fig, (ax,) = _figure(title, width=8, height=5.5)
    ax.scatter([p.overloaded_min for p in front.tidal], [p.replica_hours for p in front.tidal], s=10,
               color=COLORS["tidal"], alpha=0.35, label="tidal, every setting")
    lines = [("hpa (target)", list(front.hpa), "o", "-", COLORS["hpa"]),
             ("tidal front", pareto(front.tidal), "s", "-", COLORS["tidal"])]
    if len(front.always_on) < len(front.tidal):
        lines.append(("tidal front without scale to zero", pareto(front.always_on), None, "--", COLORS["tidal"]))
    for label, points, marker, style, color in lines:
        ax.plot([p.overloaded_min for p in points], [p.replica_hours for p in points], marker=marker, linestyle=style,
                color=color, linewidth=0.9, markersize=4, label=label)
    for p in front.hpa:
        ax.annotate(f"{p.knob:.2f}", (p.overloaded_min, p.replica_hours), textcoords="offset points", xytext=(4, 4),
                    fontsize=7, color=COLORS["hpa"])
        q = covering(p, front.tidal)
        if q is not None:
            text = f"{q.knob:.2f}/{q.headroom:g}/±{q.band:.0%}" + (f"/z{q.idle_min}" if q.idle_min else "")
            ax.annotate(text, (q.overloaded_min, q.replica_hours), textcoords="offset points", xytext=(4, -10),
                        fontsize=7, color=COLORS["tidal"])
    ax.set_xscale("symlog", linthresh=10)
    ax.set(xlabel="overloaded minutes (utilization > 1.0)", ylabel="replica-hours")
    ax.legend(loc="upper right")
    _save(fig, path)


def busiest_day(demand: np.ndarray) -> int:
    """The evaluated day (index) with the highest minute: the zoomed plot's day."""
    return int(np.argmax(demand[: len(demand) // DAY_MIN * DAY_MIN].reshape(-1, DAY_MIN).max(axis=1)))


def write_json(figures: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(figures, indent=2, sort_keys=False) + "\n")


def _pct(a: float, b: float) -> str:
    return f"{(a - b) / b:+.0%}" if b else "n/a"


def front_markdown(front) -> list[str]:
    """The front's table and the dominance verdict, one line per HPA point."""
    lines = ["", f"## Front (start-up {front.startup_min} min)", "",
             "| policy | setting | overloaded min | replica-hours |", "|---|---|---|---|"]
    for p in (*front.hpa, *front.tidal):
        r = tidal_rates(p.knob, p.band)
        knob = f"target {p.knob:.2f}" if p.policy == "hpa" else \
            f"min/expect/max {r.min_rate:g}/{r.expect_rate:g}/{r.max_rate:g}, headroom {p.headroom:g}" + (
                f", to zero after {p.idle_min} idle min" if p.idle_min else "")
        lines.append(f"| {p.policy} | {knob} | {p.overloaded_min} | {p.replica_hours:,.1f} |")
    verdict = "dominates" if front.dominates else "does **not** dominate"
    lines += ["", f"Tidal's front {verdict} HPA's (for every HPA point, a tidal point with no more overloaded "
                  "minutes and no more replica-hours):", ""]
    lines += [f"- {line}" for line in front.lines()]
    lines += ["", without_zero(front), "", f"Plot: `{FRONT_PLOT}`.", ""]
    return lines


def without_zero(front) -> str:
    """The verdict on HPA's own terms: tidal's points that never go under minReplicas."""
    if len(front.always_on) == len(front.tidal):
        return "No scale-to-zero setting was run: the traffic never idles as long as the shortest idle time tried."
    verdict = "still dominates" if dominates(front.always_on, front.hpa) else "does not dominate"
    return (f"Without scale to zero (HPA cannot go below minReplicas) tidal's front {verdict} HPA's: "
            f"{len(front.always_on)} of its {len(front.tidal)} points never go to zero.")


def markdown(figures: dict, command: str, wall_s: float, front=None) -> str:
    p, f, s, acc = figures["policies"], figures["forecast"], figures["service"], figures["acceptance"]
    lines = [
        f"# Autoscaling evaluation — {figures['trace']}", "",
        f"`{command}` — {wall_s:.1f} s wall", "",
        f"Evaluated {figures['days']} whole days of the trace's {figures.get('trace_days', '?')} (days "
        f"{figures['eval_days'][0]}–{figures['eval_days'][1]}, local time; {figures.get('unit', 'requests/min')}); "
        f"the forecast was trained only on the {figures['train_days']} days just before them.", "",
        f"Service model: {s['capacity']:g} {figures.get('unit', 'requests/min')} per replica at utilization 1.0"
        + (f" ({s['capacity_note']})" if s.get("capacity_note") else "") + ", new replicas serve after "
        f"{s['startup_min']} minutes, scale-in at once; thresholds min/expect/max {s['min_rate']}/{s['expect_rate']}/"
        f"{s['max_rate']} on GPU utilization; {s['min_replicas']}..{s['max_replicas']} replicas; static = "
        f"{s['static_replicas']} replicas (the evaluated peak at expectRate).", "",
        "| policy | overloaded min (>1.0) | min over maxRate | replica-hours | scale events | unserved "
        + ("requests |" if figures.get("unit", "requests/min") == "requests/min" else "work |"),
        "|---|---|---|---|---|---|",
    ]
    for name, r in p.items():
        lines.append(f"| {name} | {r['overloaded_min']} | {r['over_max_rate_min']} | {r['replica_hours']:.0f} | "
                     f"{r['scale_events']} | {r['unserved_share']:.3%} |")
    mae = f["mae"]
    lines += ["", f"Forecast MAE (utilization at the notional {f['notional_replicas']} replicas, {f['minutes']} "
              f"evaluated minutes; seasonal lag {f['seasonal_lag']} min):", "",
              "| model | h1 | h2 | h3 | h4 | h5 |", "|---|---|---|---|---|---|"]
    for name, values in mae.items():
        lines.append(f"| {name} | " + " | ".join(f"{v:.4f}" for v in values) + " |")
    t, r, h, st = p["tidal"], p["reactive"], p["hpa"], p["static"]
    lines += ["", "## Acceptance", "",
              f"- overloaded minutes, tidal vs reactive: {t['overloaded_min']} vs {r['overloaded_min']} "
              f"({_pct(t['overloaded_min'], r['overloaded_min'])}; target <= -50%): {_ok(acc['overload_vs_reactive'])}",
              f"- overloaded minutes, tidal vs hpa: {t['overloaded_min']} vs {h['overloaded_min']} "
              f"({_pct(t['overloaded_min'], h['overloaded_min'])}; target <= -50%): {_ok(acc['overload_vs_hpa'])}",
              f"- replica-hours, tidal vs reactive: {_pct(t['replica_hours'], r['replica_hours'])} (target <= +10%): "
              f"{_ok(acc['hours_vs_reactive'])}",
              f"- replica-hours, tidal vs static: {_pct(t['replica_hours'], st['replica_hours'])} (target <= -30%): "
              f"{_ok(acc['hours_vs_static'])}",
              f"- XGBoost MAE at h5 {mae['xgboost'][4]:.4f} vs last value {mae['last_value'][4]:.4f} and seasonal "
              f"{mae['seasonal'][4]:.4f}: {_ok(acc['forecast_h5'])}",
              "", f"Forecast used by tidal: {'yes' if f['usable'] else 'no — ' + f['note']}", "",
              "Plots: " + ", ".join(f"`{n}`" for n in PLOTS) + f" (zoom: day {figures['zoom_day']}).", ""]
    if front is not None:
        lines += front_markdown(front)
    return "\n".join(lines)


def _ok(flag: bool) -> str:
    return "**met**" if flag else "**not met**"


def acceptance(policies: dict, mae: dict) -> dict:
    t, r, h, s = (policies[k] for k in ("tidal", "reactive", "hpa", "static"))
    return {
        "overload_vs_reactive": t["overloaded_min"] <= 0.5 * r["overloaded_min"],
        "overload_vs_hpa": t["overloaded_min"] <= 0.5 * h["overloaded_min"],
        "hours_vs_reactive": t["replica_hours"] <= 1.10 * r["replica_hours"],
        "hours_vs_static": t["replica_hours"] <= 0.70 * s["replica_hours"],
        "forecast_h5": mae["xgboost"][4] < min(mae["last_value"][4], mae["seasonal"][4]),
    }
