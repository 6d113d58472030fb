"""How the CLI shows things: relative times, units, kubectl-like tables, JSON and YAML that parse."""
import json
import re
from datetime import datetime, timedelta, timezone

import pytest
import yaml

from tidal_cli import output
from tidal_cli.output import Format

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("delta, text", [
    (timedelta(seconds=2), "just now"), (timedelta(seconds=45), "45s ago"), (timedelta(minutes=3), "3m ago"),
    (timedelta(hours=2), "2h ago"), (timedelta(hours=2, minutes=5), "2h5m ago"), (timedelta(days=3, hours=4),
                                                                                 "3d4h ago"),
    (timedelta(days=-1), "in 1d"), (timedelta(minutes=-5), "in 5m"),
])
def test_relative_times(delta, text):
    assert output.ago((NOW - delta).isoformat().replace("+00:00", "Z"), now=NOW) == text


def test_no_time_is_a_dash():
    assert output.ago(None) == "-" and output.ago("") == "-"


@pytest.mark.parametrize("value, text", [("0.500", "0.5"), ("2.000", "2"), ("100.000", "100"), ("0", "0"),
                                         (None, "-")])
def test_decimals_lose_their_trailing_zeros(value, text):
    assert output.number(value) == text


def test_units():
    assert [output.cores(4000), output.cores(500), output.cores(None)] == ["4", "0.5", "-"]
    assert [output.mem(16384), output.mem(512), output.mem(1536)] == ["16Gi", "512Mi", "1.5Gi"]
    assert [output.latency(1.5), output.latency(0.05), output.latency(None)] == ["1.5s", "50ms", "-"]


def test_json_and_yaml_print_the_data_itself(capsys):
    data = [{"id": 1, "name": "résumé", "gpus": "0.500", "node": None}]
    output.emit(data, Format.json, lambda: ["not this"])
    assert json.loads(capsys.readouterr().out) == data
    output.emit(data, Format.yaml, lambda: ["not this"])
    assert yaml.safe_load(capsys.readouterr().out) == data


def test_a_table_is_plain_and_whole_on_a_pipe(capsys):
    long = "x" * 300
    output.emit([], Format.table, lambda: [output.grid(["id", "name", "node"], [[1, long, None], [22, "b", "t4-0"]])])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "NODE"]
    assert lines[1].split() == ["1", long, "-"]  # not wrapped, no borders, "-" for nothing
    assert lines[2].split() == ["22", "b", "t4-0"]
    assert "\x1b[" not in "".join(lines)  # no colour codes into a pipe


def test_a_describe_block(capsys):
    output.emit({}, Format.table, lambda: [output.fields([("Status", "pending"), ("Node", None), ("Gang", True)])])
    assert [line.split() for line in capsys.readouterr().out.splitlines()] == [
        ["Status:", "pending"], ["Node:", "-"], ["Gang:", "yes"]]


@pytest.mark.parametrize("service, said", [
    ({"tpot_p99_target_s": 0.05}, "lowered in a minute whose latencies predict a missed target"),
    ({"ttft_p99_target_s": 0.5, "slo_min_gain": 0.1}, "moved every minute to the SLO's sizing"),
    ({"kv_cache_target": 0.9}, None),  # no latency target: the band stays the owner's
])
def test_describe_service_says_when_the_slo_moves_the_band_of_its_thresholds(service, said):
    from tidal_cli.commands.cluster import _band_moves

    moves = _band_moves(service)
    assert (said in moves[0]) if said else moves == []


def test_rates_are_whole_percents_and_a_band_reads_as_the_consoles():
    from colocation.policy.autoscaling import span

    assert [output.percent(0.3), output.percent(0.655), output.percent(1), output.percent(None)] == [
        "30%", "66%", "100%", "-"]
    for low, high in [(0.3, 0.8), (0.2, 0.55), (0.125, 0.875), (0, 1)]:
        assert output.band(low, high) == span(low, high)  # the console's and the decisions' sentences' formatter
    assert output.band(0.3, 0.8) == "30%–80%"


SERVICE = {"id": 7, "name": "llm", "department": "ml-search", "gpu_model": "T4", "priority": 100, "replicas": 2,
           "min_replicas": 1, "max_replicas": 4, "replicas_changed_at": None, "gpus_per_replica": "1.000",
           "cpu_milli_per_replica": 4000, "memory_mib_per_replica": 16384, "autoscaling": True, "offline": False,
           "created_at": None, "kv_cache_target": 0.9, "slo_ttft_s": 1, "slo_tpot_s": 0.05, "slo_min_gain": 0.1,
           "thresholds": [{"metric": "gpu", "min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}]}
MOVED = {"bands": {"gpu": {"min_rate": 0.25, "expect_rate": 0.45, "max_rate": 0.55}},
         "owner_bands": {"gpu": {"min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}},
         "band_note": "lowered for the SLO"}


def test_describe_service_shows_thresholds_and_the_bands_decisions_applied_in_percents(capsys):
    from tidal_cli.commands.cluster import _service_blocks

    scaling = [{"created_at": None, "kind": "scaling", "reason": "scale-out", "message": "llm scales out",
                "data": MOVED},
               {"created_at": None, "kind": "scaling", "reason": "hold", "message": "llm stays",
                "data": {"bands": {"gpu": {"min_rate": 0.3, "expect_rate": 0.6, "max_rate": 0.8}}}},
               {"created_at": None, "kind": "alert", "reason": "no-metrics", "message": "no load", "data": {}}]
    output.emit({}, Format.table, lambda: _service_blocks(SERVICE, scaling))
    lines = capsys.readouterr().out.splitlines()
    assert next(line for line in lines if line.startswith("gpu ")).split() == ["gpu", "30%", "60%", "80%"]
    said = {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}
    assert said["Serving targets"] == "KV cache 90%" and said["Sized to the SLO"].endswith("min gain 10%")
    header = lines.index("Scaling:") + 1
    assert re.split(r" {2,}", lines[header]) == ["WHEN", "KIND", "REASON", "GPU BAND", "MESSAGE"]
    assert [re.split(r" {2,}", line) for line in lines[header + 1:]] == [
        ["-", "scaling", "scale-out", "25%–55% (lowered for the SLO; owner's 30%–80%)", "llm scales out"],
        ["-", "scaling", "hold", "30%–80%", "llm stays"],
        ["-", "alert", "no-metrics", "-", "no load"]]  # an alert applies no band
