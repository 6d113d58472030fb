"""Combining minutes into runs and runs into tasks (profiling/policy/aggregate.py): exact means, max peaks."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.types import RunProfile
from profiling.policy.aggregate import Minute, Stat, Usage, combine_minutes, combine_runs, mean, run_profile


def minute(samples: int, **stats: tuple[float | None, float | None]) -> Minute:
    return Minute(samples=samples, stats={name: Stat(*value) for name, value in stats.items()})


def test_run_mean_is_sample_weighted_and_peak_is_max():
    usage = combine_minutes([minute(10, gpu_util=(0.5, 0.7), cpu_cores=(2.0, 3.0)),
                             minute(30, gpu_util=(0.9, 0.95), cpu_cores=(4.0, 6.0))])
    assert (usage.samples, usage.minutes) == (40, 2)
    assert usage.stat("gpu_util") == Stat(pytest.approx((0.5 * 10 + 0.9 * 30) / 40), 0.95)  # 0.8, not 0.7
    assert usage.stat("cpu_cores") == Stat(pytest.approx(3.5), 6.0)
    assert usage.stat("mem_util") == Stat(None, None)


def test_a_minute_without_a_figure_counts_in_neither_sum():
    usage = combine_minutes([minute(10, gpu_util=(0.4, 0.5), cpu_cores=(1.0, 1.0)),
                             minute(30, gpu_util=(None, None), cpu_cores=(3.0, 4.0))])
    assert usage.stat("gpu_util") == Stat(pytest.approx(0.4), 0.5)
    assert usage.stat("cpu_cores").mean == pytest.approx(2.5)


def test_minutes_without_samples_are_ignored():
    assert combine_minutes([minute(0, gpu_util=(1.0, 1.0))]) == Usage(0, 0, combine_minutes([]).stats)


@given(st.lists(st.tuples(st.integers(1, 1000), st.floats(0, 1)), min_size=1, max_size=30), st.data())
def test_combining_in_any_grouping_equals_the_mean_over_every_sample(parts, data):
    """Σ(mean × samples) / Σ samples: combining minute means is exact, however the minutes are cut."""
    every_sample = [value for samples, value in parts for _ in range(samples)]
    usage = combine_minutes([minute(samples, cpu_util=(value, value)) for samples, value in parts])
    assert usage.stat("cpu_util").mean == pytest.approx(sum(every_sample) / len(every_sample))
    assert usage.stat("cpu_util").peak == max(value for _, value in parts)


def test_task_mean_is_the_mean_of_run_means_and_peak_the_max():
    runs = [combine_minutes([minute(10, gpu_util=(0.2, 0.3))]), combine_minutes([minute(1000, gpu_util=(0.6, 0.9))])]
    task = combine_runs(runs)
    assert task.stat("gpu_util") == Stat(pytest.approx(0.4), 0.9)  # each run counts once, as right-sizing does
    assert combine_runs([]).stat("gpu_util") == Stat(None, None)


def test_mean_skips_missing_values():
    assert mean([1.0, None, 3.0]) == 2.0
    assert mean([None]) is None


@pytest.mark.parametrize("gpus, stats, expected", [
    (1, {"gpu_util": (0.5, 0.8), "gpu_mem_util": (0.3, 0.4), "cpu_cores": (1.5, 2.5)}, RunProfile(0.5, 0.4, 1500, 2500)),
    (0, {"cpu_cores": (1.5, 2.5)}, RunProfile(0.0, 0.0, 1500, 2500)),  # a CPU-only job has no GPU figures
    (1, {"cpu_cores": (1.5, 2.5)}, None),  # a GPU job without GPU figures: no usable profile
    (1, {"gpu_util": (0.5, 0.8), "gpu_mem_util": (0.3, 0.4)}, None),  # no CPU figures
])
def test_run_profile(gpus, stats, expected):
    usage = combine_minutes([minute(12, **stats)])
    assert run_profile(usage, gpus=gpus) == expected


def test_run_without_samples_has_no_profile():
    assert run_profile(Usage(), gpus=0) is None
