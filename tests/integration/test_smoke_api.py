import pytest

pytestmark = pytest.mark.django_db


def test_member_submits_and_cancels(world):
    client = world.client("member")
    created = client.post("/api/jobs/", world.job_payload(), format="json")
    assert created.status_code == 201, created.json()
    job_id = created.json()["id"]
    assert client.get(f"/api/jobs/{job_id}/").json()["status"] == "pending"
    cancelled = client.post(f"/api/jobs/{job_id}/cancel/")
    assert cancelled.json()["status"] == "cancelled"
    again = client.post(f"/api/jobs/{job_id}/cancel/")
    assert again.status_code == 400 and "already cancelled" in again.json()["message"] + str(again.json()["extra"])
