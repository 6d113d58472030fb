"""How much two jobs on one GPU slow each other, predicted from measured pairs (docs/concepts/sharing.md).

A job is described by its solo `Signature` (SM active, tensor activity, DRAM activity, framebuffer share, and
whether it serves requests, so its tail latency matters). A `Table` holds one sharing mode's measurements (time-
slicing or MPS): each measured workload's signature and, per measured pair, what each side kept of its solo
throughput and how much its p99 (request latency, or step time) grew. `Model.predict(a, b)` answers:
  - a measured pair (both signatures those of a measured pair): the measurement, exactly;
  - otherwise the measured pair nearest in signature space, when it is within `cutoff` (the distance of a pair is
    the larger of its two sides' Euclidean distances over the four activity figures; a serving job only matches a
    serving job);
  - otherwise, or for a job with no signature (no profile yet), `default`: each side keeps 0.5 (sharing gains
    nothing over running one after the other: allowed, never preferred over a pairing measured to gain) and a
    latency-sensitive side's p99 grows by the worst measured (so no unknown job joins a serving one under the
    default bound). A job without a profile is taken for a batch job: serving is declared, not guessed.
More than two jobs on a GPU (measured: pairs only) compose the pairs as time-slicing does (`share`).

`refusal` and `choose` are the share placement's rule: never two jobs whose predicted combined throughput is below
`min_combined`, never a latency-sensitive job's predicted p99 growth above `p99_bound`, and among the GPUs of the best
loss score the highest predicted combined throughput. The tables are values: the loader
(scheduler/interference_tables.py) reads them from the measured CSVs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

TIME_SLICING, MPS = "time-slicing", "mps"
DEFAULT_CUTOFF = 0.2        # signature distance beyond which a measured pair says nothing about a new one
DEFAULT_KEPT = 0.5          # an unseen pair: no gain over running the two one after the other
DEFAULT_P99_BOUND = 1.5     # a latency-sensitive job's p99 may grow by at most this factor beside a partner
MIN_COMBINED = 1.0          # below this, sharing does less work than running the jobs one after the other


@dataclass(frozen=True, slots=True)
class Signature:
    """A job alone on a GPU: activity ratios (0..1), framebuffer used over the card's, and whether it serves
    requests (its p99 latency is what matters, not its throughput alone)."""

    sm_active: float
    tensor_active: float
    dram_active: float
    fb_fraction: float
    latency_sensitive: bool = False

    def distance(self, other: Signature) -> float:
        """Euclidean over the four figures; infinite between a serving and a batch job."""
        if self.latency_sensitive != other.latency_sensitive:
            return math.inf
        return math.dist((self.sm_active, self.tensor_active, self.dram_active, self.fb_fraction),
                         (other.sm_active, other.tensor_active, other.dram_active, other.fb_fraction))


@dataclass(frozen=True, slots=True)
class Slowdown:
    """One side of a pair: the fraction of its solo throughput it keeps, and its p99 paired over alone."""

    kept: float
    p99: float = 1.0


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    a_side: Slowdown
    b_side: Slowdown


@dataclass(frozen=True, slots=True)
class Table:
    """One sharing mode's measurements: workload -> solo signature, and the measured pairs."""

    mode: str
    signatures: tuple[tuple[str, Signature], ...]
    pairs: tuple[Pair, ...]

    def signature(self, workload: str) -> Signature | None:
        return next((s for w, s in self.signatures if w == workload), None)

    @property
    def worst_p99(self) -> float:
        return max((s.p99 for p in self.pairs for s in (p.a_side, p.b_side)), default=1.0)


@dataclass(frozen=True, slots=True)
class Prediction:
    a: Slowdown
    b: Slowdown
    basis: str  # "measured a + b", "nearest measured a + b (distance d)" or "no measured pair near: default"

    @property
    def combined(self) -> float:
        return self.a.kept + self.b.kept


@dataclass(frozen=True, slots=True)
class Model:
    tables: tuple[Table, ...]
    cutoff: float = DEFAULT_CUTOFF
    default_kept: float = DEFAULT_KEPT

    def table(self, mode: str) -> Table | None:
        return next((t for t in self.tables if t.mode == mode), None)

    def default(self, mode: str, a: Signature | None, b: Signature | None) -> Prediction:
        worst = self.table(mode).worst_p99 if self.table(mode) else 1.0
        def side(s: Signature | None) -> Slowdown:
            return Slowdown(self.default_kept, worst if s is not None and s.latency_sensitive else 1.0)
        return Prediction(side(a), side(b), "no measured pair near: default")

    def predict(self, a: Signature | None, b: Signature | None, mode: str = TIME_SLICING) -> Prediction:
        """What a and b keep side by side on one GPU under `mode` (see the module doc)."""
        table = self.table(mode)
        if table is None or a is None or b is None:
            return self.default(mode, a, b)
        best, best_d = None, math.inf
        for p in table.pairs:
            sx, sy = table.signature(p.a), table.signature(p.b)
            for (x, y, flip) in ((sx, sy, False), (sy, sx, True)):
                d = max(a.distance(x), b.distance(y))
                if d < best_d:
                    best, best_d = (p, flip), d
        if best is None or best_d > self.cutoff:
            return self.default(mode, a, b)
        p, flip = best
        first, second = (p.b, p.a) if flip else (p.a, p.b)
        sides = (p.b_side, p.a_side) if flip else (p.a_side, p.b_side)
        basis = f"measured {first} + {second}" if best_d == 0 else \
            f"nearest measured {first} + {second} (distance {best_d:.2f})"
        return Prediction(*sides, basis)


@dataclass(frozen=True, slots=True)
class Sharing:
    """A GPU's jobs after a placement: what each keeps and its p99 growth, and the newcomer's pair predictions."""

    members: tuple[Signature | None, ...]   # the residents, the newcomer last
    kept: tuple[float, ...]                 # per member
    p99: tuple[float, ...]
    pairs: tuple[Prediction, ...]           # the newcomer (side a) beside each resident

    @property
    def combined(self) -> float:
        return sum(self.kept)


def share(model: Model, new: Signature | None, residents: Sequence[Signature | None],
          mode: str = TIME_SLICING) -> Sharing:
    """The GPU's jobs once `new` joins `residents`. Pairs compose as time-slicing shares time: each partner stretches
    a job's time by what the pair alone would (1 / kept - 1), so a job keeps 1 / (1 + the sum of its stretches), and
    its p99 grows by the sum of the pairs' growths (n jobs that each keep 0.5 in pairs keep 1/n each)."""
    members = (*residents, new)
    stretch, growth = [0.0] * len(members), [0.0] * len(members)
    pairs = tuple(model.predict(new, r, mode) for r in residents)
    for i in range(len(members)):
        for j in range(i + 1, len(members)):
            p = pairs[i] if j == len(residents) else model.predict(members[i], members[j], mode)
            mine, theirs = (p.b, p.a) if j == len(residents) else (p.a, p.b)  # pairs[i]: the newcomer is side a
            stretch[i] += 1 / mine.kept - 1
            stretch[j] += 1 / theirs.kept - 1
            growth[i] += mine.p99 - 1
            growth[j] += theirs.p99 - 1
    return Sharing(members, tuple(1 / (1 + x) for x in stretch), tuple(1 + g for g in growth), pairs)


@dataclass(frozen=True, slots=True)
class Rule:
    """The share placement's limits (profile settings: scheduler/policy/profile.py)."""

    min_combined: float = MIN_COMBINED
    p99_bound: float = DEFAULT_P99_BOUND
    mode: str = TIME_SLICING


def refusal(s: Sharing, rule: Rule = Rule()) -> str | None:
    """Why the placement `s` must not happen, or None when it may."""
    for p in s.pairs:
        if p.combined < rule.min_combined:
            return f"predicted combined throughput {p.combined:.2f} < {rule.min_combined:g} ({p.basis})"
    for m, growth in zip(s.members, s.p99):
        if m is not None and m.latency_sensitive and growth > rule.p99_bound:
            return f"predicted p99 x{growth:.2f} > x{rule.p99_bound:g} for a latency-sensitive job"
    return None


@dataclass(frozen=True, slots=True)
class Choice:
    index: int                  # of the candidate chosen
    sharing: Sharing | None     # None: the GPU was free
    overruled: str | None       # why the model refused the candidate the least GPU loss alone takes (None: it did not)


def choose(scores: np.ndarray, sharing: Callable[[int], Sharing | None], rule: Rule = Rule()) -> Choice | None:
    """The share placement among candidate GPUs listed in the least-GPU-loss placement's tie-break order, `scores`
    their loss scores (higher is better; equal scores tie), `sharing(i)` the jobs of candidate i's GPU once the
    share joins (None for a free GPU): the best score whose candidates are not all refused, and among its candidates
    the highest predicted combined throughput (a free GPU: 1.0), the first among equals. None when all are refused."""
    top = sharing(int(np.argmax(scores)))  # what the least GPU loss alone takes: the first of the best score
    overruled = None if top is None else refusal(top, rule)
    for level in np.unique(scores)[::-1]:
        best: tuple[float, int, Sharing | None] | None = None
        for i in np.flatnonzero(scores == level).tolist():
            s = sharing(i)
            if s is not None and refusal(s, rule) is not None:
                continue
            combined = 1.0 if s is None else round(s.combined, 9)  # n jobs at 1/n each tie with a free GPU
            if best is None or combined > best[0]:
                best = (combined, i, s)
        if best is not None:
            return Choice(best[1], best[2], overruled)
    return None


def describe(s: Sharing) -> str:
    """The predicted slowdown in a few words, for a decision sentence."""
    p = s.pairs[0] if len(s.pairs) == 1 else None
    if p is not None:
        return (f"predicted to keep {p.a.kept:.2f} of its solo speed, its partner {p.b.kept:.2f} "
                f"(combined {p.combined:.2f}; {p.basis})")
    return (f"predicted to keep {s.kept[-1]:.2f} of its solo speed beside {len(s.pairs)} jobs "
            f"(combined {s.combined:.2f})")
