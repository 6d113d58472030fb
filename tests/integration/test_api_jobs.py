"""Training jobs through the API: submission rules, cancellation, filters and who sees what."""
from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import Decision
from scheduler.models import JobRun, Quota, TrainingJob
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


def test_a_gpu_job_may_leave_its_model_open_and_be_non_preemptible(world):
    response = world.client("member").post("/api/jobs/", world.job_payload(gpu_model=None, gpus="2",
                                                                          preemptible=False), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["gpu_model"], body["preemptible"]) == (None, False)
    row = next(r for r in world.client("member").get("/api/jobs/").json()["results"] if r["id"] == body["id"])
    assert (row["gpu_model"], row["preemptible"]) == (None, False)
    assert world.client("member").post("/api/jobs/", world.job_payload(), format="json").json()["preemptible"] is True


def test_an_open_model_needs_a_framework_certified_somewhere(world):
    from scheduler.models import Framework

    Framework.objects.create(name="jax", version="0.4")
    before = world.snapshot()
    response = world.client("member").post("/api/jobs/", world.job_payload(gpu_model=None, framework="jax-0.4"),
                                           format="json")
    assert response.status_code == 400 and "framework" in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


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
    shape of job: GPU and CPU-only, fractions, a gang, waiting, running on a node, finished, in UTC and in another
    time zone."""
    from scheduler.api.serializers import TrainingJobSerializer
    from scheduler.selectors import job_rows

    settings.TIME_ZONE = tz
    now = timezone.now()
    jobs = [world.submit(gpus="0.5"), world.submit(gpus="0", gpu_model=None), world.submit(gpus="2", gpu_model="A100")]
    world.hold(jobs[2], gpu_model="A100")
    TrainingJob.objects.filter(pk=jobs[2].pk).update(node=world.nodes["a100-0"], admitted_at=now, started_at=now,
                                                    expected_duration_s=3600, keep_request=True, workers=2,
                                                    topology="spread")  # a gang
    TrainingJob.objects.filter(pk=jobs[0].pk).update(status="succeeded", finished_at=now.replace(microsecond=0))
    with timezone.override(tz):
        listed = TrainingJobSerializer(list(job_rows(TrainingJob.objects.order_by("pk"))), many=True).data
        one_by_one = [TrainingJobSerializer(job).data for job in TrainingJob.objects.order_by("pk")]
    assert len(listed) == len(one_by_one) >= 3
    assert listed == one_by_one
    assert all(list(row) == TrainingJobSerializer.Meta.fields for row in listed)


# --- gangs (issue 25): several workers of one request, started together or not at all ---------------------------


def test_a_gang_is_submitted_and_read_back(world):
    member = world.client("member")
    response = member.post("/api/jobs/", world.job_payload(workers=2, topology="spread"), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["workers"], body["topology"], body["gpus"], body["placement"], body["reservation"]) == (
        2, "spread", "1.000", [], None)
    job = TrainingJob.objects.get(pk=body["id"])
    assert (job.workers, job.topology) == (2, "spread")
    assert "as a gang of 2 workers (spread)" in Decision.objects.get(subject=f"job:{job.pk}").message
    assert member.get(f"/api/jobs/{job.pk}/").json()["workers"] == 2
    row = next(r for r in member.get("/api/jobs/").json()["results"] if r["id"] == job.pk)
    assert (row["workers"], row["topology"]) == (2, "spread")


def test_a_job_without_workers_is_one_worker_packed(world):
    response = world.client("member").post("/api/jobs/", world.job_payload(), format="json")
    assert (response.json()["workers"], response.json()["topology"]) == (1, "pack")


@pytest.mark.parametrize(
    "overrides",
    [{"workers": 2, "gpus": "2", "gpu_model": "A100"},  # 4 A100 GPUs: exactly the own quota
     {"workers": 3, "gpus": "1"},  # 3 T4 GPUs are above either T4 quota, but the own A100 quota holds them
     {"workers": 8, "gpus": "0", "gpu_model": None, "cpu_milli": 8000, "memory_mib": 65536}],  # exactly own CPU, memory
    ids=["a100-at-own-quota", "t4-gang-fits-a100", "cpu-only-at-own-quota"],
)
def test_gangs_within_node_and_quota_limits_are_accepted(world, overrides):
    response = world.client("member").post("/api/jobs/", world.job_payload(**overrides), format="json")
    assert response.status_code == 201, response.json()


def test_a_gang_without_gpus_is_a_cpu_gang(world):
    """No `gpus` means none (the schema's default): a CPU-only gang, accepted when the quota holds it."""
    payload = {k: v for k, v in world.job_payload(workers=2, gpu_model=None).items() if k != "gpus"}
    response = world.client("member").post("/api/jobs/", payload, format="json")
    assert response.status_code == 201, response.json()
    assert (response.json()["gpus"], response.json()["workers"]) == ("0.000", 2)


def test_a_large_gang_without_gpus_is_refused_with_the_quota_not_a_server_error(world):
    """Found by a schema fuzzer: 449 workers and no `gpus` answered 500 (the default reached the service as an int)."""
    before = world.snapshot()
    payload = {k: v for k, v in world.job_payload(workers=449).items() if k != "gpus"}
    response = world.client("member").post("/api/jobs/", payload, format="json")
    assert response.status_code == 400, response.json()
    assert any("449 workers ask" in m for m in response.json()["extra"]["fields"]["workers"])
    assert world.snapshot() == before


@pytest.fixture
def lopsided_t4(world):
    """A T4 node with more CPU but less memory than the others, and a framework certified on T4 only: each of a
    worker's CPU and memory fits some T4 node, both together none."""
    from cluster.types import Pool
    from colocation.models import Node, NodeState
    from scheduler.models import Framework

    Node.objects.create(name="t4-cpu", resource_group=world.groups["t4"], gpu_model=world.gpu_models["T4"],
                        gpu_count=2, cpu_milli=64000, memory_mib=65536, pool=Pool.FIXED,
                        state=NodeState.OFFLINE_NORMAL)
    Framework.objects.create(name="jax", version="0.4").certified_on.set([world.gpu_models["T4"]])


@pytest.mark.parametrize(
    ("overrides", "field", "text"),
    [
        ({"workers": 0}, "workers", "greater than or equal to 1"),
        ({"workers": -3}, "workers", "greater than or equal to 1"),
        ({"workers": 1025}, "workers", "less than or equal to 1024"),
        ({"topology": "ring"}, "topology", "not a valid choice"),
        ({"workers": 2, "gpus": "0.5"}, "gpus",
         "0.5 GPUs is a fraction: each of a gang's 2 workers asks for whole GPUs"),
        ({"workers": 2, "gpus": "4", "gpu_model": "A100"}, "workers",
         "2 workers ask 8 GPUs, 8000m CPU and 32768 MiB memory at once, more than ml-search's own or borrowed quota "
         "could ever give (a gang takes all it asks from one of them): own: 8 GPUs above A100 4 and T4 2; borrowed: "
         "8 GPUs above A100 2 and T4 1"),
        ({"workers": 2, "gpus": "3", "gpu_model": "A100"}, "workers",  # 6 = own 4 + borrowed 2, but never both
         "own: 6 GPUs above A100 4 and T4 2; borrowed: 6 GPUs above A100 2 and T4 1"),
        ({"workers": 3, "gpus": "1", "cpu_milli": 32000}, "workers",
         "own: 96000m CPU above 64000m CPU; borrowed: 3 GPUs above A100 2 and T4 1, 96000m CPU above 16000m CPU"),
        ({"workers": 6, "gpus": "0", "gpu_model": None, "memory_mib": 131072}, "workers",
         "own: 786432 MiB memory above 524288 MiB memory; borrowed: 24000m CPU above 16000m CPU, 786432 MiB memory "
         "above 131072 MiB memory"),
        ({"workers": 2, "framework": "jax-0.4", "cpu_milli": 96000}, "cpu_milli",
         "96000m CPU is more than any T4 node with 1 GPU has (64000m)"),
        ({"workers": 2, "framework": "jax-0.4", "cpu_milli": 48000, "memory_mib": 100000}, "memory_mib",
         "no single T4 node with 1 GPU has both 48000m CPU and 100000 MiB memory"),
        ({"framework": "jax-0.4", "cpu_milli": 48000, "memory_mib": 100000}, "memory_mib",
         "no single T4 node with 1 GPU has both"),  # one worker is a worker too
    ],
    ids=["zero", "negative", "too-many", "topology", "fraction", "gpu-quota", "own-plus-borrowed", "cpu-quota",
         "memory-quota",
         "cpu-of-the-gpu-nodes", "no-node-holds-both", "one-worker-no-node-holds-both"],
)
def test_a_bad_gang_is_rejected_with_the_numbers_and_writes_nothing(world, lopsided_t4, overrides, field, text):
    before = world.snapshot()
    response = world.client("member").post("/api/jobs/", world.job_payload(**overrides), format="json")
    assert response.status_code == 400, response.json()
    messages = response.json()["extra"]["fields"][field]
    assert any(text in m for m in messages), messages
    assert world.snapshot() == before


def test_quota_numbers_are_not_told_to_an_outsider(world):
    """Not a member of ml-search: told that, not what ml-search's quotas are."""
    response = world.client("outsider").post(
        "/api/jobs/", world.job_payload(workers=2, gpus="4", gpu_model="A100"), format="json")
    assert response.status_code == 400
    assert set(response.json()["extra"]["fields"]) == {"department"}


def _run(job, attempt: int, **fields) -> JobRun:
    started = timezone.now() - timedelta(hours=2 - attempt)
    return JobRun.objects.create(job=job, attempt=attempt, started_at=started, **fields)


def test_the_detail_shows_every_worker_of_the_open_run(world):
    job = world.hold(world.submit(gpus="8", gpu_model="A100"), gpu_model="A100")
    TrainingJob.objects.filter(pk=job.pk).update(workers=2, node=world.nodes["a100-0"])
    _run(job, 1, node=world.nodes["t4-0"], ended_at=timezone.now() - timedelta(minutes=30),
         outcome=JobRun.Outcome.PREEMPTED,
         workers=[{"rank": 0, "node": "t4-0", "pod": "job-1-1-0", "gpu_shares": [[0, 1.0]], "state": "preempted"}])
    shares = [[i, 1.0] for i in range(4)]
    _run(job, 2, node=world.nodes["a100-0"], pod=f"job-{job.pk}-2-0", gpu_shares=shares, workers=[
        {"rank": 1, "node": "a100-1", "pod": f"job-{job.pk}-2-1", "gpu_shares": shares, "state": "running"},
        {"rank": 0, "node": "a100-0", "pod": f"job-{job.pk}-2-0", "gpu_shares": shares, "state": "running"},
    ])
    body = world.client("member").get(f"/api/jobs/{job.pk}/").json()
    assert body["placement"] == [
        {"rank": 0, "node": "a100-0", "pod": f"job-{job.pk}-2-0", "gpus": "4.000", "gpu_shares": shares,
         "state": "running"},
        {"rank": 1, "node": "a100-1", "pod": f"job-{job.pk}-2-1", "gpus": "4.000", "gpu_shares": shares,
         "state": "running"},
    ]


def test_a_one_worker_job_is_one_row_from_its_run(world):
    job = world.hold(world.submit(gpus="0.5"))
    _run(job, 1, node=world.nodes["t4-1"], pod=f"job-{job.pk}-1", gpu_shares=[[1, 0.5]])
    placement = world.client("member").get(f"/api/jobs/{job.pk}/").json()["placement"]
    assert placement == [{"rank": 0, "node": "t4-1", "pod": f"job-{job.pk}-1", "gpus": "0.500",
                          "gpu_shares": [[1, 0.5]], "state": "running"}]
    JobRun.objects.filter(job=job).update(ended_at=timezone.now(), outcome=JobRun.Outcome.KILLED)
    TrainingJob.objects.filter(pk=job.pk).update(status="pending")
    placement = world.client("member").get(f"/api/jobs/{job.pk}/").json()["placement"]
    assert [row["state"] for row in placement] == ["killed"]  # the last run's, ended


def test_a_waiting_gang_shows_its_reservation(world):
    job = world.submit()
    start = 1_790_000_000
    TrainingJob.objects.filter(pk=job.pk).update(workers=2, reservation={"nodes": ["t4-0", "t4-1"], "start_at": start})
    body = world.client("member").get(f"/api/jobs/{job.pk}/").json()
    assert body["reservation"] == {"nodes": ["t4-0", "t4-1"], "start_at": "2026-09-21T14:13:20Z"}
    TrainingJob.objects.filter(pk=job.pk).update(status="running")
    assert world.client("member").get(f"/api/jobs/{job.pk}/").json()["reservation"] is None


def test_a_running_gang_holds_quota_for_every_worker(world):
    """What the department's usage (and the console's quota bars, and a quota change's floor) count: 2 workers of
    2 A100 GPUs, 8 cores and 32 GiB each hold 4 GPUs, 16 cores and 64 GiB."""
    job = world.hold(world.submit(gpus="2", gpu_model="A100", cpu_milli=8000, memory_mib=32768), gpu_model="A100")
    TrainingJob.objects.filter(pk=job.pk).update(workers=2)
    usage = {u["resource"]: u for u in world.client("member").get(
        f"/api/departments/{world.departments['ml-search'].pk}/usage/").json()}
    assert (usage["A100"]["own_used"], usage["cpu"]["own_used"], usage["memory"]["own_used"]) == (
        "4.000", "16000.000", "65536.000")
    response = world.client("operator").patch(
        f"/api/quotas/{Quota.objects.get(department__name='ml-search', gpu_model__name='A100').pk}/",
        {"own": "3"}, format="json")
    assert response.status_code == 409 and "below the 4" in str(response.json())
