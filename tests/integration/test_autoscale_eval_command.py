"""`manage.py autoscale_eval` on the real World Cup 98 trace (a few evaluated days so it runs in seconds): the JSON
with the four policies, the report and the plots; on a small generated --traffic CSV with --sweep (the front); bad
--trace / --days / --traffic are refused naming the problem, nothing written."""
import json
import math
from datetime import datetime, timedelta, timezone

import pytest
from django.core.management import CommandError, call_command

from experiments.autoscale_eval.report import FRONT_PLOT, PLOTS

MIDNIGHT = datetime(2024, 3, 4, tzinfo=timezone.utc)


def traffic_csv(path, days: int = 4, step_min: int = 5):
    """A diurnal curve (trough 200, peak 1,400 per minute) every `step_min` minutes, ISO with an offset."""
    rows = ["timestamp,value"]
    for i in range(days * 1440 // step_min):
        t = (MIDNIGHT + timedelta(minutes=i * step_min)).replace(tzinfo=None)
        rows.append(f"{t.isoformat()}+02:00,{800 - 600 * math.cos(2 * math.pi * i * step_min / 1440):.1f}")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_autoscale_eval_on_a_traffic_csv_with_the_front(tmp_path):
    out, figures = tmp_path / "out", tmp_path / "ae.json"
    call_command("autoscale_eval", traffic=str(traffic_csv(tmp_path / "mine.csv")), days=2, start=2, sweep=True,
                 out=str(out), json_path=str(figures))
    data = json.loads(figures.read_text())
    assert data["trace"] == "mine.csv" and data["eval_days"] == [2, 3] and data["trace_days"] == 4
    assert data["train_days"] == 2 and set(data["policies"]) == {"static", "hpa", "reactive", "tidal"}
    front = data["front"]
    assert len(front["hpa"]) == len(front["hpa_targets"]) and len(front["tidal"]) == len(front["tidal_settings"])
    assert all(len(p) == 2 and p[1] > 0 for p in front["hpa"] + front["tidal"])
    assert isinstance(front["dominates"], bool) and front["startup_min"] == 3
    assert data["service"]["capacity"] == pytest.approx(1400 / 25, rel=0.01)  # no --capacity: peak over 25
    text = (out / "report.md").read_text()
    assert "## Front (start-up 3 min)" in text and "HPA's" in text
    assert (out / FRONT_PLOT).stat().st_size > 0


@pytest.mark.parametrize("row, words", [("2024-03-04T00:10:00,lots", "bad.csv line 4: value 'lots' is not a number"),
                                        ("soon,5", "bad.csv line 4: timestamp 'soon'")])
def test_autoscale_eval_refuses_a_bad_traffic_file_naming_the_line(tmp_path, row, words):
    path = tmp_path / "bad.csv"
    path.write_text(f"timestamp,value\n2024-03-04T00:00:00,1\n2024-03-04T00:05:00,2\n{row}\n")
    with pytest.raises(CommandError, match=words):
        call_command("autoscale_eval", traffic=str(path), out=str(tmp_path / "never"))
    assert not (tmp_path / "never").exists()


def test_autoscale_eval_writes_json_report_and_plots(tmp_path):
    out, figures = tmp_path / "out", tmp_path / "ae.json"
    call_command("autoscale_eval", trace="worldcup98", days=2, train_days=3, out=str(out), json_path=str(figures))
    data = json.loads(figures.read_text())
    assert set(data["policies"]) == {"static", "hpa", "reactive", "tidal"}
    for fig in data["policies"].values():
        assert isinstance(fig["overloaded_min"], int) and isinstance(fig["scale_events"], int)
        assert fig["replica_hours"] > 0
    static = data["policies"]["static"]
    assert static["scale_events"] == 0 and static["overloaded_min"] == 0
    assert static["replica_hours"] == pytest.approx(data["service"]["static_replicas"] * 2 * 24)
    assert data["policies"]["reactive"]["replica_hours"] < static["replica_hours"]
    for name in ("xgboost", "last_value", "seasonal"):
        assert len(data["forecast"]["mae"][name]) == 5
    assert data["eval_days"] == [85, 86] and data["train_days"] == 3  # --train-days
    for name in PLOTS + ("report.md",):
        assert (out / name).stat().st_size > 0, name
    assert "trained only on the" in (out / "report.md").read_text()


@pytest.mark.parametrize("opts, match", [
    ({"trace": "nope"}, "unknown trace 'nope'"),
    ({"trace": "genai", "days": 22}, "leaves 0 of its 22 days for training"),
    ({"trace": "genai", "days": 7, "start": 20}, "genai has 22 whole days .*run past its end"),
    ({"days": 0}, "--days must be at least 1"),
    ({"days": 87}, "leaves 0 of its 87 days for training"),
    ({"trace": "genai", "traffic": "x.csv"}, "give one of --trace, --traffic and --trace-file"),
    ({"startup_min": -1}, "startup"),
])
def test_autoscale_eval_refuses_bad_options(tmp_path, opts, match):
    with pytest.raises(CommandError, match=match):
        call_command("autoscale_eval", out=str(tmp_path / "never"), **opts)
    assert not (tmp_path / "never").exists()


def servegen_csv(path, windows: int = 144):
    """A ServeGen-format trace of 10-minute `windows` (144: a day): a diurnal rate (30-90 requests/s), CV 2, 900/150
    tokens."""
    rows = ["t_s,requests_per_s,cv_weighted,mean_input_tokens,mean_output_tokens"]
    for i in range(windows):
        rows.append(f"{600 * i},{60 - 30 * math.cos(2 * math.pi * i / 144):.2f},2.0,900,150")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_llm_evaluation_on_a_trace_file(tmp_path):
    out, figures = tmp_path / "out", tmp_path / "llm.json"
    # Three hours of the day's rise (the trace holds fewer than the day asked: all of it; the figures say 0.12 days),
    # the whole grid on them
    call_command("autoscale_eval", trace_file=str(servegen_csv(tmp_path / "llm.csv", 18)), days=1, startup_min=[3],
                 model_b=70.0, tp=8, pp=1, out=str(out), json_path=str(figures))
    data = json.loads(figures.read_text())
    assert data["days"] == 0.12 and data["group"] == {"gpus": 8, "gpu": "H200", "tp": 8, "pp": 1, "params_b": 70.0,
                                                     "prefill_tokens_s": 45234, "decode_step_ms": 2.6}
    (sweep,) = data["sweeps"]
    assert sweep["startup_min"] == 3 and {"tidal_dominates_hpa", "tidal_dominates_kpa"} <= sweep.keys()
    policies = {p[0] for p in sweep["points"]}
    assert policies == {"tidal", "hpa", "kpa"}
    assert all(0 <= p[2] <= 1 and p[3] > 0 for p in sweep["points"])
    for name in ("report.md", "front.png", "figures.json"):
        assert (out / name).stat().st_size > 0, name
    assert "Tidal's front dominates HPA's" in (out / "report.md").read_text()


@pytest.mark.parametrize("opts,match", [
    ({"trace_file": "missing.csv"}, "cannot read"),
    ({"trace": "servegen-m-large", "trace_file": "x.csv"}, "give one of"),
    ({"trace": "servegen-m-large", "ttft_slo": 0.0}, "--ttft-slo"),
    ({"trace": "servegen-m-large", "tp": 1, "pp": 1}, "do not fit"),
])
def test_the_llm_evaluation_refuses_bad_options(tmp_path, opts, match):
    with pytest.raises(CommandError, match=match):
        call_command("autoscale_eval", out=str(tmp_path / "never"), **opts)
    assert not (tmp_path / "never").exists()
