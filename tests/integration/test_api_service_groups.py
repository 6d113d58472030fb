"""Services whose replica is a group of pods, through the REST API: what is accepted, and the groups that can never be
placed refused with a 400 naming the field, nothing written (docs/concepts/service-groups.md#the-group)."""
import pytest

from colocation.models import InferenceService, ServiceGroup

pytestmark = pytest.mark.django_db

GPU_THRESHOLD = {"metric": "gpu", "min_rate": 0.2, "expect_rate": 0.5, "max_rate": 0.8}


def _payload(**overrides) -> dict:
    """A group of 2 pods of 2 T4 each: the world's two T4 nodes (one block) hold it."""
    payload = {"name": "llm", "department": "ml-search", "gpu_model": "T4", "replicas": 1, "min_replicas": 1,
               "max_replicas": 2, "gpus_per_replica": "2", "group_size": 2, "startup_s": 300,
               "exclusive_topology": True, "max_surge": 1, "max_unavailable": 0, "thresholds": [GPU_THRESHOLD]}
    payload.update(overrides)
    return payload


def test_a_group_service_is_created_with_its_group_settings(world):
    response = world.client("dept_admin").post("/api/inference-services/", _payload(), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert {k: body[k] for k in ("group_size", "startup_s", "exclusive_topology", "max_surge", "max_unavailable",
                                 "groups", "unready_gpu_seconds")} == \
        {"group_size": 2, "startup_s": 300, "exclusive_topology": True, "max_surge": 1, "max_unavailable": 0,
         "groups": [], "unready_gpu_seconds": 0.0}


def test_a_group_service_keeps_its_groups_when_a_container_restarts_in_place_with_restart_policy_none(world):
    client = world.client("dept_admin")
    response = client.post("/api/inference-services/", _payload(group_restart_policy="None"), format="json")
    assert response.status_code == 201 and response.json()["group_restart_policy"] == "None", response.json()
    response = client.patch(f"/api/inference-services/{response.json()['id']}/",
                            {"group_restart_policy": "RecreateGroupOnPodRestart"}, format="json")
    assert response.status_code == 200, response.json()
    assert InferenceService.objects.get(name="llm").group_restart_policy == "RecreateGroupOnPodRestart"


def test_a_service_without_group_settings_is_one_pod_per_replica(world):
    payload = _payload(gpus_per_replica="0.5")
    for key in ("group_size", "startup_s", "exclusive_topology", "max_surge", "max_unavailable"):
        payload.pop(key)
    response = world.client("dept_admin").post("/api/inference-services/", payload, format="json")
    assert response.status_code == 201, response.json()
    service = InferenceService.objects.get(name="llm")
    assert (service.group_size, service.max_surge, service.max_unavailable, service.group_restart_policy) == \
        (1, 0, 1, "RecreateGroupOnPodRestart")


BAD_GROUPS = [
    ({"group_size": 3}, "group_size"),  # three pods of 2 T4: the block has two nodes of 2
    ({"group_size": 2, "cpu_milli_per_replica": 40000}, "group_size"),  # no T4 node has 40 cores
    ({"group_size": 2, "gpus_per_replica": "0.5"}, "gpus_per_replica"),  # a group's pods ask for whole GPUs
    ({"gpu_model": "P40"}, "group_size"),  # no P40 node at all
    ({"max_surge": 0, "max_unavailable": 0}, "max_unavailable"),  # a rollout could never progress
    ({"group_size": 0}, "group_size"),
    ({"group_restart_policy": "Default"}, "group_restart_policy"),  # LWS's deprecated name for None: not offered
    ({"group_restart_policy": "none"}, "group_restart_policy"),  # spelled as LWS spells it
]


@pytest.mark.parametrize(("overrides", "field"), BAD_GROUPS, ids=[str(o) for o, _ in BAD_GROUPS])
def test_a_group_that_can_never_be_placed_is_refused_and_nothing_written(world, overrides, field):
    before = world.snapshot()
    response = world.client("dept_admin").post("/api/inference-services/", _payload(**overrides), format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


def test_a_change_that_makes_the_group_unplaceable_is_refused(world):
    assert world.client("dept_admin").post("/api/inference-services/", _payload(), format="json").status_code == 201
    service = InferenceService.objects.get(name="llm")
    before = world.snapshot()
    response = world.client("dept_admin").patch(f"/api/inference-services/{service.pk}/", {"group_size": 5},
                                                format="json")
    assert response.status_code == 400 and "group_size" in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


def test_the_service_shows_its_groups(world):
    service = world.service(name="llm", gpu_model=world.gpu_models["T4"], group_size=2, gpus_per_replica=2)
    ServiceGroup.objects.create(service=service, index=0, leader="llm-0", nodes=["t4-1", "t4-0"], pods_ready=2,
                                ready=True, restarts=1)
    body = world.client("member").get(f"/api/inference-services/{service.pk}/").json()
    assert [(g["index"], g["leader"], g["nodes"], g["ready"], g["restarts"]) for g in body["groups"]] == \
        [(0, "llm-0", ["t4-1", "t4-0"], True, 1)]
