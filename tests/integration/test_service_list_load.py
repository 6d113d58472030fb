"""The services list shows each service's newest load: the gateway's requests/s that real Prometheus scraped from its
pods as soon as they serve, the service-load profile's minute (3-4 minutes behind) where the gateway has none, and
"—" only where neither measured anything, with a title that says why."""
import re
import time
import uuid
from datetime import timedelta

import pytest
import redis
from django.core.cache import cache
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_api_client import PrometheusConnect

from cluster.clock import VirtualClock
from cluster.simulated.engine import SimulatedCluster
from cluster.simulated.exporter import register_target, serve
from cluster.simulated.metrics import INFERENCE_NAMESPACE, builtin_shapes
from colocation.replicas import replica_template
from colocation.selectors import node_views
from colocation.serving_signals import SERVICE
from frontend.services.tables import GatewayLoad
from frontend.services.views import GATEWAY_CACHE_KEY, GATEWAY_TTL_S, gateway_qps
from profiling.models import ServiceMinute
from tests.integration.livecluster import EnginesAt
from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL, REDIS_URL

pytestmark = pytest.mark.django_db
QPS = 6.0


def qps_cell(page: str, name: str) -> tuple[str, str]:
    """The (title, text) of the QPS cell in `name`'s row (the row's one cell with a titled figure)."""
    row = re.search(rf'<tr[^>]*>\s*<td[^>]*><a href="/services/{name}/">.*?</tr>', page, re.S).group(0)
    return re.search(r'<td class="num"><span title="([^"]*)">([^<]*)</span></td>', row).groups()


def test_a_serving_service_shows_the_gateways_qps_before_its_first_profile_minute(world):
    run = uuid.uuid4().hex[:6]  # names of this run alone: Prometheus keeps earlier runs' series
    live, profiled, idle = (world.service(name=f"{kind}-{run}", gpu_model=world.gpu_models["T4"], gpus_per_replica="0.25",
                                          replicas=1, min_replicas=1, max_replicas=4)
                            for kind in ("live", "profiled", "idle"))
    ServiceMinute.objects.create(service=profiled, minute=timezone.now() - timedelta(minutes=4), samples=12, replicas=1,
                                 qps=2.5, emitted_at=timezone.now())
    cluster = SimulatedCluster(node_views(), VirtualClock(time.time()))
    cluster.apply_replicaset(live.name, replica_template(live), 1, startup_s=0)
    cluster.advance()
    state = (cluster.pods(), cluster.nodes())
    server, thread = serve(lambda: state, builtin_shapes(), 0, load=EnginesAt({live.name: (QPS, 0.5)}))
    target = register_target(PROMETHEUS_SD_DIR, server.server_port, f"it-list-{run}")
    try:
        prometheus, deadline = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True), time.monotonic() + 60
        qps = gateway_qps(INFERENCE_NAMESPACE)
        while live.name not in {s["metric"].get(SERVICE) for s in prometheus.custom_query(qps)}:
            assert time.monotonic() < deadline, "no gateway request rate of the service in Prometheus within 60 s"
            time.sleep(1)
        cache.delete(GATEWAY_CACHE_KEY)  # a render of another test within the TTL read Prometheus before the service
        browser = Client()
        browser.force_login(world.users["operator"])
        page = browser.get("/services/").content.decode()
    finally:
        target.unlink(missing_ok=True)
        server.shutdown()
        thread.join(timeout=5)
    assert not ServiceMinute.objects.filter(service=live).exists()  # no profile minute yet: the gateway's figure
    title, text = qps_cell(page, live.name)
    assert title == "requests/s at the gateway, from Prometheus&#x27; newest scrapes of its pods" and float(text) == pytest.approx(QPS, rel=0.05)
    assert qps_cell(page, profiled.name) == ("the service-load profile&#x27;s newest minute, 4\xa0minutes ago", "2.50")
    title, text = qps_cell(page, idle.name)
    assert text == "—" and title.startswith("No measurement yet: Prometheus has no request count of its pods")


def test_the_gateways_figures_are_read_once_per_ttl_and_a_down_prometheus_is_remembered_as_long(world):
    """A slow or down Prometheus must not slow every render of the list: the gateway's figures are kept in the
    project's cache (Redis) for GATEWAY_TTL_S, a failed read too."""
    service = world.service(name=f"cached-{uuid.uuid4().hex[:6]}", replicas=1, min_replicas=1, max_replicas=4)
    browser = Client()
    browser.force_login(world.users["operator"])
    cache.delete(GATEWAY_CACHE_KEY)
    with override_settings(PROMETHEUS_URL="http://127.0.0.1:9"):  # nothing listens on the discard port
        browser.get("/services/")
    stored = cache.get(GATEWAY_CACHE_KEY)
    assert stored.qps == {} and "127.0.0.1:9 did not answer" in stored.down
    assert 0 < redis.Redis.from_url(REDIS_URL).ttl(cache.make_key(GATEWAY_CACHE_KEY)) <= GATEWAY_TTL_S
    title, text = qps_cell(browser.get("/services/").content.decode(), service.name)  # Prometheus is up again
    assert text == "—" and "127.0.0.1:9 did not answer" in title  # still the failed read: not asked again

    cache.set(GATEWAY_CACHE_KEY, GatewayLoad({service.name: 42.0}), GATEWAY_TTL_S)  # what a read within the TTL kept
    assert qps_cell(browser.get("/services/").content.decode(), service.name)[1] == "42.00"
    cache.delete(GATEWAY_CACHE_KEY)
    title, text = qps_cell(browser.get("/services/").content.decode(), service.name)  # expired: Prometheus is asked
    assert text == "—" and "Prometheus has no request count of its pods" in title
