"""Fault: Prometheus down (issue 14). On a private Prometheus (never the stack's), the real Kafka (Tansu), Redis
and PostgreSQL.

What "no gap" can mean. While the Prometheus *server* is down nothing is scraped: those samples never exist, and no
publisher can bring them back. What it can and must do: publish every step Prometheus holds exactly once — including
the steps it had not reached yet when Prometheus went down (Prometheus keeps them: its WAL is replayed on restart) —
never move its cursor past a step it could not read, and carry on after the hole. Inside the hole Prometheus answers
what its 5-minute lookback gives (the last value before the outage; irate() rates for 1 minute), and nothing after
that: the publisher publishes what Prometheus answers, so the first 5 minutes of a hole are the last value carried
forward, not measurements (Prometheus' own semantics, as any dashboard shows them), and the rest stays a hole.

Downstream, a hole is missing minutes: the autoscaler holds on stale metrics and falls back to yesterday's maximum
after 5 silent minutes (docs/concepts/autoscaling.md#the-policy), and the scheduler right-sizes only from runs that measured
something — a task whose runs were not measured keeps its request (docs/concepts/quotas-and-priority.md#right-sizing)
— until the late minutes
arrive.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid
from decimal import Decimal

import pytest
import redis

from cluster.clock import VirtualClock, utc
from cluster.simulated import store
from colocation import autoscaler
from colocation.loads import ProfileLoads
from colocation.models import InferenceService
from colocation.serving_signals import ServingSignals
from core.models import Decision
from profiling import services as profiling_services
from profiling.models import RunSummary, ServiceMinute
from scheduler.models import JobRun, JobStatus, TrainingJob
from streaming.publisher import Publisher, PublisherConfig, cursor_key
from streaming.records import PodSample, decode
from streaming.topics import Topics, ensure_topics
from tests.integration import promwrite
from tests.integration.livecluster import scaling_lab, tick
from tests.integration.profiles import at, end_run, job_minute, past_jobs
from tests.integration.services import KAFKA_BOOTSTRAP, REDIS_URL, drop_prefix
from tests.integration.test_publisher import consume
from tests.system.private_services import private_prometheus

STEP = 5000  # ms
PRE, HOLE, POST = 24, 84, 24  # steps before, during (7 minutes: longer than the 5-minute lookback) and after
DELAY_S = 10
RATE_WINDOW_STEPS = 12  # the publisher's irate window (1 minute), in steps
MINUTE = 60


# --- the publisher -------------------------------------------------------------------------------------------


class Feed:
    """Two training pods, one sample per step: GPU utilization (10 + i) % and a CPU counter growing 2 cores/s,
    where i is the step's index; the hole's steps are never written (missed scrapes)."""

    def __init__(self) -> None:
        uid = uuid.uuid4().hex[:8]
        self.pods = {f"train-{uid}-a": (9101, 1), f"train-{uid}-b": (9102, 3)}  # pod -> (job, run)
        self.base = (int(time.time() * 1000) - 15 * MINUTE * 1000) // STEP * STEP
        self.ts = [self.base + i * STEP for i in range(PRE + HOLE + POST)]

    def series(self, steps: range, *, last: bool = False) -> list[promwrite.Series]:
        out = []
        for pod, (job, run) in self.pods.items():
            pod_labels = {"namespace": "tidal-faults", "pod": pod}

            def add(name: str, labels: dict, value) -> None:
                samples: list = [(self.ts[i], float(value(i))) for i in steps]
                if last:
                    samples.append((self.ts[steps[-1]] + STEP, promwrite.STALE))  # the pod ended
                out.append(({"__name__": name, **pod_labels, **labels}, samples))

            add("kube_pod_labels", {"label_tidal_io_job": str(job), "label_tidal_io_run": str(run)}, lambda i: 1)
            add("DCGM_FI_DEV_GPU_UTIL", {"gpu": "0"}, lambda i: 10 + i)
            add("container_cpu_usage_seconds_total", {"container": "main"}, lambda i: 10 * i)
        return out

    def end_ms(self) -> int:
        return self.ts[-1] + 2 * STEP  # past the staleness markers

    def measured(self, i: int) -> dict:
        """What the publisher must say of step i, written before or after the hole."""
        first = i in (0, PRE + HOLE)  # irate needs two samples within its 1-minute window
        return {"gpu_util": (10 + i) / 100, "cpu_cores": None if first else 2.0}


class ManualClock:
    def __init__(self, at_ms: int) -> None:
        self.at_ms = at_ms

    def __call__(self) -> float:
        return self.at_ms / 1000


def wait_for(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def prefix():
    name = f"it-pfault-{uuid.uuid4().hex[:8]}"
    ensure_topics(KAFKA_BOOTSTRAP, Topics(name))
    yield name
    drop_prefix(name)


def test_publisher_waits_out_a_prometheus_outage_and_publishes_every_held_step_once(prefix, caplog):
    feed = Feed()
    r = redis.Redis.from_url(REDIS_URL)
    cursor = lambda: int(r.get(cursor_key(prefix)))  # noqa: E731
    r.set(cursor_key(prefix), feed.base - STEP)
    clock = ManualClock(feed.ts[11] + DELAY_S * 1000)

    with private_prometheus() as prom:
        promwrite.write(prom.url, feed.series(range(PRE)))
        promwrite.wait_queryable(prom.url, f'count(kube_pod_labels{{pod=~"{"|".join(feed.pods)}"}})',
                                 feed.ts[PRE - 1] / 1000, 2)
        cfg = PublisherConfig(prometheus_url=prom.url, kafka_bootstrap=KAFKA_BOOTSTRAP, redis_url=REDIS_URL,
                              topic_prefix=prefix, step_s=STEP // 1000, interval_s=0.2, delay_s=DELAY_S,
                              chunk_steps=12, query_timeout_s=5)
        publisher = Publisher(cfg, clock=clock)
        thread = threading.Thread(target=publisher.run, name="publisher", daemon=True)
        caplog.set_level(logging.WARNING, logger="streaming.publisher")
        thread.start()
        try:
            wait_for(lambda: cursor() == feed.ts[11], "the first half of what was written to be published")

            # Prometheus goes down; time runs on through the hole.
            prom.stop()
            clock.at_ms = feed.ts[PRE + HOLE - 1] + DELAY_S * 1000
            failures = lambda: [rec for rec in caplog.records if "Prometheus" in rec.getMessage()]  # noqa: E731
            wait_for(lambda: len(failures()) >= 2, "two failed cycles")
            assert thread.is_alive(), "the publisher must wait, not die"
            assert cursor() == feed.ts[11], "the cursor never passes a step it could not read"
            message = failures()[-1].getMessage()
            assert "Connection refused" in message and "cursor stays at" in message, message
            assert all(rec.levelno == logging.WARNING and rec.exc_info is None for rec in failures()), \
                "an outage is a one-line warning per retry, not a traceback"

            # It comes back with what it held (its WAL is replayed); the hole was never scraped.
            prom.start()
            wait_for(lambda: cursor() == feed.ts[PRE + HOLE - 1], "the publisher to resume after the outage")
            # Scrapes land again after the hole, and time goes on.
            promwrite.write(prom.url, feed.series(range(PRE + HOLE, PRE + HOLE + POST), last=True))
            clock.at_ms = feed.end_ms() + DELAY_S * 1000
            wait_for(lambda: cursor() == feed.end_ms(), "the steps after the outage to be published")
        finally:
            publisher.stop_event.set()
            thread.join(timeout=30)
            publisher.close()
        # What Prometheus holds now for the whole range, read in one go: the stream must be exactly this.
        reader = Publisher(cfg, clock=clock)
        try:
            once = {(s.pod, s.ts): s for s in reader.samples(feed.ts[0], feed.end_ms())}
        finally:
            reader.close()

    got = [decode(PodSample, value) for _, _, value in consume(prefix, set(feed.pods), len(once))]
    keys = [(s.pod, s.ts) for s in got]
    assert len(keys) == len(set(keys)), "a (pod, step) was published twice"
    assert {(s.pod, s.ts): s for s in got} == once, "the stream differs from what Prometheus holds"

    by_step = {(s.pod, (s.ts - feed.base) // STEP): s for s in got}
    for pod in feed.pods:
        for i in (*range(PRE), *range(PRE + HOLE, PRE + HOLE + POST)):  # every measured step, before and after
            want = feed.measured(i)
            assert by_step[(pod, i)].gpu_util == pytest.approx(want["gpu_util"]), (pod, i)
            assert by_step[(pod, i)].cpu_cores == want["cpu_cores"], (pod, i)
        carried = [i for i in range(PRE, PRE + HOLE) if (pod, i) in by_step]
        # The hole: GPU util is read over each step, so a step no scrape landed in has none; irate's 1-minute window
        # still holds the last two CPU samples for up to a minute; then nothing is invented.
        assert carried == list(range(PRE, PRE + len(carried))), carried
        assert 0 < len(carried) <= RATE_WINDOW_STEPS, carried
        assert {by_step[(pod, i)].gpu_util for i in carried} == {None}
        assert {by_step[(pod, i)].cpu_cores for i in carried} == {2.0}


# --- the autoscaler's LLM serving signals ----------------------------------------------------------------------


def test_serving_signals_read_nothing_while_prometheus_is_down_and_the_same_minutes_once_it_is_back(caplog):
    """colocation/serving_signals.py on a Prometheus that goes down: a tick reads no serving signal (the other
    source's minutes alone, docs/concepts/autoscaling.md) and says so in a warning, never an exception; back up (its
    WAL replayed), the same minutes read again."""
    service = f"llm-{uuid.uuid4().hex[:8]}"
    now = time.time() // MINUTE * MINUTE
    ts = [int((now - 10 * MINUTE) * 1000) + i * STEP for i in range(10 * MINUTE * 1000 // STEP)]  # 10 minutes
    pod = {"namespace": "tidal-faults", "pod": f"{service}-0"}
    series = [({"__name__": "kube_pod_labels", **pod, "label_tidal_io_service": service}, [(t, 1.0) for t in ts]),
              ({"__name__": "vllm:num_requests_waiting", **pod}, [(t, 2.0) for t in ts])]
    with private_prometheus() as prom:
        promwrite.write(prom.url, series)
        promwrite.wait_queryable(prom.url, f'count(kube_pod_labels{{pod="{service}-0"}})', ts[-1] / 1000, 1)
        read = lambda: ServingSignals(prom.url, pod["namespace"], timeout_s=2).of(service, now)  # noqa: E731
        before = read()
        assert len(before) >= 8 and all(m["queue"] == 2.0 and m["replicas"] == 1.0 for m in before.values()), before
        prom.stop()
        with caplog.at_level(logging.WARNING, logger="colocation.serving_signals"):
            assert read() == {}
        assert "LLM serving signals not read from Prometheus" in caplog.text
        prom.start()
        assert read() == before


# --- the autoscaler: stale, then silent, then back -----------------------------------------------------------


@pytest.fixture
def lab(world, settings):
    """An online T4 node for room, the simulated cluster on a virtual clock, a Redis namespace of its own."""
    clock = VirtualClock(time.time() // MINUTE * MINUTE)
    with scaling_lab(world, settings, clock=clock, prefix="test-pfault") as (cluster, r, namespace):
        yield cluster, clock, r, namespace


def minutes_written(service: InferenceService, newest: float, count: int, *, gpu: float, replicas: int) -> None:
    """`count` service-load minutes ending with the one starting at `newest`, as the profile sink writes them."""
    for i in range(count):
        start = newest - i * MINUTE
        ServiceMinute.objects.get_or_create(service=service, minute=utc(start), defaults=dict(
            samples=24, replicas=replicas, gpu_util_mean=gpu, cpu_util_mean=0.2, qps=50.0, emitted_at=utc(start)))


def test_autoscaler_holds_on_stale_metrics_then_falls_back_to_yesterdays_maximum_then_resumes(world, lab):
    cluster, clock, r, namespace = lab
    ranker = world.service(name="ranker", gpu_model=world.gpu_models["T4"], gpus_per_replica=Decimal("0.25"),
                           replicas=2, min_replicas=2, max_replicas=8)  # gpu thresholds 0.2 / 0.5 / 0.8
    yesterday = Decision.objects.create(kind=Decision.Kind.SCALING, subject="service:ranker", reason="scale-out",
                                        message="ranker scales out to 5 replicas", department=ranker.department,
                                        data={"current": 3, "target": 5})
    Decision.objects.filter(pk=yesterday.pk).update(created_at=utc(clock.now() - 86400))

    def autoscale(seconds: float) -> str:
        clock.advance(seconds)
        cluster.advance()
        report = autoscaler.autoscale_tick(backend=cluster, now=clock.now(), loads=ProfileLoads(), redis=r,
                                           namespace=namespace, forecasts=autoscaler.no_forecast)
        return report.decisions["ranker"]

    assert autoscale(0) == "skip-scaling"  # its ReplicaSet was just created; the pods start
    outage = clock.now()  # the newest minute written is the one that ended now; nothing after it
    minutes_written(ranker, outage - MINUTE, 10, gpu=0.5, replicas=2)
    assert autoscale(30) == "hold"  # fresh metrics within the thresholds
    assert autoscale(60) == "hold"  # the newest minute ended 90 s ago: within the 2-minute bound
    assert autoscale(60) == "stale-metrics"  # 150 s: dropped
    assert autoscale(120) == "stale-metrics"  # 4.5 silent minutes: still waiting
    assert autoscale(60) == "fallback-yesterday-max"  # 5.5 silent minutes
    assert cluster.replicaset("ranker").replicas == 5
    ranker.refresh_from_db()
    assert ranker.replicas == 5

    scaling = list(Decision.objects.filter(kind=Decision.Kind.SCALING, subject="service:ranker",
                                           created_at__gt=utc(clock.now() - 3600)).order_by("id"))
    assert [d.reason for d in scaling] == ["skip-scaling", "hold", "stale-metrics", "fallback-yesterday-max"]
    stale, fallback = scaling[2], scaling[3]
    assert stale.message == "ranker: no fresh metrics for 2 minutes; stays at 2"
    assert fallback.message == "ranker: no metrics for 5+ minutes; restored to yesterday's maximum of 5 replicas"
    assert fallback.data == {"silent_minutes": 5, "current": 2, "target": 5}

    # Metrics come back (at 5 replicas): once the count has been stable 3 minutes, the rules apply again.
    for _ in range(7):  # its new pods start, the count ages past 3 minutes, 5 minutes are measured at 5 replicas
        autoscale(MINUTE)
    minutes_written(ranker, clock.now() // MINUTE * MINUTE - MINUTE, 5, gpu=0.1, replicas=5)
    assert autoscale(0) == "scale-in"  # under minRate 20% for 5 minutes: floor(0.1/0.5×5) = 1, at least 2
    assert cluster.replicaset("ranker").replicas == 2


# --- the scheduler: right-sizing from the runs that measured something ---------------------------------------


def test_scheduler_right_sizes_only_from_measured_runs_and_uses_late_minutes_when_they_arrive(world, cluster):
    # Task "steady": 3 measured runs (40% GPU, 30% peak GPU memory, 1 core mean, 1.5 peak), then a 4th run that
    # ended while Prometheus was down: no minute was ever profiled.
    past_jobs(world, *[{"gpu": (0.4, 0.5), "gpu_mem": (0.2, 0.3), "cores": (1.0, 1.5)}] * 3,
              name="steady", gpus="2", cpu_milli=8000)
    unmeasured_run(world, name="steady", gpus="2", cpu_milli=8000, minute=100)
    # Task "dark": its only run ended during the outage.
    dark_run = unmeasured_run(world, name="dark", gpus="2", cpu_milli=8000, minute=100)
    assert RunSummary.objects.get(run=dark_run).samples == 0

    steady = pending(world, name="steady")
    dark = pending(world, name="dark")
    assert tick(cluster).admitted == 2
    steady.refresh_from_db()
    dark.refresh_from_db()
    # the unmeasured run counts as no history, not as zero use: CPU mean 1000m / 0.5 (a zero run would give 1333m)
    assert (steady.alloc_gpus, steady.alloc_cpu_milli, steady.cpu_limit_milli) == (1, 2000, 3000)
    assert steady.score["utilization"] == -20
    # no measured run: the request is kept and the utilization term is 0, and the decision says so
    # (docs/concepts/quotas-and-priority.md#right-sizing)
    assert (dark.alloc_gpus, dark.alloc_cpu_milli, dark.cpu_limit_milli) == (2, 8000, 8000)
    admission = Decision.objects.get(subject=f"job:{dark.pk}", kind=Decision.Kind.ADMISSION)
    assert admission.data["requested"] == admission.data["rightsized"] == "2 GPU, 8000m CPU (limit 8000m), 16384 MiB"
    assert admission.data["score"]["utilization"] == 0 and "right-sized" not in admission.message

    # Prometheus is back and held the minutes of the dark run's first part: they reach the profile late, and its
    # summary is refreshed at once, so the next job of the task is right-sized from them.
    profiling_services.job_minutes_record(records=[
        job_minute(dark_run.job_id, 1, 100 + i, gpu=(0.3, 0.4), gpu_mem=(0.2, 0.3), cores=(2.0, 3.0)) for i in range(5)])
    summary = RunSummary.objects.get(run=dark_run)
    assert (summary.samples, summary.minutes) == (60, 5)
    later = pending(world, name="dark")
    tick(cluster)
    later.refresh_from_db()
    assert (later.alloc_gpus, later.alloc_cpu_milli, later.cpu_limit_milli) == (1, 4000, 6000)
    assert Decision.objects.get(subject=f"job:{later.pk}", kind=Decision.Kind.ADMISSION).data["rightsized"] == \
        "1 GPU, 4000m CPU (limit 6000m), 16384 MiB"


def unmeasured_run(world, *, minute: float, **submit) -> JobRun:
    """A finished job whose single run (5 minutes from `minute`) has no profiled minute."""
    job = world.submit(**submit)
    TrainingJob.objects.filter(pk=job.pk).update(submitted_at=at(minute - 5))
    run = JobRun.objects.create(job=job, attempt=1, pod=f"job-{job.pk}-1", started_at=at(minute))
    end_run(run, minute=minute + 5)
    TrainingJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED, finished_at=at(minute + 5))
    return run


def pending(world, name: str) -> TrainingJob:
    job = world.submit(name=name, gpus="2", cpu_milli=8000)
    job.annotations = {store.RUNTIME_LABEL: "600"}
    job.save()
    return job
