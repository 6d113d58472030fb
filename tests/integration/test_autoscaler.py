"""The live inference autoscaler on the real database against the simulated cluster: scale-out and scale-in
applied to the ReplicaSet, skipped services recorded once, alerts (Decision, counter, the notifications app's
webhook delivery), priority across a group, forecasts, vertical recommendations, and the Celery entry point under the
cluster lock."""
import json
import secrets
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.backend import BackendError
from cluster.clock import VirtualClock, utc
from cluster.simulated import store
from colocation import autoscaler, controller, replicas
from colocation.loads import ProfileLoads
from colocation.models import InferenceService, ScalingThreshold
from colocation.policy.autoscaling import LoadMinute
from core.models import Decision
from notifications import tasks as notifications
from notifications.models import Delivery
from notifications.services import MAX_ATTEMPTS
from profiling.models import ServiceMinute
from tests.integration.livecluster import T0, scaling_lab

pytestmark = pytest.mark.django_db
MINUTE = 60


class Loads:
    """A LoadSource answering what the test says: per service, one utilization for the last `minutes`."""

    def __init__(self):
        self.by_service: dict[str, tuple[float, int]] = {}

    def set(self, service: str, gpu: float, minutes: int = 5) -> None:
        self.by_service[service] = (gpu, minutes)

    def recent(self, service, now):
        gpu, minutes = self.by_service.get(service.name, (None, 0))
        newest = now // MINUTE * MINUTE - MINUTE
        return tuple(LoadMinute(newest - i * MINUTE, service.replicas, gpu=gpu, qps=10.0)
                     for i in reversed(range(minutes)))


@pytest.fixture
def lab(world, settings):
    """World plus an online T4 node (t4-2) for room; lending off; a Redis namespace of its own."""
    clock = VirtualClock(T0)
    with scaling_lab(world, settings, clock=clock, prefix="test-autoscale") as (cluster, redis, namespace):
        yield world, cluster, clock, redis, namespace


def service(world, name: str, **fields) -> InferenceService:
    fields = {"gpu_model": world.gpu_models["T4"], "gpus_per_replica": Decimal("0.25"), "replicas": 2,
              "min_replicas": 2, "max_replicas": 8, **fields}
    return world.service(name=name, **fields)  # gpu thresholds 0.2 / 0.5 / 0.8


def tick(lab, loads, seconds: float = MINUTE, **kwargs):
    world, cluster, clock, redis, namespace = lab
    clock.advance(seconds)
    cluster.advance()
    kwargs.setdefault("forecasts", autoscaler.no_forecast)
    return autoscaler.autoscale_tick(backend=cluster, now=clock.now(), loads=loads, redis=redis, namespace=namespace,
                                     **kwargs)


def decisions(name: str, kind: str = Decision.Kind.SCALING) -> list[Decision]:
    return list(Decision.objects.filter(kind=kind, subject=f"service:{name}").order_by("id"))


def settle(lab, name: str) -> None:
    """Let new replicas start (a tick without loads) and the replica count age past the 3-minute filter."""
    tick(lab, Loads(), seconds=31)
    InferenceService.objects.filter(name=name).update(replicas_changed_at=utc(lab[2].now() - 600))


def test_scale_out_then_in_through_the_replicaset_with_the_policy_sentence(lab):
    world, cluster, clock, _, _ = lab
    api = service(world, "ranker")
    loads = Loads()
    report = tick(lab, loads)  # creates the ReplicaSet; its pods start
    assert report.decisions["ranker"] == "skip-scaling"
    loads.set("ranker", 0.9, minutes=2)
    settle(lab, "ranker")
    report = tick(lab, loads)
    assert report.scaled == {"ranker": (2, 4)}  # ceil(0.9 / 0.5 × 2)
    assert cluster.replicaset("ranker").replicas == 4
    api.refresh_from_db()
    assert api.replicas == 4 and api.replicas_changed_at == utc(clock.now())
    out = decisions("ranker")[-1]
    assert out.reason == "scale-out" and out.department == world.departments["ml-search"]
    assert out.message == "ranker scales out to 4 replicas: gpu 90%/90% over maxRate 80% for 2 minutes: " \
                          "ceil(0.90/0.50×2) = 4"
    assert out.data["current"] == 2 and out.data["target"] == 4

    loads.set("ranker", 0.1, minutes=5)
    assert tick(lab, loads).decisions["ranker"] == "skip-unstable"  # changed a minute ago
    settle(lab, "ranker")
    report = tick(lab, loads)
    assert report.scaled == {"ranker": (4, 2)}  # floor(0.1 / 0.5 × 4) = 0, bounded by the minimum of 2
    assert cluster.replicaset("ranker").replicas == 2 and InferenceService.objects.get(name="ranker").replicas == 2
    scale_in = decisions("ranker")[-1]
    assert scale_in.reason == "scale-in" and "under minRate 20% for 5 minutes" in scale_in.message
    assert scale_in.message.endswith("bounded by its minimum to 2")


def test_skipped_services_are_recorded_once_with_why(lab):
    world = lab[0]
    service(world, "paused", autoscaling=False)
    service(world, "retired", offline=True)
    loads = Loads()
    for _ in range(3):
        report = tick(lab, loads)
    assert report.decisions == {"paused": "skip-autoscaling-off", "retired": "skip-offline"}
    assert [d.message for d in decisions("paused")] == ["paused: autoscaling is off; stays at 2 replicas"]
    assert [d.message for d in decisions("retired")] == ["retired is offline; left at 2 replicas"]


class Receiver(BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):
        Receiver.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook(settings, eager):
    """The operators' alert webhook."""
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    Receiver.bodies = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.TIDAL_ALERT_WEBHOOK_URL = f"http://127.0.0.1:{server.server_port}/alerts"
    yield Receiver.bodies
    server.shutdown()


def test_a_failed_scale_raises_one_alert_a_counter_and_a_webhook_post(lab, webhook, monkeypatch, client):
    world, cluster, _, redis, namespace = lab
    service(world, "ranker")
    loads = Loads()
    tick(lab, loads)
    loads.set("ranker", 0.95, minutes=2)
    settle(lab, "ranker")
    applied = cluster.apply_replicaset

    def refuse(name, template, replicas, **kwargs):
        if replicas != cluster.replicaset(name).replicas:
            raise BackendError("the API server refused: quota exceeded")
        return applied(name, template, replicas, **kwargs)

    monkeypatch.setattr(cluster, "apply_replicaset", refuse)
    for _ in range(3):
        report = tick(lab, loads)
    assert report.scaled == {} and cluster.replicaset("ranker").replicas == 2
    (alert,) = decisions("ranker", Decision.Kind.ALERT)  # once per episode, not every tick
    assert alert.reason == "scale-failed"
    assert alert.message == "ranker: scaling from 2 to 4 replicas failed: the API server refused: quota exceeded"
    assert webhook == []  # the notifications scan delivers it
    notifications.scan.apply()
    assert [(b["service"], b["reason"], b["target"]) for b in webhook] == [("ranker", "scale-failed", 4)]
    assert webhook[0]["text"].endswith(alert.message) and webhook[0]["department"] == alert.department.name
    notifications.scan.apply()
    assert len(webhook) == 1  # once
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(client.get("/metrics").content.decode()) for s in f.samples}
    assert samples[("tidal_autoscaler_alerts_total", (("reason", "scale-failed"), ("service", "ranker")))] == 1

    monkeypatch.setattr(cluster, "apply_replicaset", applied)  # the API recovers: the episode closes
    assert tick(lab, loads).scaled == {"ranker": (2, 4)}
    monkeypatch.setattr(cluster, "apply_replicaset", refuse)
    settle(lab, "ranker")
    loads.set("ranker", 0.95, minutes=2)
    tick(lab, loads)
    assert len(decisions("ranker", Decision.Kind.ALERT)) == 2  # a new episode, a new alert
    notifications.scan.apply()
    assert [b["reason"] for b in webhook] == ["scale-failed", "scale-failed"]


def test_a_dead_webhook_never_breaks_the_tick_and_its_delivery_fails_naming_the_host_only(lab, settings, eager,
                                                                                         monkeypatch):
    """The tick only records the alert; its delivery to an unreachable webhook is retried and fails, said by host:
    webhook URLs carry their token (Slack, Teams)."""
    world, cluster, _, _, _ = lab
    token = secrets.token_urlsafe(16)
    settings.TIDAL_ALERT_WEBHOOK_URL = f"http://127.0.0.1:9/services/{token}?key={token}"  # port 9: nobody listens
    service(world, "ranker")
    loads = Loads()
    tick(lab, loads)
    loads.set("ranker", 0.95, minutes=2)
    settle(lab, "ranker")
    monkeypatch.setattr(cluster, "apply_replicaset", lambda *a, **k: (_ for _ in ()).throw(BackendError("down")))
    assert tick(lab, loads).alerts == ["ranker:scale-failed"]
    notifications.scan.apply()
    (delivery,) = Delivery.objects.filter(user=None)
    assert delivery.status == Delivery.Status.FAILED and delivery.attempts == MAX_ATTEMPTS
    assert "webhook at 127.0.0.1:9 unreachable" in delivery.last_error and token not in delivery.last_error


def test_priority_decides_who_gets_the_group_when_it_cannot_serve_both(lab):
    world = lab[0]
    # T4 capacity for inference: t4-1 and t4-2 (the fixed t4-0 does not count) = 4 GPUs = 8 half-GPU replicas
    service(world, "search", priority=10, gpus_per_replica=Decimal("0.5"), replicas=3)
    service(world, "ads", department="ml-ads", priority=0, gpus_per_replica=Decimal("0.5"), replicas=3)
    loads = Loads()
    tick(lab, loads)
    for name in ("search", "ads"):
        settle(lab, name)
        loads.set(name, 1.0, minutes=2)  # each asks ceil(1.0 / 0.5 × 3) = 6 replicas = 3 GPUs
    report = tick(lab, loads)  # 4 GPUs: the minimums first (2 + 2 replicas), then search takes the rest
    assert report.scaled == {"search": (3, 6), "ads": (3, 2)}
    assert report.decisions == {"search": "scale-out", "ads": "priority-capped"}
    capped = decisions("ads")[-1]
    assert capped.message.startswith("ads gets 2 of the 6 replicas it asks (priority 0)")
    assert capped.data["asked"] == 6 and capped.data["target"] == 2
    (alert,) = decisions("ads", Decision.Kind.ALERT)
    assert alert.reason == "priority-capped" and alert.department == world.departments["ml-ads"]
    assert decisions("search", Decision.Kind.ALERT) == []


def test_the_forecast_scales_out_ahead_of_the_peak(lab, monkeypatch):
    from profiling import forecasting

    world = lab[0]
    service(world, "ranker")
    loads = Loads()
    tick(lab, loads)
    loads.set("ranker", 0.5, minutes=5)  # within the band now
    settle(lab, "ranker")
    asked = []

    def forecast_service(*, service, now):
        asked.append((service.name, now))
        return (("gpu", (0.7, 0.85, 0.9, 0.95, 0.9)),), "xgboost gpu v3"

    monkeypatch.setattr(forecasting, "forecast_service", forecast_service)
    report = tick(lab, loads, forecasts=autoscaler.profile_forecast)
    assert report.scaled == {"ranker": (2, 4)}  # ceil(0.95 / 0.5 × 2)
    ahead = decisions("ranker")[-1]
    assert ahead.reason == "predictive-scale-out" and "ahead of the peak" in ahead.message
    assert asked and asked[-1][0] == "ranker"

    def broken(*, service, now):
        raise RuntimeError("model file missing")

    monkeypatch.setattr(forecasting, "forecast_service", broken)
    assert autoscaler.profile_forecast(InferenceService.objects.get(name="ranker"), 0.0) == \
        ((), "no forecast: the model failed (model file missing)")


def test_vertical_recommendation_is_stored_once_and_used_by_the_next_rollout(lab):
    world, cluster, clock, _, _ = lab
    api = service(world, "ranker", gpus_per_replica=Decimal("1"), replicas=2)
    for i in range(90):  # 90 minutes at 30 % of one GPU and 45 % of 4000 m
        ServiceMinute.objects.create(service=api, minute=utc(clock.now() - (i + 1) * MINUTE), samples=12, replicas=2,
                                     gpu_util_mean=0.3, cpu_util_mean=0.45, emitted_at=utc(clock.now()))
    ScalingThreshold.objects.create(service=api, metric="cpu", min_rate=0.3, expect_rate=0.6, max_rate=0.9)
    loads = Loads()
    tick(lab, loads, seconds=1)
    tick(lab, loads)  # within the hour: not recomputed
    api.refresh_from_db()
    assert (api.recommended_gpus_per_replica, api.recommended_cpu_milli) == (Decimal("0.75"), 3000)
    (rec,) = [d for d in decisions("ranker") if d.reason == "vertical-recommendation"]
    assert "0.75 GPUs, 3000 m CPU" in rec.message and rec.message.endswith("not applied (vertical scaling is off)")
    assert replicas.replica_template(api).gpus == 1.0
    api.vertical = True
    template = replicas.replica_template(api)
    assert (template.gpus, template.cpu_milli, template.memory_mib) == (0.75, 3000, api.memory_mib_per_replica)


def test_profile_loads_read_the_service_minutes(lab):
    world, _, clock, _, _ = lab
    api = service(world, "ranker")
    newest = clock.now() // MINUTE * MINUTE - MINUTE
    for i in range(3):
        ServiceMinute.objects.create(service=api, minute=utc(newest - i * MINUTE), samples=12, replicas=3,
                                     gpu_util_mean=(0.4, 0.5, 0.6)[i], cpu_util_mean=0.2, qps=7.5,
                                     emitted_at=utc(newest))
    minutes = ProfileLoads().recent(api, clock.now())
    assert [(m.at, m.replicas, m.gpu, m.qps) for m in minutes] == [
        (newest - 2 * MINUTE, 3, 0.6, 7.5), (newest - MINUTE, 3, 0.5, 7.5), (newest, 3, 0.4, 7.5)]


class EngineLoads:
    """An LLM engine's minutes (20, steady): the latencies the SLO sizing fits (policy/slo_sizing.py)."""

    def recent(self, service, now):
        newest = now // MINUTE * MINUTE - MINUTE
        return tuple(LoadMinute(newest - i * MINUTE, service.replicas, gpu=0.7, qps=10.0, queue=2.0, ttft_p99=1.5,
                                tpot_p50=0.045, tpot_p99=0.06) for i in reversed(range(20)))


def test_the_live_loop_sizes_a_service_to_its_request_slo(lab):
    """The service's slo_* fields reach the policy: its decision says what the sizing found; without a min gain,
    nothing is sized."""
    world = lab[0]
    service(world, "llm", slo_ttft_s=1.0, slo_tpot_s=0.05, slo_min_gain=0.1)
    service(world, "unsized", slo_ttft_s=1.0, slo_tpot_s=0.05)
    tick(lab, EngineLoads())
    for name in ("llm", "unsized"):
        settle(lab, name)
    tick(lab, EngineLoads())
    sized = decisions("llm")[-1].message
    assert "sized to the SLO (TTFT 1 s, TPOT 50 ms): " in sized and "of requests predicted within it" in sized, sized
    assert all("sized to the SLO" not in d.message for d in decisions("unsized"))


def test_profile_loads_keep_the_hours_a_service_sized_to_its_slo_reads(lab):
    world, _, clock, _, _ = lab
    plain, sized = service(world, "ranker"), service(world, "llm", slo_ttft_s=1.0, slo_tpot_s=0.05, slo_min_gain=0.1)
    hours_ago = clock.now() // MINUTE * MINUTE - 5 * 60 * MINUTE
    for s in (plain, sized):
        ServiceMinute.objects.create(service=s, minute=utc(hours_ago), samples=12, replicas=3, gpu_util_mean=0.5,
                                     qps=7.5, emitted_at=utc(hours_ago))
    loads = ProfileLoads(keep=autoscaler.keep_minutes)
    assert [m.at for m in loads.recent(sized, clock.now())] == [hours_ago]
    assert loads.recent(plain, clock.now()) == ()


def test_the_celery_entry_point_runs_under_the_cluster_lock(lab, settings):
    world, _, _, redis, namespace = lab
    service(world, "ranker")
    settings.TIDAL_DEMO_TRAFFIC, settings.TIDAL_AUTOSCALE_INTERVAL_S = False, 0.5  # waits 0.4 s for the lock
    report = autoscaler.run_autoscale_tick(redis=redis, namespace=namespace)
    assert report.decisions == {"ranker": "skip-scaling"}  # its pods were just created
    assert store.load(redis, namespace).replicaset("ranker").replicas == 2
    lock = redis.lock(f"{namespace}:{store.LOCK}", timeout=5)
    assert lock.acquire(blocking=False)
    try:
        assert autoscaler.run_autoscale_tick(redis=redis, namespace=namespace) is None  # another loop holds it
    finally:
        lock.release()


def test_under_the_demo_traffic_the_policy_runs_on_the_demo_clock(lab, settings):
    world, _, _, redis, namespace = lab
    service(world, "ranker")
    settings.TIDAL_DEMO_TRAFFIC, settings.TIDAL_DEMO_DAY_S, settings.TIDAL_DEMO_START_HOUR = True, 600.0, 22.0
    assert autoscaler.run_autoscale_tick(redis=redis, namespace=namespace).decisions == {"ranker": "skip-scaling"}
    clock = json.loads(redis.get(f"{namespace}:demo-traffic:clock"))
    assert clock[2] == 144.0 and clock[1] - clock[3] == 22 * 3600  # 144×, from 22:00 demo time
    assert json.loads(redis.get(f"{namespace}:demo-traffic:ranker")) == []  # no demo minute has ended yet
    (skip,) = decisions("ranker")
    assert skip.message == "ranker is still scaling: 0 of 2 replicas ready"


def test_the_demo_lends_and_takes_back_whatever_the_real_hour(settings, monkeypatch):
    from colocation import tasks

    seen = []
    monkeypatch.setattr(controller, "run_lending_tick", lambda **kwargs: seen.append(kwargs["profile"]))
    settings.TIDAL_DEMO_TRAFFIC = True
    tasks.lending_tick()
    settings.TIDAL_DEMO_TRAFFIC = False
    tasks.lending_tick()
    assert [p.hold_against_window for p in seen] == [False, True]


def test_demo_loads_keep_the_ready_count_each_minute_was_measured_at(lab):
    from cluster.simulated.traffic import DemoClock
    from colocation.loads import DemoLoads, demo_traffic

    world, _, _, redis, namespace = lab
    api = service(world, "ranker")
    clock = DemoClock.starting(T0, speed=144, start_hour=22)
    traffic = demo_traffic(clock=clock)
    serving = {"ranker": 3}
    loads = DemoLoads(redis=redis, namespace=namespace, traffic=traffic, clock=clock, serving=serving)
    first = loads.recent(api, clock.demo_start + 5 * MINUTE + 1)
    assert [m.replicas for m in first] == [3] * 5 and first[0].at == clock.demo_start
    serving["ranker"] = 5  # scaled out since
    later = loads.recent(api, clock.demo_start + 8 * MINUTE + 1)
    assert [m.replicas for m in later] == [3] * 5 + [5] * 3
    assert later[:5] == first  # a measured minute never changes
    m = later[-1]
    assert m.qps == traffic.qps("ranker", m.at) and m.gpu == traffic.gpu("ranker", m.at, 5)
    # busy: the SM active of the H200 server its pods follow, launch-bound: well under its GPU util
    assert m.busy_source == "SM active" and 0 < m.busy < 0.6 * m.gpu


def test_priority_aware_autoscaling_counts_a_group_of_pods_whole():
    """docs/concepts/service-groups.md#quotas-and-autoscaling: a replica of 4 pods of 2 GPUs takes 8 GPUs."""
    service = InferenceService(gpu_model_id=1, gpus_per_replica=2, cpu_milli_per_replica=4000, group_size=4)
    assert replicas.per_replica(service) == 8.0
