"""The live autoscaler reads an LLM service's serving signals from the real Prometheus: the simulated cluster's
exporter publishes its engines' series under vLLM's names, Prometheus scrapes them (TPOT's exact mean from its
histogram's _sum and _count among them), and a TTFT p99 over the service's SLO for two minutes scales it out
(slo-scale-out). The policy runs on a demo clock of 5 real seconds a minute, so two minutes of signals take seconds,
not minutes. A service of the same name in another namespace is not read."""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import replace
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from cluster.clock import VirtualClock, utc
from cluster.simulated import llm
from cluster.simulated.exporter import register_target, serve
from cluster.simulated.metrics import INFERENCE_NAMESPACE, builtin_shapes
from cluster.simulated.traffic import DemoClock
from colocation import autoscaler
from colocation.models import InferenceService
from colocation.policy import autoscaling, serving
from colocation.policy.autoscaling import LoadMinute, ScaleReason, ServiceView
from colocation.replicas import replica_template
from colocation.serving_signals import ServingSignals, WithServingSignals
from core.models import Decision
from tests.integration.livecluster import EnginesAt, scaling_lab
from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL

pytestmark = pytest.mark.django_db
SPEED = 12.0  # demo seconds per real second: a policy minute is 5 s
DEADLINE_S = 90


class NoLoads:
    """No utilization source: the minutes are the serving signals alone."""

    def recent(self, service, now):
        return ()


@pytest.fixture
def lab(world, settings):
    clock = VirtualClock(time.time())
    with scaling_lab(world, settings, clock=clock, prefix="test-signals") as (cluster, redis, ns):
        yield world, cluster, clock, redis, ns


def test_a_ttft_p99_over_the_slo_in_prometheus_scales_the_service_out(lab):
    world, cluster, cluster_clock, redis, namespace = lab
    name = f"llm-{uuid.uuid4().hex[:6]}"
    world.service(name=name, gpu_model=world.gpu_models["T4"], gpus_per_replica=Decimal("0.25"), replicas=2,
                  min_replicas=2, max_replicas=8, ttft_p99_target_s=0.5)
    clock = DemoClock.starting(time.time(), speed=SPEED)
    signals = ServingSignals(PROMETHEUS_URL, INFERENCE_NAMESPACE, to_real=clock.real, to_policy=clock.demo,
                             speed=SPEED)
    loads = WithServingSignals(NoLoads(), signals, lambda service: service.ttft_p99_target_s is not None)

    def tick():
        cluster_clock.advance(max(0.0, time.time() - cluster_clock.now()))
        cluster.advance()
        return autoscaler.autoscale_tick(backend=cluster, now=time.time(), loads=loads, clock=clock,
                                         forecasts=autoscaler.no_forecast, redis=redis, namespace=namespace)

    assert tick().decisions[name] == "skip-scaling"  # its ReplicaSet is made; the replicas start
    cluster_clock.advance(120)
    cluster.advance()
    InferenceService.objects.filter(name=name).update(replicas_changed_at=utc(time.time() - 3600))
    state = (cluster.pods(), cluster.nodes())
    server, thread = serve(lambda: state, builtin_shapes(), 0, load=EnginesAt({name: (8.0, 0.9)}))  # overloaded: 90 % GPU
    target = register_target(PROMETHEUS_SD_DIR, server.server_port, f"it-signals-{name}")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(_breached(signals, name, clock)) < 2:
            assert time.monotonic() < deadline, f"no two minutes of TTFT p99 for {name} in Prometheus"
            time.sleep(1)
        minutes = loads.recent(InferenceService.objects.get(name=name), clock.demo(time.time()))
        newest = minutes[-1]
        assert newest.replicas == 2 and newest.tokens_in > newest.tokens_out > 0 and newest.queue > 0
        assert 0 < newest.kv_cache <= 1 and newest.ttft_p50 < newest.ttft_p99 and newest.tpot_p99 > 0
        # the exact mean TPOT, rate(_sum) / rate(_count): the engine's at 90 % use, where the p99 is interpolated
        engine = llm.engine_at(0.9)
        assert newest.tpot_mean == pytest.approx(engine.tpot_median_s * math.exp(llm.TPOT_SIGMA ** 2 / 2), rel=1e-3)
        assert newest.tpot_mean < newest.tpot_p99
        _minutes_exact(name)
        _the_service_page_charts_the_ttft_p99_against_its_slo(world, name)
        report = tick()
    finally:
        target.unlink(missing_ok=True)
        server.shutdown()
        thread.join(timeout=5)
    assert report.scaled == {name: (2, 3)}
    out = Decision.objects.filter(kind=Decision.Kind.SCALING, subject=f"service:{name}").first()
    assert out.reason == "slo-scale-out"
    assert "ttft_p99" in out.message and "over its target 0.5 s for 2 minutes" in out.message
    assert cluster.replicaset(name).replicas == 3


def _breached(signals: ServingSignals, name: str, clock: DemoClock) -> list[float]:
    """The newest consecutive minutes of `name` whose TTFT p99 is over 0.5 s at 2 replicas."""
    now = clock.demo(time.time())
    read = signals.of(name, now)
    run, at = [], (now // 60 - 1) * 60
    while (m := read.get(at)) and m.get("ttft_p99", 0) > 0.5 and m.get("replicas") == 2:
        run.append(at)
        at -= 60
    return run


def _minutes_exact(name: str) -> None:
    """On the demo's clock (a minute in 0.42 s) a read's newest minute is the newest complete one, whatever fraction
    of a second it ends at: rounded to whole seconds (as the client does), the reads' times moved by up to half a
    second, a demo minute, and the newest minute went missing or came from the minute still running."""
    fast = DemoClock.starting(time.time(), speed=144)
    signals = ServingSignals(PROMETHEUS_URL, INFERENCE_NAMESPACE, to_real=fast.real, to_policy=fast.demo, speed=144)
    end = math.floor(fast.demo(time.time() - 2) / 60) * 60  # a minute's end that Prometheus has scraped past
    for at in range(end, end - 12 * 60, -60):  # 12 ends, 5/12 s apart: every fraction of a second
        assert max(signals.of(name, at + 1)) == at - 60


def _the_service_page_charts_the_ttft_p99_against_its_slo(world, name: str) -> None:
    client = Client()
    client.force_login(world.users["operator"])
    page = client.get(reverse("service", args=[name])).content.decode()
    chart = json.loads(page.split('<script id="chart-ttft-p99" type="application/json">', 1)[1].split("</script>")[0])
    ttft, target = chart["series"]
    assert [v for _, v in target["points"]] == [0.5, 0.5] and target["dash"]
    assert max(v for _, v in ttft["points"] if v is not None) > 0.5  # the overloaded engines miss it
    assert "chart-tpot-p99" not in page  # no target, no chart


class FallingThenMissing:
    """Four engines' GPU use: 45 % for HOLD_S real seconds from their first scrape, falling to 15 % over FALL_S (the
    night coming), then 78 % once `miss()` is called (past the 76 % at which the demo engine's TPOT p99 passes 50 ms,
    under maxRate 80 %): the exporter's load and, minute by minute on the demo clock, the policy's utilization."""

    HOLD_S, FALL_S = 4.0, 12.0

    def __init__(self, name: str, clock: DemoClock) -> None:
        self.name, self.clock = name, clock
        self.start: float | None = None
        self.missed_at: float | None = None

    def miss(self) -> None:
        self.missed_at = time.time()

    def serves(self, service: str) -> bool:
        return service == self.name

    def qps(self, service: str, now: float) -> float:
        return 8.0

    def gpu(self, service: str, now: float, ready: int = 4) -> float:
        if self.start is None:
            self.start = now
        if self.missed_at is not None and now >= self.missed_at:
            return 0.78
        return 0.45 - 0.3 * min(1.0, max(0.0, now - self.start - self.HOLD_S) / self.FALL_S)

    def recent(self, service, now: float) -> tuple[LoadMinute, ...]:
        if self.start is None:
            return ()
        first = math.ceil(self.clock.demo(self.start) / 60) * 60
        return tuple(LoadMinute(at, 4, gpu=self.gpu(service.name, self.clock.real(at + 30)))
                     for at in range(int(first), int(now // 60 * 60), 60))


def test_a_tpot_p99_pinned_in_vllms_bucket_lets_the_night_scale_in_and_a_miss_scales_out(lab):
    """A 50 ms TPOT target, a bound of vLLM's buckets: through the real Prometheus the p99 reads ~49 ms at every load
    within it (censored by the bucket's bounds from 25 % use) while the mean falls with the night, so the policy sets
    no TPOT limit and the service scales in on its thresholds (on the p99 alone, a flat curve lowered its band); past
    76 % the p99 leaves the bucket and the service scales out on the TPOT miss, under its maxRate: to
    ceil(78 % / expectRate 50 % × 4) = 7."""
    world, cluster, cluster_clock, redis, namespace = lab
    name = f"llm-{uuid.uuid4().hex[:6]}"
    world.service(name=name, gpu_model=world.gpu_models["T4"], gpus_per_replica=Decimal("0.25"), replicas=4,
                  min_replicas=2, max_replicas=8, tpot_p99_target_s=0.05)  # GPU 20/50/80 %
    clock = DemoClock.starting(time.time(), speed=144)  # a minute in 0.42 s: the night in seconds
    load = FallingThenMissing(name, clock)
    loads = WithServingSignals(load, ServingSignals(PROMETHEUS_URL, INFERENCE_NAMESPACE, to_real=clock.real,
                                                    to_policy=clock.demo, speed=144), lambda service: True)
    autoscaler.autoscale_tick(backend=cluster, now=time.time(), loads=loads, clock=clock,
                              forecasts=autoscaler.no_forecast, redis=redis, namespace=namespace)  # its pods start
    cluster_clock.advance(120)
    cluster.advance()
    service = InferenceService.objects.get(name=name)
    policy = autoscaler.scaling_policy(service)

    def decide(minutes=None, now=None):
        now = clock.demo(time.time()) if now is None else now
        minutes = loads.recent(service, now) if minutes is None else minutes
        return autoscaling.decide_service(ServiceView(name, policy, 4, 4, tuple(minutes)), now)

    state = (cluster.pods(), cluster.nodes())
    server, thread = serve(lambda: state, builtin_shapes(), 0, load=load)
    target = register_target(PROMETHEUS_SD_DIR, server.server_port, f"it-signals-{name}")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while load.start is None:
            assert time.monotonic() < deadline, "Prometheus never scraped the engines"
            time.sleep(0.2)
        time.sleep(load.HOLD_S + load.FALL_S + 8)  # the fall, and the night's first minutes past the 6 s each is read over
        night = [m for m in loads.recent(service, clock.demo(time.time())) if m.tpot_mean is not None]
        assert len(night) >= 20
        p99s, means = [m.tpot_p99 for m in night], [m.tpot_mean for m in night]
        assert 0.045 < min(p99s) and max(p99s) <= 0.05  # pinned in the 25-50 ms bucket
        assert max(means) / min(means) > 1.1  # while the exact mean fell with the night
        # the bucket's bounds, read from Prometheus: the readings in the top 2 % of 25-50 ms say only "<= 50 ms"
        censored = [m for m in night if m.tpot_p99_bound is not None]
        assert censored and {m.tpot_p99_bound for m in censored} == {0.05}, night
        assert all((m.tpot_p99 >= 0.0495) == (m.tpot_p99_bound is not None) for m in night), night
        assert serving.slo_utilization(policy.serving, night) is None
        now = clock.demo(time.time())  # read and decided at one moment: on a loaded machine a minute passes in 0.42 s
        alone = [replace(m, tpot_mean=None, tpot_p99_bound=None) for m in loads.recent(service, now)]
        on_p99 = decide(alone, now)  # the p99 alone, as before the mean and the bounds were read
        assert on_p99.data.get("band_note") == "lowered for the SLO", on_p99.message  # a flat curve lowered the band
        d = decide()
        assert d.reason is ScaleReason.SCALE_IN and d.target == 2 and "TPOT" not in d.message, d.message

        load.miss()
        deadline = time.monotonic() + DEADLINE_S
        while (d := decide()).reason is not ScaleReason.SLO_OUT:
            assert d.target <= 4 and time.monotonic() < deadline, d.message  # holds until the miss scales it out
            time.sleep(0.5)
    finally:
        target.unlink(missing_ok=True)
        server.shutdown()
        thread.join(timeout=5)
    assert d.target == 7 and "tpot_p99" in d.message and "over its target 0.05 s" in d.message, d.message


def test_a_service_of_the_same_name_in_another_namespace_is_not_read(lab):
    """Two installations that one Prometheus scrapes, each with a service `name` in a Kubernetes namespace of its own
    (two engines in one, busy; one in the other, near idle): each namespace's reader sees its own engines alone, and a
    third namespace's sees none. Joined across namespaces, both read 3 engines and the sum of their tokens."""
    world, cluster, _, _, _ = lab
    run, name = uuid.uuid4().hex[:6], f"llm-{uuid.uuid4().hex[:6]}"
    service = world.service(name=name, gpu_model=world.gpu_models["T4"], gpus_per_replica=Decimal("0.25"), replicas=2,
                            min_replicas=1, max_replicas=4, queue_target=4)
    cluster.apply_replicaset(name, replica_template(service), 2, startup_s=0)
    cluster.advance()
    pods, nodes = cluster.pods(), cluster.nodes()
    assert sum(p.ready for p in pods) == 2
    installs = {f"it-a-{run}": (pods, 8.0, 0.9), f"it-b-{run}": (pods[:1], 1.0, 0.2)}  # namespace: engines, qps, GPU
    clock = DemoClock.starting(time.time(), speed=SPEED)
    readers = {ns: ServingSignals(PROMETHEUS_URL, ns, minutes=5, to_real=clock.real, to_policy=clock.demo, speed=SPEED)
               for ns in [*installs, f"it-c-{run}"]}
    served = []
    try:
        for ns, (engines, qps, gpu) in installs.items():
            server, thread = serve(lambda engines=engines: (engines, nodes), builtin_shapes(), 0,
                                   load=EnginesAt({name: (qps, gpu)}), namespace=ns)
            served.append((server, thread, register_target(PROMETHEUS_SD_DIR, server.server_port, f"it-ns-{ns}")))
        deadline = time.monotonic() + DEADLINE_S
        while not all(_newest(readers[ns], name, clock).get("tokens_in") for ns in installs):
            assert time.monotonic() < deadline, f"no minute of {name}'s tokens in both namespaces in Prometheus"
            time.sleep(1)
        now = clock.demo(time.time())
        a, b = (readers[ns].of(name, now) for ns in installs)
        assert {m["replicas"] for m in a.values()} == {2.0} and {m["replicas"] for m in b.values()} == {1.0}, (a, b)
        newest = max(set(a) & set(b))
        assert a[newest]["tokens_in"] > 4 * b[newest]["tokens_in"] > 0 and a[newest]["queue"] > b[newest]["queue"]
        assert readers[f"it-c-{run}"].of(name, now) == {}
    finally:
        for server, thread, target in served:
            target.unlink(missing_ok=True)
            server.shutdown()
            thread.join(timeout=5)


def _newest(signals: ServingSignals, name: str, clock: DemoClock) -> dict[str, float]:
    """`name`'s newest complete minute as `signals` read it now ({} when it has none)."""
    now = clock.demo(time.time())
    return signals.of(name, now).get((now // 60 - 1) * 60, {})
