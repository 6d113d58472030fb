"""Quotas through the API: upsert, amount changes with their decisions, the in-use floor, filters."""
import pytest

from core.models import Decision
from scheduler.models import Quota
from tests.conftest import listed

pytestmark = pytest.mark.django_db


def _quota(world, department: str, resource: str) -> Quota:
    if resource in ("cpu", "memory"):
        return Quota.objects.get(department__name=department, resource_kind=resource)
    return Quota.objects.get(department__name=department, gpu_model__name=resource)


def test_post_creates_then_changes_the_same_quota(world):
    client = world.client("operator")
    payload = {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "2"}

    created = client.post("/api/quotas/", payload, format="json")
    assert created.status_code == 201, created.json()
    assert (created.json()["resource"], created.json()["own"], created.json()["borrowed"]) == ("P40", "2.000", "0.000")

    changed = client.post("/api/quotas/", {**payload, "own": "5", "borrowed": "1"}, format="json")
    assert changed.status_code in (200, 201), changed.json()
    assert changed.json()["id"] == created.json()["id"]
    quota = Quota.objects.get(pk=created.json()["id"])
    assert (quota.own, quota.borrowed) == (5, 1)
    reasons = list(Decision.objects.filter(kind="quota").order_by("id").values_list("reason", flat=True))
    assert reasons == ["quota_created", "quota_changed"]


def test_post_changes_a_cpu_quota_without_naming_a_gpu_model(world):
    response = world.client("operator").post(
        "/api/quotas/", {"department": "ml-search", "resource_kind": "cpu", "own": "32000"}, format="json"
    )
    assert response.status_code in (200, 201), response.json()
    assert _quota(world, "ml-search", "cpu").own == 32000


def test_patch_changes_amounts_and_writes_a_quota_decision(world):
    quota = _quota(world, "ml-search", "T4")
    response = world.client("operator").patch(f"/api/quotas/{quota.pk}/", {"own": "6"}, format="json")
    assert response.status_code == 200, response.json()
    assert (response.json()["own"], response.json()["borrowed"]) == ("6.000", "1.000")  # borrowed kept
    decision = Decision.objects.get(kind=Decision.Kind.QUOTA)
    assert (decision.subject, decision.department, decision.reason) == (
        "department:ml-search", world.departments["ml-search"], "quota_changed"
    )
    assert decision.data == {"resource": "T4", "own": "6.000", "borrowed": "1.000"}
    assert "otto" in decision.message


@pytest.mark.parametrize(
    ("kind", "resource", "amount"),
    [("own", "T4", "0"), ("borrowed", "T4", "0.5"), ("own", "cpu", "3999"), ("borrowed", "memory", "16383")],
)
def test_quota_below_what_is_in_use_is_rejected_and_writes_nothing(world, kind, resource, amount):
    world.hold(world.submit(gpus="1", cpu_milli=4000, memory_mib=16384), quota_kind=kind)
    quota = _quota(world, "ml-search", resource)
    before = world.snapshot()
    response = world.client("operator").patch(f"/api/quotas/{quota.pk}/", {kind: amount}, format="json")
    assert response.status_code == 409  # valid amounts, refused by what is in use now
    assert kind in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


def test_quota_down_to_what_is_in_use_is_accepted(world):
    world.hold(world.submit(gpus="1"))
    quota = _quota(world, "ml-search", "T4")
    assert world.client("operator").patch(f"/api/quotas/{quota.pk}/", {"own": "1"}, format="json").status_code == 200


def test_quota_in_use_cannot_be_deleted(world):
    world.hold(world.submit())
    quota = _quota(world, "ml-search", "T4")
    before = world.snapshot()
    response = world.client("operator").delete(f"/api/quotas/{quota.pk}/")
    assert response.status_code == 409
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("method", "payload", "field"),
    [
        ("patch", {"own": "-1"}, "own"),
        ("patch", {"borrowed": "-0.5"}, "borrowed"),
        ("patch", {"own": "-0"}, "own"),  # the schema's pattern has no sign: neither has the field
        ("patch", {"own": "lots"}, "own"),
        ("post", {"department": "ml-search", "resource_kind": "gpu", "own": "1"}, "gpu_model"),
        ("post", {"department": "ml-search", "resource_kind": "cpu", "gpu_model": "T4", "own": "1"}, "gpu_model"),
        ("post", {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "V100", "own": "1"}, "gpu_model"),
        ("post", {"department": "ml-search", "resource_kind": "disk", "own": "1"}, "resource_kind"),
        ("post", {"department": "ml-nowhere", "resource_kind": "cpu", "own": "1"}, "department"),
        ("post", {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "-2"}, "own"),
    ],
)
def test_bad_quota_input_is_rejected_and_writes_nothing(world, method, payload, field):
    quota = _quota(world, "ml-search", "T4")
    url = f"/api/quotas/{quota.pk}/" if method == "patch" else "/api/quotas/"
    before = world.snapshot()
    response = getattr(world.client("operator"), method)(url, payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("department=ml-ads", {("ml-ads", r) for r in ("T4", "A100", "cpu", "memory")}),
        ("resource_kind=gpu", {(d, r) for d in ("ml-search", "ml-ads") for r in ("T4", "A100")}),
        ("gpu_model=A100", {("ml-search", "A100"), ("ml-ads", "A100")}),
        ("department=ml-search&resource_kind=memory", {("ml-search", "memory")}),
    ],
)
def test_operator_filters_quotas(world, query, expected):
    rows = world.client("operator").get(f"/api/quotas/?{query}").json()["results"]
    assert {(row["department"], row["resource"]) for row in rows} == expected


@pytest.mark.parametrize(
    ("role", "departments"),
    [("member", {"ml-search"}), ("outsider", {"ml-ads"}), ("operator", {"ml-search", "ml-ads"})],
)
def test_users_list_their_departments_quotas(world, role, departments):
    assert listed(world.client(role).get("/api/quotas/"), "department") == departments
    assert len(world.client(role).get("/api/quotas/").json()["results"]) == 4 * len(departments)
