"""Nodes and resource groups: read-only inventory with filters."""
import pytest

from tests.conftest import listed

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", {"t4-0", "t4-1", "a100-0", "cpu-0"}),
        ("state=online-normal", {"t4-1", "cpu-0"}),
        ("state=online-normal&state=offline-normal", {"t4-0", "t4-1", "a100-0", "cpu-0"}),
        ("state=offline-unnormal", set()),
        ("pool=fixed", {"t4-0"}),
        ("pool=colocation", {"t4-1", "a100-0", "cpu-0"}),
        ("resource_group=t4", {"t4-0", "t4-1"}),
        ("gpu_model=A100", {"a100-0"}),
        ("min_gpus=2", {"t4-0", "t4-1", "a100-0"}),
        ("min_gpus=3", {"a100-0"}),
        ("gpu_model=T4&state=offline-normal", {"t4-0"}),
    ],
)
def test_filter_nodes(world, query, expected):
    assert listed(world.client("member").get(f"/api/nodes/?{query}"), "name") == expected


@pytest.mark.parametrize("query", ["state=asleep", "pool=spot", "min_gpus=many", "min_gpus=-1",
                                   # present but empty: the schema admits no empty choice, number or boolean
                                   "state=", "state=online-normal&state=", "pool=", "min_gpus=", "pinned=",
                                   "resource_group=t4%00"])  # text holds no NUL (the schema's pattern says so)
def test_an_invalid_node_filter_is_400(world, query):
    response = world.client("member").get(f"/api/nodes/?{query}")
    assert response.status_code == 400, response.json()
    assert query.split("=")[0] in response.json()["extra"]["fields"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [("", {"t4": 2, "a100": 1, "cpu": 1}), ("gpu_model=T4", {"t4": 2}), ("hardware_class=CPU", {"cpu": 1})],
)
def test_filter_resource_groups_with_node_counts(world, query, expected):
    rows = world.client("outsider").get(f"/api/resource-groups/?{query}").json()["results"]
    assert {row["name"]: row["node_count"] for row in rows} == expected


@pytest.mark.parametrize("url", ["/api/nodes/", "/api/resource-groups/"])
def test_inventory_is_read_only_even_for_operators(world, url):
    before = world.snapshot()
    assert world.client("operator").post(url, {"name": "x"}, format="json").status_code == 405
    assert world.snapshot() == before


@pytest.mark.parametrize("query, status", [("pinned=true", 200), ("pinned=False", 200), ("pinned=null", 400),
                                           ("pinned=yes", 400)])
def test_boolean_filters_take_true_or_false_only(world, query, status):
    assert world.client("member").get(f"/api/nodes/?{query}").status_code == status
    assert world.client("member").get(f"/api/forecast-models/?{query.replace('pinned', 'usable')}").status_code == status


def test_an_empty_text_filter_is_no_filter(world):
    assert listed(world.client("member").get("/api/nodes/?gpu_model="), "name") == {"t4-0", "t4-1", "a100-0", "cpu-0"}


def test_the_api_reads_json_only(world):
    response = world.client("operator").post("/api/departments/", {"name": "ml-form"}, format="multipart")
    assert response.status_code == 415
