"""The training log a simulated pod writes: a pure, deterministic function of the pod and the time.

The simulated cluster and kwok's nodes have no containers (kwok's log writer is cluster/simulated/kwok_logs.py), so
they make up what a training container would print, with the same pod and times always giving the same text (tests
compare it; an archive taken twice is the same): the framework's banner (torchrun / TensorFlow / PaddlePaddle / a
generic solver), then per-step lines (loss, learning rate, throughput) and one validation line per epoch, at the
pod's cadence in the cluster's clock, and at the end the last lines of a success, a failure, or the SIGTERM a
graceful eviction sends.

Each progress line is computed from its index alone, so reading the last N lines of a week-long run costs N lines.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from cluster.backend import FRAMEWORK_LABEL, WORKER_LABEL, PodSpec

# How a run ended, as the log shows it ("" while it runs).
SUCCEEDED, FAILED, EVICTED = "succeeded", "failed", "evicted"
FRAMEWORK_STYLES = ("pytorch", "tensorflow", "paddle", "generic")


@dataclass(frozen=True, slots=True)
class PodLogSource:
    """What the log is made from: the pod, when it started and, once it ended, when and how."""

    name: str
    started_at: float
    framework: str = ""  # "pytorch-2.1"; empty: guessed from the image, command and environment
    image: str = ""
    command: str = ""
    gpus: float = 0.0
    gpu_model: str | None = None
    rank: int = 0
    workers: int = 1
    ended_at: float | None = None
    end: str = ""  # SUCCEEDED | FAILED | EVICTED, or "" while running
    reason: str = ""  # why it was evicted / failed


def style_of(framework: str, image: str = "", command: str = "", env: Mapping[str, str] | None = None) -> str:
    """pytorch | tensorflow | paddle | generic: from the framework's name, else the rendezvous environment, image and
    command."""
    env = env or {}
    text = f"{framework} {image} {command}".lower()
    if "tensorflow" in framework.lower() or "TF_CONFIG" in env:
        return "tensorflow"
    if "paddle" in framework.lower() or "PADDLE_TRAINER_ID" in env:
        return "paddle"
    if "torch" in framework.lower() or "MASTER_ADDR" in env:
        return "pytorch"
    for style, words in (("tensorflow", ("tensorflow", "keras")), ("paddle", ("paddle",)),
                         ("pytorch", ("torch", "pytorch"))):
        if any(w in text for w in words):
            return style
    return "generic" if framework else "pytorch"


@dataclass(frozen=True, slots=True)
class _Shape:
    """The pod's training run, drawn once from its name: the same pod always trains the same way."""

    style: str
    version: str
    interval_s: float  # between progress lines
    warmup_s: float  # start to the first step
    log_every: int  # steps per progress line
    lines_per_epoch: int  # progress lines per epoch
    epochs: int
    batch: int  # per GPU (or per process on CPU)
    loss0: float
    loss_floor: float
    tau: float  # steps for the loss to fall by 1/e
    lr: float
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        return self.log_every * self.lines_per_epoch


def _seed(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")


def _shape(src: PodLogSource) -> _Shape:
    seed = _seed(src.name)
    rng = random.Random(seed)
    style = style_of(src.framework, src.image, src.command)
    version = src.framework.rpartition("-")[2] if "-" in src.framework else {"pytorch": "2.1", "tensorflow": "2.15",
                                                                              "paddle": "2.6"}.get(style, "1.0")
    lines_per_epoch = rng.choice((40, 60, 100, 150))
    return _Shape(style=style, version=version, interval_s=rng.uniform(6.0, 15.0), warmup_s=rng.uniform(8.0, 25.0),
                  log_every=rng.choice((10, 20, 50, 100)), lines_per_epoch=lines_per_epoch,
                  epochs=rng.choice((90, 120, 200, 300)), batch=rng.choice((32, 64, 128, 256)),
                  loss0=rng.uniform(4.0, 7.0), loss_floor=rng.uniform(0.3, 1.2),
                  tau=rng.uniform(5_000, 40_000), lr=rng.choice((0.1, 0.01, 0.001, 3e-4)), seed=seed)


def timestamp(at: float) -> str:
    """RFC 3339 in UTC with milliseconds, as the container stamps its lines."""
    ms = int(round(at * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def _devices(src: PodLogSource) -> str:
    if src.gpus <= 0:
        return "no GPU (CPU only)"
    if src.gpus < 1:
        return f"{src.gpus:g} of a {src.gpu_model or 'GPU'} (shared)"
    return f"{int(src.gpus)} x {src.gpu_model or 'GPU'}"


def _banner(src: PodLogSource, shape: _Shape) -> list[str]:
    """The lines a container prints while it starts, before the first step."""
    command = src.command or "python train.py"
    world = max(1, src.workers) * max(1, math.ceil(src.gpus))
    data = f"dataset: {shape.steps_per_epoch * shape.batch * max(1, world):,} samples, batch {shape.batch} per " \
           f"device, {shape.steps_per_epoch:,} steps per epoch, {shape.epochs} epochs"
    if shape.style == "pytorch":
        return [f"torchrun --nnodes={max(1, src.workers)} --node_rank={src.rank} "
                f"--nproc_per_node={max(1, math.ceil(src.gpus))} {command}",
                f"[rank{src.rank}] PyTorch {shape.version}.0+cu121, CUDA 12.1, NCCL 2.18.1; devices: {_devices(src)}",
                f"[rank{src.rank}] world size {world}; image {src.image or 'unknown'}",
                f"[rank{src.rank}] {data}",
                f"[rank{src.rank}] optimizer SGD(lr={shape.lr:g}, momentum=0.9), AMP on"]
    if shape.style == "tensorflow":
        return [f"$ {command}",
                f"I tensorflow/core/platform/cpu_feature_guard.cc:182] TensorFlow {shape.version}.0 binary is "
                f"optimized to use available CPU instructions",
                f"I tensorflow/core/common_runtime/gpu/gpu_device.cc:1886] Created device /job:worker/replica:0/"
                f"task:{src.rank}/device:GPU:0: {_devices(src)}",
                f"INFO:tensorflow:Using MultiWorkerMirroredStrategy with {world} replicas (task {src.rank})",
                f"INFO:tensorflow:{data}"]
    if shape.style == "paddle":
        return [f"$ python -m paddle.distributed.launch {command}",
                f"LAUNCH INFO PaddlePaddle {shape.version}.0, trainer {src.rank} of {max(1, src.workers)}",
                f"LAUNCH INFO devices: {_devices(src)}; image {src.image or 'unknown'}",
                f"[INFO] {data}",
                f"[INFO] optimizer Momentum(learning_rate={shape.lr:g}, momentum=0.9)"]
    return [f"$ {command}",
            f"I solver.cpp:48] Initializing solver from parameters: base_lr: {shape.lr:g} max_iter: "
            f"{shape.steps_per_epoch * shape.epochs}",
            f"I net.cpp:86] Creating training net on {_devices(src)}",
            f"I solver.cpp:60] {data}"]


MASK = (1 << 64) - 1


def _unit(seed: int, n: int, salt: int) -> float:
    """A uniform number in [0, 1) from (seed, n, salt): splitmix64, so that any line is made without the others."""
    x = (seed + (n * 4 + salt + 1) * 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return ((x ^ (x >> 31)) >> 11) / float(1 << 53)


def _loss(shape: _Shape, step: int, n: int) -> float:
    noise = (_unit(shape.seed, n, 0) + _unit(shape.seed, n, 1) + _unit(shape.seed, n, 2) - 1.5) * 0.04
    return max(0.01, shape.loss_floor + (shape.loss0 - shape.loss_floor) * math.exp(-step / shape.tau)) * (1 + noise)


def _throughput(src: PodLogSource, shape: _Shape, n: int) -> float:
    per_step = shape.interval_s / shape.log_every
    return shape.batch * max(1.0, math.ceil(src.gpus)) / per_step * (0.95 + 0.1 * _unit(shape.seed, n, 3))


def _progress(src: PodLogSource, shape: _Shape, n: int) -> str:
    """Progress line n (0-based): a step line, or the epoch's validation line after its last step line."""
    epoch, r = divmod(n, shape.lines_per_epoch + 1)
    style = shape.style
    if r == shape.lines_per_epoch:  # the epoch's summary
        step = (epoch + 1) * shape.steps_per_epoch
        val = _loss(shape, step, n) * 1.05
        acc = max(0.0, min(0.99, 1.0 - val / (shape.loss0 + 0.5)))
        took = shape.lines_per_epoch * shape.interval_s
        if style == "pytorch":
            return (f"[rank{src.rank}] epoch {epoch + 1} done in {took:.0f}s: val_loss {val:.4f} val_acc {acc:.4f}; "
                    f"checkpoint saved to /checkpoints/epoch-{epoch + 1}.pt")
        if style == "tensorflow":
            return f"Epoch {epoch + 1}/{shape.epochs} - {took:.0f}s - val_loss: {val:.4f} - val_accuracy: {acc:.4f}"
        if style == "paddle":
            return f"[Eval][Epoch {epoch + 1}] loss: {val:.5f}, acc1: {acc:.5f}; saved ./output/epoch_{epoch + 1}.pdparams"
        return f"I solver.cpp:414] Test net output #0: loss = {val:.4f}, accuracy = {acc:.4f}"
    in_epoch = (r + 1) * shape.log_every
    step = epoch * shape.steps_per_epoch + in_epoch
    loss = _loss(shape, step, n)
    lr = shape.lr * 0.1 ** min(epoch // 30, 3)
    speed = _throughput(src, shape, n)
    if style == "pytorch":
        return (f"[rank{src.rank}] epoch {epoch + 1} step {in_epoch}/{shape.steps_per_epoch} loss {loss:.4f} "
                f"lr {lr:.6f} throughput {speed:,.1f} samples/s")
    if style == "tensorflow":
        return (f"Epoch {epoch + 1}/{shape.epochs} step {in_epoch}/{shape.steps_per_epoch} - loss: {loss:.4f} - "
                f"lr: {lr:.6f} - {speed:,.0f} samples/sec")
    if style == "paddle":
        return (f"[Train][Epoch {epoch + 1}/{shape.epochs}][Iter: {in_epoch}/{shape.steps_per_epoch}] "
                f"loss: {loss:.5f}, lr: {lr:.6f}, ips: {speed:,.2f} samples/s")
    return (f"I solver.cpp:239] Iteration {step} ({speed / shape.batch:.2f} iter/s), loss = {loss:.4f}, "
            f"lr = {lr:g}")


def _line_time(shape: _Shape, t0: float, n: int) -> float:
    epoch, r = divmod(n, shape.lines_per_epoch + 1)
    return t0 + (epoch * shape.lines_per_epoch + min(r, shape.lines_per_epoch - 1)) * shape.interval_s


def _lines_by(shape: _Shape, t0: float, at: float) -> int:
    """How many progress lines were written by `at`."""
    if at < t0:
        return 0
    events = int((at - t0) // shape.interval_s) + 1  # step lines
    return events + events // shape.lines_per_epoch


def _ending(src: PodLogSource, shape: _Shape, steps_done: int) -> list[str]:
    rank = f"[rank{src.rank}] " if shape.style == "pytorch" else ""
    if src.end == EVICTED:
        why = src.reason or "the pod is being evicted"
        return [f"{rank}Received SIGTERM (signal 15): {why}",
                f"{rank}saving checkpoint at step {steps_done} to /checkpoints/step-{steps_done}.ckpt before exit",
                f"{rank}checkpoint saved; exiting with code 143 (terminated by SIGTERM)"]
    if src.end == FAILED:
        why = src.reason or "CUDA error: an illegal memory access was encountered"
        return ["Traceback (most recent call last):",
                '  File "train.py", line 214, in <module>',
                "    main()",
                f"RuntimeError: {why}",
                f"{rank}exiting with code 1"]
    if src.end == SUCCEEDED:
        return [f"{rank}training complete after {steps_done} steps; final model saved to /checkpoints/final.ckpt",
                f"{rank}exiting with code 0"]
    return []


def pod_log_lines(src: PodLogSource, now: float, *, since: float | None = None, tail: int | None = None) -> list[str]:
    """The lines the pod had written by `now` (its end, if it ended before), each stamped with its time; `since`
    keeps the lines written at or after that time, `tail` the last N of those."""
    shape = _shape(src)
    until = now if src.ended_at is None else min(now, src.ended_at)
    if until < src.started_at:
        return []
    t0 = src.started_at + shape.warmup_s
    stamped = [(src.started_at + i * shape.warmup_s / 8, text) for i, text in enumerate(_banner(src, shape))]
    banner = [(at, text) for at, text in stamped if at <= until]
    written = _lines_by(shape, t0, until)
    first = 0
    if since is not None:  # the progress lines are in time order: skip those before `since` without computing them
        first = _lines_by(shape, t0, since - 1e-9) if since > t0 else 0
        banner = [(at, text) for at, text in banner if at >= since]
    ending: list[tuple[float, str]] = []
    if src.ended_at is not None and src.ended_at <= now and src.end:
        steps = (written - written // (shape.lines_per_epoch + 1)) * shape.log_every
        ending = [(src.ended_at, text) for text in _ending(src, shape, steps)]
        if since is not None:
            ending = [(at, text) for at, text in ending if at >= since]
    if tail is not None:  # only compute the lines that are kept
        keep_ending = ending[max(0, len(ending) - tail):]
        room = tail - len(keep_ending)
        first = max(first, written - room)
        banner = banner[max(0, len(banner) - max(0, room - (written - first))):] if room > written - first else []
        ending = keep_ending
    progress = [(_line_time(shape, t0, n), _progress(src, shape, n)) for n in range(first, written)]
    return [f"{timestamp(at)} {text}" for at, text in (*banner, *progress, *ending)]


def pod_log_count(src: PodLogSource, now: float) -> int:
    """How many lines pod_log_lines(src, now) gives, without making them (a follower's cursor)."""
    shape = _shape(src)
    until = now if src.ended_at is None else min(now, src.ended_at)
    if until < src.started_at:
        return 0
    banner = sum(1 for i in range(len(_banner(src, shape))) if src.started_at + i * shape.warmup_s / 8 <= until)
    ending = len(_ending(src, shape, 0)) if src.ended_at is not None and src.ended_at <= now and src.end else 0
    return banner + _lines_by(shape, src.started_at + shape.warmup_s, until) + ending


def source_of(spec: PodSpec, started_at: float, *, ended_at: float | None = None, end: str = "",
              reason: str = "") -> PodLogSource:
    """A training pod's log source from what it was bound with (its framework label, image, command, GPUs, rank and
    its gang's rendezvous environment)."""
    env = spec.env
    workers = env.get("WORLD_SIZE") or env.get("PADDLE_TRAINERS_NUM") or ""
    if not workers and "TF_CONFIG" in env:
        try:
            workers = str(len(json.loads(env["TF_CONFIG"])["cluster"]["worker"]))
        except (ValueError, KeyError, TypeError):
            workers = ""
    rank = spec.labels.get(WORKER_LABEL, "0")
    framework = spec.labels.get(FRAMEWORK_LABEL, "")
    if not framework:
        framework = style_of("", spec.image, spec.command, env)
    return PodLogSource(name=spec.name, started_at=started_at, framework=framework, image=spec.image,
                        command=spec.command, gpus=spec.gpus, gpu_model=spec.gpu_model,
                        rank=int(rank) if rank.isdigit() else 0, workers=int(workers) if workers.isdigit() else 1,
                        ended_at=ended_at, end=end, reason=reason)


def pod_log_text(src: PodLogSource, now: float, *, since: float | None = None, tail: int | None = None) -> str:
    """pod_log_lines as the text a log endpoint returns (newline-terminated lines)."""
    lines = pod_log_lines(src, now, since=since, tail=tail)
    return "".join(line + "\n" for line in lines)
