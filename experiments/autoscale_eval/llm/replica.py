"""What one replica of an LLM service -- a group of GPUs serving one copy of the model with tensor and pipeline
parallelism -- does with a minute of traffic: a roofline model, prefill and decode separately.

- Prefill is compute-bound: P = GPUs × peak FLOP/s × MFU / (2 × parameters) prompt tokens/s.
- Decode is one step per output token of every running sequence: a step reads the weights once (t0 = weight bytes /
  (tensor-parallel GPUs × HBM bandwidth × MBU): pipeline stages run one after another, so only tensor parallelism
  shortens it) and adds, per running sequence, its compute and its KV-cache read (k seconds).
- Prefill and decode share the GPUs (chunked prefill): with u = λ·I/P + λ·O·k (λ requests/s to the group, I and O
  mean prompt and output tokens) the share of time the load keeps the group busy, the time per output token is
  τ = t0 / (1 - u) (Little's law on the running batch: B = λ·O·τ, and τ·(1 - λ·I/P) = t0 + k·B).
- Time to first token: the prompt's prefill (I/P), a decode step, and the wait of an M/G/1 queue of prefills at
  utilization u (Kingman: mean wait u/(1-u) · I/P · (c_a² + c_s²)/2, with c_a the window's burstiness and
  c_s = 1, prompt lengths spread about their mean), its tail exponential with P(wait > 0) = u.
- u >= 1: the group cannot keep up; the minute's requests miss their SLO and the excess work waits (see run.py).
- KV-cache use: the running sequences' tokens (B × (I + O/2)) over the memory left after the weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MEMORY_FOR_KV = 0.9  # of GPU memory, less the weights: the engine's gpu_memory_utilization


@dataclass(frozen=True, slots=True)
class Gpu:
    flops: float  # dense peak at the model's precision, FLOP/s
    bandwidth: float  # HBM bytes/s
    memory: float  # bytes


# Datasheet dense peaks (FP8 on Hopper, BF16 on Ampere) and HBM figures.
GPUS = {"H200": Gpu(1979e12, 4.8e12, 141e9), "H100": Gpu(1979e12, 3.35e12, 80e9),
        "A100": Gpu(312e12, 2.0e12, 80e9), "L40S": Gpu(733e12, 0.864e12, 48e9)}


@dataclass(frozen=True, slots=True)
class LlmModel:
    params_b: float = 405.0  # billions of parameters (dense)
    bytes_per_param: float = 1.0  # FP8 weights
    layers: int = 126  # Llama 3.1 405B's shape: 126 layers, 8 KV heads of 128
    kv_heads: int = 8
    head_dim: int = 128
    kv_bytes: float = 1.0  # FP8 KV cache

    @property
    def weight_bytes(self) -> float:
        return self.params_b * 1e9 * self.bytes_per_param

    @property
    def kv_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes


@dataclass(frozen=True, slots=True)
class Minute:
    """How a group serves a minute's traffic."""

    utilization: float  # u: the share of the group's time the load asks (over 1: more than it can serve)
    tpot_s: float  # time per output token (inf when u >= 1)
    ttft_p50_s: float
    ttft_p99_s: float
    kv_cache: float  # 0..1
    queue: float  # requests waiting for their prefill (Little's law on the wait)
    ttft_ok: float  # the share of requests whose first token came within the TTFT target


@dataclass(frozen=True, slots=True)
class GroupModel:
    model: LlmModel = LlmModel()
    gpu: str = "H200"
    tp: int = 8
    pp: int = 2  # two nodes of 8 GPUs
    startup_min: int = 10
    mfu: float = 0.4
    mbu: float = 0.7

    def __post_init__(self) -> None:
        if self.gpu not in GPUS:
            raise ValueError(f"gpu must be one of {', '.join(GPUS)}, got {self.gpu!r}")
        if self.tp < 1 or self.pp < 1 or self.startup_min < 0 or not 0 < self.mfu <= 1 or not 0 < self.mbu <= 1:
            raise ValueError(f"need tp, pp >= 1, startup >= 0, 0 < mfu, mbu <= 1; got {self}")
        if self.kv_room <= 0:
            raise ValueError(f"{self.model.params_b:g}B parameters do not fit in {self.gpus} × {self.gpu}")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def kv_room(self) -> float:
        return self.gpus * GPUS[self.gpu].memory * MEMORY_FOR_KV - self.model.weight_bytes

    @property
    def prefill_tokens_s(self) -> float:
        """Prompt tokens/s the group prefills when it does nothing else."""
        return self.gpus * GPUS[self.gpu].flops * self.mfu / (2 * self.model.params_b * 1e9)

    @property
    def step_s(self) -> float:
        """t0: a decode step's weight read."""
        return self.model.weight_bytes / (self.tp * GPUS[self.gpu].bandwidth * self.mbu)

    def per_sequence_s(self, context: float) -> float:
        """k: what one more running sequence adds to a decode step (its compute and its KV-cache read)."""
        g = GPUS[self.gpu]
        return (2 * self.model.params_b * 1e9 / (self.gpus * g.flops * self.mfu)
                + context * self.model.kv_per_token / (self.gpus * g.bandwidth * self.mbu))

    def decode_tokens_s(self, tpot_s: float, tokens_in: float, tokens_out: float) -> float:
        """Output tokens/s the group generates within `tpot_s` per token when it does nothing else."""
        return max(0.0, 1.0 - self.step_s / tpot_s) / self.per_sequence_s(tokens_in + tokens_out / 2)

    def utilization(self, rps: float, tokens_in: float, tokens_out: float) -> float:
        """u for `rps` requests/s to one group."""
        k = self.per_sequence_s(tokens_in + tokens_out / 2)
        return rps * tokens_in / self.prefill_tokens_s + rps * tokens_out * k

    def serve(self, rps: float, tokens_in: float, tokens_out: float, cv: float, ttft_target_s: float) -> Minute:
        """One group's minute at `rps` requests/s (its share of the service's), the window's burstiness `cv`."""
        u = self.utilization(rps, tokens_in, tokens_out)
        if u >= 1.0:
            return Minute(u, math.inf, math.inf, math.inf, 1.0, math.inf, 0.0)
        tpot = self.step_s / (1.0 - u)
        s = tokens_in / self.prefill_tokens_s
        wait = u / (1.0 - u) * s * (cv * cv + 1.0) / 2.0  # Kingman
        rate = u / wait if wait > 0 else math.inf  # the tail: P(wait > x) = u·exp(-rate·x)
        base = s + tpot

        def quantile(q: float) -> float:
            return base + (math.log(u / (1 - q)) / rate if u > 1 - q and rate < math.inf else 0.0)

        slack = ttft_target_s - base
        ok = 0.0 if slack < 0 else 1.0 - (u * math.exp(-rate * slack) if rate < math.inf else 0.0)
        running = rps * tokens_out * tpot
        kv = min(1.0, running * (tokens_in + tokens_out / 2) * self.model.kv_per_token / self.kv_room)
        return Minute(u, tpot, quantile(0.5), quantile(0.99), kv, rps * wait, ok)
