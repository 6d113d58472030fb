"""The simulated cluster's per-pod metrics (cluster/simulated/metrics.py): values by hand on tiny trace shapes,
exposition under the real exporters' names, counters that never step back, and the real trace's shapes."""

import math
import urllib.request
from itertools import pairwise

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cluster.backend import (DETACHED_FROM_LABEL, INFERENCE, JOB_LABEL, KIND_LABEL, REPLACED_BY_LABEL,
                             GROUP_LABEL, REPLICASET_LABEL, RUN_LABEL, SERVICE_LABEL, TASK_LABEL, WORKER_LABEL, PodSpec,
                             PodView, serving_pods)
from cluster.simulated import h200, llm
from cluster.simulated.exporter import serve
from cluster.simulated.alibaba import TraceError
from cluster.simulated.metrics import (BASE_LATENCY_MS, LATENCY_BUCKETS_MS, LATENCY_SIGMA, MIB,
                                       PodMetricsCollector, Series, TraceShapes, gpu_shape_of, load_traces, pick,
                                       serving_shape, training_shape, usage_of)
from cluster.types import GpuShare
from experiments.builders.scheduling import NodeBuilder

START = 1_000_000.0
TRAIN = training_shape([1, 1, 2])  # memory x0.75, x0.75, x1.5
TASK_A = h200.load()[h200.WHOLE_GPU[pick("task-a", len(h200.WHOLE_GPU))]]  # what task-a's GPUs do
SERVE = serving_shape([10, 20, 30], [0.25, 0.5, 0.75], [1, 2, 0], capacity_qps=4)
SHAPES = TraceShapes((TRAIN,), (SERVE,))
NODES = (NodeBuilder("n1", gpus=4).build(), NodeBuilder("cpu", model=None, gpus=0).build())
TRAINING_LABELS = {KIND_LABEL: "training", JOB_LABEL: "7", RUN_LABEL: "2", TASK_LABEL: "task-a"}


TWO_GPUS = (GpuShare(0, 1.0), GpuShare(1, 1.0))


def training_pod(name="job-7-run-2", gpus=TWO_GPUS, labels=TRAINING_LABELS,
                 node="n1", started_at=START) -> PodView:
    model = "T4" if gpus else None
    return PodView(PodSpec(name, 7, model, tuple(gpus), 4000, 8192, dict(labels)), node, started_at)


def web_pod(name="web-0", labels=None, ready=True) -> PodView:
    labels = labels or {KIND_LABEL: INFERENCE, SERVICE_LABEL: "web"}
    return PodView(PodSpec(name, None, "T4", (GpuShare(2, 0.5),), 1000, 2048, labels), "n1", START, ready)


def scrape(pods, now, shapes=SHAPES, namespace=None) -> dict[tuple[str, frozenset], float]:
    """Render through a registry like the exporter, parse the text back: {(sample name, labels): value}."""
    registry = CollectorRegistry()
    registry.register(PodMetricsCollector(lambda: (pods, NODES), shapes, clock=lambda: now, namespace=namespace))
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels) -> float:
    (hit,) = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    return hit


def names(samples, pod: str) -> set[str]:
    return {n for (n, ls), _ in samples.items() if ("pod", pod) in ls}


# -- series ---------------------------------------------------------------------------------------------
def test_series_integral_is_the_area_under_the_repeating_minutes():
    s = Series.of([1, 2, 3])
    assert s.integral(90_000) == 60 * 1 + 30 * 2
    assert s.integral(180_000) == 360  # one whole cycle
    assert s.integral(200_000) == 360 + 20 * 1  # wrapped around
    assert s.at(200_000) == 1 and s.mean == 2


def test_series_integral_never_steps_back_even_across_many_cycles():
    s = Series.of([0.1234567, 0.7654321, 0.0, 1e-6])
    values = [s.integral(t) for t in range(0, 40 * 240_000, 997)]
    assert all(a <= b for a, b in pairwise(values))


# -- training pods ------------------------------------------------------------------------------------------
def util_seconds(workload: h200.Workload, seconds: int) -> float:
    return sum(workload.seconds[i % len(workload.seconds)].gpu_util for i in range(seconds))


def test_training_values_by_hand():
    use, now = usage_of("task-a"), TASK_A.seconds[90 % len(TASK_A.seconds)]
    samples = scrape([training_pod()], START + 90)  # minute 1: memory x0.75; second 90 of its H200 workload

    gpu0 = {"pod": "job-7-run-2", "gpu": "0", "UUID": "GPU-n1-0", "namespace": "tidal-training", "container": "main",
            "Hostname": "n1", "modelName": "T4", "shape": f"h200-workloads/{TASK_A.name}"}
    assert value(samples, "DCGM_FI_DEV_GPU_UTIL", **gpu0) == pytest.approx(100 * now.gpu_util, abs=1e-3)
    assert value(samples, "DCGM_FI_PROF_SM_ACTIVE", **gpu0) == pytest.approx(now.sm_active, abs=1e-6)
    assert value(samples, "DCGM_FI_PROF_DRAM_ACTIVE", **gpu0) == pytest.approx(now.dram_active, abs=1e-6)
    used = round(16384 * use.gpu_memory * 0.75)
    assert value(samples, "DCGM_FI_DEV_FB_USED", **gpu0) == used
    assert value(samples, "DCGM_FI_DEV_FB_FREE", **gpu0) == 16384 - used
    assert value(samples, "container_cpu_usage_seconds_total", pod="job-7-run-2", node="n1") == pytest.approx(
        4 * use.cpu * (0.15 * 90 + 0.7 * util_seconds(TASK_A, 90)))
    assert value(samples, "container_memory_working_set_bytes", pod="job-7-run-2") == pytest.approx(
        8192 * MIB * use.memory * (0.3 + 0.6 * use.gpu_memory * 0.75), abs=1)


def test_pods_follow_h200_workloads_by_kind():
    """Whole GPUs: a training job; a fraction of one: the notebook-sized kinds; inference: a server."""
    whole = {h200.workload_for(f"task-{i}", inference=False, gpus=2, pick=pick) for i in range(200)}
    part = {h200.workload_for(f"task-{i}", inference=False, gpus=0.5, pick=pick) for i in range(200)}
    served = {h200.workload_for(f"svc-{i}", inference=True, gpus=1, pick=pick) for i in range(200)}
    assert (whole, part, served) == (set(h200.WHOLE_GPU), set(h200.FRACTION), set(h200.SERVING))
    means = {name: w.mean_util for name, w in h200.load().items()}
    assert means["notebook-idle"] < 0.2 and means["resnet18-dataloader"] < 0.2 and means["gpt2s-train"] > 0.9


def test_a_service_groups_pods_follow_the_decode_server_whatever_its_name_hashes_to():
    """An LLM across nodes decodes tokens; a one-pod service of the same name still picks by its hash."""
    names = [f"svc-{i}" for i in range(20)]
    assert {h200.workload_for(n, inference=True, gpus=8, pick=pick, llm=True) for n in names} == {"gpt2m-decode"}
    bert = next(n for n in names if h200.workload_for(n, inference=True, gpus=8, pick=pick) == "bert-server")
    labels = {KIND_LABEL: INFERENCE, SERVICE_LABEL: bert}
    alone = PodView(PodSpec("a", None, "T4", TWO_GPUS, 1000, 2048, labels), "n1", START, True)
    leader = PodView(PodSpec("b", None, "T4", TWO_GPUS, 1000, 2048, {**labels, GROUP_LABEL: "0", WORKER_LABEL: "0"}),
                     "n1", START, True)
    assert (gpu_shape_of(alone, SHAPES).workload.name, gpu_shape_of(leader, SHAPES).workload.name) == (
        "bert-server", "gpt2m-decode")


def test_pods_sharing_a_gpu_each_read_the_gpus_activity():
    """Two notebook-sized pods on half of GPU 3 each: one series each under the GPU's UUID, its SM active the sum
    of each one's times its share; a pod alone on a share reads its own."""
    def half(name: str, task: str, index: int) -> PodView:
        labels = {**TRAINING_LABELS, TASK_LABEL: task}
        return PodView(PodSpec(name, 7, "T4", (GpuShare(index, 0.5),), 1000, 2048, labels), "n1", START)

    pods = [half("a", "task-a", 3), half("b", "task-b", 3), half("c", "task-c", 2)]
    samples = scrape(pods, START + 7)
    own = {p: h200.load()[h200.workload_for(t, inference=False, gpus=0.5, pick=pick)].seconds[7]
           for p, t in (("a", "task-a"), ("b", "task-b"), ("c", "task-c"))}
    gpu = 0.5 * own["a"].sm_active + 0.5 * own["b"].sm_active
    assert value(samples, "DCGM_FI_PROF_SM_ACTIVE", pod="a", UUID="GPU-n1-3") == pytest.approx(gpu, abs=1e-6)
    assert value(samples, "DCGM_FI_PROF_SM_ACTIVE", pod="b", UUID="GPU-n1-3") == pytest.approx(gpu, abs=1e-6)
    assert value(samples, "DCGM_FI_PROF_SM_ACTIVE", pod="c") == pytest.approx(own["c"].sm_active, abs=1e-6)
    assert value(samples, "DCGM_FI_DEV_GPU_UTIL", pod="a") == pytest.approx(100 * own["a"].gpu_util, abs=1e-3)


def test_one_dcgm_series_per_gpu_held_and_kube_state_requests():
    samples = scrape([training_pod()], START + 30)
    gpus = {dict(ls)["gpu"] for (n, ls) in samples if n == "DCGM_FI_DEV_GPU_UTIL"}
    assert gpus == {"0", "1"}
    requests = {(dict(ls)["resource"], dict(ls)["unit"]): v for (n, ls), v in samples.items()
                if n == "kube_pod_container_resource_requests"}
    assert requests == {("cpu", "core"): 4.0, ("memory", "byte"): 8192 * MIB, ("nvidia_com_gpu", "integer"): 2.0}
    labels = next(dict(ls) for (n, ls) in samples if n == "kube_pod_labels")
    assert labels == {"namespace": "tidal-training", "pod": "job-7-run-2", "label_tidal_io_job": "7",
                      "label_tidal_io_run": "2", "label_tidal_io_task": "task-a"}


def test_the_kwok_pods_series_carry_their_own_namespace():
    """On Kubernetes the exporter plays kube-state-metrics and DCGM for pods of TIDAL_K8S_NAMESPACE: every series
    carries it, where the autoscaler reads the engines of its services (colocation/serving_signals.py)."""
    samples = scrape([training_pod()], START + 30, namespace="tidal-workloads")
    assert {dict(ls).get("namespace") for (n, ls) in samples} == {"tidal-workloads"}
    assert {dict(ls).get("namespace") for (n, ls) in scrape([training_pod()], START + 30)} == {"tidal-training"}


def test_a_cpu_only_pod_has_no_dcgm_series_and_no_gpu_request():
    samples = scrape([training_pod("cpu-job", gpus=(), node="cpu")], START + 600)
    assert names(samples, "cpu-job") == {"container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
                                         "kube_pod_container_resource_requests", "kube_pod_labels"}
    assert ("resource", "nvidia_com_gpu") not in {kv for (n, ls) in samples for kv in ls}


def test_cpu_counter_is_monotonic_and_the_integral_of_its_rate_across_scrapes():
    pod = training_pod()
    use = usage_of("task-a")
    first = value(scrape([pod], START + 150), "container_cpu_usage_seconds_total")
    second = value(scrape([pod], START + 400), "container_cpu_usage_seconds_total")  # several cycles of seconds
    assert first == pytest.approx(4 * use.cpu * (0.15 * 150 + 0.7 * util_seconds(TASK_A, 150)))
    assert second == pytest.approx(4 * use.cpu * (0.15 * 400 + 0.7 * util_seconds(TASK_A, 400)))
    assert second > first
    times = [START + t / 10 for t in range(0, 20_000, 37)]
    counters = [value(scrape([pod], t), "container_cpu_usage_seconds_total") for t in times]
    assert all(x <= y for x, y in pairwise(counters))


def test_values_are_deterministic_and_shared_by_every_run_of_a_task():
    run2 = training_pod()
    run3 = training_pod("job-7-run-3", labels={**TRAINING_LABELS, RUN_LABEL: "3"}, started_at=START + 3600)
    first, again = scrape([run2], START + 500), scrape([run2], START + 500)  # e.g. a restarted exporter
    assert first == again
    later = scrape([run3], START + 3600 + 500)  # same task, same time since start
    assert value(later, "DCGM_FI_DEV_GPU_UTIL", gpu="0") == value(first, "DCGM_FI_DEV_GPU_UTIL", gpu="0")
    assert value(later, "container_cpu_usage_seconds_total") == value(first, "container_cpu_usage_seconds_total")


# -- inference pods -------------------------------------------------------------------------------------------
def test_inference_values_by_hand():
    samples = scrape([web_pod()], START + 150)  # minutes 0, 1 and half of 2: 60 x 1 + 60 x 2 + 30 x 0 requests
    web = {"pod": "web-0", "namespace": "tidal-inference", "destination_workload": "web"}
    assert value(samples, "istio_requests_total", response_code="200", **web) == 179
    assert value(samples, "istio_requests_total", response_code="500", **web) == 1
    assert value(samples, "istio_request_duration_milliseconds_count", **web) == 180
    medians = (BASE_LATENCY_MS / (1 - 1 / 4), BASE_LATENCY_MS / (1 - 2 / 4))  # load = qps / capacity
    mean = math.exp(LATENCY_SIGMA ** 2 / 2)
    assert value(samples, "istio_request_duration_milliseconds_sum", **web) == pytest.approx(
        60 * 1 * medians[0] * mean + 60 * 2 * medians[1] * mean, rel=1e-6)
    assert value(samples, "DCGM_FI_DEV_GPU_UTIL", pod="web-0", gpu="2") == 30.0  # the trace's duty cycle
    assert value(samples, "DCGM_FI_DEV_FB_USED", pod="web-0") == round(8192 * 0.75)  # half of a T4
    assert value(samples, "DCGM_FI_DEV_FB_FREE", pod="web-0") == 8192 - round(8192 * 0.75)
    assert value(samples, "kube_pod_container_resource_requests", pod="web-0", resource="nvidia_com_gpu") == 0.5


def test_latency_histogram_is_cumulative_and_its_counters_grow():
    previous = None
    for t in (61, 150, 600, 3600, 7300):
        samples = scrape([web_pod()], START + t)
        buckets = [value(samples, "istio_request_duration_milliseconds_bucket", le=str(float(le)))
                   for le in LATENCY_BUCKETS_MS] + [value(samples, "istio_request_duration_milliseconds_bucket",
                                                          le="+Inf")]
        count = value(samples, "istio_request_duration_milliseconds_count")
        assert buckets == sorted(buckets) and buckets[-1] == count
        assert count == sum(v for (n, _), v in samples.items() if n == "istio_requests_total")
        if previous is not None:
            assert all(x <= y for x, y in zip(previous, buckets))
        previous = buckets


def test_service_of_a_detached_pod_and_no_traffic_before_ready():
    detached = web_pod("web-3", {KIND_LABEL: INFERENCE, DETACHED_FROM_LABEL: "web"})
    starting = web_pod("web-4", ready=False)
    samples = scrape([detached, starting], START + 300)
    assert value(samples, "kube_pod_labels", pod="web-3") == 1
    assert next(dict(ls) for (n, ls) in samples if n == "kube_pod_labels" and ("pod", "web-3") in ls) == {
        "namespace": "tidal-inference", "pod": "web-3", "label_tidal_io_service": "web"}
    assert value(samples, "istio_requests_total", pod="web-3", response_code="200") >= 0
    assert not {n for n in names(samples, "web-4") if n.startswith("istio_")}
    assert "container_cpu_usage_seconds_total" in names(samples, "web-4")


def test_no_cluster_stored_means_no_pod_series():
    registry = CollectorRegistry()
    registry.register(PodMetricsCollector(lambda: None, SHAPES))
    assert generate_latest(registry) == b""


# -- the real trace ------------------------------------------------------------------------------------------
GENAI = "/work/shared/traces/alibaba-genai-2026"


def test_real_trace_shapes():
    shapes = load_traces(GENAI)
    assert len(shapes.training) > 50 and len(shapes.serving) > 50
    assert all(0 < s.memory.mean for s in shapes.training)
    assert all(len(s.util) >= 60 and s.qps.mean > 0 for s in shapes.serving)
    samples = scrape([training_pod(), web_pod()], START + 86_400, shapes)
    assert 0 <= value(samples, "DCGM_FI_DEV_GPU_UTIL", pod="job-7-run-2", gpu="0") <= 100


def write_trace(folder, duty_rows: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "pod_gpu_duty_cycle_anon.csv").write_text("value,timestamp_anon,container_ip\n" + duty_rows)
    (folder / "pod_gpu_memory_used_bytes_anon.csv").write_text(
        "timestamp_anon,value,container_ip\n" + "".join(f"{60 * m},100.0,c1\n" for m in range(70)))
    (folder / "qps.csv").write_text("timestamp_anon,value,container_ip,request_type\n0,1,,API Requests\n" +
                                    "".join(f"{60 * m},0.5,c1,Generative Requests\n" for m in range(70)))


@pytest.mark.parametrize("rows, error", [
    ("5.0,0,c1\nabc,60,c1\n", r"pod_gpu_duty_cycle_anon.csv:3: value 'abc' is not a number"),
    ("5.0,0,c1\n-1,60,c1\n", r":3: value '-1' must be finite and >= 0"),
    ("5.0,0,c1\n5.0,xx,c1\n", r":3: timestamp_anon 'xx' is not a number"),
    ("5.0,0,\n", r":2: no container_ip"),
    ("5.0,0\n", r":2: 2 fields, the header has 3"),
])
def test_a_malformed_trace_row_is_a_clear_error(tmp_path, rows, error):
    write_trace(tmp_path, rows)
    with pytest.raises(TraceError, match=error):
        load_traces(tmp_path)


def test_a_trace_without_long_enough_containers_is_refused(tmp_path):
    write_trace(tmp_path, "5.0,0,c1\n7.0,600,c1\n")  # 11 minutes
    with pytest.raises(ValueError, match="no container has 60"):
        load_traces(tmp_path)
    write_trace(tmp_path / "ok", "".join(f"{m % 7}.0,{60 * m},c1\n" for m in range(70)))
    shapes = load_traces(tmp_path / "ok")
    assert len(shapes.training) == len(shapes.serving) == 1


def test_a_trace_file_without_its_columns_is_refused(tmp_path):
    write_trace(tmp_path, "")
    (tmp_path / "qps.csv").write_text("timestamp_anon,value,container_ip\n0,1,c1\n")
    with pytest.raises(TraceError, match=r"qps.csv:1: missing columns request_type"):
        load_traces(tmp_path)


# -- inference driven by a load (the live demo's traffic) -------------------------------------------------------
class FlatLoad:
    """`web` at 12 requests/s; each serving pod's GPU at 0.3 per request/s it takes."""

    def serves(self, service):
        return service == "web"

    def qps(self, service, now):
        return 12.0

    def gpu(self, service, now, ready):
        return min(1.0, 0.3 * 12.0 / ready / 10)


def driven_scrapes(pods, times):
    registry = CollectorRegistry()
    clock = iter(times)
    registry.register(PodMetricsCollector(lambda: (pods, NODES), SHAPES, clock=lambda: next(clock), load=FlatLoad()))
    for _ in times:
        text = generate_latest(registry).decode()
        yield {(s.name, frozenset(s.labels.items())): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}


def rs_pod(name, ready=True, labels=None):
    return web_pod(name, labels or {KIND_LABEL: INFERENCE, REPLICASET_LABEL: "web"}, ready=ready)


def test_a_driven_service_shares_its_load_among_the_pods_serving_it():
    pods = [rs_pod("web-0"), rs_pod("web-1"), rs_pod("web-2", ready=False)]
    first, later = driven_scrapes(pods, [START + 100, START + 110])
    for pod in ("web-0", "web-1"):
        assert value(later, "DCGM_FI_DEV_GPU_UTIL", pod=pod) == pytest.approx(100 * 0.3 * 6 / 10)  # 2 serve
        assert value(first, "istio_requests_total", pod=pod, response_code="200") == 0  # counted from first sight
        served = value(later, "istio_requests_total", pod=pod, response_code="200") + \
            value(later, "istio_requests_total", pod=pod, response_code="500")
        assert served == 12 / 2 * 10  # its share of the service's requests over the 10 s between scrapes
        cores = 1000 / 1000 * usage_of("web").cpu
        cpu = value(later, "container_cpu_usage_seconds_total", pod=pod) - \
            value(first, "container_cpu_usage_seconds_total", pod=pod)
        assert cpu == pytest.approx(cores * (0.15 + 0.7 * 0.18) * 10)
    assert value(later, "DCGM_FI_DEV_GPU_UTIL", pod="web-2") == 0  # starting: no traffic yet
    assert "istio_requests_total" not in names(later, "web-2")


def test_a_driven_pods_latency_rises_with_how_busy_its_gpu_is():
    _, later = driven_scrapes([rs_pod("web-0")], [START, START + 60])
    mean = value(later, "istio_request_duration_milliseconds_sum", pod="web-0") / \
        value(later, "istio_request_duration_milliseconds_count", pod="web-0")
    busy = 0.3 * 12 / 10  # one pod takes all 12 requests/s
    assert mean == pytest.approx(BASE_LATENCY_MS / (1 - busy) * math.exp(LATENCY_SIGMA ** 2 / 2), rel=0.01)


def test_a_detached_pod_serves_until_its_replacement_is_ready():
    detached = {KIND_LABEL: INFERENCE, DETACHED_FROM_LABEL: "web", REPLACED_BY_LABEL: "web-9"}
    for replacement_ready, old_serves in ((False, True), (True, False)):
        pods = [web_pod("web-0", detached), rs_pod("web-9", ready=replacement_ready)]
        assert {p.spec.name for p in serving_pods(pods).get("web", [])} == \
            ({"web-0"} if old_serves else {"web-9"})
        _, later = driven_scrapes(pods, [START, START + 10])
        assert ("istio_requests_total" in names(later, "web-0")) is old_serves


def test_services_the_load_does_not_serve_keep_the_trace_series():
    pods = [web_pod("api-0", {KIND_LABEL: INFERENCE, SERVICE_LABEL: "api"})]
    _, driven = driven_scrapes(pods, [START, START + 90])
    assert driven == scrape(pods, START + 90)


def test_a_ready_group_serves_whole_and_only_its_leader_shows_vllms_series():
    def member(group: str, worker: str, ready=True):
        return rs_pod(f"web-{group}-{worker}", ready=ready, labels={KIND_LABEL: INFERENCE, SERVICE_LABEL: "web",
                                                                    GROUP_LABEL: group, WORKER_LABEL: worker})
    pods = [member("0", "0"), member("0", "1"), member("1", "0"), member("1", "1", ready=False)]
    first, later = driven_scrapes(pods, [START, START + 10])
    util = 0.3 * 12 / 10  # one group serves: it is the only replica
    engine = llm.engine_at(util, 12)
    assert value(later, "DCGM_FI_DEV_GPU_UTIL", pod="web-0-1") == pytest.approx(100 * util)  # a worker is busy too
    assert value(later, "vllm:prompt_tokens_total", pod="web-0-0", model_name="web") == \
        pytest.approx(12 * 10 * llm.PROMPT_TOKENS)
    assert value(later, "vllm:generation_tokens_total", pod="web-0-0") == pytest.approx(12 * 10 * llm.OUTPUT_TOKENS)
    assert value(later, "vllm:num_requests_waiting", pod="web-0-0") == pytest.approx(engine.waiting)
    assert value(later, "vllm:kv_cache_usage_perc", pod="web-0-0") == pytest.approx(engine.kv_cache)
    assert value(later, "vllm:time_to_first_token_seconds_count", pod="web-0-0") == pytest.approx(120)
    assert value(later, "vllm:request_time_per_output_token_seconds_count", pod="web-0-0") == pytest.approx(120)
    ttft = [value(later, "vllm:time_to_first_token_seconds_bucket", pod="web-0-0", le=str(le))
            for le in llm.TTFT_BUCKETS_S]
    assert ttft == sorted(ttft) and ttft[-1] <= 120
    mean_ms = value(later, "istio_request_duration_milliseconds_sum", pod="web-0-0") / \
        value(later, "istio_request_duration_milliseconds_count", pod="web-0-0")  # a request as its engine answers it
    assert mean_ms == pytest.approx(1e3 * (engine.ttft_median_s + (llm.OUTPUT_TOKENS - 1) * engine.tpot_median_s)
                                    * math.exp(LATENCY_SIGMA ** 2 / 2), rel=0.01)
    for pod in ("web-0-1", "web-1-0", "web-1-1"):  # a worker, and a group not ready yet
        assert not {n for n in names(later, pod) if n.startswith(("vllm:", "istio_"))}
    assert value(later, "DCGM_FI_DEV_GPU_UTIL", pod="web-1-0") == 0


def test_an_engine_waits_longer_and_fills_its_cache_as_its_load_rises():
    states = [llm.engine_at(u, 5.0) for u in (0.0, 0.3, 0.6, 0.9, 1.0, 1.5)]
    for a, b in pairwise(states):
        assert a.waiting <= b.waiting and a.kv_cache <= b.kv_cache
        assert a.ttft_median_s <= b.ttft_median_s and a.tpot_median_s <= b.tpot_median_s
    assert states[-1] == llm.engine_at(1.0, 5.0) and math.isfinite(states[-1].waiting)
    assert llm.share_within(0.2, 0.2, llm.TTFT_SIGMA) == pytest.approx(0.5)


def test_an_engines_queue_is_its_first_tokens_wait_by_littles_law():
    """Requests waiting / requests per second is the mean time a first token waits past an idle engine's, as on a
    real engine (the autoscaler reads the prefill wait this way)."""
    for u, qps in ((0.0, 3.0), (0.4, 0.1), (0.8, 20.0)):
        e, idle = llm.engine_at(u, qps), llm.engine_at(0.0)
        mean = math.exp(llm.TTFT_SIGMA ** 2 / 2)
        assert e.waiting / qps == pytest.approx((e.ttft_median_s - idle.ttft_median_s) * mean)
    assert llm.engine_at(0.8).waiting == 0  # nobody asks, nobody waits


def test_a_requests_tpot_spreads_far_less_than_its_first_token():
    """A request's TPOT is the mean of its decode steps: a 50 ms TPOT p99 (NVIDIA Dynamo's target) is met at a moderate
    load and missed near saturation, while TTFT keeps a queue's wide tail."""
    def p99_within(target_s: float, util: float) -> bool:
        return llm.share_within(target_s, llm.engine_at(util).tpot_median_s, llm.TPOT_SIGMA) >= 0.99

    assert p99_within(0.05, 0.6) and not p99_within(0.05, 0.9)
    tpot_p99, ttft_p99 = (math.exp(2.326 * sigma) for sigma in (llm.TPOT_SIGMA, llm.TTFT_SIGMA))  # × the median
    assert 1.2 < tpot_p99 < 1.6 and ttft_p99 > 3


def test_the_exporter_answers_in_the_text_format_so_vllms_colons_reach_prometheus():
    server, thread = serve(lambda: ([rs_pod("web-0")], NODES), SHAPES, 0, load=FlatLoad())
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{server.server_port}/metrics",
                                         headers={"Accept": "application/openmetrics-text; version=1.0.0"})
        with urllib.request.urlopen(request) as answer:
            text = answer.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert "\nvllm:num_requests_waiting{" in text and "vllm_num_requests_waiting" not in text
