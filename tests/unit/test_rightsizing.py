import pytest

from experiments.builders.scheduling import JobBuilder
from scheduler.policy import Request, get_profile, rightsize

TIDAL = get_profile("tidal")


@pytest.mark.parametrize("gpus, runs, expected", [
    # GPUs = ceil(req * max(mean util, peak mem util) / 0.9), within [1, req]
    (4, [(0.45, 0.2, 0, 0)], 2),  # 4 * 0.45 / 0.9 = 2 exactly
    (4, [(0.2, 0.5, 0, 0)], 3),  # peak memory dominates: ceil(2.22) = 3
    (8, [(0.1, 0.1, 0, 0)], 1),  # ceil(0.89) = 1
    (8, [(0.0, 0.0, 0, 0)], 1),  # floor: a whole-GPU job keeps 1 GPU
    (2, [(1.0, 1.0, 0, 0)], 2),  # never above the request
    (0.5, [(0.1, 0.1, 0, 0)], 0.5),  # a fraction keeps its fraction
    (4, [(0.9, 0.9, 0, 0), (0.1, 0.1, 0, 0), (0.2, 0.2, 0, 0), (0.3, 0.3, 0, 0)], 2),  # last 3: mean .2, peak .3
])
def test_gpu_formula(gpus, runs, expected):
    job = JobBuilder().gpus(gpus).history(*[(u, m, 100, 100) for u, m, _, _ in runs]).build()
    assert rightsize(job, TIDAL).gpus == expected


@pytest.mark.parametrize("asked, runs, request_, limit", [
    (8000, [(0.5, 0.5, 1000, 3000)], 2000, 6000),  # mean/0.5, peak/0.5
    (8000, [(0.5, 0.5, 1000, 1000), (0.5, 0.5, 2000, 5000)], 3000, 8000),  # mean of means; peak capped at ask
    (8000, [(0.5, 0.5, 10, 20)], 100, 100),  # floor 100m, limit >= request
    (4000, [(0.5, 0.5, 3000, 3000)], 4000, 4000),  # never above the request
])
def test_cpu_formula(asked, runs, request_, limit):
    job = JobBuilder().cpu(asked).history(*runs).build()
    r = rightsize(job, TIDAL)
    assert (r.cpu_request_milli, r.cpu_limit_milli) == (request_, limit)


def test_no_history_keeps_request():
    job = JobBuilder().gpus(4).cpu(8000).memory(4096).build()
    assert rightsize(job, TIDAL) == Request(4.0, 8000, 8000, 4096)


def test_profile_without_rightsizing_keeps_request():
    job = JobBuilder().gpus(4).cpu(8000).history((0.1, 0.1, 100, 100)).build()
    assert rightsize(job, get_profile("quota-borrowing")).gpus == 4


@pytest.mark.parametrize("keep, expected", [(False, Request(2.0, 2000, 6000, 4096)), (True, Request(4.0, 8000, 8000, 4096))])
def test_an_admin_can_keep_the_request(keep, expected):
    """The admins' override (docs/concepts/quotas-and-priority.md#right-sizing): with keep_request the same history
    right-sizes nothing."""
    from dataclasses import replace

    job = JobBuilder().gpus(4).cpu(8000).memory(4096).history((0.45, 0.2, 1000, 3000)).build()
    assert rightsize(replace(job, keep_request=keep), TIDAL) == expected


@pytest.mark.parametrize("runs, gpus, basis", [
    # GPU util 90 % (a kernel ran most of the time), SM active 30 %: sized on the lower, measured SM active
    ([(0.9, 0.1, 100, 100, 0.3)], 2, "mean SM active 30%"),
    ([(0.9, 0.1, 100, 100)], 4, "mean GPU util 90%"),  # no SM active (an exporter without it): GPU util
    ([(0.9, 0.1, 100, 100, 0.3), (0.6, 0.1, 100, 100)], 2, "mean SM active and GPU util 45%"),  # each run its own
])
def test_gpus_are_sized_on_sm_active_where_measured_and_say_so(runs, gpus, basis):
    job = JobBuilder().gpus(4).history(*runs).build()
    request = rightsize(job, TIDAL)
    assert (request.gpus, request.basis) == (gpus, basis)


def test_the_utilization_term_reads_sm_active_where_measured():
    from scheduler.policy.priority import utilization_points

    busy_looking = JobBuilder().gpus(4).history((0.9, 0.1, 100, 100)).build()
    idle_sms = JobBuilder().gpus(4).history((0.9, 0.1, 100, 100, 0.3)).build()
    assert (utilization_points(busy_looking, TIDAL), utilization_points(idle_sms, TIDAL)) == (20, -20)
