"""The profile job's SQL text (its behaviour is tested on a real mini-cluster: tests/system/)."""

from dataclasses import fields

import pytest

from streaming.flink.sql import Spec, _interval, ddl, inserts, plan_id
from streaming.records import JobMinute, LateSample, PodSample, ServiceMinute
from streaming.topics import Topics

SPEC = Spec(bootstrap="127.0.0.1:9092", topics=Topics("t"), group_id="g")


@pytest.mark.parametrize(("seconds", "literal"), [
    (60, "INTERVAL '0 00:01:00' DAY TO SECOND"),
    (120, "INTERVAL '0 00:02:00' DAY TO SECOND"),
    (90061, "INTERVAL '1 01:01:01' DAY TO SECOND"),
])
def test_intervals_are_day_to_second_literals(seconds, literal):
    assert _interval(seconds) == literal


@pytest.mark.parametrize("record", [PodSample, JobMinute, ServiceMinute, LateSample])
def test_every_record_field_is_a_column_of_its_table(record):
    text = "\n".join(ddl(SPEC))
    assert all(f"`{f.name}`" in text for f in fields(record))


def test_topics_lateness_and_window_come_from_the_spec():
    spec = Spec(bootstrap="b:1", topics=Topics("p"), group_id="g", window_s=30, lateness_s=300)
    text = "\n".join(ddl(spec) + inserts(spec))
    assert "'topic' = 'p.metrics.pods'" in text and "'topic' = 'p.profiles.job-minute'" in text
    assert "rowtime - INTERVAL '0 00:05:00' DAY TO SECOND" in text
    assert "MOD(ts, 30000) + 29999" in text  # the late test uses the same window as the aggregation
    assert text.count("INTERVAL '0 00:00:30' DAY TO SECOND") == 4  # 2 inner + 2 outer tumbling windows


def test_the_plan_id_changes_with_the_sql_only():
    assert plan_id(SPEC) == plan_id(Spec(bootstrap="127.0.0.1:9092", topics=Topics("t"), group_id="g"))
    assert plan_id(SPEC) != plan_id(Spec(bootstrap="127.0.0.1:9092", topics=Topics("t"), group_id="g", lateness_s=60))
