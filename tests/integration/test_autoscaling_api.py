"""The autoscaling policy of an inference service through the API (SPEC §3 rules as field errors, nothing
written on a refusal) and its scaling history."""
from datetime import timedelta

import pytest
from django.utils import timezone

from colocation.models import InferenceService, ScalingSchedule
from scheduler.models import Decision
from scheduler.services import decision_record

pytestmark = pytest.mark.django_db

GPU = {"metric": "gpu", "min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}
BUSY = {"metric": "busy", "min_rate": 0.6, "expect_rate": 0.7, "max_rate": 0.8}
NIGHTLY = {"weekdays": "mon-fri", "start": "08:00", "end": "20:00", "min_replicas": 4}
POLICY = {"name": "ranker", "department": "ml-search", "gpu_model": "T4", "replicas": 3, "min_replicas": 2,
          "max_replicas": 10, "thresholds": [BUSY, GPU], "schedules": [NIGHTLY], "peak_start": "09:00",
          "peak_end": "18:00", "scale_to_zero_idle_min": 30, "busy_signal": True, "priority": 5}


def create(world, role: str = "dept_admin", **overrides):
    return world.client(role).post("/api/inference-services/", {**POLICY, **overrides}, format="json")


def test_a_full_policy_round_trips(world):
    response = create(world)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["thresholds"] == [BUSY, GPU] and body["schedules"] == [NIGHTLY]
    assert (body["peak_start"], body["peak_end"], body["scale_to_zero_idle_min"]) == ("09:00", "18:00", 30)
    assert body["busy_signal"] and body["priority"] == 5 and body["replicas_changed_at"] is None
    assert world.client("member").get(f"/api/inference-services/{body['id']}/").json() == body


def test_zero_replicas_only_with_scale_to_zero(world):
    assert create(world, replicas=0).status_code == 201
    response = create(world, name="other", replicas=0, scale_to_zero_idle_min=None)
    assert response.status_code == 400 and "replicas" in response.json()["extra"]["fields"]


@pytest.mark.parametrize("overrides, field, says", [
    ({"thresholds": [{**GPU, "min_rate": 0.6}]}, "thresholds", "min_rate < expect_rate"),
    ({"thresholds": [{**GPU, "min_rate": 0.0}]}, "thresholds", "need 0 < min_rate"),
    ({"thresholds": [{**GPU, "expect_rate": 0.8}]}, "thresholds", "expect_rate < max_rate"),
    ({"thresholds": [{**GPU, "max_rate": 1.2}]}, "thresholds", "1"),
    ({"thresholds": [GPU]}, "thresholds", "busy signal needs a busy threshold"),
    ({"peak_end": None}, "peak_end", "both ends"),
    ({"peak_start": "25:00"}, "peak_start", ""),
    ({"scale_to_zero_idle_min": 0}, "scale_to_zero_idle_min", ""),
    ({"schedules": [{**NIGHTLY, "weekdays": "mon-funday"}]}, "schedules", "funday"),
    ({"schedules": [{**NIGHTLY, "min_replicas": 11}]}, "schedules", "above max_replicas 10"),
    ({"schedules": [{**NIGHTLY, "end": "08:00"}]}, "schedules", "empty"),
    ({"min_replicas": 12}, "min_replicas", "above max_replicas"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_policy_is_a_400_naming_the_field_and_writes_nothing(world, overrides, field, says):
    before = Decision.objects.count()
    response = create(world, **overrides)
    assert response.status_code == 400, response.json()
    fields = response.json()["extra"]["fields"]
    assert field in fields and says in str(fields[field])
    assert not InferenceService.objects.filter(name="ranker").exists() and Decision.objects.count() == before


def test_patch_replaces_schedules_and_refuses_without_changing_anything(world):
    service_id = create(world).json()["id"]
    client = world.client("dept_admin")
    weekend = {"weekdays": "sat,sun", "start": "22:00", "end": "02:00", "min_replicas": 2}
    response = client.patch(f"/api/inference-services/{service_id}/", {"schedules": [weekend]}, format="json")
    assert response.status_code == 200 and response.json()["schedules"] == [weekend]
    bad = client.patch(f"/api/inference-services/{service_id}/",
                       {"schedules": [{**weekend, "weekdays": "8"}], "priority": 9}, format="json")
    assert bad.status_code == 400 and "schedules" in bad.json()["extra"]["fields"]
    service = InferenceService.objects.get(pk=service_id)
    assert service.priority == 5 and list(ScalingSchedule.objects.filter(service=service).values_list(
        "weekdays", flat=True)) == ["sat,sun"]
    off = client.patch(f"/api/inference-services/{service_id}/", {"busy_signal": False, "thresholds": [GPU]},
                       format="json")
    assert off.status_code == 200 and off.json()["thresholds"] == [GPU]


def test_members_read_the_policy_but_cannot_change_it(world):
    service_id = create(world).json()["id"]
    member = world.client("member")
    assert member.get(f"/api/inference-services/{service_id}/").status_code == 200
    assert member.patch(f"/api/inference-services/{service_id}/", {"priority": 1}, format="json").status_code == 403
    assert create(world, role="member", name="mine").status_code == 403


def test_scaling_history_newest_first_filtered_by_kind_and_time(world):
    service = InferenceService.objects.get(pk=create(world).json()["id"])
    subject = f"service:{service.name}"
    for reason in ("scale-out", "scale-in"):
        decision_record(kind=Decision.Kind.SCALING, subject=subject, reason=reason, message=f"{service.name} {reason}",
                        department=service.department, data={"current": 2, "target": 3})
    decision_record(kind=Decision.Kind.ALERT, subject=subject, reason="short", message=f"{service.name} short",
                    department=service.department)
    decision_record(kind=Decision.Kind.SCALING, subject="service:other", reason="scale-out", message="other")
    url = f"/api/inference-services/{service.pk}/scaling/"
    client = world.client("member")
    body = client.get(url).json()
    assert [d["reason"] for d in body["results"]] == ["short", "scale-in", "scale-out", "service-created"]
    assert [d["reason"] for d in client.get(url, {"kind": "alert"}).json()["results"]] == ["short"]
    later = (timezone.now() + timedelta(minutes=1)).isoformat()
    assert client.get(url, {"since": later}).json()["results"] == []
    for params, field in (({"kind": "lending"}, "kind"), ({"since": later, "until": later}, "until"),
                          ({"since": "yesterday"}, "since")):
        response = client.get(url, params)
        assert response.status_code == 400 and field in response.json()["extra"]["fields"]
    assert world.client("outsider").get(url).status_code == 404
