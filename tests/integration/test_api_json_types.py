"""JSON bodies keep to the types the schema states: what DRF would coerce ("5" as an integer, 0 as a string or a
boolean, {} as a list, a number as a decimal string) is a 400 naming the field, and nothing is written.
The cases are schemathesis' "schema-violating request accepted" findings (`st run -c all`, issue 14)."""
import pytest
from django.contrib.auth import get_user_model

from core.models import GPUModel
from scheduler.models import Quota


def _ids(world) -> dict:
    return {"department": world.departments["ml-search"].pk, "gpu_model": world.gpu_models["T4"].pk,
            "framework": world.frameworks["pytorch-2.1"].pk, "group": world.groups["t4"].pk,
            "node": world.nodes["t4-1"].pk,
            "quota": Quota.objects.get(department=world.departments["ml-search"], gpu_model__name="T4").pk}


@pytest.mark.parametrize("method, path, body, field", [
    ("post", "/api/departments/", {"name": "ml-new", "description": 0}, "description"),
    ("put", "/api/departments/{department}/", {"name": "ml-search", "description": 0}, "description"),
    ("post", "/api/gpu-models/", {"name": 0, "memory_gib": 1}, "name"),
    ("put", "/api/gpu-models/{gpu_model}/", {"name": 0, "memory_gib": 1}, "name"),
    ("post", "/api/gpu-models/", {"name": "H100", "memory_gib": "80"}, "memory_gib"),
    ("post", "/api/frameworks/", {"name": "jax", "version": "0.4", "certified_on": {}}, "certified_on"),
    ("patch", "/api/frameworks/{framework}/", {"certified_on": [0]}, "certified_on"),
    ("patch", "/api/quotas/{quota}/", {"own": "3", "borrowed": 0}, "borrowed"),
    ("post", "/api/quotas/", {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": 2},
     "own"),
    ("patch", "/api/resource-groups/{group}/", {"max_rate": False}, "max_rate"),
    ("post", "/api/nodes/{node}/pin/", {"pinned": 0}, "pinned"),
    ("post", "/api/inference-services/", {"name": "ranker", "department": "ml-search", "vertical": 0}, "vertical"),
    ("post", "/api/jobs/", "job:cpu_milli", "cpu_milli"),
    ("post", "/api/memberships/", {"user": 7, "department": "ml-search", "role": "member"}, "user"),
    # "" is no name, not null (DRF's form habit for relations): minLength 1 in the schema.
    ("post", "/api/inference-services/", {"name": "ranker", "department": "ml-search", "gpu_model": ""}, "gpu_model"),
    ("post", "/api/quotas/", {"department": "ml-search", "resource_kind": "cpu", "gpu_model": "", "own": "2"},
     "gpu_model"),
])
def test_a_wrong_json_type_is_a_field_error_and_changes_nothing(world, method, path, body, field):
    if body == "job:cpu_milli":
        body = world.job_payload(cpu_milli="4000")
    # Names the coerced numbers would find: [0] was GPU model "0", 7 user "7".
    GPUModel.objects.create(name="0", memory_gib=1)
    get_user_model().objects.create_user("7")
    before = world.snapshot()
    response = getattr(world.client("operator"), method)(path.format(**_ids(world)), body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["extra"]["fields"]) == [field]
    assert world.snapshot() == before


def test_a_wrong_type_is_named_beside_the_other_bad_fields(world):
    response = world.client("operator").post("/api/gpu-models/", {"name": 0, "memory_gib": 0}, format="json")
    assert response.status_code == 400
    assert set(response.json()["extra"]["fields"]) == {"name", "memory_gib"}


def test_the_right_types_still_pass(world):
    client = world.client("operator")
    assert client.post("/api/gpu-models/", {"name": "H100", "memory_gib": 80}, format="json").status_code == 201
    framework = world.frameworks["pytorch-2.1"].pk
    certified = client.patch(f"/api/frameworks/{framework}/", {"certified_on": ["T4", "H100"]}, format="json")
    assert certified.status_code == 200 and set(certified.json()["certified_on"]) == {"T4", "H100"}
    pinned = client.post(f"/api/nodes/{world.nodes['t4-1'].pk}/pin/", {"pinned": True}, format="json")
    assert pinned.status_code == 200
    changed = client.patch(f"/api/resource-groups/{world.groups['t4'].pk}/", {"max_rate": 1}, format="json")
    assert changed.status_code == 200, changed.content  # an integral number is a number
