"""The profiling API: a job's profile, task profiles, a service's load; who sees what; 400 on bad input.
(Status per role of every operation: tests/integration/test_api_permissions.py.)"""
import pytest

from profiling import services
from profiling.models import TaskProfile
from scheduler.models import JobRun
from tests.conftest import listed
from tests.integration.profiles import at, end_run, job_minute, late_sample, past_jobs, service_minute, start_run

pytestmark = pytest.mark.django_db


def test_job_profile_has_every_run_with_series_summary_late_samples_and_advice(world):
    past_jobs(world, *[{"gpu": (0.4, 0.5), "gpu_mem": (0.2, 0.3), "cores": (1.0, 1.5)}] * 3, gpus="2",
              cpu_milli=8000)
    job = world.submit(gpus="2", cpu_milli=8000)
    first = start_run(job, minute=100)
    services.job_minutes_record(records=[job_minute(job.pk, 1, 100, samples=10, gpu=(0.5, 0.7)),
                                         job_minute(job.pk, 1, 101, samples=30, gpu=(0.9, 0.95))])
    end_run(first, minute=102, outcome=JobRun.Outcome.PREEMPTED)
    start_run(job, attempt=2, minute=104)
    services.job_minutes_record(records=[job_minute(job.pk, 2, 104, samples=12, gpu=(0.6, 0.6))])
    services.late_samples_record(records=[late_sample(f"job-{job.pk}-1", i, job=job.pk, run=1) for i in range(3)])

    body = world.client("member").get(f"/api/jobs/{job.pk}/profile/").json()
    assert body["job"] == job.pk and body["task_key"] == "ml-search/resnet50" and body["late_samples"] == 3
    one, two = body["runs"]
    assert (one["attempt"], one["outcome"], one["late_samples"], len(one["minutes"])) == (1, "preempted", 3, 2)
    assert one["summary"]["final"] and one["summary"]["samples"] == 40
    assert one["summary"]["gpu_util"] == {"mean": pytest.approx(0.8), "peak": 0.95}
    assert one["summary"]["run_s"] == 120.0
    assert two["summary"]["final"] is False and two["summary"]["computed_at"] is None  # still running
    assert two["summary"]["gpu_util"]["mean"] == pytest.approx(0.6) and two["summary"]["wait_s"] == 120.0
    assert two["minutes"][0]["minute"] == at(104).isoformat().replace("+00:00", "Z")
    # 3 past runs of the task plus this job's preempted run: the last 3 average 0.4, 0.4, 0.8 GPU utilization
    advice = body["advice"]
    assert advice["runs"] == 3 and advice["requested"]["gpus"] == 2.0
    assert advice["rightsized"]["gpus"] == 2.0 and advice["utilization_points"] == 20  # mean 0.53 >= 0.5

    only_two = world.client("member").get(f"/api/jobs/{job.pk}/profile/", {"run": 2}).json()
    assert [r["attempt"] for r in only_two["runs"]] == [2]
    windowed = world.client("member").get(f"/api/jobs/{job.pk}/profile/",
                                          {"since": at(101).isoformat(), "until": at(104).isoformat()}).json()
    assert [len(r["minutes"]) for r in windowed["runs"]] == [1, 0]


def test_job_without_history_gets_no_advice(world):
    job = world.submit()
    body = world.client("member").get(f"/api/jobs/{job.pk}/profile/").json()
    assert body == {"job": job.pk, "task_key": "ml-search/resnet50", "late_samples": 0, "advice": None, "runs": []}


@pytest.mark.parametrize("params, field", [
    ({"run": "0"}, "run"), ({"run": "x"}, "run"), ({"since": "yesterday"}, "since"),
    ({"run": ""}, "run"), ({"until": ""}, "until"),  # present but empty: not "no bound"
    ({"since": "2024-01-02T00:00:00Z", "until": "2024-01-01T00:00:00Z"}, "until"),
])
def test_bad_job_profile_query_is_a_400_with_field_messages(world, params, field):
    job = world.submit()
    response = world.client("member").get(f"/api/jobs/{job.pk}/profile/", params)
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]


def test_an_outsider_gets_404_not_400_for_a_job_they_cannot_see(world):
    job = world.submit()
    assert world.client("outsider").get(f"/api/jobs/{job.pk}/profile/", {"run": "x"}).status_code == 404


def test_task_profiles_are_visible_to_the_departments_running_the_task(world):
    past_jobs(world, {"gpu": (0.4, 0.5)}, {"gpu": (0.6, 0.7)})
    past_jobs(world, {"gpu": (0.2, 0.3)}, role="outsider", department="ml-ads", name="ads")
    services.task_profiles_compute(now=at(500))
    search, ads = TaskProfile.objects.get(task_key="ml-search/resnet50"), TaskProfile.objects.get(task_key="ml-ads/ads")

    assert listed(world.client("member").get("/api/task-profiles/")) == {search.pk}
    assert listed(world.client("outsider").get("/api/task-profiles/")) == {ads.pk}
    assert listed(world.client("operator").get("/api/task-profiles/")) == {search.pk, ads.pk}
    assert listed(world.client("operator").get("/api/task-profiles/", {"task_key": "ml-ads/ads"})) == {ads.pk}
    assert listed(world.client("operator").get("/api/task-profiles/", {"task_key_prefix": "ml-search/"})) == {search.pk}

    body = world.client("member").get(f"/api/task-profiles/{search.pk}/").json()
    assert body["runs"] == 2 and body["last_3"]["runs"] == 2
    assert body["last_3"]["gpu_util"] == {"mean": pytest.approx(0.5), "peak": pytest.approx(0.7)}
    assert body["mean_run_s"] == 600.0 and body["mean_wait_s"] == 300.0
    assert world.client("member").get(f"/api/task-profiles/{ads.pk}/").status_code == 404


def test_service_load_series_within_the_window(world):
    service = world.service()
    services.service_minutes_record(records=[service_minute(service.name, i, qps=100.0 + i) for i in range(5)])
    client = world.client("member")
    body = client.get(f"/api/inference-services/{service.pk}/load/",
                      {"since": at(1).isoformat(), "until": at(4).isoformat()}).json()
    assert body["service"] == service.name
    assert [m["qps"] for m in body["minutes"]] == [101.0, 102.0, 103.0]  # since inclusive, until exclusive
    assert body["minutes"][0]["replicas"] == 2
    assert client.get(f"/api/inference-services/{service.pk}/load/").json()["minutes"] == []  # the last hour


@pytest.mark.parametrize("params, field", [
    ({"since": "not-a-time"}, "since"), ({"until": ""}, "until"),
    ({"since": "2024-01-02T00:00:00Z", "until": "2024-01-01T00:00:00Z"}, "until"),
    ({"since": "2024-01-01T00:00:00Z", "until": "2024-01-09T00:00:00Z"}, "since"),  # more than 7 days
])
def test_bad_service_load_query_is_a_400_with_field_messages(world, params, field):
    service = world.service()
    response = world.client("member").get(f"/api/inference-services/{service.pk}/load/", params)
    assert response.status_code == 400
    body = response.json()
    assert body["message"] == "Validation error" and field in body["extra"]["fields"]
