"""Inference services and their autoscaling thresholds."""
import pytest

from core.models import Decision

from colocation.models import InferenceService
from tests.conftest import listed

pytestmark = pytest.mark.django_db

GPU_THRESHOLD = {"metric": "gpu", "min_rate": 0.2, "expect_rate": 0.5, "max_rate": 0.8}


def _payload(**overrides) -> dict:
    payload = {"name": "ranker-2", "department": "ml-search", "gpu_model": "T4", "replicas": 2, "min_replicas": 1,
               "max_replicas": 4, "thresholds": [GPU_THRESHOLD]}
    payload.update(overrides)
    return payload


def test_department_admin_creates_a_service_with_thresholds(world):
    response = world.client("dept_admin").post("/api/inference-services/", _payload(), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["thresholds"] == [GPU_THRESHOLD]
    service = InferenceService.objects.get(name="ranker-2")
    assert (service.department.name, service.replicas, service.min_replicas, service.max_replicas) == ("ml-search", 2, 1, 4)
    assert service.thresholds.get().expect_rate == 0.5
    decision = Decision.objects.get(subject="service:ranker-2")
    assert decision.reason == "service-created" and "adam" in decision.message and decision.department.name == "ml-search"


def test_patch_replaces_thresholds_and_keeps_other_fields(world):
    service = world.service(replicas=3, min_replicas=2, max_replicas=5)
    memory = {"metric": "memory", "min_rate": 0.1, "expect_rate": 0.6, "max_rate": 0.9}
    response = world.client("dept_admin").patch(
        f"/api/inference-services/{service.pk}/", {"thresholds": [memory], "replicas": 5}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["thresholds"] == [memory]
    service.refresh_from_db()
    assert (service.replicas, service.min_replicas, service.max_replicas) == (5, 2, 5)
    assert list(service.thresholds.values_list("metric", flat=True)) == ["memory"]
    changed = Decision.objects.get(subject=f"service:{service.name}", reason="service-changed")
    assert changed.message.endswith("; changed: replicas, thresholds"), changed.message


BAD_SERVICES = [
    ({"min_replicas": 5, "max_replicas": 4, "replicas": 4}, "min_replicas"),
    ({"replicas": 5}, "replicas"),
    ({"replicas": 0}, "replicas"),
    ({"thresholds": [{**GPU_THRESHOLD, "min_rate": 0.6}]}, "thresholds"),  # min_rate above expect_rate
    ({"thresholds": [{**GPU_THRESHOLD, "expect_rate": 0.9}]}, "thresholds"),  # expect_rate above max_rate
    ({"thresholds": [GPU_THRESHOLD, {**GPU_THRESHOLD, "max_rate": 0.9}]}, "thresholds"),  # the same metric twice
    ({"thresholds": [{**GPU_THRESHOLD, "max_rate": 1.5}]}, "thresholds"),
    ({"thresholds": [{**GPU_THRESHOLD, "metric": "latency"}]}, "thresholds"),
    ({"gpus_per_replica": "-1"}, "gpus_per_replica"),
    ({"gpu_model": "V100"}, "gpu_model"),
    ({"name": "ml-search-ranker"}, "name"),  # taken
]


@pytest.mark.parametrize(("overrides", "field"), BAD_SERVICES, ids=[field for _, field in BAD_SERVICES])
def test_bad_service_is_rejected_and_writes_nothing(world, overrides, field):
    world.service()
    before = world.snapshot()
    response = world.client("dept_admin").post("/api/inference-services/", _payload(**overrides), format="json")
    assert response.status_code == (409 if overrides.get("name") else 400), response.json()  # a taken name: 409
    assert field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


BAD_CHANGES = [
    ({"min_replicas": 11}, "min_replicas"),  # above max_replicas 10
    ({"max_replicas": 1}, "min_replicas"),  # below min_replicas 2
    ({"replicas": 11}, "replicas"),
    ({"replicas": 1}, "replicas"),
    ({"thresholds": [{**GPU_THRESHOLD, "min_rate": 0.6}]}, "thresholds"),
    ({"thresholds": [GPU_THRESHOLD, GPU_THRESHOLD]}, "thresholds"),
    ({"replicas": 11, "thresholds": [{"metric": "cpu", "min_rate": 0.1, "expect_rate": 0.5, "max_rate": 0.9}]}, "replicas"),
    ({"department": "ml-ads"}, "department"),
]


@pytest.mark.parametrize(("change", "field"), BAD_CHANGES, ids=[str(i) for i in range(len(BAD_CHANGES))])
def test_bad_service_change_is_rejected_and_writes_nothing(world, change, field):
    service = world.service()  # replicas 2 within [2, 10]
    before = world.snapshot()
    response = world.client("operator").patch(f"/api/inference-services/{service.pk}/", change, format="json")
    assert response.status_code == (409 if "department" in change else 400), response.json()  # a move: 409
    assert field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


def test_department_admin_cannot_create_services_elsewhere(world):
    before = world.snapshot()
    response = world.client("dept_admin").post("/api/inference-services/", _payload(department="ml-ads"), format="json")
    assert response.status_code == 403
    assert world.snapshot() == before


@pytest.fixture
def services(world):
    return {"search": world.service("ml-search").pk, "ads": world.service("ml-ads", autoscaling=False).pk}


@pytest.mark.parametrize(
    ("role", "query", "expected"),
    [
        ("operator", "", {"search", "ads"}),
        ("operator", "department=ml-ads", {"ads"}),
        ("operator", "department=ml-search", {"search"}),
        ("operator", "autoscaling=false", {"ads"}),
        ("member", "", {"search"}),
        ("member", "department=ml-ads", set()),
        ("outsider", "", {"ads"}),
    ],
)
def test_list_and_filter_services(world, services, role, query, expected):
    assert listed(world.client(role).get(f"/api/inference-services/?{query}")) == {services[key] for key in expected}


def test_patch_with_the_services_own_representation_is_accepted(world):
    service = world.service()
    client = world.client("dept_admin")
    body = client.get(f"/api/inference-services/{service.pk}/").json()
    response = client.patch(f"/api/inference-services/{service.pk}/", {**body, "replicas": 4}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {**body, "replicas": 4}
