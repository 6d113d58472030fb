"""Report of a co-location simulation: report.md, PNG plots (Agg), summary JSON."""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path

from colocation.sim.config import SimConfig
from colocation.sim.run import CoLocationSim, Outcome
from scheduler.replay.report import figure, save_figure  # the replay's plot style (Agg, reproducible PNGs)


def by_hour(values: list[float], hours: list[int]) -> list[float]:
    sums, counts = [0.0] * 24, [0] * 24
    for v, h in zip(values, hours):
        sums[h] += v
        counts[h] += 1
    return [s / c if c else 0.0 for s, c in zip(sums, counts)]


SEED = {"lent_share": 0.65, "kill_rate": 0.015}  # the seed platform's figures (issue 5)


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def summary(sim: Outcome, static: Outcome) -> dict[str, float]:
    out = sim.metrics.summary(sim.cfg.days)
    out["gpu_util_mean_static"] = static.metrics.summary(static.cfg.days)["gpu_util_mean"]
    return out


def write(sim: Outcome, static: Outcome, out: Path, command: str, wall_s: float) -> dict[str, float]:
    out.mkdir(parents=True, exist_ok=True)
    m, s = sim.metrics, static.metrics
    figures = summary(sim, static)
    fig, ax = figure("GPU utilization by hour of day", width=8, height=4)
    ax.plot(range(24), [100 * v for v in by_hour(m.gpu_util, m.hours)], marker="o", label="lending")
    ax.plot(range(24), [100 * v for v in by_hour(s.gpu_util, s.hours)], marker="s", label="static split")
    ax.set(xlabel="hour of day (UTC)", ylabel="GPU utilization %")
    ax.legend()
    save_figure(fig, out / "gpu_util_by_hour.png")
    fig, ax = figure("Online nodes per group (lending)", width=10, height=4)
    days = [i / 1440 for i in range(len(m.pending_online))]
    for g, series in m.online_nodes.items():
        ax.plot(days, series, label=f"{g} online nodes")
    ax.set(xlabel="day", ylabel="nodes")
    ax.legend()
    save_figure(fig, out / "online_nodes.png")
    fs = s.summary(static.cfg.days)
    c = sim.cfg
    gpu = c.autoscale.rates()["gpu"]
    ok = (figures["lent_share"] >= SEED["lent_share"] and figures["kill_rate"] <= SEED["kill_rate"]
          and figures["online_pending_minutes_outside_take_back"] == 0)
    lines = [
        "# Co-location simulation", "", f"`{command}` — {wall_s:.1f} s wall (both runs)", "",
        f"{c.days} days on a virtual clock, 1-minute ticks, one cluster: "
        + ", ".join(f"{g.name} {g.nodes} nodes / {g.services} services" for g in c.groups) + ".", "",
        "| figure | lending | static split | seed platform |", "|---|---|---|---|",
        f"| training jobs finished on lent nodes | {figures['lent_share']:.1%} | - | >= 65% |",
        f"| kill rate on lent nodes (take-back kills / starts on lent nodes) | {figures['kill_rate']:.2%} | - "
        f"| <= 1.5% |",
        f"| minutes with online pods pending | {figures['online_pending_minutes']} "
        f"({figures['online_pending_minutes_outside_take_back']} outside take-back windows) | "
        f"{fs['online_pending_minutes']} | none outside take-back |",
        f"| transitions per day | {figures['transitions_per_day']:.1f} | 0 | - |",
        f"| GPU utilization mean | {figures['gpu_util_mean']:.1%} | {figures['gpu_util_mean_static']:.1%} | - |",
        f"| training jobs finished / submitted | {m.finished} / {m.jobs_submitted} | {s.finished} / "
        f"{s.jobs_submitted} | - |",
        f"| training queue: mean / max pending jobs | {_mean(m.training_pending):.0f} / "
        f"{max(m.training_pending, default=0)} | {_mean(s.training_pending):.0f} / "
        f"{max(s.training_pending, default=0)} | - |",
        "", "Acceptance (lent share >= 65%, kill rate <= 1.5%, no online pending minute outside take-backs): "
        + ("**met**." if ok else "**not met** (see the figures above)."), "",
        "## Mapping and knobs", "",
        f"- Nodes: Alibaba 2023 node list, the most common shape of each model; the first {c.fixed_share:.0%} "
        "(by name) of each group form the fixed training pool (never lent); the rest start online.",
        f"- Inference: World Cup 98 per-minute curve per service (own day and phase), scaled so a group's services "
        f"need {c.inference_peak:.0%} of its co-location capacity at their p99 minute at expectRate; per-replica "
        "GPU utilization from the Alibaba GenAI serving trace (k per QPS, noise); inference autoscaling by the "
        f"live loop's policy (`colocation.policy.autoscaling`, reactive; min/expect/max {gpu.min_rate}/"
        f"{gpu.expect_rate}/{gpu.max_rate}), "
        f"{c.startup_s:.0f} s startup.",
        f"- Training: Alibaba 2023 pods of the densest {c.days}-day window, GPU pods to a GPU group by hash "
        "(weighted by GPUs), CPU pods to the CPU group, replicated (copies jittered ±3 h) so the offered load is "
        f"**{c.training_load:.0%} of each group's capacity** (copies per trace pod: "
        + ", ".join(f"{k} {v:.1f}" for k, v in m.load_factors.items()) + "). Expected run time = the trace's. "
        "About half the GPU work is long (> 12 h): fixed pool only, which is why the fixed pool is sized with "
        "the load.",
        f"- Lending: `decide_lending` with thresholds {c.lending.thresholds}; transitions run by the real step "
        "machine (`next_action`); the observation is colocation/observe.py, shared with the live controller.",
        f"- Scheduling: `schedule(snapshot, get_profile(\"tidal\"), lending)` every {c.schedule_every_min} "
        "virtual minutes, skipped when nothing arrived, finished or moved since the last cycle; the policy gives "
        "each pending job its pool (`preferred_pool`: co-location is a preference, fixed is strict; "
        "jobs killed by a take-back are pinned to the fixed pool). A cycle sees the running jobs and "
        + (f"per GPU model the oldest {c.queue_window} pending jobs that may use lent nodes and the oldest "
           f"{c.queue_window} that may only use the fixed pool." if c.queue_window else "every pending job."),
        "- Static split baseline: the same nodes, inference load and training jobs; per group the online side "
        "gets just enough nodes for the run's inference peak (a dry run of the same autoscaler over the same "
        "load and noise draws, unlimited room), the rest is an offline fixed pool; nodes never move. Online "
        "nodes: " + ", ".join(f"{g} {n} (peak {static.static_peak.get(g, 0)} replicas)"
                              for g, n in static.static_online.items()) + ".",
        "- GPU utilization: inference replicas count their modelled GPU utilization, training pods keep the "
        "GPUs they hold busy; over all GPUs of the cluster.",
        "", f"Killed by take-backs {m.killed}, preempted by the scheduler {m.preempted} (static {s.preempted}).",
        f"Lending decisions: {dict(m.decisions)}.", "",
        "![GPU utilization by hour](gpu_util_by_hour.png)", "", "![online nodes](online_nodes.png)", "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    return figures


def write_json(figures: dict[str, float], path: Path) -> None:
    keys = ("lent_share", "kill_rate", "online_pending_minutes", "transitions_per_day", "gpu_util_mean",
            "gpu_util_mean_static")
    path.write_text(json.dumps({k: figures[k] for k in keys}, indent=2))


Bar = Callable[[str, int], Callable[[int], None]]


def simulate(cfg: SimConfig, out: Path, command: str, bar: Bar = lambda label, total: (lambda minute: None),
             processes: int = 1) -> tuple[dict, float]:
    """Run the lending simulation and the static split on one configuration and write their report;
    `bar(label, total minutes)` returns what each simulated minute calls (progress). With `processes` 2 the two
    runs go side by side in forked processes (they share nothing). The figures, the wall time."""
    started = time.perf_counter()
    runs = (("lending", cfg), ("static", cfg.with_(lend=False)))
    if processes > 1:
        outcomes = _side_by_side(runs, bar)
    else:
        outcomes = [_run(c, bar(label, c.minutes)) for label, c in runs]
    wall = time.perf_counter() - started
    return write(outcomes[0], outcomes[1], out, command, wall), wall


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


def _side_by_side(runs: tuple[tuple[str, SimConfig], ...], bar: Bar) -> list[Outcome]:
    context = multiprocessing.get_context("fork")  # the workers inherit the traces already read, and no Django setup
    counters = context.RawArray("i", len(runs))
    with ProcessPoolExecutor(len(runs), mp_context=context, initializer=_adopt, initargs=(counters,)) as pool:
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
