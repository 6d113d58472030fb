import pytest

from cluster.types import QuotaKind
from experiments.builders.scheduling import MIN, NOW, JobBuilder
from scheduler.policy import aging_points, get_profile, score

TIDAL = get_profile("tidal")


@pytest.mark.parametrize("waited_min, points", [
    (0, 0), (10, 0), (19, 0), (20, 1), (29, 1), (30, 3), (40, 6), (50, 10), (60, 15), (70, 20), (80, 25),
])
def test_aging_table(waited_min, points):
    assert aging_points(waited_min * MIN, TIDAL) == points


@pytest.mark.parametrize("kind, base", [(QuotaKind.OWN, 1_000_000), (QuotaKind.BORROWED, 1_000)])
def test_base_score_by_quota_kind(kind, base):
    assert score(JobBuilder().build(), kind, NOW, TIDAL).base == base


@pytest.mark.parametrize("mean_util, points", [(None, 0), (0.5, 20), (0.9, 20), (0.49, -20), (0.0, -20)])
def test_utilization_term_against_target(mean_util, points):
    job = JobBuilder() if mean_util is None else JobBuilder().util(mean_util)
    assert score(job.build(), QuotaKind.OWN, NOW, TIDAL).utilization == points


def test_utilization_target_is_a_profile_threshold():
    job = JobBuilder().util(0.6).build()
    assert score(job, QuotaKind.OWN, NOW, TIDAL.with_(utilization_target=0.7)).utilization == -20


def test_utilization_uses_mean_of_last_three_runs():
    # Oldest run (0.0) falls out of the window: mean of 0.6, 0.6, 0.3 is 0.5 -> meets the target.
    job = JobBuilder().history((0.0, 0, 0, 0), (0.6, 0, 0, 0), (0.6, 0, 0, 0), (0.3, 0, 0, 0)).build()
    assert score(job, QuotaKind.OWN, NOW, TIDAL).utilization == 20


def test_breakdown_sums_to_total():
    job = JobBuilder().waited(60 * MIN).util(0.1).build()
    s = score(job, QuotaKind.BORROWED, NOW, TIDAL)
    assert (s.base, s.utilization, s.aging, s.total) == (1_000, -20, 15, 995)


def test_running_job_aging_freezes_at_start():
    job = JobBuilder().waited(0).running("n1", 0, ran=3600).build()  # submitted and started at once
    assert score(job, QuotaKind.OWN, NOW, TIDAL).aging == 0


def test_baselines_turn_terms_off():
    job = JobBuilder().waited(80 * MIN).util(0.9).build()
    s = score(job, QuotaKind.OWN, NOW, get_profile("quota-borrowing"))
    assert (s.utilization, s.aging) == (0, 0)
