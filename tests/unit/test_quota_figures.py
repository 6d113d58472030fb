"""The department tree's figures (scheduler/quotafigures.py): used, lent, borrowed and fair share per node."""
from cluster.types import QuotaNodeView as Node, QuotaView
from scheduler.quotafigures import tree_figures

INF = float("inf")


def quota(name: str, own: float, borrowed: float = INF, lend: float | None = None) -> QuotaView:
    return QuotaView(name, "A100", own, borrowed, lend)


def figures(quotas, nodes, used=None, pending=None, capacity=16.0):
    tree = tree_figures(tuple(quotas), tuple(nodes), {"A100": capacity},
                        {(d, "A100"): x for d, x in (used or {}).items()},
                        {(d, "A100"): x for d, x in (pending or {}).items()})
    return {n.name: n.models[0] for n in tree.nodes}, tree


TWO_DIVISIONS = [Node("d1", None), Node("d2", None), Node("t1", "d1"), Node("t2", "d1"), Node("t3", "d2")]


def test_a_team_past_its_own_borrows_what_its_sibling_lends():
    got, tree = figures([quota("t1", 4), quota("t2", 4), quota("t3", 8)], TWO_DIVISIONS, used={"t1": 6})
    assert [(n.name, n.depth, n.leaf) for n in tree.nodes] == [("d1", 0, False), ("t1", 1, True), ("t2", 1, True),
                                                              ("d2", 0, False), ("t3", 1, True)]
    assert (got["t1"].used, got["t1"].borrowed, got["t2"].lent) == (6, 2, 2)
    assert (got["d1"].used, got["d1"].subtree_own, got["d1"].borrowed, got["d2"].lent) == (6, 8, 0, 0)
    assert tree.warnings == ()


def test_a_lend_limit_caps_what_is_lent():
    got, _ = figures([quota("t1", 10, lend=4), quota("t2", 0)], [Node("t1", None), Node("t2", None)],
                     used={"t2": 6})
    assert (got["t1"].lent, got["t1"].lend_limit, got["t2"].borrowed) == (4, 4, 6)


def test_fair_share_is_own_demand_then_the_rest_by_weight():
    """Issue 41's scenario 9: cluster 12, A own 2 weight 1, B own 2 weight 3, both want 12 -> A 4, B 8."""
    nodes = [Node("a", None, 1.0), Node("b", None, 3.0)]
    got, _ = figures([quota("a", 2), quota("b", 2)], nodes, pending={"a": 12, "b": 12}, capacity=12)
    assert (got["a"].fair_share, got["b"].fair_share) == (4, 8)
    got, _ = figures([quota("a", 2), quota("b", 2)], nodes, pending={"a": 3, "b": 12}, capacity=12)
    assert (got["a"].fair_share, got["b"].fair_share) == (3, 9)
    heavier = [Node("a", None, 3.0), Node("b", None, 3.0)]
    got, _ = figures([quota("a", 2), quota("b", 2)], heavier, pending={"a": 12, "b": 12}, capacity=12)
    assert (got["a"].fair_share, got["b"].fair_share) == (6, 6)


def test_a_parents_fair_share_is_its_childrens_and_quotas_past_the_cluster_warn():
    got, tree = figures([quota("t1", 4), quota("t2", 4), quota("t3", 12)], TWO_DIVISIONS,
                        pending={"t1": 8, "t3": 8})
    assert got["d1"].fair_share == got["t1"].fair_share + got["t2"].fair_share == 8
    assert tree.warnings == ("own A100 quotas sum to 20 GPUs; the cluster has 16",)


def test_an_open_model_job_is_pending_on_its_most_idle_certified_model():
    """A waiting job without a GPU model counts where the queue tries it first: the certified model with the most
    idle GPUs; each open demand takes that model's idle GPUs in turn (largest first)."""
    capacity = {"A100": 16.0, "T4": 8.0, "V100": 32.0}
    used = {("t1", "A100"): 2.0, ("t2", "V100"): 30.0}
    got = tree_figures((quota("t1", 4), quota("t2", 4)), (Node("t1", None), Node("t2", None)), capacity, used,
                       {("t1", "A100"): 1.0}, {("t1", ("A100", "T4")): 12.0, ("t2", ("A100", "T4")): 4.0})
    pending = {(n.name, m.model): m.pending for n in got.nodes for m in n.models if m.pending}
    # A100 has 14 idle, T4 8: t1's 12 go to A100 (2 left idle there), then t2's 4 to T4 (8 idle)
    assert pending == {("t1", "A100"): 13.0, ("t2", "T4"): 4.0}
    none_certified = tree_figures((quota("t1", 4),), (Node("t1", None),), capacity, {}, {}, {("t1", ()): 2.0})
    assert all(m.pending == 0 for n in none_certified.nodes for m in n.models)
