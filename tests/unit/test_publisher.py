"""The publisher's pure parts: the step grid, chunking, the join, NaN handling; and the cycle's cursor
rules with in-memory stand-ins for Prometheus, Kafka and Redis (the real ones: tests/integration)."""

from __future__ import annotations

import itertools

import pytest

from streaming.publisher import (
    PROMETHEUS_MAX_POINTS,
    QUERIES,
    Publisher,
    PublisherConfig,
    align_down,
    build_queries,
    chunk_range,
    cursor_key,
    join,
    plan_range,
    to_float,
)
from streaming.records import PodSample, decode

S = 5000  # step, ms
T0 = 1_700_000_000_000  # a multiple of the step


def cfg(**kw) -> PublisherConfig:
    base = {"prometheus_url": "http://prom", "kafka_bootstrap": "kafka", "redis_url": "redis://", "step_s": 5,
            "delay_s": 10, "chunk_steps": 4, "max_steps_per_cycle": 10}
    return PublisherConfig(**{**base, **kw})


def series(metric: dict, points: list[tuple[int, str]]) -> dict:
    return {"metric": metric, "values": [[t / 1000, v] for t, v in points]}


def labels(pod: str, ts: list[int], job="", run="", service="", ns="ml") -> dict:
    return series({"namespace": ns, "pod": pod, "label_tidal_io_job": job, "label_tidal_io_run": run,
                   "label_tidal_io_service": service}, [(t, "1") for t in ts])


# --- grid and chunks --------------------------------------------------------------------------------

@pytest.mark.parametrize("t, expected", [(T0, T0), (T0 + 1, T0), (T0 + S - 1, T0), (T0 + S, T0 + S)])
def test_align_down(t, expected):
    assert align_down(t, S) == expected


@pytest.mark.parametrize("cursor, now, until, first, last, end", [
    # (cursor, now - delay] on the grid
    (T0, T0 + 10_000 + 3 * S + 1234, None, T0 + S, T0 + 3 * S, T0 + 3 * S),
    # a cursor off the grid (step changed) resumes at the next grid step
    (T0 + 1000, T0 + 10_000 + 3 * S, None, T0 + S, T0 + 3 * S, T0 + 3 * S),
    # nothing new yet
    (T0 + 3 * S, T0 + 10_000 + 3 * S + 4999, None, T0 + 4 * S, T0 + 3 * S, T0 + 3 * S),
    # capped at max_steps_per_cycle = 10
    (T0, T0 + 10_000 + 50 * S, None, T0 + S, T0 + 10 * S, T0 + 50 * S),
    # --until bounds the end
    (T0, T0 + 10_000 + 50 * S, T0 + 2 * S + 100, T0 + S, T0 + 2 * S, T0 + 2 * S),
    # first start without cursor and no backfill: just the newest step
    (None, T0 + 10_000 + 777, None, T0, T0, T0),
])
def test_plan_range(cursor, now, until, first, last, end):
    plan = plan_range(cursor, now, cfg(), until)
    assert (plan.first_ms, plan.last_ms, plan.end_ms) == (first, last, end)
    assert plan.steps == max(0, (last - first) // S + 1)


def test_first_start_backfill_is_aligned():
    plan = plan_range(None, T0 + 10_000 + 60_000 + 2500, cfg(backfill_s=60, max_steps_per_cycle=100))
    assert plan.first_ms == T0 and plan.last_ms == T0 + 12 * S and plan.steps == 13


def test_chunks_cover_the_range_exactly_once():
    chunks = chunk_range(T0, T0 + 9 * S, S, 4)
    assert chunks == [(T0, T0 + 3 * S), (T0 + 4 * S, T0 + 7 * S), (T0 + 8 * S, T0 + 9 * S)]
    assert chunk_range(T0, T0, S, 4) == [(T0, T0)]
    assert chunk_range(T0 + S, T0, S, 4) == []


def test_chunks_respect_prometheus_points_limit():
    chunks = chunk_range(T0, T0 + 30_000 * S, S, 10**6)
    assert all((b - a) // S + 1 <= PROMETHEUS_MAX_POINTS for a, b in chunks)
    assert chunks[0][0] == T0 and chunks[-1][1] == T0 + 30_000 * S
    assert all(nxt[0] == prev[1] + S for prev, nxt in itertools.pairwise(chunks))


@pytest.mark.parametrize("raw, expected", [
    ("1.5", 1.5), ("0", 0.0), ("NaN", None), ("+Inf", None), ("-Inf", None), (None, None), ("x", None),
])
def test_to_float(raw, expected):
    assert to_float(raw) == expected


def test_queries_cover_every_metric_field():
    names = {q.name for q in QUERIES}
    metric_fields = set(PodSample.__dataclass_fields__) - {"ts", "namespace", "pod", "job", "run", "service",
                                                           "req_gpus", "req_cpu_cores", "req_mem_bytes",
                                                           "estimated"}
    assert names == metric_fields | {"requests", "labels"}


def test_dcgm_gauges_are_read_over_the_step_not_at_its_point():
    queries = {q.name: q.expr for q in build_queries(step_s=5)}
    assert "avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=\"\"}[4999ms])" in queries["gpu_util"]
    assert "max_over_time(DCGM_FI_PROF_SM_ACTIVE{pod!=\"\"}[4999ms])" in queries["sm_active_peak"]
    assert "by (namespace, pod, UUID)" in queries["sm_active"]
    assert "[9999ms]" in {q.name: q.expr for q in build_queries(step_s=10)}["gpu_mem_used_mib"]


def test_join_splits_a_shared_gpus_activity_by_gpu_util_and_marks_it_estimated():
    """Two pods time-sliced on GPU-1 (each reads the GPU's SM active, 0.6, and its own GPU util), a third alone."""
    def dev(pod: str, uuid: str, value: str) -> dict:
        return series({"namespace": "ml", "pod": pod, "UUID": uuid}, [(T0, value)])

    results = {
        "labels": [labels(p, [T0], job=str(i), run="1") for i, p in enumerate(("a", "b", "c"), start=1)],
        "gpu_util": [dev("a", "GPU-1", "0.6"), dev("b", "GPU-1", "0.2"), dev("c", "GPU-2", "0.5")],
        "gpu_util_peak": [dev("a", "GPU-1", "0.9"), dev("b", "GPU-1", "0.3"), dev("c", "GPU-2", "0.7")],
        "sm_active": [dev("a", "GPU-1", "0.6"), dev("b", "GPU-1", "0.6"), dev("c", "GPU-2", "0.4")],
        "sm_active_peak": [dev("a", "GPU-1", "0.8"), dev("b", "GPU-1", "0.8"), dev("c", "GPU-2", "0.45")],
    }
    got = {s.pod: s for s in join(results, S)}
    assert (got["a"].gpu_util, got["a"].gpu_util_peak) == (0.6, 0.9)  # per pod already: kept
    assert got["a"].sm_active == pytest.approx(0.45) and got["b"].sm_active == pytest.approx(0.15)
    assert got["a"].sm_active_peak == pytest.approx(0.6) and got["b"].sm_active_peak == pytest.approx(0.2)
    assert got["a"].estimated == got["b"].estimated == 1
    assert (got["c"].sm_active, got["c"].sm_active_peak, got["c"].estimated) == (0.4, 0.45, None)


# --- join -------------------------------------------------------------------------------------------

def test_join_lines_up_metrics_by_pod_and_ts():
    ts = [T0, T0 + S]
    results = {
        "labels": [labels("train-a", ts, job="7", run="2"), labels("infer-b", ts, service="chat", ns="serve")],
        "gpu_util": [series({"namespace": "ml", "pod": "train-a"}, [(T0, "0.5"), (T0 + S, "0.75")])],
        "cpu_cores": [series({"namespace": "ml", "pod": "train-a"}, [(T0 + S, "2.25")]),
                      series({"namespace": "serve", "pod": "infer-b"}, [(T0, "0.5"), (T0 + S, "0.5")])],
        "requests": [series({"namespace": "ml", "pod": "train-a", "resource": "cpu"}, [(T0, "4"), (T0 + S, "4")]),
                     series({"namespace": "ml", "pod": "train-a", "resource": "nvidia_com_gpu"}, [(T0, "2")]),
                     series({"namespace": "ml", "pod": "train-a", "resource": "memory"}, [(T0, "1024")]),
                     series({"namespace": "ml", "pod": "train-a", "resource": "ephemeral"}, [(T0, "9")])],
        "qps": [series({"namespace": "serve", "pod": "infer-b"}, [(T0 + S, "10")])],
        "latency_mean_ms": [series({"namespace": "serve", "pod": "infer-b"}, [(T0, "NaN"), (T0 + S, "20")])],
        "latency_p99_ms": [series({"namespace": "serve", "pod": "infer-b"}, [(T0, "NaN"), (T0 + S, "+Inf")])],
    }
    got = join(results, S)
    assert got == [
        PodSample(ts=T0, namespace="ml", pod="train-a", job=7, run=2, gpu_util=0.5, req_cpu_cores=4.0,
                  req_gpus=2.0, req_mem_bytes=1024.0),
        PodSample(ts=T0, namespace="serve", pod="infer-b", service="chat", cpu_cores=0.5),
        PodSample(ts=T0 + S, namespace="ml", pod="train-a", job=7, run=2, gpu_util=0.75, cpu_cores=2.25,
                  req_cpu_cores=4.0),
        # no 5xx series while requests flow: 0 errors/s; +Inf p99 -> null
        PodSample(ts=T0 + S, namespace="serve", pod="infer-b", service="chat", cpu_cores=0.5, qps=10.0,
                  errors_per_s=0.0, latency_mean_ms=20.0),
    ]


def test_join_skips_unlabelled_pods_label_only_rows_and_off_grid_points():
    results = {
        "labels": [labels("pending", [T0], job="1"), labels("nolabels", [T0])],
        "requests": [series({"namespace": "ml", "pod": "pending", "resource": "cpu"}, [(T0, "1")])],
        "mem_bytes": [series({"namespace": "ml", "pod": "nolabels"}, [(T0, "5")]),
                      series({"namespace": "ml", "pod": "other"}, [(T0, "5")]),
                      series({"namespace": "ml", "pod": ""}, [(T0, "5")])],
        "gpu_util": [series({"namespace": "ml", "pod": "pending"}, [(T0 + 1, "0.5")])],
    }
    assert join(results, S) == []


def test_join_bad_job_label_and_conflicting_label_sets():
    results = {
        "labels": [labels("p", [T0], job="abc"), labels("q", [T0], job="3", run="1"),
                   labels("q", [T0], job="3", run="2")],
        "mem_bytes": [series({"namespace": "ml", "pod": "p"}, [(T0, "5")]),
                      series({"namespace": "ml", "pod": "q"}, [(T0, "6")])],
    }
    assert join(results, S) == [PodSample(ts=T0, namespace="ml", pod="q", job=3, run=2, mem_bytes=6.0)]


def test_join_is_deterministic_whatever_the_answer_order():
    a = {"labels": [labels(f"p{i}", [T0, T0 + S], job=str(i)) for i in range(5)],
         "mem_bytes": [series({"namespace": "ml", "pod": f"p{i}"}, [(T0, str(i)), (T0 + S, str(i))])
                       for i in range(5)]}
    b = {k: list(reversed(v)) for k, v in reversed(list(a.items()))}
    assert join(a, S) == join(b, S)
    assert [(s.ts, s.pod) for s in join(a, S)] == sorted((s.ts, s.pod) for s in join(a, S))


# --- the cycle with in-memory stand-ins ---------------------------------------------------------------

class FakeProm:
    """Answers every expression with one pod present at every step."""

    def __init__(self):
        self.calls = []

    def custom_query_range(self, query, start_time, end_time, step):
        self.calls.append((query, start_time.timestamp(), end_time.timestamp(), step))
        a, b, st = int(start_time.timestamp() * 1000), int(end_time.timestamp() * 1000), int(step) * 1000
        ts = list(range(a, b + 1, st))
        if "kube_pod_labels" in query:
            return [labels("p", ts, job="1")]
        if query.startswith("sum by (namespace, pod) (container_memory"):
            return [series({"namespace": "ml", "pod": "p"}, [(t, "1") for t in ts])]
        return []


class Future:
    is_done = True

    def __init__(self, error=None):
        self.exception = error

    def failed(self):
        return self.exception is not None


class FakeProducer:
    def __init__(self):
        self.sent, self.fail = [], False

    def send(self, topic, key, value):
        self.sent.append((topic, key, value))
        return Future(RuntimeError("not acked") if self.fail else None)

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


class FakeRedis(dict):
    def set(self, k, v):
        self[k] = v


def publisher(now_ms, **kw):
    clock = {"now": now_ms / 1000}
    prom, producer, redis = FakeProm(), FakeProducer(), FakeRedis()
    pub = Publisher(cfg(**kw), prometheus=lambda: prom, producer=producer, redis_client=redis,
                    clock=lambda: clock["now"])
    return pub, prom, producer, redis, clock


def test_cycle_publishes_each_step_once_and_advances_the_cursor_per_chunk():
    pub, prom, producer, redis, clock = publisher(T0 + 10_000 + 6 * S)
    redis[cursor_key("tidal")] = str(T0)
    stats = pub.run_cycle()
    assert (stats.steps, stats.records, stats.cursor_ms, stats.more) == (6, 6, T0 + 6 * S, False)
    # two chunks (4 + 2 steps), one query_range per expression per chunk, start/end on the grid
    assert len(prom.calls) == 2 * len(QUERIES)
    assert {(c[1], c[2]) for c in prom.calls} == {((T0 + S) / 1000, (T0 + 4 * S) / 1000),
                                                  ((T0 + 5 * S) / 1000, (T0 + 6 * S) / 1000)}
    assert [decode(PodSample, v).ts for _, _, v in producer.sent] == [T0 + i * S for i in range(1, 7)]
    assert {(t, k) for t, k, _ in producer.sent} == {("tidal.metrics.pods", b"p")}
    assert redis[cursor_key("tidal")] == str(T0 + 6 * S)
    # nothing new: an empty cycle
    assert pub.run_cycle().steps == 0
    clock["now"] += 5
    assert [decode(PodSample, v).ts for _, _, v in producer.sent[6:]] == []
    assert pub.run_cycle().records == 1 and decode(PodSample, producer.sent[-1][2]).ts == T0 + 7 * S


def test_cycle_is_capped_and_reports_more():
    pub, _, producer, redis, _ = publisher(T0 + 10_000 + 25 * S)
    redis[cursor_key("tidal")] = str(T0)
    stats = pub.run_cycle()
    assert (stats.steps, stats.cursor_ms, stats.more) == (10, T0 + 10 * S, True)
    assert pub.run_cycle().cursor_ms == T0 + 20 * S
    last = pub.run_cycle()
    assert (last.cursor_ms, last.more) == (T0 + 25 * S, False)
    assert [decode(PodSample, v).ts for _, _, v in producer.sent] == [T0 + i * S for i in range(1, 26)]


def test_unacked_chunk_keeps_the_cursor_and_is_republished_identically():
    pub, _, producer, redis, _ = publisher(T0 + 10_000 + 6 * S)
    redis[cursor_key("tidal")] = str(T0)
    producer.fail = True
    with pytest.raises(RuntimeError):
        pub.run_cycle()
    assert redis[cursor_key("tidal")] == str(T0)
    failed = list(producer.sent)
    producer.fail, producer.sent = False, []
    pub.run_cycle()
    assert producer.sent[:4] == failed  # byte-identical records for the same range
    assert decode(PodSample, failed[0][2]).job == 1


def test_first_start_pins_the_cursor_before_publishing():
    pub, _, producer, redis, _ = publisher(T0 + 10_000 + 60_000, backfill_s=10)
    producer.fail = True
    with pytest.raises(RuntimeError):
        pub.run_cycle()
    assert redis[cursor_key("tidal")] == str(T0 + 60_000 - 10_000 - S)


def test_run_until_stops_when_the_until_step_is_published():
    pub, _, producer, redis, _ = publisher(T0 + 10_000 + 40 * S)
    redis[cursor_key("tidal")] = str(T0)
    pub.run(until_s=(T0 + 23 * S + 100) / 1000)  # 3 cycles (cap 10), no waiting in between
    assert [decode(PodSample, v).ts for _, _, v in producer.sent] == [T0 + i * S for i in range(1, 24)]
    assert redis[cursor_key("tidal")] == str(T0 + 23 * S)


def test_a_selector_narrows_every_query():
    queries = build_queries(selector='namespace=~"team-a|team-b"')
    assert all('pod!="", namespace=~"team-a|team-b"' in q.expr for q in queries)
    assert not any("namespace=~" in q.expr for q in build_queries())
