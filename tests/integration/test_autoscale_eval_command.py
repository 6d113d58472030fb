"""`manage.py autoscale_eval` on the real World Cup 98 trace (a few evaluated days so it runs in seconds): the JSON
with the four policies, the report and the plots; bad --trace / --days are refused naming the problem."""
import json

import pytest
from django.core.management import CommandError, call_command

from colocation.autoscale_eval.report import PLOTS


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
    ({"trace": "genai"}, "spans 2[0-9].[0-9] hours"),
    ({"days": 0}, "--days must be at least 1"),
    ({"days": 87}, "leaves 0 of the trace's 87 days for training"),
    ({"startup_min": -1}, "startup"),
])
def test_autoscale_eval_refuses_bad_options(tmp_path, opts, match):
    with pytest.raises(CommandError, match=match):
        call_command("autoscale_eval", out=str(tmp_path / "never"), **opts)
    assert not (tmp_path / "never").exists()
