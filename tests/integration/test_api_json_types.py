"""JSON bodies keep to the types the schema states: what DRF would coerce ("5" as an integer, 0 as a string or a
boolean, {} as a list) is a 400 naming the field, and nothing is written. The cases are schemathesis'
"schema-violating request accepted" findings (`st run -c all`, issue 14). Amounts (GPUs, quotas) take what people
write: a JSON number or a decimal string (issue 27), never a boolean, list, object, NaN or infinity."""
import json
from decimal import Decimal

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
    ("patch", "/api/quotas/{quota}/", {"own": "3", "borrowed": True}, "borrowed"),
    ("patch", "/api/quotas/{quota}/", {"own": [3]}, "own"),
    ("post", "/api/quotas/", {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": {"n": 2}},
     "own"),
    ("post", "/api/jobs/", "job:gpus=true", "gpus"),
    ("post", "/api/jobs/", "job:gpus=[1]", "gpus"),
    ("post", "/api/jobs/", "job:gpus={}", "gpus"),
    ("post", "/api/jobs/", "job:gpus=1.5", "gpus"),  # a fraction of one GPU, or whole GPUs: the rule stays
    ("post", "/api/jobs/", "job:gpus=0.0005", "gpus"),  # thousandths, as "0.0005" is refused
    ("post", "/api/jobs/", "job:gpus=-1", "gpus"),
    ("post", "/api/inference-services/", {"name": "ranker", "department": "ml-search", "gpus_per_replica": False},
     "gpus_per_replica"),
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
    elif isinstance(body, str) and body.startswith("job:gpus="):
        body = world.job_payload(gpus=json.loads(body.removeprefix("job:gpus=")))
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


@pytest.mark.parametrize("gpus, stored", [(0.5, "0.5"), (2, "2"), (1, "1"), (0.25, "0.25"), (2.0, "2"), ("0.5", "0.5"),
                                          ("2", "2")])
def test_gpus_are_a_json_number_or_a_decimal_string(world, gpus, stored):
    from scheduler.models import TrainingJob

    response = world.client("member").post("/api/jobs/", world.job_payload(gpus=gpus), format="json")
    assert response.status_code == 201, response.content
    assert Decimal(response.json()["gpus"]) == Decimal(stored)  # answered as a decimal string, as before
    assert TrainingJob.objects.get(pk=response.json()["id"]).gpus == Decimal(stored)


def test_every_gpu_amount_takes_a_number(world):
    client = world.client("operator")
    ids = _ids(world)
    quota = client.patch(f"/api/quotas/{ids['quota']}/", {"own": 3, "borrowed": 0.5}, format="json")
    assert quota.status_code == 200, quota.content
    assert (quota.json()["own"], quota.json()["borrowed"]) == ("3.000", "0.500")
    created = client.post("/api/quotas/", {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40",
                                           "own": 2, "borrowed": 0}, format="json")
    assert created.status_code == 201, created.content
    service = client.post("/api/inference-services/", {"name": "ranker", "department": "ml-search",
                                                       "gpu_model": "T4", "gpus_per_replica": 0.5}, format="json")
    assert service.status_code == 201, service.content
    assert service.json()["gpus_per_replica"] == "0.500"


@pytest.mark.parametrize("text", ['{"gpus": NaN}', '{"gpus": Infinity}', '{"gpus": -Infinity}'])
def test_nan_and_infinity_are_refused(world, text):
    body = json.dumps(world.job_payload(gpus=0))[:-1] + ", " + text[1:]  # the same body, gpus last
    before = world.snapshot()
    response = world.client("member").post("/api/jobs/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert world.snapshot() == before


@pytest.mark.parametrize("value", [float("nan"), float("inf"), True])
def test_the_gpu_field_refuses_what_json_numbers_are_not(value):
    from rest_framework.exceptions import ValidationError

    from scheduler.api.serializers import GPUsField

    with pytest.raises(ValidationError):
        GPUsField(max_digits=6, decimal_places=3).run_validation(value)


def test_the_schema_says_number_or_string_for_requests_and_string_for_responses():
    from drf_spectacular.generators import SchemaGenerator

    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    gpus = schemas["TrainingJobInputRequest"]["properties"]["gpus"]["oneOf"]
    assert [branch["type"] for branch in gpus] == ["number", "number", "string"]
    for component, field in [("QuotaRequest", "own"), ("PatchedQuotaAmountsRequest", "borrowed"),
                             ("InferenceServiceRequest", "gpus_per_replica")]:
        assert [b["type"] for b in schemas[component]["properties"][field]["oneOf"]] == ["number", "string"]
    assert schemas["Quota"]["properties"]["own"]["type"] == "string"
