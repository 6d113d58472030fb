"""The autoscaling policy of an inference service through the API (the rules of docs/concepts/autoscaling.md#the-policy as field
errors, nothing written on a refusal) and its scaling history."""
from datetime import timedelta

import pytest
from django.utils import timezone

from colocation.models import InferenceService, ScalingSchedule, ScalingThreshold
from core.decisions import decision_record
from core.models import Decision

pytestmark = pytest.mark.django_db

GPU = {"metric": "gpu", "min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}
BUSY = {"metric": "busy", "min_rate": 0.6, "expect_rate": 0.7, "max_rate": 0.8}
NIGHTLY = {"weekdays": "mon-fri", "start": "08:00", "end": "20:00", "min_replicas": 4}
POLICY = {"name": "ranker", "department": "ml-search", "gpu_model": "T4", "replicas": 3, "min_replicas": 2,
          "max_replicas": 10, "thresholds": [BUSY, GPU], "schedules": [NIGHTLY], "peak_start": "09:00",
          "peak_end": "18:00", "scale_to_zero_idle_min": 30, "busy_signal": True, "priority": 5}

SLO = {"slo_ttft_s": 1.0, "slo_tpot_s": 0.05, "slo_min_gain": 0.1}  # sized to the request SLO


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


@pytest.mark.parametrize("overrides, path, says", [
    ({"thresholds": [BUSY, {**GPU, "min_rate": 0.6}]}, ("thresholds", "1", "min_rate"), "need min_rate < expect_rate"),
    ({"thresholds": [BUSY, {**GPU, "min_rate": 0.0}]}, ("thresholds", "1", "min_rate"), "must be above 0"),
    ({"thresholds": [BUSY, {**GPU, "expect_rate": 0.8}]}, ("thresholds", "1", "expect_rate"), "need expect_rate < max_rate"),
    ({"thresholds": [BUSY, {**GPU, "max_rate": 1.2}]}, ("thresholds", "1", "max_rate"), "1"),
    ({"thresholds": [BUSY, GPU, {**GPU, "min_rate": 0.2}]}, ("thresholds", "2", "metric"), "appears twice"),
    ({"thresholds": [GPU]}, ("busy_signal",), "busy signal needs a busy threshold"),
    ({"peak_end": None}, ("peak_end",), "both ends"),
    ({"peak_start": "25:00"}, ("peak_start",), "format"),
    ({"scale_to_zero_idle_min": 0}, ("scale_to_zero_idle_min",), ""),
    ({"schedules": [{**NIGHTLY, "weekdays": "mon-funday"}]}, ("schedules", "0", "weekdays"), "funday"),
    ({"schedules": [NIGHTLY, {**NIGHTLY, "weekdays": "8"}]}, ("schedules", "1", "weekdays"), "8"),
    ({"schedules": [{**NIGHTLY, "min_replicas": 11}]}, ("schedules", "0", "min_replicas"), "above max_replicas 10"),
    ({"schedules": [{**NIGHTLY, "end": "08:00"}]}, ("schedules", "0", "end"), "empty"),
    ({"min_replicas": 12}, ("min_replicas",), "above max_replicas"),
    ({"replicas": 0, "scale_to_zero_idle_min": None}, ("replicas",), "0 needs scale_to_zero_idle_min"),
    ({"ttft_p99_target_s": 0}, ("ttft_p99_target_s",), "0.001"),
    ({"tpot_p99_target_s": -0.05}, ("tpot_p99_target_s",), ""),
    ({"kv_cache_target": 1.5}, ("kv_cache_target",), "1"),
    ({"queue_target": 0}, ("queue_target",), ""),
    ({"slo_ttft_s": 0}, ("slo_ttft_s",), "0.001"),
    ({"slo_tpot_s": -0.05}, ("slo_tpot_s",), ""),
    ({**SLO, "slo_min_gain": 1.5}, ("slo_min_gain",), "1"),
    ({**SLO, "slo_min_gain": 0}, ("slo_min_gain",), "0.001"),
    ({"slo_min_gain": 0.1}, ("slo_min_gain",), "needs slo_ttft_s and slo_tpot_s"),
    ({**SLO, "slo_tpot_s": None}, ("slo_min_gain",), "needs slo_tpot_s too"),
    ({**SLO, "thresholds": [BUSY]}, ("slo_min_gain",), "give a gpu threshold"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_bad_policy_is_a_400_naming_the_field_and_writes_nothing(world, overrides, path, says):
    before = (Decision.objects.count(), ScalingThreshold.objects.count(), ScalingSchedule.objects.count())
    response = create(world, **overrides)
    assert response.status_code == 400, response.json()
    messages = response.json()["extra"]["fields"]
    for step in path:  # nested like DRF's list errors: {"thresholds": {"1": {"min_rate": [...]}}}
        messages = messages[step]
    assert isinstance(messages, list) and says in " ".join(messages), response.json()
    assert not InferenceService.objects.filter(name="ranker").exists()
    assert (Decision.objects.count(), ScalingThreshold.objects.count(), ScalingSchedule.objects.count()) == before


def test_every_bad_field_is_named_in_one_400(world):
    response = create(world, min_replicas=12, thresholds=[{**GPU, "min_rate": 0.7}], busy_signal=True,
                      schedules=[{**NIGHTLY, "weekdays": "someday"}])
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    assert set(fields) == {"min_replicas", "thresholds", "busy_signal", "schedules"}
    assert fields["thresholds"] == {"0": {"min_rate": ["need min_rate < expect_rate, got 0.7 ≥ 0.6"]}}
    assert list(fields["schedules"]["0"]) == ["weekdays"]


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


@pytest.mark.parametrize("change, path", [
    ({"schedules": [{"weekdays": "*", "end": "08:00", "min_replicas": 0}]}, ("schedules", "0", "start")),
    ({"thresholds": [{"metric": "gpu", "min_rate": 0.3, "max_rate": 0.8}]}, ("thresholds", "0", "expect_rate")),
])
def test_a_patch_names_a_field_missing_from_a_replaced_item_and_writes_nothing(world, change, path):
    """A PATCH replaces the list whole, so each item needs every field (a fuzzed schedule without its start was a 500)."""
    service_id = create(world).json()["id"]
    response = world.client("dept_admin").patch(f"/api/inference-services/{service_id}/", {**change, "priority": 9},
                                                format="json")
    assert response.status_code == 400, response.content
    fields = response.json()["extra"]["fields"]
    assert fields[path[0]][path[1]][path[2]] == ["This field is required."]
    service = InferenceService.objects.get(pk=service_id)
    assert service.priority == 5 and ScalingSchedule.objects.filter(service=service).count() == 1
    assert ScalingThreshold.objects.filter(service=service).count() == 2


def test_who_may_read_and_change_the_policy(world):
    service_id = create(world).json()["id"]
    url = f"/api/inference-services/{service_id}/"
    change = {"priority": 1, "schedules": []}
    assert world.client("member").get(url).status_code == 200
    assert world.client("member").patch(url, change, format="json").status_code == 403
    assert create(world, role="member", name="mine").status_code == 403
    assert world.client("outsider").patch(url, change, format="json").status_code == 404  # not even visible
    assert world.client("anonymous").get(url).status_code == 401
    assert ScalingSchedule.objects.filter(service_id=service_id).count() == 1
    assert world.client("operator").patch(url, change, format="json").status_code == 200
    assert create(world, role="operator", name="ops-made", department="ml-ads").status_code == 201
    assert InferenceService.objects.get(pk=service_id).priority == 1


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


def test_llm_serving_targets_round_trip_and_reach_the_policy(world):
    from colocation.autoscaler import scaling_policy
    from colocation.policy.serving import ServingTargets

    targets = {"ttft_p99_target_s": 0.5, "tpot_p99_target_s": 0.05, "kv_cache_target": 0.9, "queue_target": 4.0,
               **SLO}
    body = create(world, **targets).json()
    assert {k: body[k] for k in targets} == targets
    service = InferenceService.objects.get(pk=body["id"])
    assert scaling_policy(service).serving == ServingTargets(0.5, 0.05, 0.9, 4.0, slo_ttft_s=1.0, slo_tpot_s=0.05,
                                                             min_gain=0.1)
    sized = InferenceService.objects.get(pk=create(world, name="sized", **SLO).json()["id"])
    assert scaling_policy(sized).serving == ServingTargets(slo_ttft_s=1.0, slo_tpot_s=0.05, min_gain=0.1)
    assert scaling_policy(sized).serving.sizes_to_slo
    plain = InferenceService.objects.get(pk=create(world, name="plain").json()["id"])
    assert scaling_policy(plain).serving is None


def test_a_patch_that_would_leave_min_gain_without_its_slo_is_refused(world):
    """The stored fields count: dropping an SLO time under a stored min gain is a 400 on slo_min_gain."""
    service_id = create(world, **SLO).json()["id"]
    client = world.client("dept_admin")
    url = f"/api/inference-services/{service_id}/"
    bad = client.patch(url, {"slo_ttft_s": None, "priority": 9}, format="json")
    assert bad.status_code == 400, bad.json()
    assert bad.json()["extra"]["fields"] == {"slo_min_gain": ["sizing to the request SLO needs slo_ttft_s too"]}
    service = InferenceService.objects.get(pk=service_id)
    assert (service.slo_ttft_s, service.priority) == (1.0, 5)
    off = client.patch(url, {"slo_ttft_s": None, "slo_min_gain": None}, format="json")
    assert off.status_code == 200 and (off.json()["slo_ttft_s"], off.json()["slo_min_gain"]) == (None, None)
    assert client.patch(url, {"slo_min_gain": 0.2}, format="json").status_code == 400
    assert client.patch(url, {"slo_ttft_s": 2, "slo_min_gain": 0.2}, format="json").json()["slo_min_gain"] == 0.2


@pytest.mark.parametrize("fields", [{"slo_min_gain": 0.1}, {**SLO, "slo_tpot_s": None}, {**SLO, "slo_min_gain": 1.5},
                                    {"slo_ttft_s": 0.0}])
def test_the_database_refuses_an_slo_sizing_written_around_the_api(world, fields):
    from django.db import IntegrityError, transaction

    service = InferenceService.objects.get(pk=create(world).json()["id"])
    with pytest.raises(IntegrityError, match="service_slo_sizing_valid"), transaction.atomic():
        InferenceService.objects.filter(pk=service.pk).update(**fields)
