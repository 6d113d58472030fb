"""The decision log: who sees which decisions, and filters."""
import pytest

from core.models import Decision
from tests.conftest import listed

pytestmark = pytest.mark.django_db


@pytest.fixture
def decisions(world):
    search, ads = world.departments["ml-search"], world.departments["ml-ads"]
    rows = {
        "search-job1": dict(kind="pending", subject="job:1", department=search),
        "search-job10": dict(kind="preemption", subject="job:10", department=search),
        "ads-job2": dict(kind="admission", subject="job:2", department=ads),
        "cluster-lending": dict(kind="lending", subject="node:t4-0", department=None),
    }
    return {key: Decision.objects.create(reason="test", message=key, **row).pk for key, row in rows.items()}


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("member", {"search-job1", "search-job10", "cluster-lending"}),
        ("dept_admin", {"search-job1", "search-job10", "cluster-lending"}),
        ("outsider", {"ads-job2", "cluster-lending"}),
        ("operator", {"search-job1", "search-job10", "ads-job2", "cluster-lending"}),
    ],
)
def test_users_see_their_departments_and_cluster_wide_decisions(world, decisions, role, expected):
    client = world.client(role)
    assert listed(client.get("/api/decisions/")) == {decisions[key] for key in expected}
    for key, pk in decisions.items():
        assert client.get(f"/api/decisions/{pk}/").status_code == (200 if key in expected else 404)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("subject=job:1", {"search-job1"}),
        ("subject_prefix=job:1", {"search-job1", "search-job10"}),
        ("subject_prefix=node:", {"cluster-lending"}),
        ("kind=lending", {"cluster-lending"}),
        ("kind=admission&subject_prefix=job:", {"ads-job2"}),
        ("department=ml-search", {"search-job1", "search-job10"}),
        ("subject=job:3", set()),
        ("q=JOB1", {"search-job1", "search-job10"}),  # text in message, subject or reason, any case
        ("q=node:t4", {"cluster-lending"}),
    ],
)
def test_operator_filters_decisions(world, decisions, query, expected):
    assert listed(world.client("operator").get(f"/api/decisions/?{query}")) == {decisions[key] for key in expected}


def test_member_filters_within_what_they_see(world, decisions):
    assert listed(world.client("member").get("/api/decisions/?subject_prefix=job:")) == {
        decisions["search-job1"], decisions["search-job10"]
    }


def test_an_unknown_decision_kind_filter_is_400(world, decisions):
    response = world.client("operator").get("/api/decisions/?kind=whim")
    assert response.status_code == 400 and "kind" in response.json()["extra"]["fields"]


def test_decisions_are_read_only(world, decisions):
    before = world.snapshot()
    client = world.client("operator")
    assert client.post("/api/decisions/", {"kind": "lending"}, format="json").status_code == 405
    assert client.delete(f"/api/decisions/{decisions['search-job1']}/").status_code == 405
    assert world.snapshot() == before
