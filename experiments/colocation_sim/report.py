"""Report of a co-location simulation: report.md, PNG plots (Agg), summary JSON."""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path

from experiments.colocation_sim.config import SimConfig
from experiments.colocation_sim.run import CoLocationSim, Metrics, Outcome
from experiments.colocation_sim.world import load_traffic
from experiments.replay.report import figure, save_figure  # the replay's plot style (Agg, reproducible PNGs)


def by_hour(values: list[float], hours: list[int]) -> list[float]:
    sums, counts = [0.0] * 24, [0] * 24
    for v, h in zip(values, hours):
        sums[h] += v
        counts[h] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


SEED = {"lent_share": 0.65, "kill_rate": 0.015}  # the seed platform's figures (issue 5)
LYRA = {"queue_wait": 1.53, "jct": 1.48}  # Lyra (EuroSys'23): static / lending, average queuing time and JCT
KILL_RATE_TARGET = 0.005  # issue 26
TWINS = ("queue_wait_mean_s", "queue_wait_p95_s", "jct_mean_s", "online_short_minutes", "gpu_util_mean")
JSON_KEYS = ("lent_share", "kill_rate", "online_pending_minutes", "transitions_per_day", "gpu_util_mean",
             "gpu_util_mean_static", "queue_wait_mean_s", "queue_wait_mean_s_static", "queue_wait_p95_s",
             "queue_wait_p95_s_static", "jct_mean_s", "jct_mean_s_static", "online_short_minutes",
             "online_short_minutes_static", "gpu_hours_lent", "kills_per_lent_node_hour", "queue_wait_ratio",
             "jct_ratio", "killed", "jobs_submitted")


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ratio(static: float, lending: float) -> float:
    return static / lending if lending > 0 else (1.0 if static <= 0 else float("inf"))


def summary(sim: Outcome, static: Outcome) -> dict[str, float]:
    out = sim.metrics.summary(sim.cfg.days)
    fs = static.metrics.summary(static.cfg.days)
    for key in TWINS:
        out[f"{key}_static"] = fs[key]
    out["queue_wait_ratio"] = _ratio(fs["queue_wait_mean_s"], out["queue_wait_mean_s"])
    out["jct_ratio"] = _ratio(fs["jct_mean_s"], out["jct_mean_s"])
    return out


def acceptance(f: dict[str, float]) -> dict[str, bool]:
    """Issue 26's checks of lending against the static split."""
    return {"queue wait >= 1.53x lower": f["queue_wait_ratio"] >= LYRA["queue_wait"],
            "JCT >= 1.48x lower": f["jct_ratio"] >= LYRA["jct"],
            "kill rate on lent nodes <= 0.5%": f["kill_rate"] <= KILL_RATE_TARGET,
            "no online-short minute caused by lending": f["online_short_minutes"] <= f["online_short_minutes_static"]}


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h"


def _plots(runs: dict[str, Outcome], static: Outcome, out: Path) -> None:
    m, s = next(iter(runs.values())).metrics, static.metrics
    fig, ax = figure("GPU utilization by hour of day", width=8, height=4)
    for label, o in runs.items():
        ax.plot(range(24), [100 * v for v in by_hour(o.metrics.gpu_util, o.metrics.hours)], marker="o",
                label=f"lending ({label})")
    ax.plot(range(24), [100 * v for v in by_hour(s.gpu_util, s.hours)], marker="s", label="static split")
    ax.set(xlabel="hour of day (UTC)", ylabel="GPU utilization %")
    ax.legend()
    save_figure(fig, out / "gpu_util_by_hour.png")
    days = [i / 1440 for i in range(len(m.pending_online))]
    fig, ax = figure("Online nodes per group (lending)", width=10, height=4)
    for g, series in m.online_nodes.items():
        ax.plot(days, series, label=f"{g} online nodes")
    ax.set(xlabel="day", ylabel="nodes")
    ax.legend()
    save_figure(fig, out / "online_nodes.png")
    fig, ax = figure("Training queue: pending jobs", width=10, height=4)
    for label, o in runs.items():
        ax.plot(days, o.metrics.training_pending, label=f"lending ({label})")
    ax.plot(days, s.training_pending, label="static split")
    ax.set(xlabel="day", ylabel="pending jobs")
    ax.legend()
    save_figure(fig, out / "queue.png")
    fig, ax = figure("Lent nodes per group", width=10, height=4)
    for label, o in runs.items():
        for g, series in o.metrics.lent_nodes.items():
            ax.plot(days, series, label=f"{g} ({label})")
    ax.set(xlabel="day", ylabel="nodes lent to training")
    ax.legend()
    save_figure(fig, out / "lent_nodes.png")


def write(sim: Outcome | dict[str, Outcome], static: Outcome, out: Path, command: str,
          wall_s: float) -> dict[str, float]:
    """report.md and the plots; the figures of the (last) lending run against the static split. `sim`: one lending
    run, or several by label ("threshold", "forecast") shown side by side."""
    out.mkdir(parents=True, exist_ok=True)
    runs = sim if isinstance(sim, dict) else {"threshold" if not sim.cfg.lending.forecast else "forecast": sim}
    primary = list(runs.values())[-1]
    figures = summary(primary, static)
    per = {label: summary(o, static) for label, o in runs.items()}
    _plots(runs, static, out)
    m, s = primary.metrics, static.metrics
    fs = s.summary(static.cfg.days)
    c = primary.cfg
    gpu = c.autoscale.rates()["gpu"]
    labels = list(runs)
    head = "| figure | " + " | ".join(f"lending ({x})" for x in labels) + " | static split | target |"
    rows = [head, "|---" * (len(labels) + 3) + "|"]

    def row(name: str, fmt, static_value: str, target: str) -> None:
        rows.append(f"| {name} | " + " | ".join(fmt(per[x], runs[x].metrics) for x in labels)
                    + f" | {static_value} | {target} |")

    row("queue wait, mean", lambda f, _: _h(f["queue_wait_mean_s"]), _h(fs["queue_wait_mean_s"]), "-")
    row("queue wait, p95", lambda f, _: _h(f["queue_wait_p95_s"]), _h(fs["queue_wait_p95_s"]), "-")
    row("JCT, mean", lambda f, _: _h(f["jct_mean_s"]), _h(fs["jct_mean_s"]), "-")
    row("queue wait static / lending", lambda f, _: f"{f['queue_wait_ratio']:.2f}x", "1", ">= 1.53x (Lyra)")
    row("JCT static / lending", lambda f, _: f"{f['jct_ratio']:.2f}x", "1", ">= 1.48x (Lyra)")
    row("killed by take-backs", lambda f, mm: f"{mm.killed}", "0", "-")
    row("kill rate on lent nodes (kills / starts on lent nodes)", lambda f, _: f"{f['kill_rate']:.2%}", "-",
        "<= 0.5%")
    row("kills per lent node-hour", lambda f, _: f"{f['kills_per_lent_node_hour']:.4f}", "-", "-")
    row("online-short minutes", lambda f, _: f"{f['online_short_minutes']}", f"{fs['online_short_minutes']}",
        "<= static")
    row("GPU-hours lent", lambda f, _: f"{f['gpu_hours_lent']:,.0f}", "0", "-")
    row("training jobs finished on lent nodes", lambda f, _: f"{f['lent_share']:.1%}", "-", "-")
    row("minutes with online pods pending (outside take-backs)",
        lambda f, _: f"{f['online_pending_minutes']} ({f['online_pending_minutes_outside_take_back']})",
        f"{fs['online_pending_minutes']}", "-")
    row("transitions per day", lambda f, _: f"{f['transitions_per_day']:.1f}", "0", "-")
    row("GPU utilization mean", lambda f, _: f"{f['gpu_util_mean']:.1%}", f"{fs['gpu_util_mean']:.1%}", "-")
    row("jobs finished / submitted (unfinished)", lambda f, mm: f"{mm.finished} / {mm.jobs_submitted} "
        f"({mm.unfinished})", f"{s.finished} / {s.jobs_submitted} ({s.unfinished})", "-")
    row("queue: mean / max pending jobs", lambda f, mm: f"{_mean(mm.training_pending):.0f} / "
        f"{max(mm.training_pending, default=0)}", f"{_mean(s.training_pending):.0f} / "
        f"{max(s.training_pending, default=0)}", "-")
    checks = acceptance(figures)
    lines = [
        "# Co-location simulation", "", f"`{command}` — {wall_s:.1f} s wall (all runs)", "",
        f"{c.days} days of `{c.traffic}` traffic (from day {primary_start(primary)}) on a virtual clock, 1-minute "
        "ticks, one cluster: " + ", ".join(f"{g.name} {g.nodes} nodes / {g.services} services" for g in c.groups)
        + ".", "", *rows, "",
        f"Acceptance of `{labels[-1]}` lending against the static split (issue 26): "
        + "; ".join(f"{k}: **{'met' if v else 'not met'}**" for k, v in checks.items()) + ".", "",
        "Queue wait: from submission to the job's first start; JCT: from submission to its end; over every job "
        "submitted in the run; a job not started (not finished) by the run's end counts until the run's end, so "
        "both are lower bounds where jobs are left over. Online-short minutes: minutes in which some inference "
        "service serves fewer ready replicas than the autoscaler asked for a minute earlier (measured at the start "
        "of each minute, before it scales again, so a new replica's start-up, shorter than a tick, never counts; "
        "a replica pending for room does).", "",
        "## Mapping and knobs", "",
        "- Nodes: Alibaba 2023 node list, the most common shape of each model. "
        + ("Lyra's layout: the static split's training side is the fixed pool of both runs; lending may lend only "
           "the nodes the static split keeps online for inference." if c.fixed_from_static else
           f"The first {c.fixed_share:.0%} (by name) of each group form the fixed training pool (never lent)."),
        f"- Inference: `{c.traffic}` per-minute curve per service (own day within 6 days before the run's and phase "
        f"+-60 min), scaled so a group's services need {c.inference_peak:.0%} of its co-location capacity (with a "
        f"{c.fixed_share:.0%} fixed pool) at their p99 minute at expectRate; per-replica GPU utilization from the "
        "Alibaba GenAI serving trace's duty cycles (k per QPS, noise); autoscaling by the live loop's policy "
        f"(`colocation.policy.autoscaling`, reactive; min/expect/max {gpu.min_rate}/{gpu.expect_rate}/"
        f"{gpu.max_rate}), {c.startup_s:.0f} s startup.",
        f"- Training: {m.training_load} Departments label jobs; each department's quota covers the cluster (no "
        "quota contention). Expected run time = "
        + (f"the real one times a lognormal factor (sigma {c.runtime_error:g})." if c.runtime_error
           else "the real one (a perfect profile)."),
        f"- Lending: `decide_lending` with thresholds {c.lending.thresholds}"
        + ("; forecast-driven runs add the seasonal forecast of each group's online demand (before a day of "
           "history: its high of the last 2 h, `recent_forecast`, with a burst band lending plans with; renewed every "
           f"{c.schedule_every_min} min; history warmed with the traffic days before the run), take back ahead of "
           f"the rise (drain {c.lending.drain_s / 60:.0f} min), lend only what stays idle "
           f"{c.lending.min_lend_s / 60:.0f} min, and place jobs on lent nodes only if they end "
           f"{c.lending.deadline_margin_s / 60:.0f} min before the predicted take-back (`lend_bar_s`)"
           if any(o.cfg.lending.forecast for o in runs.values()) else "")
        + "; transitions run by the real step machine (`next_action`); the observation is colocation/observe.py.",
        f"- Scheduling: `schedule(snapshot, get_profile(\"tidal\"), lending)` every {c.schedule_every_min} "
        "virtual minutes, skipped when nothing changed; a cycle sees the running jobs and "
        + (f"per GPU model the oldest {c.queue_window} pending jobs that may use lent nodes and the oldest "
           f"{c.queue_window} that may only use the fixed pool." if c.queue_window else "every pending job."),
        "- Static split baseline: the same nodes, inference load and training jobs; per group the online side "
        "gets just enough nodes for the run's inference peak (a dry run of the same autoscaler over the same "
        "load), the rest is the training side; nodes never move. Online nodes: "
        + ", ".join(f"{g} {n} (peak {static.static_peak.get(g, 0)} replicas)" for g, n in static.static_online.items())
        + ".", "",
        f"Preempted by the scheduler {m.preempted} (static {s.preempted}). Lending decisions ({labels[-1]}): "
        f"{dict(m.decisions)}.", "", *(f"Kills ({x}): {kills_line(runs[x].metrics)}" for x in labels), "",
        "![training queue](queue.png)", "", "![lent nodes](lent_nodes.png)", "",
        "![GPU utilization by hour](gpu_util_by_hour.png)", "", "![online nodes](online_nodes.png)", "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    if len(runs) > 1:
        figures["by_lending"] = per
    return figures


def kills_line(m: Metrics) -> str:
    """Why jobs died: by the take-back's reason, and medians of how long they had run, how long they were expected to
    run still, and how long before the eviction the take-back was decided."""
    if not m.kills:
        return "none."
    reasons = Counter(k.reason for k in m.kills)
    left = [k.left_s for k in m.kills if k.left_s is not None]
    return (f"{len(m.kills)} by reason {dict(reasons)}; median run so far {_minutes(k.ran_s for k in m.kills)}, "
            f"expected left {_minutes(left)}, take-back decided {_minutes(k.ahead_s for k in m.kills)} before the "
            f"eviction.")


def _minutes(values: Iterable[float]) -> str:
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2] / 60:.0f} min" if ordered else "-"


def primary_start(o: Outcome) -> str:
    days = load_traffic(o.cfg).days
    start = days - o.cfg.days if o.cfg.start_day is None else o.cfg.start_day
    return f"{start} of its {days}"


def write_json(figures: dict, path: Path) -> None:
    data = {k: figures[k] for k in JSON_KEYS}
    if "by_lending" in figures:
        data["by_lending"] = {label: {k: f[k] for k in JSON_KEYS} for label, f in figures["by_lending"].items()}
    path.write_text(json.dumps(data, indent=2))


Bar = Callable[[str, int], Callable[[int], None]]


LENDING_MODES = ("threshold", "forecast", "both")


def simulate(cfg: SimConfig, out: Path, command: str, bar: Bar = lambda label, total: (lambda minute: None),
             processes: int = 1, lending: str | None = None) -> tuple[dict, float]:
    """Run the lending simulation and the static split on one configuration and write their report;
    `bar(label, total minutes)` returns what each simulated minute calls (progress). `lending`: "threshold",
    "forecast" or "both" (None: as cfg.lending says). With `processes` > 1 the runs go side by side in forked
    processes (they share nothing). The figures, the wall time."""
    started = time.perf_counter()
    load_traffic(cfg)  # read once, before forking
    modes = {"both": ("threshold", "forecast"), None: ("forecast" if cfg.lending.forecast else "threshold",)}.get(
        lending, (lending,))
    runs = tuple((f"lending ({m})" if len(modes) > 1 else "lending",
                  cfg.with_(lending=cfg.lending.with_(forecast=m == "forecast"))) for m in modes)
    runs += (("static", cfg.with_(lend=False)),)
    if processes > 1:
        outcomes = _side_by_side(runs, bar, processes)
    else:
        outcomes = [_run(c, bar(label, c.minutes)) for label, c in runs]
    wall = time.perf_counter() - started
    lendings = dict(zip(modes, outcomes[:-1]))
    return write(lendings, outcomes[-1], out, command, wall), wall


def _run(cfg: SimConfig, progress: Callable[[int], None] | None = None) -> Outcome:
    sim = CoLocationSim(cfg)
    sim.run(progress)
    return sim.outcome()


_minutes_done = None  # per run, in a forked worker: the shared counters its progress goes to


def _adopt(counters) -> None:
    global _minutes_done
    _minutes_done = counters


def _run_counted(cfg: SimConfig, index: int) -> Outcome:
    def progress(minute: int) -> None:
        _minutes_done[index] = minute + 1
    return _run(cfg, progress)


def _side_by_side(runs: tuple[tuple[str, SimConfig], ...], bar: Bar, processes: int = 2) -> list[Outcome]:
    context = multiprocessing.get_context("fork")  # the workers inherit the traces already read, and no Django setup
    counters = context.RawArray("i", len(runs))
    with ProcessPoolExecutor(min(processes, len(runs)), mp_context=context, initializer=_adopt,
                             initargs=(counters,)) as pool:
        futures = [pool.submit(_run_counted, c, i) for i, (_, c) in enumerate(runs)]
        ticks = [bar(label, c.minutes) for label, c in runs]
        shown = [0] * len(runs)
        while True:
            done, _ = wait(futures, timeout=0.5, return_when=FIRST_EXCEPTION)
            for i, tick in enumerate(ticks):
                while shown[i] < counters[i]:
                    tick(shown[i])
                    shown[i] += 1
            if len(done) == len(futures) or any(f.exception() for f in done):
                break
        return [f.result() for f in futures]
