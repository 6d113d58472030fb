"""The autoscaler's LLM serving signals (colocation/serving_signals.py): which engine metrics each signal reads, and how
they are laid over another source's minutes."""

from types import SimpleNamespace

from colocation.policy.autoscaling import LoadMinute, ScalingPolicy
from colocation.policy.serving import ServingTargets
from colocation.serving_signals import (MAX_MINUTES, REPLICAS, ServingSignals, WithServingSignals, minutes_for,
                                        promql_string, queries, tpot_bounds_query, with_tpot_bounds)


def test_every_signal_reads_vllms_name_first_then_sglangs_by_the_pods_service():
    q = queries("60000ms", "tidal-inference")
    assert set(q) == {"tokens_in", "tokens_out", "queue", "kv_cache", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
                      "tpot_mean", REPLICAS}
    assert q["tokens_in"].index("rate(vllm:prompt_tokens_total[60000ms])") < \
        q["tokens_in"].index("rate(sglang:prompt_tokens_total[60000ms])")
    assert "vllm:kv_cache_usage_perc" in q["kv_cache"] and "vllm:gpu_cache_usage_perc" in q["kv_cache"]
    assert "sglang:num_queue_reqs" in q["queue"] and "sglang:token_usage" in q["kv_cache"]
    assert "histogram_quantile(0.99, sum by (label_tidal_io_service, le) " \
           "((rate(vllm:time_to_first_token_seconds_bucket[60000ms]))" in q["ttft_p99"]
    assert q["tpot_p99"].index("vllm:request_time_per_output_token_seconds_bucket") < \
        q["tpot_p99"].index("vllm:inter_token_latency_seconds_bucket")  # a request's TPOT first, then a step's
    # the exact mean, under the same names in the same order: rate(_sum) / rate(_count) per service
    assert q["tpot_mean"].index("rate(vllm:request_time_per_output_token_seconds_sum[60000ms])") < \
        q["tpot_mean"].index("rate(vllm:request_time_per_output_token_seconds_count[60000ms])") < \
        q["tpot_mean"].index("rate(sglang:time_per_output_token_seconds_sum[60000ms])")
    for expr in q.values():
        assert "group_left (label_tidal_io_service)" in expr and "kube_pod_labels" in expr


def test_every_query_keeps_the_pods_of_its_namespace_only():
    """Each engine series is joined to kube_pod_labels of the namespace alone (a service of the same name elsewhere
    is not read; through the real Prometheus: tests/integration/test_serving_signals.py), its name escaped."""
    pods = 'kube_pod_labels{label_tidal_io_service!="",namespace="team-a"}'
    for expr in [*queries("6000ms", "team-a").values(), tpot_bounds_query("6000ms", "team-a")]:
        assert expr.count("kube_pod_labels") == expr.count(pods) > 0, expr
    assert promql_string('we"ird\\ns') == '"we\\"ird\\\\ns"'
    assert 'namespace="we\\"ird"}' in queries("1m", 'we"ird')["queue"]


def policy(**serving) -> ScalingPolicy:
    return ScalingPolicy(serving=ServingTargets(**serving), startup_min=10)


def test_the_signals_are_read_as_far_back_as_the_services_that_want_them_read():
    """A queue or KV-cache target reads the reactive rules' 5 minutes; a latency target the TPOT curve's fit (60); a
    policy that keeps more (an idle time, the SLO sizing's hours of request rates, which the signals do not carry)
    no more than that."""
    queue, kv = policy(queue_per_replica=4.0), policy(kv_cache=0.8)
    assert minutes_for([queue, kv]) == 5
    assert minutes_for([]) == 5
    assert minutes_for([queue, ScalingPolicy(serving=ServingTargets(kv_cache=0.8), scale_to_zero_idle_min=30)]) == 30
    assert minutes_for([queue, policy(ttft_p99_s=0.5)]) == minutes_for([policy(tpot_p99_s=0.05)]) == 60 == MAX_MINUTES
    assert minutes_for([policy(slo_ttft_s=1.0, slo_tpot_s=0.05, min_gain=0.1)]) == MAX_MINUTES


def test_a_read_spans_the_newest_complete_minutes_it_was_made_for():
    now = 36_000.0 + 25  # 25 s into minute 600: 599 is the newest complete one, its end at 36 000 s
    for minutes in (5, 60):
        start, end, step = ServingSignals("http://127.0.0.1:9", "ns", minutes=minutes).span(now)
        assert (end, step) == (36_000.0, 60.0) and (end - start) / step + 1 == minutes
    fast = ServingSignals("http://127.0.0.1:9", "ns", minutes=5, to_real=lambda t: t / 144, speed=144)
    assert fast.span(now) == (36_000.0 / 144 - 4 * 60 / 144, 36_000.0 / 144, 60 / 144)


class Signals:
    def __init__(self, by_minute):
        self.by_minute = by_minute

    def of(self, service, now):
        return self.by_minute


class Base:
    def recent(self, service, now):
        return (LoadMinute(0.0, 2, gpu=0.5, qps=3.0), LoadMinute(60.0, 2, gpu=0.6, qps=3.0))


def test_signals_fill_the_base_minutes_and_add_the_minutes_it_lacks_at_the_engines_reporting():
    signals = Signals({60.0: {"ttft_p99": 0.8, REPLICAS: 2.0}, 120.0: {"ttft_p99": 0.9, "queue": 4.0, REPLICAS: 3.0},
                       180.0: {"ttft_p99": 1.0}})  # no engine counted: not a minute
    llm = SimpleNamespace(name="llm")
    merged = WithServingSignals(Base(), signals, lambda s: True).recent(llm, 200.0)
    assert merged == (LoadMinute(0.0, 2, gpu=0.5, qps=3.0), LoadMinute(60.0, 2, gpu=0.6, qps=3.0, ttft_p99=0.8),
                      LoadMinute(120.0, 3, ttft_p99=0.9, queue=4.0))
    assert WithServingSignals(Base(), signals, lambda s: False).recent(llm, 200.0) == Base().recent(llm, 200.0)


def test_the_tpot_buckets_bounds_are_read_per_service_under_the_name_its_p99_is_read_from():
    q = tpot_bounds_query("6000ms", "tidal-inference")
    assert q.startswith("(group by (label_tidal_io_service, le) ((last_over_time("
                        "vllm:request_time_per_output_token_seconds_bucket[6000ms])) * on (namespace, pod) group_left")
    # a service's bounds from its first name only (`or on` the service), in the p99's order of names
    assert q.count(" or on (label_tidal_io_service) ") == 4
    assert q.index("vllm:request_time_per_output_token_seconds_bucket") < \
        q.index("vllm:inter_token_latency_seconds_bucket") < q.index("sglang:time_per_output_token_seconds_bucket")


VLLM_LE = {0.01, 0.025, 0.05, 0.075, 0.1, float("inf")}


def test_a_tpot_p99_at_the_top_of_its_bucket_carries_the_bound_of_that_minutes_buckets():
    """49.75 ms (99 % of 25-50 ms): censored at 50 ms; 49 ms (96 %): taken at its word; 49.75 ms in a minute whose
    bounds were not read, or a histogram whose bucket there is 25-75 ms: not censored. (Read through the real
    Prometheus: tests/integration/test_serving_signals.py.)"""
    read = {360.0: {"tpot_p99": 0.04975}, 420.0: {"tpot_p99": 0.049}, 480.0: {"tpot_p99": 0.04975},
            540.0: {"tpot_p99": 0.04975}, 600.0: {"queue": 1.0}}
    with_tpot_bounds(read, {360.0: VLLM_LE, 420.0: VLLM_LE, 540.0: {0.025, 0.075, float("inf")}, 600.0: VLLM_LE})
    assert read == {360.0: {"tpot_p99": 0.04975, "tpot_p99_bound": 0.05}, 420.0: {"tpot_p99": 0.049},
                    480.0: {"tpot_p99": 0.04975}, 540.0: {"tpot_p99": 0.04975}, 600.0: {"queue": 1.0}}
    merged = WithServingSignals(Base(), Signals(read | {360.0: read[360.0] | {REPLICAS: 2.0}}), lambda s: True)
    assert merged.recent(SimpleNamespace(name="llm"), 660.0)[2] == LoadMinute(360.0, 2, tpot_p99=0.04975,
                                                                             tpot_p99_bound=0.05)


def test_the_services_namespace_is_the_kubernetes_backends_or_the_simulated_exporters(settings):
    from cluster.simulated.metrics import INFERENCE_NAMESPACE
    from colocation.live_backend import serving_namespace

    settings.TIDAL_CLUSTER_BACKEND, settings.TIDAL_K8S_NAMESPACE = "kubernetes", "team-a"
    assert serving_namespace() == "team-a"
    settings.TIDAL_CLUSTER_BACKEND = "simulated"
    assert serving_namespace() == INFERENCE_NAMESPACE == "tidal-inference"
