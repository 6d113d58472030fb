"""The live demo's traffic model (cluster/simulated/traffic.py): the demo clock, a night trough and a day peak
from World Cup 98, per-replica utilization from the GenAI per-request cost."""
from pathlib import Path

import pytest

from cluster.simulated.traffic import (DEMO_DAYS, DemoClock, DemoTraffic, ServiceTraffic, peak_qps_for,
                                       service_traffic, smoothed_curve)

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
WORLDCUP, GENAI = TRACES / "worldcup98-per-minute", TRACES / "alibaba-genai-2026"
REAL0 = 1_790_000_000.0  # any real time
HOUR = 3600


@pytest.fixture(scope="module")
def clock() -> DemoClock:
    return DemoClock.starting(REAL0, speed=144, start_hour=22, tz="UTC")


def test_demo_clock_maps_real_to_demo_and_back(clock):
    assert clock.demo(REAL0) == clock.demo_start
    assert clock.demo_start - clock.origin == 22 * HOUR  # 22:00 of the real start's date
    assert clock.demo(REAL0 + 600) - clock.demo(REAL0) == 86400  # ten real minutes are a demo day
    assert clock.real(clock.demo(REAL0 + 123.5)) == pytest.approx(REAL0 + 123.5)
    assert clock.minute(clock.demo_start + 61) == clock.minute(clock.demo_start) + 1


def test_a_time_zone_moves_the_demo_start_with_the_local_midnight():
    berlin = DemoClock.starting(REAL0, start_hour=22, tz="Europe/Berlin")
    assert (berlin.demo_start - berlin.origin) == 22 * HOUR and berlin.origin != DemoClock.starting(REAL0).origin


@pytest.mark.parametrize("day", DEMO_DAYS)
def test_every_demo_day_has_a_night_trough_and_a_day_peak(clock, day):
    traffic = DemoTraffic(WORLDCUP, GENAI, [ServiceTraffic("s", day, 0, 100.0)], origin=clock.origin)
    at = lambda h: traffic.qps("s", clock.demo_start + h * HOUR)  # noqa: E731
    night = min(at(h / 4) for h in range(0, 8 * 4))  # 22:00-06:00
    day_peak = max(at(h / 4) for h in range(8 * 4, 18 * 4))  # 06:00-16:00
    assert day_peak > 2 * night  # the morning rise more than doubles the traffic
    assert 0 < night and day_peak <= 100.0 * 1.15  # the p99 of the days used maps to peak_qps


def test_utilization_is_cost_per_request_over_ready_replicas(clock):
    traffic = DemoTraffic(WORLDCUP, GENAI, [service_traffic("svc", 5.0)], origin=clock.origin)
    t = clock.demo_start + 3 * HOUR
    k = traffic.model.per_qps
    assert 0 < traffic.gpu("svc", t, 100) == pytest.approx(k * traffic.qps("svc", t) / 100, rel=0.2)
    assert traffic.gpu("svc", t, 100) == traffic.gpu("svc", t, 100)  # a minute's value never changes
    assert traffic.gpu("svc", t, 0) == 1.0  # requests and no replica: saturated
    assert traffic.gpu("svc", t, 1000) < traffic.gpu("svc", t, 100) < traffic.gpu("svc", t, 5) == 1.0
    assert traffic.cpu("svc", t, 100) == pytest.approx(0.5 * traffic.gpu("svc", t, 100))
    # sizing: the peak QPS of 20 replicas at 60 % is what 20 replicas serve at 60 %
    peak = peak_qps_for(20, 0.6, traffic.model)
    assert k * peak / 20 == pytest.approx(0.6)


def test_services_breathe_on_their_own_day_and_phase_the_same_on_every_run():
    a, b = service_traffic("g2-serving", 10.0), service_traffic("t4-serving", 10.0)
    assert a == service_traffic("g2-serving", 10.0) and a.day in DEMO_DAYS and abs(a.phase_min) <= 20
    assert (a.day, a.phase_min) != (b.day, b.phase_min)


def test_the_smoothed_curve_keeps_the_daily_volume():
    raw_sum = sum(smoothed_curve(str(WORLDCUP), 1)[:1440 * 7])
    assert sum(smoothed_curve(str(WORLDCUP))[:1440 * 7]) == pytest.approx(raw_sum, rel=0.01)


def test_the_exporter_serves_the_figures_the_autoscaler_measures_for_the_demo_minute(clock):
    from cluster.simulated.traffic import DemoServing

    traffic = DemoTraffic(WORLDCUP, GENAI, [ServiceTraffic("s", 24, 0, 100.0)], origin=clock.origin)
    serving = DemoServing(traffic, clock)
    assert serving.serves("s") and not serving.serves("other")
    for real in (REAL0 + 0.1, REAL0 + 200.3, REAL0 + 431.9):
        minute_start = clock.minute(clock.demo(real)) * 60  # DemoLoads' LoadMinute(m * MINUTE, …)
        assert serving.qps("s", real) == traffic.qps("s", minute_start)
        assert serving.gpu("s", real, 3) == traffic.gpu("s", minute_start, 3)
    night, day = serving.qps("s", REAL0 + 6 * HOUR / 144), serving.qps("s", REAL0 + 14 * HOUR / 144)
    assert day > 1.5 * night  # it follows the demo's day: 04:00 against 12:00 demo time
