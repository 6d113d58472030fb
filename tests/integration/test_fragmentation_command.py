"""`manage.py fragmentation` end to end on a tiny hand-made trace: report files, the JSON's shape, bad input."""
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduler import interference_tables
from tidal.celery import app
from tests.unit.replay_fixtures import NODE_HEADER, POD_HEADER, write

POLICIES = ["random", "dotprod", "clustering", "packing", "bestfit", "fgd", "tidal"]


@pytest.fixture
def trace(tmp_path):
    nodes = write(tmp_path / "nodes.csv", NODE_HEADER,
                  ["a,32000,65536,2,T4", "b,32000,65536,4,T4", "c,64000,131072,8,A100", "d,8000,16384,1,T4"])
    rows = [f"p{i},{1000 * (1 + i % 4)},2048,{g},{m},{spec},LS,Running,0,10,0" for i, (g, m, spec) in enumerate(
        [(1, 100, ""), (1, 300, "T4"), (0, 0, ""), (1, 200, ""), (1, 250, "A100"), (1, 150, "")] * 4)]
    # shares of at most 0.3 GPU: arrivals step < 2 % of the 15 GPUs, so some event rounds to 99..101 %
    pods = write(tmp_path / "openb_pod_list_tiny.csv", POD_HEADER, rows)
    return nodes, pods


def test_fragmentation_writes_report_plots_and_json(trace, tmp_path):
    nodes, pods = trace
    out, figures = tmp_path / "out", tmp_path / "figures.json"
    call_command("fragmentation", nodes=str(nodes), pods=str(pods), seeds="1-3", processes=2, out=str(out),
                 json_path=str(figures), interference=str(interference_tables.FOLDER))
    for name in ("report.md", "report.json", "unallocated_vs_arrived.png", "unallocated_at_100.png",
                 "fragmentation_vs_arrived.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads(figures.read_text())
    assert set(data) == {"capacity_gpus", "nodes", "policies"}
    assert data["capacity_gpus"] == 15 and data["nodes"] == 4
    assert list(data["policies"]) == POLICIES
    for name, f in data["policies"].items():
        assert set(f) == {"at100", "curve", "frag_pct", "goodput"}, name
        assert set(f["goodput"]) == {"at100", "at_end", "refused_pairs_at_end", "overruled"}
        assert set(f["at100"]) == {"mean", "sd", "median"} and f["at100"]["mean"] is not None
        assert list(f["curve"]) == [str(a) for a in range(75, 131)]
        assert list(f["frag_pct"]) == ["60", "80", "90"]
    report = (out / "report.md").read_text()
    assert "## Unallocated GPU % at arrived = 100 %" in report and "No published figure" in report
    assert "## Goodput (useful GPU work once shares slow each other)" in report
    assert json.loads((out / "report.json").read_text())["trace"] == "tiny"


def test_policies_and_seeds_can_be_chosen(trace, tmp_path):
    nodes, pods = trace
    figures = tmp_path / "f.json"
    call_command("fragmentation", nodes=str(nodes), pods=str(pods), seeds="4,2", policies="fgd,random",
                 processes=1, out=str(tmp_path / "o"), json_path=str(figures))
    assert list(json.loads(figures.read_text())["policies"]) == ["fgd", "random"]
    assert json.loads((tmp_path / "o" / "report.json").read_text())["seeds"] == [4, 2]


@pytest.mark.parametrize(("options", "message"), [
    ({"seeds": "51-42"}, r"--seeds: range '51-42' runs backwards"),
    ({"seeds": "42-x"}, r"--seeds: '42-x' is not a seed"),
    ({"policies": "fgd,tetris"}, r"--policies: unknown policy tetris; known: random, dotprod"),
    ({"tune": 0}, r"--tune must be a number > 0, got 0"),
    ({"tune": -1.3}, r"--tune must be a number > 0"),
    ({"processes": 0}, r"--processes must be >= 1"),
])
def test_bad_options_are_command_errors(trace, tmp_path, options, message):
    nodes, pods = trace
    out = tmp_path / "never"
    with pytest.raises(CommandError, match=message):
        call_command("fragmentation", nodes=str(nodes), pods=str(pods), out=str(out), **options)
    assert not out.exists()


def test_a_bad_csv_line_is_named(trace, tmp_path):
    nodes, _ = trace
    pods = write(tmp_path / "bad.csv", POD_HEADER, ["ok,1000,1024,1,1000,,LS,Running,0,10,0",
                                                    "neg,1000,-5,1,1000,,LS,Running,0,10,0"])
    with pytest.raises(CommandError, match=r"bad\.csv:3: memory_mib is negative \(-5\)"):
        call_command("fragmentation", nodes=str(nodes), pods=str(pods), out=str(tmp_path / "never"))
    bad_nodes = write(tmp_path / "badnodes.csv", NODE_HEADER, ["a,32000,65536,2,T4", "b,32000,65536,2,"])
    with pytest.raises(CommandError, match=r"badnodes\.csv:3: 2 GPUs but no GPU model"):
        call_command("fragmentation", nodes=str(bad_nodes), pods=str(pods), out=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_a_name_resolves_in_the_traces_folder(settings, tmp_path, trace):
    nodes, _ = trace
    settings.TRACES_DIR = tmp_path / "traces"
    with pytest.raises(CommandError, match=r"traces/alibaba-gpu-2023/openb_pod_list_nosuch\.csv:0: cannot open"):
        call_command("fragmentation", nodes=str(nodes), pods="nosuch", out=str(tmp_path / "never"))


def test_the_runs_can_go_to_the_celery_workers(trace, tmp_path, worker_queue, monkeypatch):
    """--celery: every run (policy x seed) is a task a real worker process takes through Redis; the figures are
    those of the runs in processes."""
    nodes, pods = trace
    monkeypatch.setitem(app.conf, "task_default_queue", worker_queue)
    local, remote = tmp_path / "local.json", tmp_path / "remote.json"
    options = dict(nodes=str(nodes), pods=str(pods), seeds="1-2", policies="bestfit,tidal,tidal-interference")
    call_command("fragmentation", processes=1, out=str(tmp_path / "a"), json_path=str(local), **options)
    out = StringIO()
    call_command("fragmentation", celery=True, out=str(tmp_path / "b"), json_path=str(remote), stdout=out, **options)
    assert "on the Celery workers" in out.getvalue()
    assert json.loads(remote.read_text()) == json.loads(local.read_text())
    # the workers read the interference model too: goodput, and no pair the model refuses under tidal-interference
    aware = json.loads(local.read_text())["policies"]["tidal-interference"]["goodput"]
    assert aware["refused_pairs_at_end"] == 0 and aware["at_end"]["mean"] > 0


def test_the_interference_aware_policy_needs_the_measurements(trace, tmp_path):
    nodes, pods = trace
    with pytest.raises(CommandError, match="--interference: no folder .*nosuch"):
        call_command("fragmentation", nodes=str(nodes), pods=str(pods), policies="tidal-interference",
                     interference=str(tmp_path / "nosuch"), out=str(tmp_path / "never"))
