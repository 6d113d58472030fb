"""A loop's CycleCache gives exactly what a fresh build gives.

Its node tables keep the last snapshot's rows and re-read only nodes whose NodeView object
changed; its quota limits are kept for the same quota tuple. Whatever happened in between
(node changes, renames, reorders, tables changed by a cycle), the result must equal the plain
build bit for bit, or schedule() would no longer be a function of its inputs.
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.types import CPU_KEY, GpuShare, NodeState, NodeView, Pool, QuotaKind, QuotaView
from experiments.builders.scheduling import JobBuilder, NodeBuilder, SnapshotBuilder
from scheduler.policy import get_profile, schedule
from scheduler.policy.cache import CycleCache
from scheduler.policy.nodes import NodeTable
from scheduler.policy.quota import QuotaLedger, demand

ARRAYS = ("gpu_used", "gpu_count", "cpu_cap", "cpu_free", "mem_free", "schedulable", "fixed_pool", "used_sum",
          "whole_free", "max_share_free", "least_shared", "allocated")
MODELS = ("T4", "G2", None)
SHARES = st.sampled_from([0.0, 0.0, 0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 1.0, 1.0])


def fresh(nodes) -> dict:
    """What the cycle built before the memo: one NodeTable per model, models in first-appearance order."""
    by_model: dict = {}
    for n in nodes:
        by_model.setdefault(n.gpu_model, []).append(n)
    return {model: NodeTable(model, group) for model, group in by_model.items()}


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for model, table in want.items():
        t = got[model]
        assert t.gpu_model == table.gpu_model and t.names == table.names and t.row == table.row
        for name in ARRAYS:
            a, b = getattr(t, name), getattr(table, name)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert a.tobytes() == b.tobytes(), name  # bit for bit (NaN from 0/0 included)
        assert np.float64(t.idle_gpus()).tobytes() == np.float64(table.idle_gpus()).tobytes()
        assert t.bounds() == table.bounds() and t.failed == table.failed == []


@st.composite
def node(draw, name: str, model: str | None = None, gpus: int | None = None) -> NodeView:
    model = draw(st.sampled_from(MODELS)) if model is None and gpus is None else model
    gpus = (0 if model is None else draw(st.integers(1, 8))) if gpus is None else gpus
    used = draw(st.lists(SHARES, min_size=gpus, max_size=gpus)) if draw(st.booleans()) else []
    return replace(NodeBuilder(name, model, gpus).build(), gpu_used=tuple(used),
                   cpu_milli=draw(st.sampled_from([0, 8000, 64000])), cpu_used=draw(st.sampled_from([0, 1000, 8000])),
                   memory_used=draw(st.sampled_from([0, 4096])),
                   state=draw(st.sampled_from(list(NodeState))), pool=draw(st.sampled_from(list(Pool))))


@st.composite
def clusters(draw) -> list[NodeView]:
    count = draw(st.integers(0, 14))
    names = draw(st.permutations([f"n{i:02d}" for i in range(count)]))  # snapshot order is not name order
    return [draw(node(name)) for name in names]


@st.composite
def step(draw, nodes: list[NodeView]) -> list[NodeView]:
    """The next snapshot: mostly a few nodes re-read (same name, model, GPU count), sometimes a
    structural change, sometimes nothing; an unchanged node is the same object, as the cluster gives it."""
    nodes = list(nodes)
    kind = draw(st.sampled_from(["rows", "rows", "rows", "none", "reorder", "add", "remove", "regpu", "rename"]))
    if kind == "rows" and nodes:
        for i in draw(st.lists(st.integers(0, len(nodes) - 1), max_size=4)):
            n = nodes[i]
            nodes[i] = draw(node(n.name, n.gpu_model, n.gpu_count))
    elif kind == "reorder":
        nodes = draw(st.permutations(nodes))
    elif kind == "add":
        nodes.insert(draw(st.integers(0, len(nodes))), draw(node(f"m{len(nodes):02d}")))
    elif kind == "remove" and nodes:
        nodes.pop(draw(st.integers(0, len(nodes) - 1)))
    elif kind == "rename" and nodes:
        i = draw(st.integers(0, len(nodes) - 1))
        nodes[i] = replace(nodes[i], name=f"r{i:02d}")
    elif kind == "regpu" and nodes:
        i = draw(st.integers(0, len(nodes) - 1))
        nodes[i] = draw(node(nodes[i].name, "T4", draw(st.integers(1, 8))))
    return nodes


@st.composite
def cycles(draw) -> list[list[NodeView]]:
    snapshots = [draw(clusters())]
    for _ in range(draw(st.integers(1, 8))):
        snapshots.append(draw(step(snapshots[-1])))
    return snapshots


@settings(max_examples=200, deadline=None)
@given(cycles(), st.lists(st.tuples(st.integers(0, 20), st.integers(0, 7), SHARES, st.booleans()), max_size=6))
def test_incrementally_rebuilt_tables_equal_fresh_ones(snapshots, changes):
    cache = CycleCache()
    for nodes in snapshots:
        tables = cache.node_tables(tuple(nodes))
        assert_same(tables, fresh(nodes))
        # what a cycle does to its tables must not leak into the next cycle's
        for table in tables.values():
            for row, index, share, release in changes:
                if len(table) and table.gpu_count[row % len(table)]:
                    row %= len(table)
                    shares = (GpuShare(index % int(table.gpu_count[row]), share),)
                    (table.release if release else table.allocate)(row, shares, 100, 100)


def test_unchanged_snapshot_reuses_rows_and_shares_only_read_only_arrays():
    cache = CycleCache()
    nodes = tuple(NodeBuilder(f"n{i}", "T4", 2).used(0.5 * (i % 3)).build() for i in range(5))
    first = cache.node_tables(nodes)["T4"]
    second = cache.node_tables(nodes)["T4"]
    for name in ("gpu_count", "cpu_cap", "schedulable", "fixed_pool"):
        assert getattr(first, name) is getattr(second, name)
        with pytest.raises(ValueError):
            getattr(second, name)[0] = 0
    for name in set(ARRAYS) - {"gpu_count", "cpu_cap", "schedulable", "fixed_pool"}:
        assert not np.shares_memory(getattr(first, name), getattr(second, name)), name
    # a node turned unschedulable: the shared array is replaced, not written
    was = second.schedulable
    third = cache.node_tables(nodes[:2] + (replace(nodes[2], state=NodeState.ONLINE_NORMAL),) + nodes[3:])["T4"]
    assert third.schedulable.tolist() == [True, True, False, True, True]
    assert was.tolist() == [True] * 5


def test_a_cycle_on_a_memoized_snapshot_decides_as_on_a_fresh_one():
    cache = CycleCache()
    snap = SnapshotBuilder().node(NodeBuilder("n1", gpus=2), NodeBuilder("n2", gpus=4)) \
        .quota("a", "T4", own=4, borrowed=4) \
        .job(JobBuilder(1).gpus(2).running("n2", 0, 1, kind=QuotaKind.BORROWED),
             JobBuilder(2).gpus(2), JobBuilder(3).gpus(4), JobBuilder(4).gpus(1)).build()
    profile = get_profile("tidal")
    first = schedule(snap, profile, cache=cache)  # builds and keeps, then changes its own tables
    again = schedule(snap, profile, cache=cache)  # same NodeView objects: every row reused
    assert cache.layout is not None
    assert first == again == schedule(snap, profile)


DEPTS = st.sampled_from(["a", "b", "c"])
RESOURCES = st.sampled_from(["T4", "G2", CPU_KEY])
NEEDS = st.tuples(st.sampled_from(["T4", "G2"]), st.sampled_from([0.25, 0.5, 1.0, 2.0]), st.sampled_from([0, 1000]),
                  st.sampled_from([0, 4096])).map(lambda t: demand(*t))
CHARGES = st.lists(st.tuples(DEPTS, st.sampled_from(list(QuotaKind)), NEEDS, st.sampled_from([1, -1])), max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(QuotaView, DEPTS, RESOURCES, st.sampled_from([0.0, 1.0, 2.5, 8.0]),
                          st.sampled_from([0.0, 1.0, 4.0])), max_size=8), CHARGES, CHARGES)
def test_quota_ledger_reuses_the_limits_of_the_same_quota_tuple_but_never_its_usage(quotas, before, after):
    quotas = tuple(quotas)

    def run(ledger: QuotaLedger, charges) -> list:
        seen = []
        for dept, kind, need, sign in charges:
            ledger.charge(dept, kind, need, sign)
            seen += [(d, ledger.has_own_room(d, n), ledger.choose(d, n, True), ledger.choose(d, n, False))
                     for d in ("a", "b", "c") for _, _, n, _ in charges]
        return seen

    holders = [JobBuilder(1).dept("a").gpus(2).running("n1", 0, 1, kind=QuotaKind.BORROWED).build(),
               JobBuilder(2).dept("b").gpus(0.5).running("n1", 2, share=0.5).build()]
    cache = CycleCache()
    run(QuotaLedger(quotas, holders, cache.quota_limits(quotas)), before)  # keeps the limits, charges its own rows
    kept = cache.quota_limits(quotas)
    assert kept is cache.quota_limits(quotas)  # the same tuple: the same limits
    memoized = run(QuotaLedger(quotas, holders, kept), after)
    plain = run(QuotaLedger(list(quotas), holders), after)
    assert memoized == plain
