"""Vertical scaling recommendations (colocation/policy/vertical.py): p95 of use ÷ expectRate, in sane steps,
never below a floor, only from enough minutes."""
import pytest

from colocation.policy.vertical import MIN_MINUTES, Resources, Usage, percentile, recommend

CURRENT = Resources(gpus=1.0, cpu_milli=4000, memory_mib=16384)


def day(value: float, n: int = MIN_MINUTES) -> tuple[float, ...]:
    return (value,) * n


@pytest.mark.parametrize(("usage", "expected"), [
    # GPU p95 30 % of 1 GPU at expectRate 60 %: half a GPU
    (Usage(gpu=day(0.3)), Resources(0.5, 4000, 16384)),
    # 0.2/0.6 = 0.333 -> rounded up to the next quarter
    (Usage(gpu=day(0.2)), Resources(0.5, 4000, 16384)),
    # busy: 0.9/0.6 = 1.5 GPUs -> 2 whole GPUs
    (Usage(gpu=day(0.9)), Resources(2.0, 4000, 16384)),
    # nearly idle: the floor
    (Usage(gpu=day(0.01), cpu=day(0.001), memory=day(0.01)), Resources(0.25, 250, 1024)),
    # CPU 45 % of 4000 m at 60 % -> 3000 m; memory 40 % of 16 GiB at 80 % -> 8192 MiB
    (Usage(cpu=day(0.45), memory=day(0.4)), Resources(1.0, 3000, 8192)),
])
def test_recommendation_is_p95_over_expect_rate_rounded_up(usage, expected):
    rec = recommend(CURRENT, usage)
    assert rec is not None and rec.resources == expected
    assert rec.message.startswith(f"per replica {expected.gpus:g} GPUs")


def test_p95_ignores_the_top_five_percent():
    values = (0.3,) * 95 + (1.0,) * 5
    assert percentile(values, 0.95) == 0.3
    assert recommend(CURRENT, Usage(gpu=values)).resources.gpus == 0.5


def test_too_few_minutes_recommend_nothing_and_a_cpu_service_keeps_no_gpu():
    assert recommend(CURRENT, Usage(gpu=day(0.3, MIN_MINUTES - 1))) is None
    cpu_only = recommend(Resources(0.0, 2000, 4096), Usage(gpu=day(0.9), cpu=day(0.3)))
    assert cpu_only.resources == Resources(0.0, 1000, 4096)
    assert "GPU" not in cpu_only.message.split("(", 1)[1]


def test_a_resource_without_data_keeps_its_size():
    rec = recommend(CURRENT, Usage(gpu=day(0.6)))
    assert rec.resources == Resources(1.0, 4000, 16384) and rec.minutes == MIN_MINUTES
