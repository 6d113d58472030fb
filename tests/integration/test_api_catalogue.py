"""GPU models and frameworks with their certifications."""
import pytest

from core.models import GPUModel
from tests.conftest import listed

pytestmark = pytest.mark.django_db


def test_operator_creates_a_gpu_model(world):
    response = world.client("operator").post("/api/gpu-models/", {"name": "H100", "memory_gib": 80}, format="json")
    assert response.status_code == 201, response.json()
    assert GPUModel.objects.get(name="H100").memory_gib == 80


@pytest.mark.parametrize(
    "payload",
    [
        {"name": "cpu", "memory_gib": 16},
        {"name": "CPU", "memory_gib": 16},
        {"name": "memory", "memory_gib": 16},
        {"name": "T4", "memory_gib": 16},
        {"name": "H100", "memory_gib": 0},
        {"name": "H100", "memory_gib": -80},
    ],
    ids=["cpu", "CPU", "memory", "duplicate", "zero-memory", "negative-memory"],
)
def test_bad_gpu_model_is_rejected_and_writes_nothing(world, payload):
    before = world.snapshot()
    response = world.client("operator").post("/api/gpu-models/", payload, format="json")
    taken = payload["name"] == "T4"  # a name already taken is a conflict (409), the rest bad input (400)
    assert response.status_code == (409 if taken else 400), response.json()
    assert response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


@pytest.mark.parametrize("method", ["patch", "put"])
@pytest.mark.parametrize("name", ["cpu", "Memory", "A100", "P40-24G"])
def test_gpu_model_cannot_be_renamed(world, method, name):
    p40 = world.gpu_models["P40"]
    before = world.snapshot()
    payload = {"name": name, "memory_gib": 24}
    response = getattr(world.client("operator"), method)(f"/api/gpu-models/{p40.pk}/", payload, format="json")
    reserved = name.lower() in ("cpu", "memory")  # bad input; a taken name or a rename conflicts with the state
    assert response.status_code == (400 if reserved else 409), response.content
    assert "name" in response.json()["extra"]["fields"]
    assert world.snapshot() == before


def test_gpu_model_in_use_cannot_be_deleted(world):
    before = world.snapshot()
    response = world.client("operator").delete(f"/api/gpu-models/{world.gpu_models['T4'].pk}/")
    assert response.status_code == 409 and "still in use" in response.json()["message"]
    assert world.snapshot() == before


def test_in_use_answer_reads_no_relation_a_concurrent_request_may_have_deleted(world):
    """A fuzzer's two workers: the quota protecting the GPU model lost its department between Django's collection and
    the answer; the 409 must not follow quota -> department (that was a 500)."""
    from django.db.models import ProtectedError

    from core.api.errors import exception_handler
    from scheduler.models import Quota

    orphan = Quota(pk=10**9, department_id=10**9, gpu_model=world.gpu_models["T4"], own=1, borrowed=0)
    response = exception_handler(ProtectedError("in use", {orphan}), {})
    assert (response.status_code, response.data["message"]) == (409, "still in use by 1 quota")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", {"pytorch-2.1", "caffe-1.0"}),
        ("certified_on=T4", {"pytorch-2.1"}),
        ("certified_on=A100", {"pytorch-2.1"}),
        ("certified_on=P40", {"caffe-1.0"}),
        ("certified_on=H100", set()),
        ("name=caffe", {"caffe-1.0"}),
    ],
)
def test_filter_frameworks(world, query, expected):
    assert listed(world.client("member").get(f"/api/frameworks/?{query}"), "key") == expected


def test_operator_certifies_a_framework_and_jobs_may_use_it(world):
    caffe = world.frameworks["caffe-1.0"]
    member = world.client("member")
    payload = world.job_payload(framework="caffe-1.0", gpu_model="T4")
    assert member.post("/api/jobs/", payload, format="json").status_code == 400

    response = world.client("operator").patch(f"/api/frameworks/{caffe.pk}/", {"certified_on": ["P40", "T4"]}, format="json")
    assert response.status_code == 200, response.json()
    assert sorted(caffe.certified_on.values_list("name", flat=True)) == ["P40", "T4"]
    assert listed(member.get("/api/frameworks/?certified_on=T4"), "key") == {"pytorch-2.1", "caffe-1.0"}
    assert member.post("/api/jobs/", payload, format="json").status_code == 201


def test_patch_without_certifications_changes_nothing(world):
    caffe = world.frameworks["caffe-1.0"]
    before = world.snapshot()
    response = world.client("operator").patch(f"/api/frameworks/{caffe.pk}/", {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["certified_on"] == ["P40"]
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("method", "payload", "field"),
    [
        ("patch", {"certified_on": ["V100"]}, "certified_on"),
        ("patch", {"certified_on": "T4"}, "certified_on"),
        ("post", {"name": "pytorch", "version": "2.1", "certified_on": ["T4"]}, "non_field_errors"),
        ("post", {"name": "jax", "version": "0.4", "certified_on": ["V100"]}, "certified_on"),
        ("post", {"name": "jax", "version": "0.4"}, "certified_on"),
    ],
)
def test_bad_framework_input_is_rejected_and_writes_nothing(world, method, payload, field):
    url = f"/api/frameworks/{world.frameworks['caffe-1.0'].pk}/" if method == "patch" else "/api/frameworks/"
    before = world.snapshot()
    response = getattr(world.client("operator"), method)(url, payload, format="json")
    taken = field == "non_field_errors"  # pytorch 2.1 exists already: a conflict
    assert response.status_code == (409 if taken else 400), response.content
    assert field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before
