"""Traffic from a file and the built-in traces (cluster/simulated/traffic.py, second half): read_csv's clocks and
resampling, its errors naming the line, the GenAI request log as GPU work per minute, and whole-day windows."""
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.simulated.traffic import DAY_MIN, Traffic, TrafficError, builtin, genai_work, read_csv, window
from tidal.settings import TRACES_DIR

MIDNIGHT = datetime(2024, 3, 4, tzinfo=timezone.utc)  # a Monday
TRACES = Path(TRACES_DIR)  # the shared traces the README requires beside the clone


def write(tmp_path: Path, rows: list[str], header: str = "timestamp,value", name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def minutes(first: datetime, n: int, step_min: float = 1.0, fmt=lambda t: t.isoformat(), value=lambda i: i % 7):
    return [f"{fmt(first + timedelta(minutes=i * step_min))},{value(i)}" for i in range(n)]


def test_iso_minutes_from_a_midnight_keep_every_value(tmp_path):
    t = read_csv(write(tmp_path, minutes(MIDNIGHT.replace(tzinfo=None), DAY_MIN)))
    assert t.name == "t.csv" and t.days == 1 and t.start == MIDNIGHT.timestamp()
    assert np.array_equal(t.values, np.arange(DAY_MIN) % 7)


def test_epoch_seconds_read_as_utc_wall_clock(tmp_path):
    iso = read_csv(write(tmp_path, minutes(MIDNIGHT.replace(tzinfo=None), DAY_MIN), name="a.csv"))
    epoch = read_csv(write(tmp_path, minutes(MIDNIGHT, DAY_MIN, fmt=lambda t: f"{t.timestamp():.0f}"), name="b.csv"))
    assert epoch.start == iso.start and np.array_equal(epoch.values, iso.values)


def test_an_offset_keeps_its_own_wall_clock(tmp_path):
    """10:00+02:00 is 10:00 local: minute-of-day features see the trace's local time, not UTC."""
    tz = timezone(timedelta(hours=2))
    first = datetime(2024, 3, 4, tzinfo=tz)
    t = read_csv(write(tmp_path, minutes(first, DAY_MIN)))
    assert t.start == MIDNIGHT.timestamp() and t.days == 1 and t.values[600] == 600 % 7


def test_data_before_the_first_midnight_is_dropped_and_partial_days_trimmed(tmp_path):
    first = MIDNIGHT - timedelta(hours=5)
    t = read_csv(write(tmp_path, minutes(first, 300 + 2 * DAY_MIN + 100, value=lambda i: float(i >= 300))))
    assert t.start == MIDNIGHT.timestamp() and t.days == 2 and np.all(t.values == 1.0)


@pytest.mark.parametrize("step_min", [0.25, 1 / 6, 5, 15, 60])
def test_any_step_resamples_to_the_same_per_minute_rate(tmp_path, step_min):
    """Values are rates per minute: finer samples average, coarser ones forward-fill."""
    n = int(DAY_MIN / step_min)
    t = read_csv(write(tmp_path, minutes(MIDNIGHT, n, step_min, value=lambda i: 100 + (i * step_min >= 720))))
    assert t.days == 1
    assert np.allclose(t.values[:720], 100) and np.allclose(t.values[720:], 101)


def test_an_irregular_step_is_time_weighted(tmp_path):
    """12.5 for 30 s then 0 for 90 s: the first minute's mean is 6.25, the second 0."""
    rows = [f"{(MIDNIGHT + timedelta(seconds=s)).isoformat()},{v}" for s, v in [(0, 12.5), (30, 0)]]
    rows += minutes(MIDNIGHT + timedelta(minutes=2), DAY_MIN - 2, value=lambda i: 3)
    t = read_csv(write(tmp_path, rows))
    assert t.values[0] == pytest.approx(6.25) and t.values[1] == 0 and t.values[2] == 3


def test_a_gap_is_forward_filled(tmp_path):
    rows = [f"{MIDNIGHT.isoformat()},5", f"{(MIDNIGHT + timedelta(hours=23, minutes=59)).isoformat()},9"]
    t = read_csv(write(tmp_path, rows))
    assert t.days == 1 and np.all(t.values[:-1] == 5) and t.values[-1] == 9


def test_extra_columns_and_any_column_order_are_fine(tmp_path):
    rows = [f"x,{v},{MIDNIGHT.timestamp() + 60 * i:.0f}" for i, v in enumerate(np.arange(DAY_MIN) % 7)]
    t = read_csv(write(tmp_path, rows, header="host,Value,Timestamp"))
    assert np.array_equal(t.values, np.arange(DAY_MIN) % 7)


@pytest.mark.parametrize("bad_row, line, words", [
    ("2024-03-04T00:03:00,x", 5, "value 'x' is not a number"),
    ("2024-03-04T00:03:00,-1", 5, "must be a finite number >= 0"),
    ("2024-03-04T00:03:00,nan", 5, "must be a finite number >= 0"),
    ("2024-03-04T00:03:00,", 5, "value '' is not a number"),
    ("yesterday,3", 5, "neither ISO 8601 nor epoch seconds"),
    ("1709510580000,3", 5, "milliseconds"),
    ("2024-03-04T00:02:00,3", 5, "is not after the previous row's"),
    ("2024-03-04T00:01:00,3", 5, "is not after the previous row's"),
    ("2024-03-04T00:03:00", 5, "expected 2 columns, got 1"),
])
def test_a_bad_row_names_its_line(tmp_path, bad_row, line, words):
    rows = minutes(MIDNIGHT, 3) + [bad_row] + minutes(MIDNIGHT + timedelta(minutes=4), DAY_MIN)
    with pytest.raises(TrafficError) as e:
        read_csv(write(tmp_path, rows))
    assert f"t.csv line {line}:" in str(e.value) and words in str(e.value)


@pytest.mark.parametrize("content, words", [
    ("time,count\n2024-03-04T00:00:00,1\n", "line 1: expected a header with columns timestamp,value"),
    ("", "line 1: expected a header"),
    ("timestamp,value\n", "no data rows"),
])
def test_a_bad_header_or_no_rows_is_refused(tmp_path, content, words):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(TrafficError, match=words):
        read_csv(path)


def test_less_than_one_whole_day_is_refused_with_its_span(tmp_path):
    with pytest.raises(TrafficError, match=r"spans 30\.0 hours with 0 whole days"):
        read_csv(write(tmp_path, minutes(MIDNIGHT + timedelta(hours=1), 30 * 60)))


def test_a_missing_file_is_a_traffic_error(tmp_path):
    with pytest.raises(TrafficError, match="cannot read"):
        read_csv(tmp_path / "nope.csv")


def genai_log(tmp_path: Path, requests: list[tuple[str, float]]) -> Path:
    """A request log in the GenAI trace's schema."""
    head = ("gmt_create,predict_type,predict_status,exec_time_seconds,groupId,prompt_length,negative_prompt_length,"
            "num_images_per_prompt,num_inference_steps,checkpoint_model_version_id,num_lora")
    rows = [f"{t},TXT_2_IMG,SUCCEED,{s},G0000,63.0,,1.0,30.0,M0000,0" for t, s in requests]
    return write(tmp_path, rows, header=head, name="lora_request_trace.csv")


def test_genai_work_spreads_each_request_over_the_minutes_it_ran(tmp_path):
    day = [("2024-11-15 23:59:00", 1.0),  # before the first midnight: dropped
           ("2024-11-16 10:00:30", 90.0),  # 30 s in 10:00, 60 s in 10:01
           ("2024-11-16 10:01:00", 20.0),  # two requests at once in 10:01
           ("2024-11-17 00:00:10", 5.0)]  # ends the first whole day
    t = genai_work(genai_log(tmp_path, day))
    assert t.name == "genai" and t.unit == "GPU-seconds/min" and t.days == 1
    assert t.start == datetime(2024, 11, 16, tzinfo=timezone.utc).timestamp()
    assert t.values[600] == pytest.approx(30) and t.values[601] == pytest.approx(80)
    assert t.values.sum() == pytest.approx(110)


def test_genai_work_names_a_bad_line(tmp_path):
    with pytest.raises(TrafficError, match="lora_request_trace.csv line 3: value 'x'"):
        genai_work(genai_log(tmp_path, [("2024-11-16 00:00:00", 1.0), ("2024-11-16 00:01:00", "x")]))


def test_builtin_genai_reads_the_shared_log():
    t = builtin("genai", TRACES)
    assert t.days == 22 and t.start == datetime(2024, 11, 16, tzinfo=timezone.utc).timestamp()
    assert 0 < t.values.max() < 60 * 100 and len(t.values) == t.days * DAY_MIN


def test_builtin_refuses_an_unknown_name():
    with pytest.raises(TrafficError, match="choose one of worldcup98, genai"):
        builtin("nasa", TRACES)


def days_traffic(days: int) -> Traffic:
    return Traffic("x", MIDNIGHT.timestamp(), np.repeat(np.arange(days, dtype=float), DAY_MIN), "requests/min")


@pytest.mark.parametrize("days, start_day, first", [(3, None, 7), (10, None, 0), (2, 0, 0), (4, 3, 3), (1, 9, 9)])
def test_window_takes_whole_days(days, start_day, first):
    w = window(days_traffic(10), days, start_day)
    assert w.days == days and w.start == MIDNIGHT.timestamp() + first * 86400
    assert list(w.values[::DAY_MIN]) == list(range(first, first + days))


@pytest.mark.parametrize("days, start_day, words", [(11, None, "has 10 whole days"), (3, 8, "from day 8"),
                                                    (0, None, "at least 1 day"), (2, -1, "from day -1")])
def test_window_refuses_what_the_traffic_does_not_offer(days, start_day, words):
    with pytest.raises(TrafficError, match=words):
        window(days_traffic(10), days, start_day)


def test_traffic_must_be_whole_days():
    with pytest.raises(TrafficError, match="not a whole number of days"):
        Traffic("x", 0.0, np.zeros(100), "requests/min")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 600), st.floats(0, 1e4)), min_size=2, max_size=40))
def test_resampling_keeps_the_total_work(tmp_path_factory, samples):
    """Any step: the per-minute values integrate the step curve exactly over the whole days kept."""
    tmp = tmp_path_factory.mktemp("p")
    t, rows = 0, []
    for gap, v in samples:
        rows.append(f"{MIDNIGHT.timestamp() + t:.0f},{v}")
        t += gap
    rows.append(f"{MIDNIGHT.timestamp() + 86400:.0f},0")  # the first whole day ends here
    stamps = [int(r.split(",")[0]) for r in rows]
    total = sum(v * (b - a) for (a, b), (_, v) in zip(zip(stamps, stamps[1:]), samples)) / 60
    got = read_csv(write(tmp, rows))
    assert got.days == 1 and got.values.sum() == pytest.approx(total, rel=1e-9, abs=1e-6)
