"""The live demo breathes: on the demo configuration (`load_demo` on the traces), the autoscaler driven by the
demo's traffic and the lending controller, on an explicit clock (no sleeping), go through a scale-in, a lend,
a scale-out and a take-back, in that causal order, each a Decision with its sentence."""
import uuid
from decimal import Decimal
from pathlib import Path

import pytest
from django.conf import settings
from redis import Redis

from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from cluster.simulated.traffic import DemoClock
from colocation import autoscaler, controller
from colocation.loads import DemoLoads, demo_lending_profile, demo_traffic
from colocation.models import InferenceService, ResourceGroup
from colocation.policy import DEFAULT
from colocation.selectors import node_views
from core.models import Decision, Department
from demo.data import demo_load
from scheduler.models import Framework
from scheduler.submission import job_submit
from tests.integration.livecluster import T0

pytestmark = pytest.mark.django_db
TICK_S = 5.0  # the demo's autoscale interval; lending every 10 s


def _training_waits() -> None:
    """One training job per GPU model with a service, never scheduled here: lending always has a taker."""
    alice = Department.objects.get(name="ml-search").memberships.first().user
    framework = Framework.objects.get(name="pytorch", version="2.1")
    for service in InferenceService.objects.select_related("gpu_model"):
        job_submit(submitter=alice, department=Department.objects.get(name="ml-search"), name=f"wants-{service.name}",
                   image="registry/x:1", command="train", framework=framework, gpu_model=service.gpu_model,
                   gpus=Decimal(1), cpu_milli=1000, memory_mib=1024)


def _first(queryset) -> Decision | None:
    return queryset.order_by("id").first()


def test_a_compressed_demo_day_scales_in_lends_scales_out_and_takes_back():
    demo_load(traces_dir=Path(settings.TRACES_DIR))
    _training_waits()
    redis, namespace = Redis.from_url(settings.REDIS_URL), f"test-breathes-{uuid.uuid4().hex[:8]}"
    real = VirtualClock(T0)
    cluster = SimulatedCluster(node_views(), real, store.labelled_runtime)
    clock = DemoClock.starting(T0, speed=86400 / 600, start_hour=22, tz=settings.TIME_ZONE)
    traffic = demo_traffic(clock=clock)
    profile = demo_lending_profile(DEFAULT)
    assert not profile.hold_against_window
    try:
        for tick in range(int(600 / TICK_S)):  # ten real minutes: one demo day from 22:00
            real.advance(TICK_S)
            cluster.advance()
            loads = DemoLoads(redis=redis, namespace=namespace, traffic=traffic, clock=clock,
                              serving=autoscaler.serving_counts(cluster))
            autoscaler.autoscale_tick(backend=cluster, now=real.now(), loads=loads, forecasts=autoscaler.no_forecast,
                                      clock=clock, redis=redis, namespace=namespace)
            if tick % 2:
                controller.lending_tick(backend=cluster, now=real.now(), profile=profile)
    finally:
        for key in redis.scan_iter(f"{namespace}:*"):
            redis.delete(key)

    chains = {service.name: _chain(service) for service in InferenceService.objects.select_related("gpu_model")}
    breathing = {name: chain for name, chain in chains.items() if chain is not None}
    assert breathing, f"no service went scale-in -> lend -> scale-out -> take-back: {chains}"
    scale_in, lend, scale_out, take_back = next(iter(breathing.values()))
    assert "scales in to" in scale_in.message and "under minRate" in scale_in.message
    assert lend.message.startswith("lend ") and "< minRate" in lend.message
    assert "scales out to" in scale_out.message and "over maxRate" in scale_out.message
    assert take_back.message.startswith("take back ")


def _chain(service: InferenceService) -> tuple[Decision, ...] | None:
    """The first scale-in of `service`, the first lend of its group's nodes after it (none before it: the lend is
    the scale-in's doing), the first scale-out after that lend, the first take-back of its group after that."""
    group = ResourceGroup.objects.get(gpu_model=service.gpu_model)
    nodes = [f"node:{name}" for name in group.nodes.values_list("name", flat=True)]
    ours = Decision.objects.filter(subject=f"service:{service.name}", kind=Decision.Kind.SCALING)
    lends = Decision.objects.filter(kind=Decision.Kind.LENDING, reason="online-usage-below-min", subject__in=nodes)
    take_backs = Decision.objects.filter(kind=Decision.Kind.LENDING, subject__in=nodes,
                                         reason__in=["online-pods-pending", "online-usage-above-max"])
    scale_in = _first(ours.filter(reason="scale-in"))
    if scale_in is None or lends.filter(id__lt=scale_in.id).exists():
        return None
    lend = _first(lends.filter(id__gt=scale_in.id))
    scale_out = lend and _first(ours.filter(reason="scale-out", id__gt=lend.id))
    take_back = scale_out and _first(take_backs.filter(id__gt=scale_out.id))
    return (scale_in, lend, scale_out, take_back) if take_back else None
