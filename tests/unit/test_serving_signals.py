"""The autoscaler's LLM serving signals (colocation/serving_signals.py): which engine metrics each signal reads, and how
they are laid over another source's minutes."""

from types import SimpleNamespace

from colocation.policy.autoscaling import LoadMinute
from colocation.serving_signals import REPLICAS, WithServingSignals, queries


def test_every_signal_reads_vllms_name_first_then_sglangs_by_the_pods_service():
    q = queries("60000ms")
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
