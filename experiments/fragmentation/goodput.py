"""Goodput: the useful work of the placed pods once shares of one GPU slow each other, as the interference model
(scheduler/policy/interference.py, from the H200 measurements) predicts.

The Alibaba pod lists say nothing of what a pod runs, so every share pod is given one of the measured workloads
(`with_kinds`): uniformly at random, seeded (KIND_SEED), by its position in the pod list sorted by name, so a pod
drawn twice by the tuning is the same workload both times and every policy and seed sees the same assignment.
Whole-GPU and CPU-only pods share nothing and count in full.

A node's goodput (milli-GPU of useful work) = the GPUs its whole-GPU pods hold + for each shared GPU, the sum over its
share pods of the request x the fraction of solo speed the model predicts it keeps beside the others there (a share
alone on its GPU keeps all of it). The FGD protocol has no time (pods never leave), so goodput is GPU-hours of useful
work per hour of the packed cluster; it is reported, like the allocation, as % of capacity per arrived %.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from experiments.fragmentation.state import MILLI, ClusterState, PodRequest
from scheduler.policy.interference import Model, Rule, Sharing, Signature, refusal, share
from scheduler.policy.profile import TIDAL

KIND_SEED = 2026
RULE = Rule(TIDAL.sharing_min_combined, TIDAL.sharing_p99_bound, TIDAL.sharing_mode)


def with_kinds(pods: Sequence[PodRequest], kinds: Sequence[str], seed: int = KIND_SEED) -> tuple[PodRequest, ...]:
    """`pods` with every share pod given one of `kinds` (see the module doc)."""
    draws = np.random.default_rng(seed).integers(len(kinds), size=len(pods)).tolist()
    return tuple(replace(p, kind=kinds[d]) if p.share else p for p, d in zip(pods, draws))


class Predictor:
    """The model's answers by workload kind, kept for one run (the model is pure; this memo is the run's)."""

    def __init__(self, model: Model, rule: Rule = RULE) -> None:
        self.model, self.rule = model, rule
        table = model.table(rule.mode)
        self.signatures: dict[str, Signature] = dict(table.signatures) if table else {}
        self._memo: dict[tuple[str, tuple[str, ...]], tuple[Sharing, bool]] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.signatures)

    def sharing(self, new: str, residents: Sequence[str]) -> tuple[Sharing, bool]:
        """The GPU's jobs once a `new` joins `residents` (members: the residents sorted, then the newcomer), and
        whether the rule refuses it."""
        key = (new, tuple(sorted(residents)))
        got = self._memo.get(key)
        if got is None:
            s = share(self.model, self.signatures.get(new), [self.signatures.get(k) for k in key[1]], self.rule.mode)
            got = self._memo[key] = (s, refusal(s, self.rule) is not None)
        return got

    def gpu(self, pods: Sequence[PodRequest]) -> tuple[float, int]:
        """(useful milli-GPU, pairs the rule refuses) of the share pods on one GPU."""
        if len(pods) == 1:
            return float(pods[0].gpu_milli), 0
        ordered = sorted(pods, key=lambda p: p.kind)
        s, _ = self.sharing(ordered[-1].kind, [p.kind for p in ordered[:-1]])
        refused = sum(self.sharing(b.kind, (a.kind,))[1] for i, a in enumerate(ordered) for b in ordered[i + 1:])
        return sum(p.gpu_milli * k for p, k in zip(ordered, s.kept)), refused


class GoodputState:
    """Every node's goodput and refused pairs, kept in step with the cluster (a `place` listener)."""

    def __init__(self, cluster: ClusterState, predictor: Predictor) -> None:
        self.cluster, self.predictor = cluster, predictor
        n = len(cluster)
        self.value, self.refused = np.zeros(n), np.zeros(n, dtype=np.int64)
        self.total, self.refused_total = 0.0, 0
        cluster.listeners.append(self.update)

    @classmethod
    def attach(cls, cluster: ClusterState, predictor: Predictor) -> GoodputState:
        return cluster.extension(("goodput", id(predictor)), lambda c: cls(c, predictor))

    def update(self, node: int) -> None:
        c = self.cluster
        shared, value, refused = 0, 0.0, 0
        for g in range(int(c.gpu_count[node])):
            pods = c.shares.get((node, g))
            if pods:
                useful, bad = self.predictor.gpu(pods)
                shared += sum(p.gpu_milli for p in pods)
                value += useful
                refused += bad
        value += int(c.gpu_count[node]) * MILLI - int(c.idle[node]) - shared  # whole GPUs count in full
        self.total += value - self.value[node]
        self.refused_total += refused - int(self.refused[node])
        self.value[node], self.refused[node] = value, refused
