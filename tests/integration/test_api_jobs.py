"""Training jobs through the API: submission rules, cancellation, filters and who sees what."""
import pytest
from django.utils import timezone

from core.models import Decision
from scheduler.models import JobRun, TrainingJob
from tests.conftest import listed

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"gpus": "-1"}, "gpus"),
        ({"cpu_milli": -1000}, "cpu_milli"),
        ({"cpu_milli": 0}, "cpu_milli"),
        ({"memory_mib": -1}, "memory_mib"),
        ({"gpus": "16"}, "gpus"),  # pytorch-2.1 runs on T4 and A100: the largest such node has 8
        ({"gpus": "9"}, "gpus"),
        ({"cpu_milli": 96001}, "cpu_milli"),  # the largest node has 96000m
        ({"memory_mib": 1048577}, "memory_mib"),  # and 1 TiB
        ({"gpu_model": "V100"}, "gpu_model"),
        ({"gpus": "1", "gpu_model": None}, "gpu_model"),
        ({"framework": "caffe-1.0"}, "framework"),  # certified on P40 only, the job asks for T4
        ({"framework": "tensorflow-2.15"}, "framework"),
        ({"framework": "pytorch"}, "framework"),
        ({"gpus": "1.5"}, "gpus"),
        ({"gpus": "0.0005"}, "gpus"),
        ({"department": "ml-ads"}, "department"),  # the member belongs to ml-search only
        ({"department": "ml-nowhere"}, "department"),
        ({"name": ""}, "name"),
    ],
    ids=lambda value: "-".join(f"{k}={v}" for k, v in value.items()) if isinstance(value, dict) else None,
)
def test_bad_submission_is_rejected_and_writes_nothing(world, overrides, field):
    before = world.snapshot()
    response = world.client("member").post("/api/jobs/", world.job_payload(**overrides), format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


def test_malformed_json_is_rejected_and_writes_nothing(world):
    before = world.snapshot()
    response = world.client("member").post("/api/jobs/", '{"name": "resnet50", "gpus": ', content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["message"]
    assert world.snapshot() == before


@pytest.mark.parametrize(
    "overrides",
    [{"gpus": "0.5"}, {"gpus": "8"}, {"gpus": "4", "gpu_model": "A100"}, {"gpus": "0", "gpu_model": None}],
    ids=["fraction-below-one", "largest-certified-node", "A100", "cpu-only"],
)
def test_submissions_within_the_limits_are_accepted(world, overrides):
    assert world.client("member").post("/api/jobs/", world.job_payload(**overrides), format="json").status_code == 201


def test_submit_writes_a_pending_decision(world):
    response = world.client("member").post("/api/jobs/", world.job_payload(), format="json")
    assert response.status_code == 201, response.json()
    job = response.json()
    assert (job["status"], job["submitter"], job["department"], job["task_key"], job["runs"]) == (
        "pending", "mia", "ml-search", "ml-search/resnet50", []
    )
    decision = Decision.objects.get(subject=f"job:{job['id']}")
    assert (decision.kind, decision.department.name, decision.reason) == ("pending", "ml-search", "submitted")


def test_cancel_ends_open_runs_and_writes_a_cancellation_decision(world):
    job = world.hold(world.submit())
    started = timezone.now()
    done = JobRun.objects.create(job=job, attempt=1, node=world.nodes["t4-0"], started_at=started, ended_at=started,
                                 outcome=JobRun.Outcome.PREEMPTED)
    open_run = JobRun.objects.create(job=job, attempt=2, node=world.nodes["t4-1"], started_at=started)

    response = world.client("member").post(f"/api/jobs/{job.pk}/cancel/")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["status"] == "cancelled" and body["finished_at"]
    assert [run["outcome"] for run in body["runs"]] == ["preempted", "cancelled"]
    open_run.refresh_from_db()
    assert open_run.ended_at is not None and open_run.outcome == JobRun.Outcome.CANCELLED
    done.refresh_from_db()
    assert done.outcome == JobRun.Outcome.PREEMPTED
    decision = Decision.objects.get(subject=f"job:{job.pk}", kind=Decision.Kind.CANCELLATION)
    assert decision.department == world.departments["ml-search"]


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_cancelling_a_finished_job_is_rejected_and_writes_nothing(world, status):
    job = world.submit()
    TrainingJob.objects.filter(pk=job.pk).update(status=status)
    before = world.snapshot()
    response = world.client("member").post(f"/api/jobs/{job.pk}/cancel/")
    assert response.status_code == 409
    assert f"already {status}" in response.json()["message"]
    assert world.snapshot() == before


def test_another_member_cannot_cancel_my_job(world):
    from django.contrib.auth import get_user_model

    from core.models import Membership

    colleague = get_user_model().objects.create_user("carl", password="pw")
    Membership.objects.create(user=colleague, department=world.departments["ml-search"])
    world.users["colleague"] = colleague
    job = world.submit()
    before = world.snapshot()
    response = world.client("colleague").post(f"/api/jobs/{job.pk}/cancel/")
    assert response.status_code == 403
    assert world.snapshot() == before


@pytest.fixture
def jobs(world):
    """Four jobs in both departments, by different people, in different states."""
    ids = {
        "search-t4": world.submit("member").pk,
        "search-a100": world.submit("dept_admin", gpu_model="A100", gpus="2").pk,
        "ads-t4": world.submit("outsider", department="ml-ads").pk,
        "ads-cpu": world.submit("operator", department="ml-ads", gpu_model=None, gpus="0").pk,
    }
    for key, status in (("search-a100", "running"), ("ads-t4", "succeeded"), ("ads-cpu", "failed")):
        TrainingJob.objects.filter(pk=ids[key]).update(status=status)
    return ids


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", {"search-t4", "search-a100", "ads-t4", "ads-cpu"}),
        ("status=pending&status=running", {"search-t4", "search-a100"}),
        ("status=failed", {"ads-cpu"}),
        ("department=ml-ads", {"ads-t4", "ads-cpu"}),
        ("submitter=adam", {"search-a100"}),
        ("gpu_model=T4", {"search-t4", "ads-t4"}),
        ("gpu_model=T4&department=ml-search", {"search-t4"}),
        ("department=ml-nowhere", set()),
    ],
)
def test_operator_filters_jobs(world, jobs, query, expected):
    assert listed(world.client("operator").get(f"/api/jobs/?{query}")) == {jobs[key] for key in expected}


def test_an_unknown_status_filter_is_400(world, jobs):
    response = world.client("operator").get("/api/jobs/?status=sleeping")
    assert response.status_code == 400 and "status" in response.json()["extra"]["fields"]


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("member", {"search-t4", "search-a100"}),
        ("dept_admin", {"search-t4", "search-a100"}),
        ("outsider", {"ads-t4", "ads-cpu"}),
        ("operator", {"search-t4", "search-a100", "ads-t4", "ads-cpu"}),
    ],
)
def test_users_list_their_departments_jobs(world, jobs, role, expected):
    assert listed(world.client(role).get("/api/jobs/")) == {jobs[key] for key in expected}
    ads_jobs = {jobs[key] for key in expected if key.startswith("ads")}
    assert listed(world.client(role).get("/api/jobs/?department=ml-ads")) == ads_jobs


@pytest.mark.parametrize("query", ["submitted_after=3249-12-11T21:40:23.93%2B20:33", "submitted_before=9999-12-31T23:59:59-23:00",
                                   "submitted_after=2000-01-01T00:00:06%2B21:57"])
def test_times_with_any_iso_offset_are_filters_not_server_errors(world, query):
    """PostgreSQL refuses offsets beyond ±15:59 (schemathesis found the 500): times are compared in UTC."""
    world.submit("member")
    response = world.client("member").get(f"/api/jobs/?{query}")
    assert response.status_code in (200, 400), response.content
    if response.status_code == 400:
        assert "out of range" in str(response.json())


@pytest.mark.parametrize("field, value", [("department", "ml-search\x00"), ("gpu_model", "T4\x00"),
                                          ("framework", "pytorch-2.1\x00")])
def test_a_name_with_a_nul_character_names_nothing(world, field, value):
    """Was a 500 (PostgreSQL text cannot hold NUL)."""
    response = world.client("member").post("/api/jobs/", world.job_payload(**{field: value}), format="json")
    assert response.status_code == 400 and field in response.json()["extra"]["fields"]


@pytest.mark.parametrize("tz", ["UTC", "Asia/Shanghai"])
def test_the_job_list_writes_each_job_as_drf_would(world, settings, tz):
    """The list's rows, written out, against DRF's field-by-field representation of the jobs themselves, on every
    shape of job: GPU and CPU-only, fractions, waiting, running on a node, finished, in UTC and in another time
    zone."""
    from scheduler.api.serializers import TrainingJobSerializer
    from scheduler.selectors import job_rows

    settings.TIME_ZONE = tz
    now = timezone.now()
    jobs = [world.submit(gpus="0.5"), world.submit(gpus="0", gpu_model=None), world.submit(gpus="2", gpu_model="A100")]
    world.hold(jobs[2], gpu_model="A100")
    TrainingJob.objects.filter(pk=jobs[2].pk).update(node=world.nodes["a100-0"], admitted_at=now, started_at=now,
                                                    expected_duration_s=3600, keep_request=True)
    TrainingJob.objects.filter(pk=jobs[0].pk).update(status="succeeded", finished_at=now.replace(microsecond=0))
    with timezone.override(tz):
        listed = TrainingJobSerializer(list(job_rows(TrainingJob.objects.order_by("pk"))), many=True).data
        one_by_one = [TrainingJobSerializer(job).data for job in TrainingJob.objects.order_by("pk")]
    assert len(listed) == len(one_by_one) >= 3
    assert listed == one_by_one
    assert all(list(row) == TrainingJobSerializer.Meta.fields for row in listed)
