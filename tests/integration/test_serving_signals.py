"""The live autoscaler reads an LLM service's serving signals from the real Prometheus: the simulated cluster's
exporter publishes its engines' series under vLLM's names, Prometheus scrapes them (TPOT's exact mean from its
histogram's _sum and _count among them), and a TTFT p99 over the service's SLO for two minutes scales it out
(slo-scale-out). The policy runs on a demo clock of 5 real seconds a minute, so two minutes of signals take seconds,
not minutes."""

from __future__ import annotations

import json
import math
import time
import uuid
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from cluster.clock import VirtualClock, utc
from cluster.simulated import llm
from cluster.simulated.exporter import register_target, serve
from cluster.simulated.metrics import builtin_shapes
from cluster.simulated.traffic import DemoClock
from colocation import autoscaler
from colocation.models import InferenceService
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
    signals = ServingSignals(PROMETHEUS_URL, to_real=clock.real, to_policy=clock.demo, speed=SPEED)
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
    signals = ServingSignals(PROMETHEUS_URL, to_real=fast.real, to_policy=fast.demo, speed=144)
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
