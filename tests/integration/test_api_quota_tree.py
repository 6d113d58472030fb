"""The quota tree through the API (issue 41): departments nest, weigh and lend; bad trees are 400s naming the field,
with nothing written; the scheduler's snapshot carries the tree."""
import pytest

from core.models import Department
from scheduler.models import Quota
from scheduler.observe import quota_tree

pytestmark = pytest.mark.django_db


def test_departments_nest_and_the_snapshot_carries_the_tree(world):
    client = world.client("operator")
    division = client.post("/api/departments/", {"name": "ml", "weight": "2"}, format="json")
    assert division.status_code == 201, division.json()
    moved = client.patch(f"/api/departments/{world.departments['ml-search'].pk}/",
                         {"parent": "ml", "reclaim_min_runtime_s": 120}, format="json")
    assert moved.status_code == 200, moved.json()
    assert (moved.json()["parent"], moved.json()["weight"]) == ("ml", "1.000")
    nodes = {n.name: n for n in quota_tree()}
    assert (nodes["ml-search"].parent, nodes["ml-search"].reclaim_min_runtime_s) == ("ml", 120.0)
    assert (nodes["ml"].parent, nodes["ml"].weight) == (None, 2.0)


def test_flat_departments_give_no_tree(world):
    assert quota_tree() == ()


def test_a_cycle_in_the_tree_is_refused_and_nothing_is_written(world):
    client = world.client("operator")
    assert client.post("/api/departments/", {"name": "ml", "parent": "ml-search"}, format="json").status_code == 201
    response = client.patch(f"/api/departments/{world.departments['ml-search'].pk}/", {"parent": "ml"},
                            format="json")
    assert response.status_code == 400 and "parent" in str(response.json()), response.json()
    assert Department.objects.get(name="ml-search").parent is None


@pytest.mark.parametrize("field, value", [("weight", "-1"), ("reclaim_min_runtime_s", -5)])
def test_a_negative_weight_or_run_time_is_refused(world, field, value):
    response = world.client("operator").post("/api/departments/", {"name": "ml", field: value}, format="json")
    assert response.status_code == 400 and field in str(response.json()), response.json()
    assert not Department.objects.filter(name="ml").exists()


@pytest.mark.parametrize("lend", ["9", "-1"])
def test_a_lend_limit_above_own_or_negative_is_refused(world, lend):
    payload = {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "4", "lend_limit": lend}
    response = world.client("operator").post("/api/quotas/", payload, format="json")
    assert response.status_code == 400 and "lend_limit" in str(response.json()), response.json()
    assert not Quota.objects.filter(department__name="ml-search", gpu_model__name="P40").exists()


def test_a_lend_limit_is_kept_when_amounts_change(world):
    client = world.client("operator")
    payload = {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "4", "lend_limit": "1"}
    created = client.post("/api/quotas/", payload, format="json")
    assert created.status_code == 201, created.json()
    changed = client.patch(f"/api/quotas/{created.json()['id']}/", {"own": "6"}, format="json")
    assert changed.status_code == 200 and changed.json()["lend_limit"] == "1.000", changed.json()
