"""The wire format of streaming/records.py: PodSample as a CSV line (the Flink job reads it by column position,
nulls as CSV_NULL), the other records as JSON objects."""

import pytest

from streaming.records import CSV_NULL, JobMinute, PodSample, decode, encode

TRAINING = PodSample(ts=1_700_000_000_000, namespace="ml", pod="train-a", job=7, run=2, gpu_util=0.1234,
                     gpu_mem_used_mib=6913.599999999999, req_mem_bytes=4294967296.0, sm_active=0.269)


def test_a_sample_is_one_csv_line_in_field_order_with_nulls_as_the_null_literal():
    assert encode(TRAINING) == (b"1700000000000,ml,train-a,7,2,\\N,0.1234,6913.599999999999,\\N,\\N,\\N,\\N,\\N,"
                                b"4294967296.0,\\N,\\N,\\N,\\N,0.269,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N,\\N")
    assert encode(TRAINING).count(b",") == len(PodSample.__dataclass_fields__) - 1


@pytest.mark.parametrize("sample", [
    TRAINING,
    PodSample(ts=5, namespace="", pod='a,"b"', service="line\nbreak", qps=0.0, errors_per_s=1e-300,
              latency_p99_ms=1.7976931348623157e308),
    PodSample(ts=0, namespace="n", pod="p"),  # every optional field null
])
def test_samples_round_trip_exactly_nulls_empty_strings_and_quotes_included(sample):
    assert decode(PodSample, encode(sample)) == sample
    assert decode(PodSample, encode(sample).decode()) == sample


def test_the_null_literal_is_no_name_and_a_line_of_another_width_is_refused():
    with pytest.raises(ValueError):
        encode(PodSample(ts=1, namespace="n", pod=CSV_NULL))
    with pytest.raises(ValueError):
        decode(PodSample, b"1,n,p")


def test_other_records_stay_json_without_their_null_fields():
    minute = JobMinute(job=1, run=1, window_start=0, window_end=60_000, samples=3, gpu_util_mean=0.5,
                       gpu_util_peak=None, gpu_mem_util_mean=None, gpu_mem_util_peak=None, cpu_util_mean=None,
                       cpu_util_peak=None, mem_util_mean=None, mem_util_peak=None, cpu_cores_mean=None,
                       cpu_cores_peak=None, req_gpus=None, req_cpu_cores=None, req_mem_bytes=None, emitted_at=9)
    assert encode(minute) == (b'{"job":1,"run":1,"window_start":0,"window_end":60000,"samples":3,'
                              b'"gpu_util_mean":0.5,"emitted_at":9}')
    assert decode(JobMinute, encode(minute)) == minute
