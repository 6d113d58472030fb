"""Reading Alibaba 2023 traces: the mapping rules, and bad input reported with file:line."""
import ast
from pathlib import Path

import pytest

from cluster.simulated.alibaba import TraceError, read_nodes, read_pods
from cluster.simulated.traces import helios_shares
from experiments.replay import Options, load, mapping as mp
from tests.unit.replay_fixtures import NODE_HEADER, POD_HEADER, cluster, pod, setup_for, write


def test_pods_are_read_with_fractional_whole_and_constrained_gpus(tmp_path):
    pods = write(tmp_path / "pods.csv", POD_HEADER, [
        pod("frac", 0.46, 5, 100), pod("whole", 2, 6, 100, qos="BE"), pod("cpu", 0, 7, 100, qos="Burstable"),
        pod("spec", 1, 8, 100, spec="V100M16|V100M32|V100M32"),
        "never,1000,1024,1,1000,,LS,Pending,10,70,",          # never scheduled: lives 60 s
        "open,1000,1024,1,1000,,Guaranteed,Running,20,,30",   # never deleted: runs to the trace end
    ])
    trace = read_pods(pods)
    by = {p.name: p for p in trace.pods}
    assert by["frac"].gpus == 0.46 and by["whole"].gpus == 2.0 and by["cpu"].gpus == 0.0
    assert by["spec"].gpu_spec == ("V100M16", "V100M32")
    assert trace.timed and trace.end == 108  # "spec": created 8, runs 100
    assert mp.run_time(by["never"], trace.end) == 60
    assert mp.run_time(by["open"], trace.end) == 108 - 30
    assert mp.run_time(by["frac"], trace.end) == 100
    m = mp.Mapping({"d": 1.0})
    assert m.account(by["whole"]) == "d/be" and m.account(by["cpu"]) == "d/be"
    assert m.account(by["frac"]) == "d" and m.account(by["open"]) == "d"
    cert = mp.certified(trace.pods, ("T4", "V100M16", "V100M32"))
    assert cert == {"any": frozenset({"T4", "V100M16", "V100M32"}), "spec:V100M16|V100M32": frozenset({"V100M16", "V100M32"})}


def test_departments_follow_quota_shares_deterministically():
    m = mp.Mapping({"big": 0.75, "small": 0.25})
    names = [f"openb-pod-{i:04d}" for i in range(4000)]
    first = [m.department(n) for n in names]
    assert first == [m.department(n) for n in names]  # a hash, not Python's salted hash()
    assert 0.72 < first.count("big") / len(first) < 0.78
    quotas = {(q.department, q.resource): (q.own, q.borrowed) for q in m.quotas(read_nodes_fixture())}
    assert quotas[("big", "T4")] == (1.5, 2.0) and quotas[("small", "T4")] == (0.5, 2.0)
    assert quotas[("big/be", "T4")] == (0.0, 2.0)


def read_nodes_fixture():
    from cluster.types import NodeState, NodeView, Pool
    return [NodeView("t4-0", "T4", "T4", 2, 8000, 16384, Pool.COLOCATION, NodeState.OFFLINE_NORMAL)]


def test_helios_shares_come_from_the_last_day(tmp_path):
    csv = write(tmp_path / "earth.csv", "date,vcA,vcB,vcC,total", ["2020-04-01,10,10,0,20", "2020-04-02,30,10,0,40"])
    assert helios_shares(csv) == {"vcA": 0.75, "vcB": 0.25}


def test_untimed_pod_list_runs_the_inflate_experiment(tmp_path):
    pods = write(tmp_path / "multigpu.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
                 ["a,1000,1024,1,1000", "b,1000,1024,2,1000"])
    setup = setup_for(cluster(tmp_path), pods)
    assert not setup.trace.timed and setup.mode == "inflate"
    assert {p.qos for p in setup.pods} == {""} and mp.Mapping.own_eligible(setup.pods[0])


def test_a_pod_that_fits_no_node_is_listed_not_dropped_silently(tmp_path):
    pods = write(tmp_path / "pods.csv", POD_HEADER, [
        pod("ok", 1, 0, 10), pod("huge", 8, 1, 10), pod("nomodel", 1, 2, 10, spec="A100"),
        pod("fat", 0, 3, 10, cpu=64000)])
    setup = setup_for(cluster(tmp_path), pods)
    assert [p.name for p in setup.pods] == ["ok"]
    bad = {u.name: u for u in setup.unplaceable}
    assert set(bad) == {"huge", "nomodel", "fat"}
    assert bad["huge"].line == 3 and "large enough for 8 GPU" in bad["huge"].why
    assert "no node has an allowed GPU model (A100)" in bad["nomodel"].why
    assert "CPU-only node" in bad["fat"].why


BAD_PODS = [
    (["ok,1000,1024,1,1000,,LS,Running,0,10,0", "bad,1000,1024,1,1000,,LS,Running,0,10"], 3, "malformed row: 10 fields"),
    (["neg,-1000,1024,1,1000,,LS,Running,0,10,0"], 2, "cpu_milli is negative (-1000)"),
    (["x,1000,lots,1,1000,,LS,Running,0,10,0"], 2, "memory_mib 'lots' is not a whole number"),
    (["x,1000,1024,2,500,,LS,Running,0,10,0"], 2, "2 GPUs must be whole (gpu_milli 1000), got 500"),
    (["x,1000,1024,1,0,,LS,Running,0,10,0"], 2, "gpu_milli must be 1..1000"),
    (["x,1000,1024,1,1000,,XX,Running,0,10,0"], 2, "unknown qos 'XX'"),
    (["x,1000,1024,1,1000,,LS,Running,20,10,20"], 2, "deletion_time 10 before it was scheduled"),
    (["x,1000,1024,1,1000,,LS,Running,20,30,10"], 2, "scheduled_time 10 before creation_time 20"),
    (["x,1000,1024,1,1000,,LS,Running,0,10,0", "x,1000,1024,1,1000,,LS,Running,0,10,0"], 3, "duplicate pod x"),
    (["x,1000,1024,1,1000,,LS,Running,,10,0"], 2, "empty creation_time"),
]


@pytest.mark.parametrize("rows,line,problem", BAD_PODS)
def test_bad_pod_rows_name_file_and_line(tmp_path, rows, line, problem):
    pods = write(tmp_path / "pods.csv", POD_HEADER, rows)
    with pytest.raises(TraceError) as e:
        load(cluster(tmp_path), pods, None, Options())
    assert str(e.value).startswith(f"{pods}:{line}: ")
    assert problem in str(e.value)


def test_unknown_or_missing_columns_are_reported_on_the_header_line(tmp_path):
    pods = write(tmp_path / "pods.csv", POD_HEADER + ",colour", ["x,1000,1024,1,1000,,LS,Running,0,10,0,red"])
    with pytest.raises(TraceError, match=r"pods\.csv:1: unknown column\(s\) 'colour'"):
        read_pods(pods)
    nodes = write(tmp_path / "nodes.csv", "sn,cpu_milli,gpu,model", ["n,1000,1,T4"])
    with pytest.raises(TraceError, match=r"nodes\.csv:1: missing column\(s\) memory_mib"):
        read_nodes(nodes)
    partial = write(tmp_path / "p2.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time", ["x,1,1,0,0,5"])
    with pytest.raises(TraceError, match=r"p2\.csv:1: time columns must come together"):
        read_pods(partial)


@pytest.mark.parametrize("row,problem", [
    ("n,8000,16384,-2,T4", "gpu is negative (-2)"),
    ("n,8000,16384,2,", "2 GPUs but no GPU model"),
    ("n,0,16384,2,T4", "a node needs CPU and memory"),
    ("n,8000,16384,2", "malformed row: 4 fields"),
])
def test_bad_node_rows_name_file_and_line(tmp_path, row, problem):
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER, ["ok,1000,1024,0,", "", row])
    with pytest.raises(TraceError) as e:
        read_nodes(nodes)
    assert str(e.value) == f"{nodes}:4: {problem}" or str(e.value).startswith(f"{nodes}:4: {problem}")


def test_replay_package_imports_no_django():
    root = Path(__file__).resolve().parents[2] / "scheduler" / "replay"
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] in {"django", "rest_framework", "celery"} for n in names), path


def test_the_chosen_model_is_the_allowed_model_with_most_gpus(tmp_path):
    """gpu_spec is alphabetical: 'A10|T4' means T4 (2 GPUs here) chosen, A10 (1 GPU) as fallback."""
    nodes = cluster(tmp_path, ["a10-0,8000,16384,1,A10", "t4-0,8000,16384,2,T4"])
    pods = write(tmp_path / "pods.csv", POD_HEADER, [pod("x", 1, 0, 10, spec="A10|T4"), pod("big", 2, 0, 10, spec="A10|T4")])
    setup = setup_for(nodes, pods)
    assert [setup.preferred[p.line] for p in setup.pods] == ["T4", "T4"]
    nodes2 = cluster(tmp_path, ["a10-0,8000,16384,1,A10", "a10-1,8000,16384,1,A10", "a10-2,8000,16384,1,A10",
                                "t4-0,8000,16384,2,T4"])
    setup2 = setup_for(nodes2, pods)
    assert [setup2.preferred[p.line] for p in setup2.pods] == ["A10", "T4"]  # 'big' fits no A10 node
