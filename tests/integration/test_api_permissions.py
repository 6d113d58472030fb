"""Permission matrix: every operation of the OpenAPI schema, the status each role gets.

Roles, in column order: anonymous, outsider (member of ml-ads only), member and dept_admin of ml-search,
operator (staff). Objects named in paths belong to ml-search unless said otherwise. A new endpoint without a
row here fails `test_matrix_covers_every_schema_operation`.
"""
import json
from dataclasses import dataclass
from typing import Callable

import pytest
from drf_spectacular.generators import SchemaGenerator

from tests.conftest import ROLES

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Row:
    expected: str  # one status per role, in ROLES order
    target: str | None = None  # key of `_objects()` that fills `{id}`
    body: dict | Callable[[str], dict] | None = None  # the request body, or the role → the body

    def request_body(self, role: str) -> dict | None:
        return self.body(role) if callable(self.body) else self.body

    def status(self, role: str) -> int:
        return int(self.expected.split()[ROLES.index(role)])


USERNAMES = {"anonymous": "mia", "outsider": "olga", "member": "mia", "dept_admin": "adam", "operator": "otto"}
JOB = {"name": "resnet50", "department": "ml-search", "image": "registry/resnet:1", "command": "python train.py",
       "framework": "pytorch-2.1", "gpu_model": "T4", "gpus": "1", "cpu_milli": 4000, "memory_mib": 16384}

#                         anon out mem adm op
MATRIX: dict[tuple[str, str], Row] = {
    ("POST", "/api/auth/token/"): Row("200 200 200 200 200",
        body=lambda role: {"username": USERNAMES[role], "password": "pw"}),
    ("GET", "/api/me/"): Row("401 200 200 200 200"),
    # departments: operators write; an admin the departments below theirs (not their own, nor a top-level one);
    # others see the departments they belong to
    ("GET", "/api/departments/"): Row("401 200 200 200 200"),
    ("POST", "/api/departments/"): Row("401 403 403 403 201", body={"name": "ml-new"}),
    ("GET", "/api/departments/tree/"): Row("401 200 200 200 200"),
    ("GET", "/api/departments/{id}/"): Row("401 404 200 200 200", "department"),
    ("PUT", "/api/departments/{id}/"): Row("401 404 403 403 200", "department",
        {"name": "ml-search", "description": "x"}),
    ("PATCH", "/api/departments/{id}/"): Row("401 404 403 403 200", "department", {"description": "x"}),
    ("DELETE", "/api/departments/{id}/"): Row("401 404 404 404 204", "empty_department"),
    ("GET", "/api/departments/{id}/usage/"): Row("401 404 200 200 200", "department"),
    # memberships: operators and the department's admins manage them
    ("GET", "/api/memberships/"): Row("401 200 200 200 200"),
    ("POST", "/api/memberships/"): Row("401 403 403 201 201",
        body={"user": "olga", "department": "ml-search", "role": "member"}),
    ("GET", "/api/memberships/{id}/"): Row("401 404 200 200 200", "membership"),
    ("PATCH", "/api/memberships/{id}/"): Row("401 404 403 200 200", "membership", {"role": "admin"}),
    ("DELETE", "/api/memberships/{id}/"): Row("401 404 403 204 204", "membership"),
    # catalogue: everyone signed in reads, operators write
    ("GET", "/api/gpu-models/"): Row("401 200 200 200 200"),
    ("POST", "/api/gpu-models/"): Row("401 403 403 403 201", body={"name": "H100", "memory_gib": 80}),
    ("GET", "/api/gpu-models/{id}/"): Row("401 200 200 200 200", "gpu_model"),
    ("PUT", "/api/gpu-models/{id}/"): Row("401 403 403 403 200", "gpu_model", {"name": "P40", "memory_gib": 48}),
    ("PATCH", "/api/gpu-models/{id}/"): Row("401 403 403 403 200", "gpu_model", {"memory_gib": 48}),
    ("DELETE", "/api/gpu-models/{id}/"): Row("401 403 403 403 204", "gpu_model"),
    ("GET", "/api/frameworks/"): Row("401 200 200 200 200"),
    ("POST", "/api/frameworks/"): Row("401 403 403 403 201",
        body={"name": "jax", "version": "0.4", "certified_on": ["A100"]}),
    ("GET", "/api/frameworks/{id}/"): Row("401 200 200 200 200", "framework"),
    ("PATCH", "/api/frameworks/{id}/"): Row("401 403 403 403 200", "framework", {"certified_on": ["P40", "T4"]}),
    ("DELETE", "/api/frameworks/{id}/"): Row("401 403 403 403 204", "framework"),
    # quotas: operators write; an admin those of the departments below theirs (not their own); members read their
    # departments' (an outsider naming ml-search names a department they cannot see: invalid input)
    ("GET", "/api/quotas/"): Row("401 200 200 200 200"),
    ("POST", "/api/quotas/"): Row("401 400 403 403 201",
        body={"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "1"}),
    ("GET", "/api/quotas/{id}/"): Row("401 404 200 200 200", "quota"),
    ("PATCH", "/api/quotas/{id}/"): Row("401 404 403 403 200", "quota", {"own": "3"}),
    ("DELETE", "/api/quotas/{id}/"): Row("401 404 403 403 204", "quota"),
    # jobs: members submit into their departments (an outsider's submission into ml-search is invalid input)
    ("GET", "/api/jobs/"): Row("401 200 200 200 200"),
    ("POST", "/api/jobs/"): Row("401 400 201 201 201", body=JOB),
    ("GET", "/api/jobs/{id}/"): Row("401 404 200 200 200", "job"),
    ("POST", "/api/jobs/{id}/cancel/"): Row("401 404 200 200 200", "job"),  # the member submitted it
    ("POST", "/api/jobs/{id}/keep-request/"): Row("401 404 403 200 200", "job", {"keep_request": True}),
    ("GET", "/api/decisions/"): Row("401 200 200 200 200"),
    ("GET", "/api/decisions/{id}/"): Row("401 404 200 200 200", "decision"),
    # inventory: read-only for everyone signed in
    ("GET", "/api/nodes/"): Row("401 200 200 200 200"),
    ("GET", "/api/nodes/{id}/"): Row("401 200 200 200 200", "node"),
    ("PATCH", "/api/resource-groups/{id}/"): Row("401 403 403 403 200", "resource_group", {"min_rate": 0.3}),
    ("POST", "/api/nodes/{id}/lend/"): Row("401 403 403 403 202", "online_node"),
    ("POST", "/api/nodes/{id}/take-back/"): Row("401 403 403 403 202", "lent_node"),
    ("POST", "/api/nodes/{id}/pin/"): Row("401 403 403 403 200", "node", {"pinned": True}),
    ("GET", "/api/transitions/"): Row("401 200 200 200 200"),
    ("GET", "/api/transitions/{id}/"): Row("401 200 200 200 200", "transition"),
    ("GET", "/api/resource-groups/"): Row("401 200 200 200 200"),
    ("GET", "/api/resource-groups/allocation/"): Row("401 200 200 200 200"),
    ("GET", "/api/resource-groups/{id}/"): Row("401 200 200 200 200", "resource_group"),
    # inference services: the department's admins and operators write
    ("GET", "/api/inference-services/"): Row("401 200 200 200 200"),
    ("POST", "/api/inference-services/"): Row("401 403 403 201 201",
        body={"name": "ranker-2", "department": "ml-search"}),
    ("GET", "/api/inference-services/{id}/"): Row("401 404 200 200 200", "service"),
    ("PATCH", "/api/inference-services/{id}/"): Row("401 404 403 200 200", "service", {"replicas": 3}),
    # profiles: read-only, visible to whoever may see the job, the task's jobs or the service
    ("GET", "/api/jobs/{id}/profile/"): Row("401 404 200 200 200", "job"),
    ("GET", "/api/jobs/{id}/logs/"): Row("401 404 200 200 200", "ended_job"),  # its run's archive
    ("GET", "/api/task-profiles/"): Row("401 200 200 200 200"),
    ("GET", "/api/task-profiles/{id}/"): Row("401 404 200 200 200", "task_profile"),
    ("GET", "/api/inference-services/{id}/load/"): Row("401 404 200 200 200", "service"),
    ("GET", "/api/inference-services/{id}/forecasts/"): Row("401 404 200 200 200", "service"),
    ("GET", "/api/inference-services/{id}/scaling/"): Row("401 404 200 200 200", "service"),
    ("GET", "/api/forecast-models/"): Row("401 200 200 200 200"),
    ("GET", "/api/forecast-models/{id}/"): Row("401 200 200 200 200", "forecast_model"),
    # notifications: each user's own settings and deliveries (the delivery is mia's), operators read all; admins
    # subscribe their departments (the subscription is adam's), operators manage all
    ("GET", "/api/notifications/preferences/"): Row("401 200 200 200 200"),
    ("PUT", "/api/notifications/preferences/"): Row("401 200 200 200 200",
        body={"events": ["failed"], "waiting_hours": 3, "email": True, "webhook_url": ""}),
    ("PATCH", "/api/notifications/preferences/"): Row("401 200 200 200 200", body={"waiting_hours": 2}),
    ("GET", "/api/notifications/deliveries/"): Row("401 200 200 200 200"),
    ("GET", "/api/notifications/deliveries/{id}/"): Row("401 404 200 404 200", "delivery"),
    ("GET", "/api/notifications/department-subscriptions/"): Row("401 200 200 200 200"),
    ("POST", "/api/notifications/department-subscriptions/"): Row("401 400 400 201 201",
        body={"department": "ml-search", "events": ["quota_full"]}),
    ("GET", "/api/notifications/department-subscriptions/{id}/"): Row("401 404 404 200 200", "subscription"),
    ("PATCH", "/api/notifications/department-subscriptions/{id}/"): Row("401 404 404 200 200", "subscription",
        {"events": ["failed"]}),
    ("DELETE", "/api/notifications/department-subscriptions/{id}/"): Row("401 404 404 204 204", "subscription"),
}
# Served but not part of the schema they describe.
NOT_IN_SCHEMA: dict[tuple[str, str], Row] = {
    ("GET", "/api/"): Row("401 200 200 200 200"),
    ("GET", "/api/schema/"): Row("200 200 200 200 200"),
    ("GET", "/api/docs/"): Row("200 200 200 200 200"),
}
TABLE = {**MATRIX, **NOT_IN_SCHEMA}


def _objects(world) -> dict[str, int]:
    from colocation.models import NodeTransition
    from core.models import Decision, Department, Membership
    from profiling.models import ForecastModel, TaskProfile
    from scheduler.models import Quota

    from notifications.models import DepartmentSubscription, Delivery, Event

    job = world.submit("member")
    search = world.departments["ml-search"]
    event = Event.objects.create(kind="failed", key=f"decision:{job.pk}", job=job, department=search,
                                 subject=f"[Tidal] job {job.pk} failed", body="failed")
    return {
        "delivery": Delivery.objects.create(event=event, user=world.users["member"], channel="email",
                                            target="mia@cluster.test").pk,
        "subscription": DepartmentSubscription.objects.create(user=world.users["dept_admin"], department=search).pk,
        "department": search.pk,
        "empty_department": Department.objects.create(name="ml-empty").pk,
        "membership": Membership.objects.get(user=world.users["member"], department=search).pk,
        "gpu_model": world.gpu_models["P40"].pk,
        "framework": world.frameworks["caffe-1.0"].pk,
        "quota": Quota.objects.get(department=search, gpu_model=world.gpu_models["T4"]).pk,
        "job": job.pk,
        "ended_job": _ended_job(world),
        "decision": Decision.objects.get(subject=f"job:{job.pk}").pk,
        "node": world.nodes["t4-0"].pk,
        "online_node": world.nodes["t4-1"].pk,
        "lent_node": world.nodes["a100-0"].pk,
        "transition": NodeTransition.objects.create(node=world.nodes["cpu-0"], direction="online-to-offline",
                                                    reason="operator-lend", message="lend of cpu-0").pk,
        "resource_group": world.groups["t4"].pk,
        "service": world.service().pk,
        "task_profile": TaskProfile.objects.create(task_key=job.task_key, runs=0, computed_at=job.submitted_at).pk,
        "forecast_model": ForecastModel.objects.create(
            target="gpu", version=1, trained_from=job.submitted_at, trained_to=job.submitted_at, minutes=0,
            blob=b"{}").pk,
    }


def _ended_job(world) -> int:
    """A job of ml-search whose one run ended with its log archived (docs/concepts/job-logs.md#archive)."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import storages
    from django.utils import timezone

    from scheduler.logs import archive_path
    from scheduler.models import JobRun

    job = world.submit("member")
    now = timezone.now()
    JobRun.objects.create(job=job, attempt=1, pod=f"job-{job.pk}-1", started_at=now, ended_at=now,
                          outcome=JobRun.Outcome.FAILED)
    storages["logs"].save(archive_path(job.pk, 1, 0), ContentFile(b"step 1 loss 0.9\n"))
    return job.pk


def test_schema_is_valid_and_generates_without_warnings(tmp_path):
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


def test_matrix_covers_every_schema_operation():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert operations == set(MATRIX)


@pytest.mark.parametrize(
    ("method", "path", "role"),
    [(method, path, role) for (method, path) in TABLE for role in ROLES],
    ids=lambda value: value,
)
def test_permission_matrix(world, method, path, role):
    row = TABLE[(method, path)]
    url = path.format(id=_objects(world)[row.target]) if row.target else path
    body = row.request_body(role)
    response = world.client(role).generic(method, url, *_json(body))
    assert response.status_code == row.status(role), response.content[:500]
    if method == "POST" and path == "/api/auth/token/":
        assert response.json()["token"]


def _json(body: dict | None) -> tuple:
    return (json.dumps(body), "application/json") if body is not None else ()


def test_token_rejects_a_bad_password(world):
    response = world.client("anonymous").post("/api/auth/token/", {"username": "mia", "password": "nope"})
    assert response.status_code == 400
    assert "token" not in response.json()


def test_token_authenticates_and_a_bad_token_is_401(world):
    token = world.client("anonymous").post("/api/auth/token/", {"username": "mia", "password": "pw"}).json()["token"]
    client = world.client("anonymous")
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/me/").json()["username"] == "mia"
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    response = client.get("/api/me/")
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"
    assert world.client("anonymous").get("/api/jobs/")["WWW-Authenticate"] == "Token"
