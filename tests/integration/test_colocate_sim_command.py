"""`manage.py colocate_sim` end to end for one day on the small cluster: report, plots, JSON keys."""
import json

import pytest
from django.core.management import CommandError, call_command


def test_colocate_sim_writes_report_plots_and_json(tmp_path):
    out, figures = tmp_path / "out", tmp_path / "figures.json"
    call_command("colocate_sim", days=1, small=True, training_load=0.1, out=str(out), json_path=str(figures))
    for name in ("report.md", "gpu_util_by_hour.png", "online_nodes.png"):
        assert (out / name).stat().st_size > 0, name
    data = json.loads(figures.read_text())
    assert set(data) == {"lent_share", "kill_rate", "online_pending_minutes", "transitions_per_day",
                         "gpu_util_mean", "gpu_util_mean_static"}
    assert "static split" in (out / "report.md").read_text()


def test_colocate_sim_refuses_zero_days(tmp_path):
    with pytest.raises(CommandError, match="--days"):
        call_command("colocate_sim", days=0, out=str(tmp_path / "never"))
