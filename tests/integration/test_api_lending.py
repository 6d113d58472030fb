"""Operators move and pin nodes and set lending thresholds; bad requests change nothing."""
import pytest

from colocation.models import NodeTransition
from core.models import Decision

pytestmark = pytest.mark.django_db


def post(world, node: str, action: str, body=None):
    return world.client("operator").post(f"/api/nodes/{world.nodes[node].pk}/{action}/", body, format="json")


def test_operator_lends_a_node_and_sees_the_transition(world):
    response = post(world, "t4-1", "lend")
    assert response.status_code == 202
    assert response.json()["transition"]["direction"] == "online-to-offline"
    assert response.json()["transition"]["step"] == "planned" and response.json()["state"] == "online-normal"
    decision = Decision.objects.get(subject="node:t4-1", kind="lending")
    assert decision.reason == "operator-lend" and "otto" in decision.message
    listed = world.client("member").get("/api/transitions/", {"node": "t4-1", "status": "open"}).json()
    assert [t["node"] for t in listed["results"]] == ["t4-1"]


@pytest.mark.parametrize(
    ("node", "action", "expected"),
    [
        ("t4-0", "lend", "fixed"),  # fixed training pool: never lent
        ("t4-0", "take-back", "fixed"),
        ("t4-1", "take-back", "online-normal"),  # not lent: it already serves inference
        ("a100-0", "lend", "offline-normal"),  # already lent (offline)
    ],
)
def test_illegal_moves_are_rejected_and_change_nothing(world, node, action, expected):
    before = world.snapshot()
    response = post(world, node, action)
    assert response.status_code == 409  # the node's state refuses it
    assert expected in response.json()["message"] and response.json()["extra"]["fields"]["node"]
    assert world.snapshot() == before


def test_a_node_in_a_transition_takes_no_second_one(world):
    assert post(world, "a100-0", "take-back").status_code == 202
    before = world.snapshot()
    again = post(world, "a100-0", "take-back")
    assert again.status_code == 409 and "already in a transition" in again.json()["message"]
    assert world.snapshot() == before
    assert NodeTransition.objects.filter(node=world.nodes["a100-0"], status="open").count() == 1


def test_pinned_nodes_are_not_moved_until_unpinned(world):
    assert post(world, "t4-1", "pin", {"pinned": True}).json()["pinned"] is True
    refused = post(world, "t4-1", "lend")
    assert refused.status_code == 409 and "pinned" in refused.json()["message"]
    assert post(world, "t4-1", "pin", {"pinned": False}).json()["pinned"] is False
    assert post(world, "t4-1", "lend").status_code == 202


def test_pin_needs_a_boolean(world):
    before = world.snapshot()
    assert post(world, "t4-1", "pin", {"pinned": "sometimes"}).status_code == 400
    assert world.snapshot() == before


@pytest.mark.parametrize(
    "body",
    [{"min_rate": 0.7}, {"max_rate": 0.5}, {"expect_rate": 1.5}, {"min_rate": -0.1}, {"lending": "maybe"}],
)
def test_bad_thresholds_are_rejected_and_change_nothing(world, body):
    group = world.groups["t4"]
    before = world.snapshot()
    response = world.client("operator").patch(f"/api/resource-groups/{group.pk}/", body, format="json")
    assert response.status_code == 400, response.json()
    assert world.snapshot() == before


def test_operator_sets_thresholds_and_it_is_recorded(world):
    group = world.groups["t4"]
    body = {"min_rate": 0.3, "expect_rate": 0.5, "max_rate": 0.9, "lending": False}
    response = world.client("operator").patch(f"/api/resource-groups/{group.pk}/", body, format="json")
    assert response.status_code == 200
    assert {k: response.json()[k] for k in body} == body
    assert response.json()["fixed_pool_nodes"] == 1 and response.json()["node_count"] == 2
    assert Decision.objects.get(subject="group:t4").reason == "thresholds-changed"
