"""What-if replay from the console: a trace or an uploaded pod list, run by the Celery task's service, its
report kept and shown."""
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from core.errors import ApplicationError
from experiments import whatif
from scheduler.models import ReplayRun
from tests.integration.test_dashboards import signed_in

DEFAULT = whatif.ALIBABA + "/openb_pod_list_default.csv"


def replay(**fields) -> dict:
    """The replay form's POST body (its fields are prefixed)."""
    return {"what": "replay", **{f"replay-{k}": v for k, v in fields.items()}}


@pytest.fixture
def small_trace(settings) -> bytes:
    """The first 120 pods of the default Alibaba pod list."""
    lines = (settings.TRACES_DIR / DEFAULT).read_bytes().splitlines(keepends=True)
    return b"".join(lines[:121])


@pytest.fixture
def eager(settings, tmp_path):
    """The task runs in-process at commit, as a worker would run it; reports go to a temporary folder."""
    from tidal.celery import app

    settings.RUN_DIR = tmp_path
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = False


@pytest.mark.django_db(transaction=True)
def test_an_uploaded_pod_list_is_replayed_and_its_report_shown(world, small_trace, eager):
    operator = signed_in(world, "operator")
    response = operator.post("/ops/replays/", replay(
        upload=SimpleUploadedFile("mine.csv", small_trace, content_type="text/csv"), policies=["tidal", "fifo"],
        load_factor="2", trace=""))
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/ops/replays/{run.pk}/"
    assert (run.trace, run.status, run.load_factor) == ("mine.csv", "done", 2.0), run.error
    assert set(run.figures) == {"tidal", "fifo"} and 0 < run.figures["tidal"]["gpu_alloc_share"] <= 1
    assert run.progress["tidal"][0] == run.progress["tidal"][1] > 0  # progress reached the end
    page = operator.get(f"/ops/replays/{run.pk}/")
    jain = run.figures["tidal"]["fairness"]["jain_mean"]
    assert 0 < jain <= 1 and "Fairness (Jain)" in page.content.decode()
    assert f'<td class="num">{jain:.3f}</td>' in page.content.decode()  # the tidal row's index, as the report has it
    plots = page.context["plots"]
    assert plots and all(f'src="/ops/replays/{run.pk}/{name}"' in page.content.decode() for name in plots)
    image = operator.get(f"/ops/replays/{run.pk}/{plots[0]}")
    assert image.status_code == 200 and b"".join(image.streaming_content)[:4] == b"\x89PNG"
    assert operator.get(f"/ops/replays/{run.pk}/..%2Freport.md").status_code == 404
    assert operator.get(f"/ops/replays/{run.pk}/report.md").status_code == 404  # plots only


@pytest.mark.django_db(transaction=True)
def test_a_replay_on_the_helios_tree_runs_fair_sharing_and_records_the_tree(world, small_trace, eager):
    operator = signed_in(world, "operator")
    response = operator.post("/ops/replays/", replay(
        upload=SimpleUploadedFile("mine.csv", small_trace, content_type="text/csv"), policies=["tidal-fair"],
        load_factor="1", tree="helios"))
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and (run.tree, run.status) == ("helios", "done"), run.error
    assert 0 < run.figures["tidal-fair"]["fairness"]["jain_mean"] <= 1
    report = json.loads((Path(run.report_dir) / "report.json").read_text())
    assert set(report["mapping"]["tree"]) == {"div-xl", "div-l", "div-m", "div-s"}  # the Helios quota file's divisions
    assert report["policies"]["tidal-fair"]["profile"]["fair_sharing"] is True
    assert "<dt>Quota tree</dt><dd>helios" in operator.get(f"/ops/replays/{run.pk}/").content.decode()
    assert "mine.csv, helios tree</td>" in operator.get("/ops/replays/").content.decode()


@pytest.mark.django_db
def test_a_replay_is_flat_unless_a_tree_is_chosen_and_an_unknown_tree_is_refused(world, settings, tmp_path):
    settings.RUN_DIR = tmp_path
    operator = signed_in(world, "operator")
    page = operator.post("/ops/replays/", replay(trace="default", policies=["tidal"], load_factor="1",
                                                 tree="kueue"))
    assert page.status_code == 400 and "kueue" in page.context["replay_form"].errors["tree"][0]
    with pytest.raises(ApplicationError) as refused:
        whatif.replay_request(actor=world.users["operator"], trace="default", policies=["tidal"], load_factor=1,
                              inflate=False, tree="kueue")
    assert refused.value.extra["fields"] == {"tree": ["one of flat, helios, got 'kueue'"]}
    assert not ReplayRun.objects.exists()
    operator.post("/ops/replays/", replay(trace="default", policies=["tidal"], load_factor="1"))
    assert ReplayRun.objects.get().tree == "flat"


@pytest.mark.django_db
def test_a_bad_pod_list_is_refused_with_its_line_and_nothing_is_kept(world, small_trace, settings, tmp_path):
    settings.RUN_DIR = tmp_path
    bad = small_trace.replace(b"openb-pod-0002,", b"openb-pod-0002,lots-of-", 1)
    page = signed_in(world, "operator").post("/ops/replays/", replay(
        upload=SimpleUploadedFile("bad.csv", bad), policies=["tidal"], load_factor="1"))
    assert page.status_code == 400 and not ReplayRun.objects.exists()
    assert "line 4:" in page.context["replay_form"].errors["upload"][0]
    assert not list((tmp_path / "replays" / "uploads").iterdir())
    page = signed_in(world, "operator").post("/ops/replays/", replay(trace="nope", policies=["nope"], load_factor="0"))
    assert page.status_code == 400 and set(page.context["replay_form"].errors) >= {"policies"}
    page = signed_in(world, "operator").post("/ops/replays/", replay(trace="default", policies=["tidal"],
                                                                      load_factor="0"))
    assert page.context["replay_form"].errors["load_factor"] == ["must be above 0, got 0.0"]
    page = signed_in(world, "operator").post("/ops/replays/", {"what": "colocation", "sim-days": "8"})
    assert page.status_code == 400 and page.context["sim_form"].errors["days"]
    page = signed_in(world, "operator").post("/ops/replays/", {"what": "colocation", "sim-days": "1",
                                                                "sim-lending": "oracle"})
    assert page.status_code == 400 and "oracle" in page.context["sim_form"].errors["lending"][0]
    assert 'id="id_sim-lending_error"' in page.content.decode()  # beside its field
    assert not ReplayRun.objects.exists()


@pytest.mark.django_db
def test_only_operators_replay(world):
    assert signed_in(world, "member").post("/ops/replays/", replay(trace="default")).status_code == 403
    assert Client().get("/ops/replays/").status_code == 302
    assert not ReplayRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_colocation_simulation_runs_from_the_console(world, eager):
    response = signed_in(world, "operator").post("/ops/replays/", {"what": "colocation", "sim-days": "1",
                                                                    "sim-small": "on"})
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and (run.kind, run.status, run.days) == ("colocation", "done", 1), run.error
    assert run.progress == {"lending": [1440, 1440], "static": [1440, 1440]}
    assert 0 < run.figures["gpu_util_mean"] <= 1 and "gpu_util_mean_static" in run.figures
    assert whatif.report_files(run)


@pytest.mark.django_db(transaction=True)
def test_a_forecast_driven_colocation_simulation_runs_from_the_console(world, eager, monkeypatch):
    from experiments import whatif_run

    seen = []
    real = whatif_run.simulate
    monkeypatch.setattr(whatif_run, "simulate", lambda cfg, *args: seen.append(cfg.lending) or real(cfg, *args))
    operator = signed_in(world, "operator")
    response = operator.post("/ops/replays/", {"what": "colocation", "sim-days": "1", "sim-small": "on",
                                               "sim-lending": "forecast"})
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and (run.status, run.policies) == ("done", ["forecast"]), run.error
    assert [p.forecast for p in seen] == [True]
    assert "forecast-driven lending" in operator.get("/ops/replays/").content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_fgd_experiment_runs_from_the_console(world, eager):
    operator = signed_in(world, "operator")
    response = operator.post("/ops/replays/", {"what": "fragmentation", "frag-trace": "multigpu20",
                                               "frag-policies": ["bestfit", "dotprod"]})
    run = ReplayRun.objects.get()
    assert response.status_code == 302 and (run.kind, run.status) == ("fragmentation", "done"), run.error
    assert set(run.figures) == {"bestfit", "dotprod"}
    assert run.figures["bestfit"]["mean"] < run.figures["dotprod"]["mean"]  # as published: 6.27 vs 8.15
    assert set(run.figures["bestfit"]["frag_pct"]) == {"60", "80", "90"}
    assert run.progress["pods placed"][0] == run.progress["pods placed"][1] > 0
    page = operator.get(f"/ops/replays/{run.pk}/").content.decode()
    assert "Unallocated GPUs at 100 % arrived" in page and "FGD experiment" in page
    assert "unallocated_vs_arrived.png" in whatif.report_files(run)


@pytest.mark.django_db
def test_a_bad_fgd_experiment_is_refused_beside_its_fields(world):
    page = signed_in(world, "operator").post("/ops/replays/", {"what": "fragmentation", "frag-trace": "nope",
                                                               "frag-policies": ["nope"]})
    assert page.status_code == 400 and set(page.context["frag_form"].errors) == {"trace", "policies"}
    assert not ReplayRun.objects.exists()
