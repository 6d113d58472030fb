"""Shared fixtures: a small cluster and people in every role, on the real database (PostgreSQL under `make test`)."""
import os
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from rest_framework.test import APIClient

ROLES = ("anonymous", "outsider", "member", "dept_admin", "operator")


def listed(response, key: str = "id") -> set:
    """The `key` of every row of a successful, paginated list response."""
    assert response.status_code == 200, response.content[:500]
    body = response.json()
    assert body["count"] == len(body["results"]), "a test list must fit on one page"
    return {row[key] for row in body["results"]}


TESTS = Path(__file__).resolve().parent
# The suites a marker selects by, from their folder: `-m "not system and not browser"` (make test-fast) leaves the
# whole-stack and browser tests out. Flink tests are marked `flink` where they use the mini-cluster.
SUITE_MARKERS = {"system": "system", "e2e": "browser"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        suite = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else None
        if suite in SUITE_MARKERS:
            item.add_marker(SUITE_MARKERS[suite])


def pytest_configure(config):
    # `make test` sets TIDAL_REQUIRE_POSTGRES: the suite must not silently fall back to SQLite there.
    if os.environ.get("TIDAL_REQUIRE_POSTGRES") == "1":
        assert os.environ.get("DATABASE_URL", "").startswith("postgres"), "make test runs on PostgreSQL"
    # The cache (throttle counters) is the shared Redis: each session counts apart from earlier runs and from
    # other checkouts' sessions, whose users have the same ids.
    from django.conf import settings

    settings.CACHES["default"]["KEY_PREFIX"] += f":test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _job_log_archives_apart(settings, tmp_path_factory):
    """The job log archives the loops write (scheduler/logs.py) go to a folder of this test, not the checkout's
    .run/logs (created only when something is archived)."""
    location = tmp_path_factory.getbasetemp() / "job-logs" / uuid.uuid4().hex[:12]
    settings.STORAGES = {**settings.STORAGES, "logs": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                                                       "OPTIONS": {"location": str(location)}}}


@pytest.fixture(scope="session")
def live_server(live_server):
    """pytest-django's, whose request threads close their database session after each request. A client that keeps
    its HTTP connection open keeps its thread, and the thread its session: Prometheus scrapes the live server
    (test_metrics, the dashboards' browser tests) and holds idle connections for 5 minutes, so the test database
    could not be dropped at the end."""
    from django.db import connections

    database = connections.settings["default"]  # what each new thread's connection is made from
    kept, database["CONN_MAX_AGE"] = database["CONN_MAX_AGE"], 0
    yield live_server
    database["CONN_MAX_AGE"] = kept


@pytest.fixture
def world(db):
    """Two departments with quotas, GPU models, frameworks, a few nodes, and one user per role."""
    from django.contrib.auth import get_user_model

    from cluster.types import Pool
    from colocation.models import Node, NodeState, ResourceGroup
    from core.models import Department, GPUModel, Membership
    from scheduler.models import Framework, Quota

    User = get_user_model()
    t4 = GPUModel.objects.create(name="T4", memory_gib=16)
    a100 = GPUModel.objects.create(name="A100", memory_gib=80)
    p40 = GPUModel.objects.create(name="P40", memory_gib=24)
    pytorch = Framework.objects.create(name="pytorch", version="2.1")
    pytorch.certified_on.set([t4, a100])
    caffe = Framework.objects.create(name="caffe", version="1.0")
    caffe.certified_on.set([p40])

    t4_group = ResourceGroup.objects.create(name="t4", hardware_class="T4", gpu_model=t4)
    a100_group = ResourceGroup.objects.create(name="a100", hardware_class="A100", gpu_model=a100)
    cpu_group = ResourceGroup.objects.create(name="cpu", hardware_class="CPU")
    nodes = [
        Node.objects.create(name="t4-0", resource_group=t4_group, gpu_model=t4, gpu_count=2, cpu_milli=32000,
                            memory_mib=131072, pool=Pool.FIXED, state=NodeState.OFFLINE_NORMAL),
        Node.objects.create(name="t4-1", resource_group=t4_group, gpu_model=t4, gpu_count=2, cpu_milli=32000,
                            memory_mib=131072, pool=Pool.COLOCATION, state=NodeState.ONLINE_NORMAL),
        Node.objects.create(name="a100-0", resource_group=a100_group, gpu_model=a100, gpu_count=8, cpu_milli=96000,
                            memory_mib=1048576, pool=Pool.COLOCATION, state=NodeState.OFFLINE_NORMAL),
        Node.objects.create(name="cpu-0", resource_group=cpu_group, cpu_milli=64000, memory_mib=262144,
                            pool=Pool.COLOCATION, state=NodeState.ONLINE_NORMAL),
    ]

    search = Department.objects.create(name="ml-search")
    ads = Department.objects.create(name="ml-ads")
    for department in (search, ads):
        Quota.objects.create(department=department, resource_kind="gpu", gpu_model=t4, own=2, borrowed=1)
        Quota.objects.create(department=department, resource_kind="gpu", gpu_model=a100, own=4, borrowed=2)
        Quota.objects.create(department=department, resource_kind="cpu", own=64000, borrowed=16000)
        Quota.objects.create(department=department, resource_kind="memory", own=524288, borrowed=131072)

    users = {
        "outsider": User.objects.create_user("olga", password="pw"),
        "member": User.objects.create_user("mia", password="pw"),
        "dept_admin": User.objects.create_user("adam", password="pw"),
        "operator": User.objects.create_user("otto", password="pw", is_staff=True),
    }
    Membership.objects.create(user=users["member"], department=search, role=Membership.Role.MEMBER)
    Membership.objects.create(user=users["dept_admin"], department=search, role=Membership.Role.ADMIN)
    Membership.objects.create(user=users["outsider"], department=ads, role=Membership.Role.MEMBER)

    return _World(
        gpu_models={"T4": t4, "A100": a100, "P40": p40}, frameworks={"pytorch-2.1": pytorch, "caffe-1.0": caffe},
        groups={"t4": t4_group, "a100": a100_group, "cpu": cpu_group}, nodes={n.name: n for n in nodes},
        departments={"ml-search": search, "ml-ads": ads}, users=users,
    )


@pytest.fixture
def cluster(world):
    """The `world` fixture's nodes as a simulated cluster whose pods run for their runtime label, and its clock."""
    from cluster.clock import VirtualClock
    from cluster.simulated import store
    from cluster.simulated.engine import SimulatedCluster
    from colocation.selectors import node_views
    from tests.integration.livecluster import T0

    clock = VirtualClock(T0)
    return SimulatedCluster(node_views(), clock, store.labelled_runtime), clock


class _World:
    def __init__(self, **parts):
        self.__dict__.update(parts)

    def client(self, role: str) -> APIClient:
        """An API client signed in as `role` (one of ROLES); token auth, like automation uses."""
        from rest_framework.authtoken.models import Token

        client = APIClient()
        if role != "anonymous":
            token, _ = Token.objects.get_or_create(user=self.users[role])
            client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    def job_payload(self, **overrides) -> dict:
        """A valid submission into ml-search; override any field."""
        payload = {
            "name": "resnet50", "department": "ml-search", "image": "registry/resnet:1", "command": "python train.py",
            "framework": "pytorch-2.1", "gpu_model": "T4", "gpus": "1", "cpu_milli": 4000, "memory_mib": 16384,
        }
        payload.update(overrides)
        return payload

    def snapshot(self) -> dict:
        """Every row of the domain tables, to assert that a rejected request changed nothing."""
        from django.apps import apps
        from django.contrib.auth import get_user_model

        models = [get_user_model()]
        for app in ("scheduler", "colocation"):
            models += apps.get_app_config(app).get_models(include_auto_created=True)  # with M2M tables
        return {m._meta.label: list(m.objects.order_by("pk").values()) for m in models}

    def hold(self, job, *, gpu_model: str = "T4", quota_kind: str = "own"):
        """Make `job` hold quota, as if the scheduler had admitted and started it."""
        job.status, job.quota_kind, job.assigned_gpu_model = "running", quota_kind, self.gpu_models[gpu_model]
        job.save(update_fields=["status", "quota_kind", "assigned_gpu_model"])
        return job

    def service(self, department: str = "ml-search", **fields):
        """An inference service with one GPU threshold, written straight to the database."""
        from colocation.models import InferenceService, ScalingThreshold

        fields.setdefault("name", f"{department}-ranker")
        service = InferenceService.objects.create(department=self.departments[department], **fields)
        ScalingThreshold.objects.create(service=service, metric="gpu", min_rate=0.2, expect_rate=0.5, max_rate=0.8)
        return service

    def submit(self, role: str = "member", **overrides):
        from core.models import Department, GPUModel
        from scheduler import submission
        from scheduler.models import Framework

        p = self.job_payload(**overrides)
        name, _, version = p["framework"].rpartition("-")
        return submission.job_submit(
            submitter=self.users[role], department=Department.objects.get(name=p["department"]), name=p["name"],
            image=p["image"], command=p["command"], framework=Framework.objects.get(name=name, version=version),
            gpu_model=GPUModel.objects.get(name=p["gpu_model"]) if p["gpu_model"] else None,
            gpus=Decimal(p["gpus"]), cpu_milli=p["cpu_milli"], memory_mib=p["memory_mib"],
        )
