"""The publisher on the real Prometheus, Kafka (Tansu) and Redis.

Known series for three pods are remote-written into Prometheus at exact 5-s grid timestamps a few
minutes in the past (tests/integration/promwrite.py), each ended by a staleness marker; the
publisher runs as the management command; the topic (a unique prefix per test) is read back from
the earliest offset and every PodSample is compared with values computed by hand:

  train-a  job 101 run 2, 2 GPUs: util (40 + 5*(i%7) and 60)% -> mean; CPU counter of "trainer"
           growing 2 cores/s, then 3.5 from step 21, plus a "sidecar" at 0.25 and cAdvisor's
           pod-level container="" series (excluded); requests 4.5 cores, 16.5 GiB, 2 GPUs
  train-b  job 102 run 1, CPU only: 1 core/s, no GPU fields
  infer-c  service svc-<uid>, 1 GPU at 30%; istio: 200s at 100/s then 120/s from step 19, 503s at
           2/s, outbound (reporter="source") calls excluded; latency histogram with a known p99,
           mean latency 20 ms then 25 ms from step 19
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import redis
from django.core.management import call_command
from kafka import KafkaConsumer, TopicPartition

from streaming.publisher import cursor_key
from streaming.records import PodSample, decode
from streaming.topics import Topics
from tests.integration import promwrite
from tests.integration.services import KAFKA_BOOTSTRAP, PROMETHEUS_URL, REDIS_URL, ROOT, drop_prefix

STEP = 5000  # ms, settings.TIDAL_METRICS_STEP_S
N = 36  # steps of data per pod (3 minutes)
NS = "tidal-it"
GiB, MiB = 1 << 30, 1 << 20
BUCKETS = (("10", 100), ("25", 400), ("50", 490), ("100", 505), ("250", 510), ("+Inf", 510))  # per step


class Scenario:
    def __init__(self) -> None:
        self.uid = uuid.uuid4().hex[:8]
        now_ms = int(time.time() * 1000)
        self.base = (now_ms - 300_000) // STEP * STEP  # first sample, 5 minutes ago
        self.ts = [self.base + i * STEP for i in range(N)]
        self.a, self.b, self.c = (f"train-{self.uid}-a", f"train-{self.uid}-b", f"infer-{self.uid}-c")
        self.service = f"svc-{self.uid}"

    # --- what is written ---
    def series(self) -> list[promwrite.Series]:
        out: list[promwrite.Series] = []
        scrape = {"instance": "10.0.0.7:9400", "job": "kubernetes-pods"}  # Prometheus' job, not Tidal's

        def add(name: str, labels: dict, value) -> None:
            samples = [(t, float(value(i))) for i, t in enumerate(self.ts)]
            samples.append((self.ts[-1] + STEP, promwrite.STALE))  # the pod ended
            out.append(({"__name__": name, **scrape, "namespace": NS, **labels}, samples))

        def pod_labels(pod: str, **tidal: str) -> None:
            add("kube_pod_labels", {"pod": pod, **{f"label_tidal_io_{k}": v for k, v in tidal.items()}},
                lambda i: 1)

        def requests(pod: str, container: str, cpu: float, mem: float, gpus: float = 0) -> None:
            for resource, unit, v in (("cpu", "core", cpu), ("memory", "byte", mem), ("nvidia_com_gpu", "integer", gpus)):
                if v:
                    add("kube_pod_container_resource_requests",
                        {"pod": pod, "container": container, "resource": resource, "unit": unit}, lambda i, v=v: v)

        def gpu(pod: str, index: int, util, used, free) -> None:
            lab = {"pod": pod, "container": "main", "gpu": str(index), "UUID": f"GPU-{self.uid}-{pod[-1]}{index}",
                   "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "a100-0"}
            add("DCGM_FI_DEV_GPU_UTIL", lab, util)
            add("DCGM_FI_DEV_FB_USED", lab, used)
            add("DCGM_FI_DEV_FB_FREE", lab, free)

        # train-a
        pod_labels(self.a, job="101", run="2", task="t-101")
        gpu(self.a, 0, lambda i: 40 + 5 * (i % 7), lambda i: 1000, lambda i: 15000)
        gpu(self.a, 1, lambda i: 60, lambda i: 2000 + 10 * i, lambda i: 14000 - 10 * i)
        add("container_cpu_usage_seconds_total", {"pod": self.a, "container": "trainer"},
            lambda i: 10 * i if i <= 20 else 200 + 17.5 * (i - 20))
        add("container_cpu_usage_seconds_total", {"pod": self.a, "container": "sidecar"}, lambda i: 1.25 * i)
        add("container_cpu_usage_seconds_total", {"pod": self.a, "container": ""}, lambda i: 1000 * i)
        add("container_memory_working_set_bytes", {"pod": self.a, "container": "trainer"}, lambda i: 8 * GiB + i * MiB)
        add("container_memory_working_set_bytes", {"pod": self.a, "container": "sidecar"}, lambda i: 256 * MiB)
        add("container_memory_working_set_bytes", {"pod": self.a, "container": ""}, lambda i: 99 * GiB)
        requests(self.a, "trainer", 4, 16 * GiB, 2)
        requests(self.a, "sidecar", 0.5, 512 * MiB)
        # train-b
        pod_labels(self.b, job="102", run="1", task="t-102")
        add("container_cpu_usage_seconds_total", {"pod": self.b, "container": "main"}, lambda i: 5 * i)
        add("container_memory_working_set_bytes", {"pod": self.b, "container": "main"}, lambda i: 2 * GiB)
        requests(self.b, "main", 2, 4 * GiB)
        # infer-c
        pod_labels(self.c, service=self.service)
        gpu(self.c, 0, lambda i: 30, lambda i: 5000, lambda i: 11000)
        add("container_cpu_usage_seconds_total", {"pod": self.c, "container": "server"}, lambda i: 2.5 * i)
        add("container_memory_working_set_bytes", {"pod": self.c, "container": "server"}, lambda i: GiB)
        requests(self.c, "server", 1, 2 * GiB, 1)
        istio = {"pod": self.c, "destination_workload": self.service}
        add("istio_requests_total", {**istio, "reporter": "destination", "response_code": "200"},
            lambda i: 500 * i if i <= 18 else 9000 + 600 * (i - 18))
        add("istio_requests_total", {**istio, "reporter": "destination", "response_code": "503"}, lambda i: 10 * i)
        add("istio_requests_total", {**istio, "reporter": "source", "response_code": "200"}, lambda i: 5000 * i)
        server = {**istio, "reporter": "destination"}
        add("istio_request_duration_milliseconds_count", server, lambda i: 510 * i)
        add("istio_request_duration_milliseconds_sum", server,
            lambda i: 20 * 510 * min(i, 18) + 25 * 510 * max(0, i - 18))
        for le, per_step in BUCKETS:
            add("istio_request_duration_milliseconds_bucket", {**server, "le": le}, lambda i, n=per_step: n * i)
        return out

    # --- what must come out ---
    def expected(self) -> dict[tuple[str, int], PodSample]:
        rates = [n / 5 for _, n in BUCKETS]  # histogram_quantile(0.99) over the bucket rates, by hand:
        rank = 0.99 * rates[-1]  # 100.98 of 102 -> in the (50, 100] bucket (98 below it, 101 at its top)
        p99 = 50 + (100 - 50) * ((rank - rates[2]) / (rates[3] - rates[2]))  # 99.67 ms
        out = {}
        for i, t in enumerate(self.ts):
            first = i == 0  # irate needs two samples
            out[(self.a, t)] = PodSample(
                ts=t, namespace=NS, pod=self.a, job=101, run=2,
                gpu_util=(40 + 5 * (i % 7) + 60) / 2 / 100, gpu_util_peak=(40 + 5 * (i % 7) + 60) / 2 / 100,
                gpu_mem_used_mib=3000.0 + 10 * i,
                gpu_mem_free_mib=29000.0 - 10 * i,
                cpu_cores=None if first else (2.0 if i <= 20 else 3.5) + 0.25,
                mem_bytes=float(8 * GiB + 256 * MiB + i * MiB),
                req_gpus=2.0, req_cpu_cores=4.5, req_mem_bytes=float(16 * GiB + 512 * MiB))
            out[(self.b, t)] = PodSample(
                ts=t, namespace=NS, pod=self.b, job=102, run=1, cpu_cores=None if first else 1.0,
                mem_bytes=float(2 * GiB), req_cpu_cores=2.0, req_mem_bytes=float(4 * GiB))
            out[(self.c, t)] = PodSample(
                ts=t, namespace=NS, pod=self.c, service=self.service, gpu_util=0.3, gpu_util_peak=0.3,
                gpu_mem_used_mib=5000.0,
                gpu_mem_free_mib=11000.0, cpu_cores=None if first else 0.5, mem_bytes=float(GiB),
                req_gpus=1.0, req_cpu_cores=1.0, req_mem_bytes=float(2 * GiB),
                qps=None if first else (102.0 if i <= 18 else 122.0), errors_per_s=None if first else 2.0,
                latency_mean_ms=None if first else (20.0 if i <= 18 else 25.0),
                latency_p99_ms=None if first else p99)
        return out


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    sc = Scenario()
    promwrite.write(PROMETHEUS_URL, sc.series())
    last = sc.ts[-1] / 1000
    promwrite.wait_queryable(PROMETHEUS_URL, f'count(kube_pod_labels{{pod=~".*-{sc.uid}-.*"}})', last, 3)
    promwrite.wait_queryable(
        PROMETHEUS_URL, f'count(istio_request_duration_milliseconds_bucket{{pod="{sc.c}"}})', last, len(BUCKETS))
    return sc


@pytest.fixture
def prefix(settings):
    """A unique topic prefix (and cursor key); the topics are deleted afterwards."""
    name = f"it-pub-{uuid.uuid4().hex[:8]}"
    settings.TIDAL_TOPIC_PREFIX = name
    settings.PROMETHEUS_URL, settings.KAFKA_BOOTSTRAP, settings.REDIS_URL = PROMETHEUS_URL, KAFKA_BOOTSTRAP, REDIS_URL
    settings.TIDAL_METRICS_STEP_S, settings.TIDAL_PUBLISHER_DELAY_S = STEP // 1000, 10
    settings.TIDAL_PUBLISHER_INTERVAL_S = 1
    yield name
    drop_prefix(name)


def set_cursor(prefix: str, ts_ms: int) -> None:
    redis.Redis.from_url(REDIS_URL).set(cursor_key(prefix), str(ts_ms))


def get_cursor(prefix: str) -> int:
    return int(redis.Redis.from_url(REDIS_URL).get(cursor_key(prefix)))


def consume(prefix: str, pods: set[str], expected: int, timeout: float = 30) -> list[tuple[str, int, bytes]]:
    """(key, partition, value) of every record of `pods` on the topic, read from the earliest offset.

    Polls until `expected` records arrived, then 2 s more to catch duplicates (Tansu's end offsets
    are not reliable, so never bound the read by them)."""
    topic = Topics(prefix).pod_samples
    consumer = KafkaConsumer(bootstrap_servers=KAFKA_BOOTSTRAP, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        partitions = consumer.partitions_for_topic(topic)
        assert partitions, f"topic {topic} missing"
        consumer.assign([TopicPartition(topic, p) for p in sorted(partitions)])
        got: list[tuple[str, int, bytes]] = []
        deadline, settle = time.monotonic() + timeout, None
        while time.monotonic() < deadline and (settle is None or time.monotonic() < settle):
            for batch in consumer.poll(timeout_ms=300).values():
                got += [(r.key.decode(), r.partition, r.value) for r in batch if r.key.decode() in pods]
            if settle is None and len(got) >= expected:
                settle = time.monotonic() + 2
        return got
    finally:
        consumer.close()


def check_exactly_once(sc: Scenario, got: list[tuple[str, int, bytes]]) -> dict[tuple[str, int], PodSample]:
    samples = [decode(PodSample, v) for _, _, v in got]
    keys = [(s.pod, s.ts) for s in samples]
    assert len(keys) == len(set(keys)), "a (pod, step) was published twice"
    assert set(keys) == set(sc.expected()), "missing or extra (pod, step)"
    assert all(k == s.pod for (k, _, _), s in zip(got, samples, strict=True))  # keyed by pod
    for pod in (sc.a, sc.b, sc.c):  # one key, one partition
        assert len({p for k, p, _ in got if k == pod}) == 1
    return {(s.pod, s.ts): s for s in samples}


def assert_hand_computed(sc: Scenario, got: dict[tuple[str, int], PodSample]) -> None:
    for key, want in sc.expected().items():
        have = got[key]
        for f in PodSample.__dataclass_fields__:
            w, h = getattr(want, f), getattr(have, f)
            if isinstance(w, float):
                assert h == pytest.approx(w, rel=1e-12, abs=1e-12), (key, f, h, w)
            else:
                assert h == w, (key, f, h, w)


def test_records_are_hand_computed_and_a_restart_covers_every_step_once(scenario, prefix):
    sc = scenario
    set_cursor(prefix, sc.base - STEP)  # just before the first sample
    mid = sc.ts[17]
    call_command("publish_metrics", "--until", str(mid / 1000))
    assert get_cursor(prefix) == mid  # stopped mid-way, exactly at --until
    first = consume(prefix, {sc.a, sc.b, sc.c}, 3 * 18)
    assert sorted({decode(PodSample, v).ts for _, _, v in first}) == sc.ts[:18]

    call_command("publish_metrics", "--once")  # a second instance resumes after the cursor
    assert get_cursor(prefix) >= sc.ts[-1] + STEP  # now - delay, past the stale markers
    got = check_exactly_once(sc, consume(prefix, {sc.a, sc.b, sc.c}, 3 * N))
    assert_hand_computed(sc, got)
    # spot checks, spelled out
    assert got[(sc.a, sc.ts[3])].gpu_util == pytest.approx((55 + 60) / 200)
    assert got[(sc.a, sc.ts[20])].cpu_cores == 2.25 and got[(sc.a, sc.ts[21])].cpu_cores == 3.75
    assert got[(sc.c, sc.ts[30])].latency_p99_ms == pytest.approx(50 + 50 * (2.98 / 3))
    assert got[(sc.c, sc.ts[0])].qps is None and got[(sc.c, sc.ts[1])].errors_per_s == 2.0


def test_a_range_published_again_gives_identical_records(scenario, prefix):
    """A crash between flush and cursor save re-publishes the last chunk: same bytes, same keys."""
    sc = scenario
    set_cursor(prefix, sc.base - STEP)
    call_command("publish_metrics", "--until", str(sc.ts[-1] / 1000))
    set_cursor(prefix, sc.ts[9])  # as if the cursor save of the chunk after ts[9] was lost
    call_command("publish_metrics", "--until", str(sc.ts[-1] / 1000))
    got = consume(prefix, {sc.a, sc.b, sc.c}, 3 * N + 3 * (N - 10))
    by_key: dict[tuple[str, int], set[bytes]] = {}
    for _, _, v in got:
        s = decode(PodSample, v)
        by_key.setdefault((s.pod, s.ts), set()).add(v)
    assert set(by_key) == set(sc.expected())
    assert all(len(v) == 1 for v in by_key.values()), "re-published records differ"
    assert len(got) == 3 * N + 3 * (N - 10)


def test_sigterm_stops_cleanly_and_the_next_run_resumes(scenario, prefix):
    sc = scenario
    set_cursor(prefix, sc.base - STEP)
    env = {**os.environ, "TIDAL_TOPIC_PREFIX": prefix, "PROMETHEUS_URL": PROMETHEUS_URL,
           "KAFKA_BOOTSTRAP": KAFKA_BOOTSTRAP, "REDIS_URL": REDIS_URL, "TIDAL_PUBLISHER_INTERVAL_S": "1",
           "TIDAL_METRICS_STEP_S": "5", "TIDAL_PUBLISHER_DELAY_S": "10"}
    # small cycles and chunks so the signal lands while steps remain
    proc = subprocess.Popen([sys.executable, "manage.py", "publish_metrics", "--max-steps", "6", "--chunk-steps", "3"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while redis.Redis.from_url(REDIS_URL).get(cursor_key(prefix)) in (None, str(sc.base - STEP).encode()):
            assert proc.poll() is None and time.monotonic() < deadline, "publisher never published"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "published steps=" in out
    stopped_at = get_cursor(prefix)
    call_command("publish_metrics", "--once", "--max-steps", "720")
    assert get_cursor(prefix) > stopped_at
    got = check_exactly_once(sc, consume(prefix, {sc.a, sc.b, sc.c}, 3 * N))
    assert_hand_computed(sc, got)
