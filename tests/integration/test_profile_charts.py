"""The job profile page's charts: SM active beside GPU utilization where the minutes measured it."""

from datetime import UTC, datetime
from types import SimpleNamespace

from frontend.jobs.detail import profile_charts
from profiling.models import RESOURCES


def _minute(at: int, estimated: bool = False, **figures) -> SimpleNamespace:
    values = {f"{r}_{s}": None for r in RESOURCES for s in ("mean", "peak")}
    for resource, (mean, peak) in figures.items():
        values |= {f"{resource}_mean": mean, f"{resource}_peak": peak}
    return SimpleNamespace(minute=datetime.fromtimestamp(at, UTC), samples=12, estimated=estimated, **values)


def _charts(*minutes) -> dict[str, dict]:
    profile = SimpleNamespace(runs=[SimpleNamespace(minutes=list(minutes))])
    return {c["id"]: c for c in profile_charts(profile)}


def test_sm_active_is_charted_after_gpu_utilization_where_measured():
    charts = _charts(_minute(0, gpu_util=(0.418, 0.45), sm_active=(0.267, 0.3)), _minute(60, gpu_util=(0.4, 0.4)))
    assert list(charts)[:2] == ["chart-gpu_util", "chart-sm_active"]
    assert charts["chart-sm_active"]["series"][0]["points"] == [[0, 0.267]]
    assert "chart-sm_active" not in _charts(_minute(0, gpu_util=(0.4, 0.4)))  # an exporter without SM active


def test_sm_active_says_how_many_minutes_were_estimated_on_a_shared_gpu():
    charts = _charts(_minute(0, gpu_util=(0.4, 0.5), sm_active=(0.2, 0.3)),
                     _minute(60, True, gpu_util=(0.4, 0.5), sm_active=(0.1, 0.2)))
    assert charts["chart-sm_active"]["note"].startswith("estimated for 1 of 2 minutes: the GPU was shared")
    assert charts["chart-gpu_util"]["note"] == ""  # GPU util is the pod's own, never estimated
    alone = _charts(_minute(0, gpu_util=(0.4, 0.5), sm_active=(0.2, 0.3)))
    assert alone["chart-sm_active"]["note"] == ""


def _load(at: int, gpu: float | None, sm_active: float | None, estimated: bool = False) -> SimpleNamespace:
    return SimpleNamespace(minute=datetime.fromtimestamp(at, UTC), gpu_util_mean=gpu, sm_active_mean=sm_active,
                           estimated=estimated, cpu_util_mean=0.3, qps=10.0, errors_per_s=0.0,
                           latency_mean_ms=20.0, latency_p99_ms=40.0)


def test_a_services_utilization_chart_shows_sm_active_beside_gpu_util_and_says_what_it_lacks():
    from frontend.services.views import load_charts

    util = load_charts([_load(0, 0.68, 0.29), _load(60, 0.7, 0.3, estimated=True)])[0]
    assert [s["label"] for s in util["series"]] == ["GPU util", "SM active", "CPU"]
    assert util["series"][1]["points"] == [[0, 0.29], [60_000, 0.3]]
    assert util["note"] == "SM active estimated for 1 of 2 minutes (a shared GPU)"
    assert "not measured" in load_charts([_load(0, 0.68, None)])[0]["note"]
    assert load_charts([_load(0, None, None)])[0]["note"] == ""  # a CPU service: no GPU figure to miss
