"""Tidal's own /metrics: what the loops and the database say, in Prometheus form, scraped by the real Prometheus."""
from __future__ import annotations

import json
import time
import uuid

from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_api_client import PrometheusConnect
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from colocation.controller import run_lending_tick
from colocation.selectors import lending_profile
from profiling.models import JobMinute
from scheduler import live, services
from scheduler.models import JobRun
from scheduler.policy.profile import get_profile
from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL

FAMILIES = {
    "tidal_resource_group_capacity", "tidal_resource_group_allocated", "tidal_resource_group_gpus_used",
    "tidal_resource_group_observed_timestamp_seconds", "tidal_nodes", "tidal_transitions_open", "tidal_transitions",
    "tidal_jobs_pending", "tidal_queue_wait_seconds", "tidal_job_runs_ended", "tidal_kills", "tidal_decisions",
    "tidal_admissions", "tidal_preemptions", "tidal_autoscaling_actions", "tidal_scheduler_cycle_seconds",
    "tidal_lending_tick_seconds", "tidal_pipeline_sink_lag_seconds", "tidal_loop_ticks", "tidal_gpu_fragmented_gpus",
    "tidal_gpu_fragmentation_ratio",
}


@pytest.fixture
def ticked(transactional_db, world, settings):
    """One job admitted (1 T4), one pending (8 A100 > quota), after one scheduler tick and one lending tick."""
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"test-{uuid.uuid4().hex[:8]}"
    redis = Redis.from_url(settings.REDIS_URL)
    world.submit(gpus="1", gpu_model="T4")
    world.submit(gpus="8", gpu_model="A100")
    services.workload_learn(now=timezone.now())  # the typical jobs: 1 GPU and 8 GPUs, as often
    assert live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal")).admitted == 1
    assert run_lending_tick(redis=redis, namespace=namespace, profile=lending_profile()) is not None
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    JobMinute.objects.create(run=JobRun.objects.get(), minute=minute, samples=6, gpu_util_mean=0.5, req_gpus=1,
                             emitted_at=timezone.now())
    yield world
    for key in redis.scan_iter(f"{namespace}:*"):
        redis.delete(key)


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_say_what_the_loops_and_the_database_hold(ticked, client):
    response = client.get("/metrics")  # anonymous: Prometheus does not sign in
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    assert FAMILIES <= families, FAMILIES - families
    s = _samples(text)
    assert s[("tidal_resource_group_capacity", frozenset({("group", "t4"), ("resource", "gpu")}))] == 4
    assert s[("tidal_resource_group_allocated", frozenset({("group", "t4"), ("resource", "gpu")}))] == 1
    assert s[("tidal_resource_group_capacity", frozenset({("group", "cpu"), ("resource", "cpu")}))] == 64
    assert s[("tidal_nodes", frozenset({("group", "t4"), ("state", "offline-normal"), ("pool", "fixed"),
                                        ("pinned", "false")}))] == 1
    pending = {labels: v for (name, labels), v in s.items() if name == "tidal_jobs_pending"}
    assert list(pending.values()) == [1] and ("department", "ml-search") in next(iter(pending))
    assert s[("tidal_resource_group_gpus_used", frozenset({("group", "t4")}))] == 0.5
    assert 0 < s[("tidal_pipeline_sink_lag_seconds", frozenset({("profile", "job")}))] < 180
    assert s[("tidal_admissions_total", frozenset())] == 1
    assert s[("tidal_queue_wait_seconds_count", frozenset())] == 1
    assert s[("tidal_scheduler_cycle_seconds_count", frozenset())] == 1
    assert s[("tidal_lending_tick_seconds_count", frozenset())] == 1
    assert s[("tidal_scheduler_cycle_seconds_bucket", frozenset({("le", "+Inf")}))] == 1
    # t4: 3 idle GPUs (1 on t4-0, 2 on t4-1) where the 1-GPU shape fits and the 8-GPU one never does: half of each
    # node's idle GPUs is fragmented for the learned workload; a100's 8 idle GPUs take both shapes; cpu has none
    fragmented = {dict(labels)["group"]: v for (name, labels), v in s.items() if name == "tidal_gpu_fragmented_gpus"}
    assert fragmented == {"t4": 1.5, "a100": 0.0}
    assert s[("tidal_gpu_fragmentation_ratio", frozenset({("group", "t4")}))] == 0.5
    ticks = {labels: v for (name, labels), v in s.items() if name == "tidal_loop_ticks_total"}
    assert ticks == {frozenset({("loop", "scheduler"), ("outcome", "acted")}): 1,
                     frozenset({("loop", "lending"), ("outcome", "acted")}): 1}
    assert "mia" not in text and "otto" not in text  # no personal data


def test_the_allocation_api_says_what_metrics_say_with_the_gpus_really_busy(ticked):
    """GET /api/resource-groups/allocation/ (what `tidal top` reads): the same figures, for any signed-in user."""
    rows = {r["resource_group"]: r for r in ticked.client("member").get("/api/resource-groups/allocation/").json()}
    minute = JobMinute.objects.get().minute
    assert (rows["t4"]["gpus"], rows["t4"]["gpus_allocated"], rows["t4"]["gpus_used"]) == (4, 1, 0.5)
    assert rows["a100"]["gpus_used"] == 0.0  # profiled minute fresh, nothing busy there
    assert {r["used_minute"] for r in rows.values()} == {minute.isoformat().replace("+00:00", "Z")}
    JobMinute.objects.update(minute=minute - timedelta(minutes=30))  # the pipeline fell behind: no figure
    rows = ticked.client("member").get("/api/resource-groups/allocation/").json()
    assert {(r["gpus_used"], r["used_minute"]) for r in rows} == {(None, None)}
    assert rows[0]["gpus_allocated"] is not None  # the allocation stays


def test_the_real_prometheus_scrapes_every_family(ticked, live_server, client):
    """Every family with a sample on /metrics reaches Prometheus through the `tidal` file_sd scrape job."""
    exposed = {f.name for f in text_string_to_metric_families(client.get("/metrics").content.decode()) if f.samples}
    prom = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True)
    run = uuid.uuid4().hex[:12]
    target = live_server.url.removeprefix("http://")
    sd_file = PROMETHEUS_SD_DIR / f"tidal-metrics-{run}.json"
    PROMETHEUS_SD_DIR.mkdir(parents=True, exist_ok=True)
    sd_file.write_text(json.dumps([{"targets": [target], "labels": {"run": run}}]))
    query = f'count by (__name__) ({{run="{run}", __name__=~"tidal_.*"}})'
    try:
        deadline, names = time.monotonic() + 30, set()
        while time.monotonic() < deadline and not names:
            names = {r["metric"]["__name__"] for r in prom.custom_query(query=query)}
            time.sleep(0.5)
        scraped = {n.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
                   for n in names}
        assert exposed and exposed <= scraped, exposed - scraped
        (admitted,) = prom.custom_query(query=f'tidal_admissions_total{{run="{run}"}}')
        assert float(admitted["value"][1]) == 1
    finally:
        sd_file.unlink(missing_ok=True)
