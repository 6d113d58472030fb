"""The sentences people read: the complete one on the job's page, a short one in lists (sentences.summary)."""

from __future__ import annotations

import random
import re

import pytest

from cluster.types import CPU_KEY, MEMORY_KEY, QuotaKind
from experiments.builders.cluster import BUILTIN_SHAPES, queued_cluster
from scheduler.policy import Reason, get_profile, schedule
from scheduler.policy.quota import Bound, Shortfall
from scheduler.policy.sentences import quota_refused, summary
from experiments.builders.scheduling import JobBuilder, NodeBuilder, SnapshotBuilder
from tests.unit.helpers import admit, cycle, pending


def test_an_admission_is_summed_up_without_placement_figures_or_score():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4)).quota("a", "T4", own=4, borrowed=0) \
        .job(JobBuilder(1).gpus(0.5)).build()
    decision = admit(cycle(snap), 1)
    assert "score" in decision.message
    assert summary(decision) == "running: T4 on n1, own quota"


def test_a_gang_is_summed_up_by_its_workers():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=4), NodeBuilder("n2", gpus=4)) \
        .quota("a", "T4", own=8, borrowed=0).job(JobBuilder(1).gpus(4).workers(2)).build()
    assert summary(admit(cycle(snap), 1)) == "running: 2 workers, T4, own quota"


def test_a_waiting_job_is_summed_up_by_what_it_waits_for():
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=2)).quota("a", "T4", own=1, borrowed=0) \
        .job(JobBuilder(1).gpus(2)).build()
    waiting = pending(cycle(snap), 1)
    assert waiting.reason is Reason.QUOTA_EXHAUSTED and "quota" in waiting.message
    assert summary(waiting) == "waiting for quota: its department's own and borrowed quota are in use"


def test_every_decision_of_busy_cycles_has_a_short_sentence_free_of_figures():
    """Cycles with borrowing, preemption, fallback and gangs: every summary is short and carries no score and no
    negative number; every message is the complete sentence."""
    sim, clock, arrive = queued_cluster(120, BUILTIN_SHAPES, random.Random(5), 300, borrow_ratio=0.1, gang_share=0.2)
    seen = set()
    for _ in range(3):
        sim.finish_elapsed()
        result = schedule(sim.snapshot(), get_profile("tidal"))
        for d in result.decisions:
            short = summary(d)
            seen.add(type(d).__name__)
            assert len(short) <= 80 and "score" not in short and not re.search(r"(?<![\w-])-\d", short), short
            assert len(d.message) >= len(short) or d.reason is Reason.BLOCKED
        sim.apply(result)
        clock.advance(300.0)
        arrive(50)
    assert {"Admit", "StillPending", "Preempt"} <= seen


@pytest.mark.parametrize("shortfall, sentence", [
    (Shortfall(QuotaKind.BORROWED, "A100", 8, 8, 1, "ml", Bound.BORROW),
     "department ml may borrow at most 8 A100; 8 borrowed, needs 1"),
    (Shortfall(QuotaKind.BORROWED, "A100", 8, 8, 2, "ml", Bound.LEND),
     "department ml lends at most 8 A100; 8 lent, needs 2"),
    (Shortfall(QuotaKind.BORROWED, "T4", 11.5, 12, 1, "a and b", Bound.LEND),
     "departments a and b lend at most 12 T4 together; 11.5 lent, needs 1"),
    (Shortfall(QuotaKind.BORROWED, "A100", 16, 16, 0.5, "the tree", Bound.POOL),
     "the tree lends at most 16 A100; 16 lent, needs 0.5"),
    (Shortfall(QuotaKind.BORROWED, CPU_KEY, 64000, 64000, 4000, "nlp", Bound.BORROW),
     "department nlp may borrow at most 64000m CPU; 64000m borrowed, needs 4000m"),
    (Shortfall(QuotaKind.BORROWED, MEMORY_KEY, 0, 0, 16384, "nlp", Bound.LEND),
     "department nlp lends at most 0 MiB memory; 0 MiB lent, needs 16384 MiB"),
    (Shortfall(QuotaKind.BORROWED, "A100", 4, 4, 1),  # a flat department's (and a tree leaf's own) borrowed quota
     "borrowed A100 quota 4/4 used, needs 1"),
], ids=["borrow-limit", "lend-limit", "two-lenders", "pool", "cpu", "memory", "flat"])
def test_a_quota_tree_level_is_named_with_its_limit_and_figure(shortfall, sentence):
    assert quota_refused(shortfall) == sentence
