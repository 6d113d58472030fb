"""The sentences people read: the complete one on the job's page, a short one in lists (sentences.summary)."""

from __future__ import annotations

import random
import re

from experiments.builders.cluster import BUILTIN_SHAPES, queued_cluster
from scheduler.policy import Reason, get_profile, schedule
from scheduler.policy.sentences import summary
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
