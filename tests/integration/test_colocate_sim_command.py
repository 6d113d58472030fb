"""`manage.py colocate_sim` end to end for one day on the small cluster: report, plots, JSON keys."""
import json

import pytest
from django.core.management import CommandError, call_command

from experiments.colocation_sim.report import JSON_KEYS


def test_colocate_sim_writes_report_plots_and_json(tmp_path):
    out, figures = tmp_path / "out", tmp_path / "figures.json"
    call_command("colocate_sim", days=1, small=True, out=str(out), json_path=str(figures))
    for name in ("report.md", "gpu_util_by_hour.png", "online_nodes.png", "queue.png", "lent_nodes.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads(figures.read_text())
    assert set(data) == set(JSON_KEYS)
    assert {"lent_share", "kill_rate", "online_pending_minutes", "transitions_per_day", "gpu_util_mean",
            "gpu_util_mean_static", "queue_wait_mean_s_static", "online_short_minutes_static"} <= set(data)
    assert "static split" in (out / "report.md").read_text()


def _csv(path, days: int, bad_line: int | None = None) -> None:
    rows = ["timestamp,value"]
    for m in range(days * 1440 // 5):  # a 5-minute step, resampled to minutes
        t = 1_700_006_400 + 300 * m
        rows.append(f"{t},{100 + 80 * ((m // 12) % 24 in range(8, 20))}")
    if bad_line is not None:
        rows[bad_line - 1] = "1700100000,lots"
    path.write_text("\n".join(rows) + "\n")


def test_colocate_sim_runs_on_a_traffic_csv_with_both_lendings(tmp_path):
    traffic, out, figures = tmp_path / "t.csv", tmp_path / "out", tmp_path / "f.json"
    _csv(traffic, 2)
    call_command("colocate_sim", days=1, small=True, training_load=0.3, traffic=str(traffic), lending="both",
                 out=str(out), json_path=str(figures))
    data = json.loads(figures.read_text())
    assert set(data["by_lending"]) == {"threshold", "forecast"}
    text = (out / "report.md").read_text()
    assert "t.csv" in text and "lending (forecast)" in text and "lending (threshold)" in text


def test_a_bad_traffic_file_is_refused_naming_its_line(tmp_path):
    traffic = tmp_path / "bad.csv"
    _csv(traffic, 2, bad_line=17)
    with pytest.raises(CommandError, match="line 17"):
        call_command("colocate_sim", days=1, small=True, traffic=str(traffic), out=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_colocate_sim_refuses_more_days_than_the_traffic_has(tmp_path):
    traffic = tmp_path / "t.csv"
    _csv(traffic, 2)
    with pytest.raises(CommandError, match="2 whole days"):
        call_command("colocate_sim", days=3, small=True, traffic=str(traffic), out=str(tmp_path / "never"))


def test_colocate_sim_refuses_zero_days(tmp_path):
    with pytest.raises(CommandError, match="--days"):
        call_command("colocate_sim", days=0, out=str(tmp_path / "never"))


def test_the_llm_scenario_refuses_more_days_than_servegen_holds(tmp_path):
    with pytest.raises(CommandError, match="servegen-m-large"):
        call_command("colocate_sim", llm=True, days=20, out=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_the_llm_scenario_runs_on_a_servegen_trace_file(tmp_path):
    trace, out, figures = tmp_path / "mine.csv", tmp_path / "out", tmp_path / "f.json"
    rows = ["t_s,requests_per_s,cv_weighted,mean_input_tokens,mean_output_tokens"]
    rows += [f"{600 * i},{150 + 100 * ((i // 6) % 24 in range(8, 20))},2.0,900,150" for i in range(2 * 144)]
    trace.write_text("\n".join(rows) + "\n")
    call_command("colocate_sim", llm=True, days=1, trace_file=str(trace), lending="forecast", out=str(out),
                 json_path=str(figures))
    assert json.loads(figures.read_text())["kill_rate"] is not None
    assert "mine.csv" in (out / "report.md").read_text()
    _csv(tmp_path / "t.csv", 2)
    with pytest.raises(CommandError, match="need the columns"):  # a timestamp,value file is not LLM traffic
        call_command("colocate_sim", llm=True, days=1, trace_file=str(tmp_path / "t.csv"), out=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_colocate_sim_refuses_a_negative_runtime_error(tmp_path):
    with pytest.raises(CommandError, match="--runtime-error"):
        call_command("colocate_sim", days=1, small=True, runtime_error=-0.1, out=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()
