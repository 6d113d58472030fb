"""What the API tells people about scheduling: why a job waits, what it got, how much quota is used."""

import pytest
from django.test import Client
from django.urls import reverse

from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from colocation.selectors import node_views
from scheduler import live
from scheduler.policy.profile import get_profile
from tests.integration.livecluster import T0

pytestmark = pytest.mark.django_db


@pytest.fixture
def tick(world):
    clock = VirtualClock(T0)
    cluster = SimulatedCluster(node_views(), clock, store.labelled_runtime)

    def run():
        clock.advance(5)
        return live.scheduler_tick(backend=cluster, now=clock.now(), profile=get_profile("tidal"))

    return run


def test_pending_job_shows_position_score_and_reason(world, tick):
    waiting = world.submit(gpus="8", gpu_model="A100")  # more than own 4 + borrowed 2 A100
    tick()
    body = world.client("member").get(f"/api/jobs/{waiting.pk}/").json()
    assert body["status"] == "pending" and body["queue_position"] == 1
    assert body["score"]["total"] == body["score"]["base"] + body["score"]["utilization"] + body["score"]["aging"]
    assert body["rightsized"] is None
    assert body["latest_decision"]["kind"] == "pending" and body["latest_decision"]["reason"] == body["pending_reason"]
    assert "quota" in body["latest_decision"]["message"]


def test_admitted_job_shows_quota_kind_rightsized_request_and_admission(world, tick):
    job = world.submit(gpus="0.5")
    tick()
    body = world.client("member").get(f"/api/jobs/{job.pk}/").json()
    assert body["status"] == "running" and body["quota_kind"] == "own" and body["queue_position"] is None
    assert body["gpus"] == "0.500" and body["rightsized"]["gpus"] == "0.500"  # no history: request kept
    assert body["rightsized"]["cpu_request_milli"] == 4000 and body["rightsized"]["memory_mib"] == 16384
    assert body["score"]["base"] == 1_000_000
    assert body["latest_decision"]["kind"] == "admission" and "t4-0" in body["latest_decision"]["message"]
    assert body["runs"][0]["outcome"] == "running" and body["runs"][0]["node"] == "t4-0"


def test_an_open_model_job_is_placed_on_a_certified_model_and_charged_on_it(world, tick):
    """pytorch is certified on T4 and A100; 4 GPUs fit no T4 node (2 each), so placement takes A100 and the job is
    charged on A100's quota."""
    job = world.submit(gpus="4", gpu_model=None)
    tick()
    body = world.client("member").get(f"/api/jobs/{job.pk}/").json()
    assert (body["status"], body["gpu_model"], body["assigned_gpu_model"]) == ("running", None, "A100")
    search = world.departments["ml-search"]
    rows = {r["resource"]: r for r in world.client("member").get(f"/api/departments/{search.pk}/usage/").json()}
    assert rows["A100"]["own_used"] == "4.000" and rows["T4"]["own_used"] == "0.000"


def test_a_non_preemptible_job_is_never_admitted_as_borrowed(world, tick):
    """ml-search's own T4 (2) and A100 (4) are in use and it may borrow: a non-preemptible GPU job waits, a
    preemptible one borrows."""
    from scheduler.models import TrainingJob

    world.submit(name="own-a100", gpu_model="A100", gpus="4")
    world.submit(name="own-t4", gpu_model="T4", gpus="2")
    tick()
    steady = world.submit(name="steady", gpu_model="A100")
    TrainingJob.objects.filter(pk=steady.pk).update(preemptible=False)
    tick()
    steady.refresh_from_db()
    assert steady.status == "pending"
    TrainingJob.objects.filter(pk=steady.pk).update(preemptible=True)
    tick()
    steady.refresh_from_db()
    assert (steady.status, steady.quota_kind) == ("running", "borrowed")


def test_department_usage_counts_what_running_jobs_hold(world, tick):
    world.submit(gpus="1")
    world.submit(gpus="0.5")
    tick()
    search = world.departments["ml-search"]
    rows = {r["resource"]: r for r in world.client("member").get(f"/api/departments/{search.pk}/usage/").json()}
    assert rows["T4"] == {"resource": "T4", "own": "2.000", "own_used": "1.500", "borrowed": "1.000",
                          "borrowed_used": "0.000"}
    assert rows["cpu"]["own_used"] == "8000.000" and rows["memory"]["own_used"] == "32768.000"
    assert world.client("outsider").get(f"/api/departments/{search.pk}/usage/").status_code == 404


def test_lists_show_the_short_sentence_and_the_jobs_page_the_complete_one(world, tick):
    """My jobs, the department queue and the API's list (the CLI's `ls`) show a decision in a few words; the job's
    page and the API's job (the CLI's `describe`) the complete sentence, placement figures and score included."""
    job = world.submit(gpus="0.5")
    waiting = world.submit(gpus="8", gpu_model="A100", name="too-big")
    tick()
    member = world.client("member")
    rows = {row["id"]: row for row in member.get("/api/jobs/").json()["results"]}
    assert rows[job.pk]["why"] == "running: T4 on t4-0, own quota"
    assert rows[waiting.pk]["why"] == "waiting for quota: its department's own and borrowed quota are in use"
    detail = member.get(f"/api/jobs/{job.pk}/").json()
    assert detail["why"] == rows[job.pk]["why"]
    complete = detail["latest_decision"]["message"]
    assert complete.startswith("admitted on t4-0") and "score" in complete
    console = Client()
    console.force_login(world.users["member"])
    listed = console.get(reverse("jobs")).content.decode()
    assert "running: T4 on t4-0, own quota" in listed and complete not in listed
    assert "waiting for quota" in listed
    page = console.get(reverse("job", args=[waiting.pk])).content.decode()
    assert "quota" in page and "waiting for quota: its department" not in page  # the complete sentence there
