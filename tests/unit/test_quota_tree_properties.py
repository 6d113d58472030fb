"""Invariants of hierarchical quotas (issue 41) over random trees and workloads, across cycles on the simulated
backend: no node past its limits, own quota always comes back, fair shares split what is idle, no preemption
ping-pong."""

from __future__ import annotations

import math
from collections import defaultdict

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from cluster.clock import VirtualClock
from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, JobStatus, QuotaKind, QuotaNodeView, QuotaView
from experiments.builders.scheduling import NOW, JobBuilder, NodeBuilder
from experiments.simulated_training import SimulatedTraining
from scheduler.policy import Reason, get_profile
from scheduler.policy.fairshare import fair_split
from scheduler.policy.quotatree import QuotaTree

BIG = 10**9
limit_st = st.one_of(st.none(), st.integers(0, 6))
team_st = st.tuples(st.integers(0, 4), limit_st, st.sampled_from([0.5, 1.0, 2.0, 3.0]))  # own, borrow limit, weight
division_st = st.tuples(st.integers(0, 2), limit_st, st.lists(team_st, min_size=1, max_size=3))
tree_st = st.lists(division_st, min_size=1, max_size=3)


def quota_tree(divisions) -> tuple[list[QuotaNodeView], list[QuotaView], list[str]]:
    """O{D0{D0T0, ...}, ...} with T4 quotas (none: no limit) and unlimited CPU and memory."""
    nodes, quotas, teams = [QuotaNodeView("O", None)], [], []

    def add(name: str, parent: str, own: int, borrow: int | None, weight: float = 1.0) -> None:
        nodes.append(QuotaNodeView(name, parent, weight))
        quotas.extend([QuotaView(name, "T4", own, math.inf if borrow is None else borrow),
                       QuotaView(name, CPU_KEY, BIG, math.inf), QuotaView(name, MEMORY_KEY, BIG, math.inf)])
    for d, (own, borrow, members) in enumerate(divisions):
        add(f"D{d}", "O", own, borrow)
        for t, (team_own, team_borrow, weight) in enumerate(members):
            add(f"D{d}T{t}", f"D{d}", team_own, team_borrow, weight)
            teams.append(f"D{d}T{t}")
    return nodes, quotas, teams


def simulation(divisions, node_gpus: list[int]) -> tuple[SimulatedTraining, list[str]]:
    nodes, quotas, teams = quota_tree(divisions)
    views = [NodeBuilder(f"n{i}", "T4", g).build() for i, g in enumerate(node_gpus)]
    return SimulatedTraining(views, quotas, {"pytorch": frozenset({"T4"})}, VirtualClock(NOW), nodes), teams


def check_limits(sim: SimulatedTraining) -> None:
    """Each leaf's borrowed jobs within its borrow limit; own-class work within the own pools on its path; each
    division's use past its subtree's own within its borrow limit."""
    tree = QuotaTree.build(sim.quotas, sim.tree, (), {})
    used = defaultdict(float)  # (node, kind) -> GPUs of its subtree's running jobs
    for job in sim.jobs.values():
        if job.allocation is not None:
            for node in tree.paths[tree.index[job.department]]:
                used[node, job.quota_kind] += job.total_gpus
    own, borrow = tree.own["T4"], tree.borrow["T4"]
    excess = {}
    for i in sorted(range(len(tree.names)), key=lambda i: -len(tree.paths[i])):  # leaves first
        if tree.is_leaf(i):
            assert used[i, QuotaKind.BORROWED] <= borrow[i] + GPU_EPS
            excess[i] = max(0.0, used[i, QuotaKind.OWN] - own[i])
        else:
            excess[i] = max(0.0, sum(excess[c] for c in tree.children[i]) - own[i])
            subtree_own = sum(own[j] for j in range(len(tree.names)) if i in tree.paths[j])
            total = used[i, QuotaKind.OWN] + used[i, QuotaKind.BORROWED]
            assert total - subtree_own <= borrow[i] + GPU_EPS, (tree.names[i], total, subtree_own, borrow[i])
    assert excess[0] <= GPU_EPS  # own-class work never needs what a sibling subtree owns


workload_st = st.lists(st.lists(st.tuples(st.integers(0, 8), st.sampled_from([1, 1, 2])), max_size=10),
                       min_size=1, max_size=5)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_st, st.lists(st.sampled_from([2, 4]), min_size=1, max_size=3), workload_st, st.booleans())
# two divisions within their own quotas (shares 0) once took the same GPU from each other back and forth
@example([(0, None, [(0, None, 0.5), (2, None, 0.5)]), (0, None, [(1, None, 0.5), (0, None, 0.5)])], [2],
         [[(0, 1), (0, 1), (3, 1)]], True)
# a leaf that lost one GPU took two back (LessThanInitialShare), and the other leaf then took one back
@example([(0, None, [(0, None, 0.5)]), (0, None, [(0, None, 0.5)] * 3)], [2, 2, 2],
         [[(1, 2), (3, 1)], [(0, 1), (0, 1), (0, 1), (2, 1), (2, 1)], [(1, 1)]], True)
def test_no_node_is_past_its_limits_and_fair_share_preemption_never_ping_pongs(divisions, node_gpus, workload, fair):
    sim, teams = simulation(divisions, node_gpus)
    profile = get_profile("tidal", fair_sharing=fair)
    pairs: set[tuple[str, str]] = set()
    job_id = 0
    for arrivals in workload + [[]] * 2:
        for team, gpus in arrivals:
            job_id += 1
            sim.submit(JobBuilder(job_id).dept(teams[team % len(teams)]).gpus(gpus)
                       .submitted(sim.clock.now()).build(), 3000.0)
        departments = {j.id: j.department for j in sim.jobs.values()}
        result = sim.step(profile)
        check_limits(sim)
        for p in result.preempted:
            event(p.reason.value)
            assert p.reason is not Reason.PREEMPTED_RECLAIM or p.job_id in departments
            if p.reason is Reason.PREEMPTED_FAIR_SHARE:
                pair = (departments[p.for_job_id], departments[p.job_id])
                assert pair[::-1] not in pairs, f"{pair} after {pair[::-1]}"
                pairs.add(pair)
        sim.clock.advance(400)


def own_room(sim: SimulatedTraining, team: str) -> float:
    """GPUs the own pools on the team's path have left for it: what its own-class work does not use of its own, and
    of each ancestor's pool what the own-class work of the ancestor's subtree does not need (leaves first)."""
    tree = QuotaTree.build(sim.quotas, sim.tree, (), {})
    own = tree.own["T4"]
    used = defaultdict(float)
    for job in sim.jobs.values():
        if job.quota_kind is QuotaKind.OWN:
            used[tree.index[job.department]] += job.total_gpus
    excess = {}
    for i in sorted(range(len(tree.names)), key=lambda i: -len(tree.paths[i])):
        below = used[i] if tree.is_leaf(i) else sum(max(0.0, excess[c]) for c in tree.children[i])
        excess[i] = below - own[i]
    return sum(max(0.0, -excess[n]) for n in tree.paths[tree.index[team]])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_st, st.integers(0, 4), st.data())
def test_an_own_job_always_gets_its_own_quota_back(divisions, extra, data):
    # no borrow limits; a cluster as large as the own quotas (and `extra`), every GPU busy with work of random teams
    divisions = [(own, None, [(t_own, None, w) for t_own, _, w in members]) for own, _, members in divisions]
    _, quotas, _ = quota_tree(divisions)
    total = int(sum(q.own for q in quotas if q.resource == "T4")) + extra
    if total == 0:
        return
    sim, teams = simulation(divisions, [4] * (total // 4) + [total % 4] * bool(total % 4))
    for i in range(total):
        sim.submit(JobBuilder(100 + i).dept(data.draw(st.sampled_from(teams))).gpus(1).submitted(NOW - 10**5)
                   .build(), 10**6)
    sim.step(get_profile("tidal"))
    sim.clock.advance(data.draw(st.sampled_from([10.0, 1000.0])))
    owed = [t for t in teams if own_room(sim, t) >= 1]
    if not owed:
        return
    team = data.draw(st.sampled_from(owed))
    sim.submit(JobBuilder(1).dept(team).gpus(1).submitted(sim.clock.now()).build(), 10**6)
    result = sim.step(get_profile("tidal"))
    event("by preemption" if result.preempted else "on idle GPUs")
    assert sim.jobs[1].status is JobStatus.RUNNING, [d.message for d in result.decisions if d.job_id == 1]
    assert sim.jobs[1].quota_kind is QuotaKind.OWN
    assert all(p.reason is Reason.PREEMPTED_RECLAIM for p in result.preempted)


split_st = st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0]), st.integers(0, 12)), min_size=1,
                    max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(split_st, min_size=1, max_size=4), st.integers(0, 40))
def test_fair_shares_sum_to_what_is_idle(divisions, idle):
    children = {"": tuple(f"D{d}" for d in range(len(divisions)))}
    weight, wants = {}, {}
    for d, members in enumerate(divisions):
        children[f"D{d}"] = tuple(f"D{d}T{t}" for t in range(len(members)))
        weight[f"D{d}"] = 1.0
        for t, (w, want) in enumerate(members):
            weight[f"D{d}T{t}"], wants[f"D{d}T{t}"] = w, float(want)
    shares = fair_split(children, weight, wants, float(idle))
    leaves = list(wants)
    assert math.isclose(sum(shares[x] for x in leaves), min(idle, sum(wants.values())), abs_tol=1e-6)
    for parent, kids in children.items():
        assert math.isclose(sum(shares[k] for k in kids), shares.get(parent, float(idle)) if parent else
                            min(idle, sum(wants.values())), abs_tol=1e-6)
    for x in leaves:
        assert -1e-9 <= shares[x] <= wants[x] + 1e-6
    for kids in children.values():  # siblings that both want more get shares in proportion to their weights
        unmet = [k for k in kids if k in wants and weight[k] > 0 and shares[k] < wants[k] - 1e-6]
        for a in unmet:
            for b in unmet:
                assert shares[a] / weight[a] <= shares[b] / weight[b] + 1e-6 or shares[a] <= 1e-6


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.integers(1, 4)),
                min_size=2, max_size=4), st.integers(2, 8), st.integers(0, 6))
def test_fair_share_preemption_never_preempts_back(leaves, gpus, stagger):
    # every leaf keeps asking for more than the cluster has; some arrive later, into a cluster already full
    divisions = [(0, None, [(own, None, weight) for own, weight, _ in leaves])]
    sim, teams = simulation(divisions, [gpus])
    profile = get_profile("tidal", fair_sharing=True)
    pairs: set[tuple[str, str]] = set()
    job_id = 0
    for round_ in range(6):
        for team, (_, _, batch) in zip(teams, leaves):
            if round_ >= (stagger * teams.index(team)) % 3:
                for _ in range(batch):
                    job_id += 1
                    sim.submit(JobBuilder(job_id).dept(team).gpus(1).submitted(sim.clock.now()).build(), 10**5)
        departments = {j.id: j.department for j in sim.jobs.values()}
        result = sim.step(profile)
        check_limits(sim)
        for p in result.preempted:
            event(p.reason.value)
            if p.reason is Reason.PREEMPTED_FAIR_SHARE:
                pair = (departments[p.for_job_id], departments[p.job_id])
                assert pair[::-1] not in pairs, f"{pair} after {pair[::-1]}"
                pairs.add(pair)
        sim.clock.advance(400)
