"""The profiling services on the real database: idempotent upserts, exact run summaries, late minutes,
task profiles (last 3 vs all runs), the daily task."""
from dataclasses import replace

import pytest

from profiling import selectors, services, tasks
from profiling.models import JobMinute, LateSample, RunSummary, ServiceMinute, TaskProfile
from scheduler.models import JobRun
from tests.integration.profiles import T0_MS, at, end_run, job_minute, late_sample, past_jobs, service_minute, start_run

pytestmark = pytest.mark.django_db


def rows(model) -> list[dict]:
    return list(model.objects.order_by("pk").values())


@pytest.fixture
def job(world):
    return world.submit()


def test_same_records_twice_change_nothing(world, job):
    run = start_run(job)
    service = world.service()
    batch = [job_minute(job.pk, 1, i) for i in range(3)]
    load = [service_minute(service.name, i) for i in range(3)]
    late = [late_sample(f"job-{job.pk}-1", i, job=job.pk, run=1) for i in range(2)]

    first = services.job_minutes_record(records=batch)
    assert (first.created, first.unchanged, first.skipped) == (3, 0, 0)
    assert services.service_minutes_record(records=load).created == 3
    assert services.late_samples_record(records=late).created == 2
    before = {m: rows(m) for m in (JobMinute, ServiceMinute, LateSample)}

    again = services.job_minutes_record(records=batch + batch)  # a replay, twice over, in one batch
    assert (again.created, again.unchanged) == (0, 6)
    assert services.service_minutes_record(records=load).unchanged == 3
    assert services.late_samples_record(records=late).unchanged == 2
    assert {m: rows(m) for m in (JobMinute, ServiceMinute, LateSample)} == before  # not even written_at
    assert JobMinute.objects.filter(run=run).count() == 3


def test_the_first_write_of_a_minute_wins(job):
    """After a Flink restore, a > 2 min late sample can re-open a closed window (watermarks are not
    checkpointed): its partial minute, emitted later, must not replace the real one."""
    start_run(job)
    services.job_minutes_record(records=[job_minute(job.pk, 1, 0, samples=12, gpu=(0.6, 0.9))])
    reopened = job_minute(job.pk, 1, 0, samples=1, gpu=(1.0, 1.0), emitted_at=T0_MS + 5 * 60_000)
    counts = services.job_minutes_record(records=[reopened])
    assert (counts.created, counts.unchanged) == (0, 1)
    row = JobMinute.objects.get()
    assert (row.samples, row.gpu_util_mean, row.gpu_util_peak) == (12, 0.6, 0.9)


def test_unknown_job_run_or_service_and_broken_records_are_skipped(world, job):
    start_run(job)
    counts = services.job_minutes_record(records=[
        job_minute(job.pk, 1, 0), job_minute(job.pk, 2, 0), job_minute(999_999, 1, 0),
        replace(job_minute(job.pk, 1, 1), samples=None), replace(job_minute(job.pk, 1, 2), window_start="x"),
    ])
    assert (counts.created, counts.skipped) == (1, 4)
    counts = services.service_minutes_record(records=[service_minute("no-such-service", 0),
                                                      replace(service_minute("x", 0), service=None)])
    assert (counts.created, counts.skipped) == (0, 2)
    counts = services.late_samples_record(records=[replace(late_sample("p", 0), ts=None)])
    assert (counts.created, counts.skipped) == (0, 1)
    assert not ServiceMinute.objects.exists() and not LateSample.objects.exists()


def test_run_summary_math_by_hand(job):
    run = start_run(job, minute=0)  # submitted at T0 - 5 min
    services.job_minutes_record(records=[
        job_minute(job.pk, 1, 0, samples=10, gpu=(0.5, 0.7), cores=(2.0, 3.0), mem=(None, None)),
        job_minute(job.pk, 1, 1, samples=30, gpu=(0.9, 0.95), cores=(4.0, 6.0), mem=(0.2, 0.25)),
    ])
    end_run(run, minute=2.5)
    s = RunSummary.objects.get(run=run)
    assert (s.samples, s.minutes, s.outcome) == (40, 2, "succeeded")
    assert s.gpu_util_mean == pytest.approx((0.5 * 10 + 0.9 * 30) / 40)  # 0.8 (an unweighted mean says 0.7)
    assert s.gpu_util_peak == 0.95
    assert s.cpu_cores_mean == pytest.approx((2.0 * 10 + 4.0 * 30) / 40)  # 3.5
    assert s.cpu_cores_peak == 6.0
    assert (s.mem_util_mean, s.mem_util_peak) == (pytest.approx(0.2), 0.25)  # the minute without it is left out
    assert (s.run_s, s.wait_s) == (150.0, 300.0)


def test_wait_of_a_requeued_attempt_counts_from_the_previous_end(job):
    first = end_run(start_run(job, minute=0), minute=10, outcome=JobRun.Outcome.PREEMPTED)
    second = end_run(start_run(job, attempt=2, minute=13), minute=20)
    assert RunSummary.objects.get(run=first).wait_s == 300.0  # from the submission (T0 - 5 min)
    assert RunSummary.objects.get(run=second).wait_s == 180.0  # from the first attempt's end
    assert RunSummary.objects.get(run=second).run_s == 420.0


def test_late_minutes_refine_the_summary_of_an_ended_run(job):
    run = start_run(job)
    services.job_minutes_record(records=[job_minute(job.pk, 1, 0, samples=10, gpu=(0.2, 0.3))])
    end_run(run, minute=3)
    assert RunSummary.objects.get(run=run).samples == 10

    computed = RunSummary.objects.get(run=run).computed_at
    late = job_minute(job.pk, 1, 1, samples=30, gpu=(0.6, 0.8))
    services.job_minutes_record(records=[late])
    summary = RunSummary.objects.get(run=run)
    assert (summary.samples, summary.minutes) == (40, 2)
    assert summary.gpu_util_mean == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    assert summary.gpu_util_peak == 0.8 and summary.computed_at > computed

    services.job_minutes_record(records=[late])  # the same late minute again: the summary is left alone
    assert RunSummary.objects.get(run=run).computed_at == summary.computed_at


def test_open_run_has_no_summary_until_it_ends(job):
    run = start_run(job)
    services.job_minutes_record(records=[job_minute(job.pk, 1, 0)])
    assert services.run_summary_compute(run=run) is None
    assert not RunSummary.objects.exists()


def test_task_profile_last_three_versus_all_runs(world):
    utils = [0.1, 0.2, 0.6, 0.7, 0.8]
    past_jobs(world, *[{"gpu": (u, u + 0.1), "cores": (u * 10, u * 20)} for u in utils])
    other = world.submit(name="other")  # ended without minutes: counts as a run, not as a profile
    end_run(start_run(other), minute=200, outcome=JobRun.Outcome.FAILED)

    assert services.task_profiles_compute(now=at(1000)) == 2
    profile = TaskProfile.objects.get(task_key="ml-search/resnet50")
    assert profile.runs == 5
    assert profile.last_3["runs"] == 3 and profile.all_runs["runs"] == 5
    assert profile.last_3["gpu_util"]["mean"] == pytest.approx(0.7)  # mean of 0.6, 0.7, 0.8
    assert profile.last_3["gpu_util"]["peak"] == pytest.approx(0.9)
    assert profile.all_runs["gpu_util"]["mean"] == pytest.approx(sum(utils) / 5)  # 0.48
    assert profile.all_runs["cpu_cores"]["peak"] == pytest.approx(16.0)
    assert profile.mean_run_s == 600.0 and profile.mean_wait_s == 300.0
    empty = TaskProfile.objects.get(task_key="ml-search/other")
    assert empty.runs == 1 and empty.last_3["runs"] == 0 and empty.last_3["gpu_util"] == {"mean": None, "peak": None}
    assert empty.mean_run_s is None  # no succeeded run

    history = selectors.task_histories(task_keys=["ml-search/resnet50", "ml-search/other", "nothing"])
    assert [round(r.mean_gpu_util, 6) for r in history["ml-search/resnet50"].runs] == utils  # run-end order
    assert history["ml-search/resnet50"].run_s == (600.0,) * 5
    assert "ml-search/other" not in history and "nothing" not in history  # nothing to tell the scheduler


def test_daily_batch_summarizes_runs_ended_elsewhere_and_drops_stale_profiles(world, job):
    run = start_run(job)
    services.job_minutes_record(records=[job_minute(job.pk, 1, 0)])
    JobRun.objects.filter(pk=run.pk).update(ended_at=at(1), outcome=JobRun.Outcome.CANCELLED)  # as job_cancel does
    TaskProfile.objects.create(task_key="gone", runs=1, computed_at=at(0))

    assert tasks.task_profiles_daily() == 1  # the Celery task only calls the service
    assert RunSummary.objects.get(run=run).outcome == "cancelled"
    assert list(TaskProfile.objects.values_list("task_key", flat=True)) == ["ml-search/resnet50"]


def test_a_run_without_gpu_figures_is_no_gpu_history(world):
    past_jobs(world, {"gpu": (None, None), "gpu_mem": (None, None)})
    history = selectors.task_histories(task_keys=["ml-search/resnet50"])["ml-search/resnet50"]
    assert history.runs == () and history.run_s == (600.0,)


@pytest.mark.parametrize("model", ["jobminute", "runsummary", "taskprofile", "serviceminute", "latesample"])
def test_operators_read_raw_records_in_the_admin_and_change_nothing(world, client, model):
    from django.urls import reverse

    past_jobs(world, {"gpu": (0.4, 0.5)})
    services.task_profiles_compute(now=at(100))
    services.service_minutes_record(records=[service_minute(world.service().name, 0)])
    services.late_samples_record(records=[late_sample("job-1-1", 0, job=1, run=1)])
    client.force_login(world.users["operator"])
    changelist = client.get(reverse(f"admin:profiling_{model}_changelist"), {"q": "a"})
    assert changelist.status_code == 200
    assert client.get(reverse(f"admin:profiling_{model}_add")).status_code == 403
    pk = {"jobminute": JobMinute, "runsummary": RunSummary, "taskprofile": TaskProfile,
          "serviceminute": ServiceMinute, "latesample": LateSample}[model].objects.first().pk
    detail = client.get(reverse(f"admin:profiling_{model}_change", args=[pk]))
    assert detail.status_code == 200 and b'name="_save"' not in detail.content  # read-only


def test_cancelling_a_running_job_summarizes_its_run_at_once(world, job):
    from scheduler.lifecycle import job_cancel

    run = start_run(job)
    services.job_minutes_record(records=[job_minute(job.pk, 1, i, samples=6) for i in range(2)])
    job.status = "running"
    job.save(update_fields=["status"])
    job_cancel(job=job, actor=world.users["operator"])
    summary = RunSummary.objects.get(run=run)
    assert (summary.outcome, summary.minutes, summary.samples) == (JobRun.Outcome.CANCELLED, 2, 12)


def test_the_scheduler_reads_the_newest_twenty_runs_of_a_task_in_run_end_order(world):
    utils = [round(0.03 * n, 2) for n in range(25)]  # run n at 3n % GPU: tells the runs apart
    jobs = past_jobs(world, *[{"gpu": (u, u)} for u in utils], run_minutes=1, name="many")
    history = selectors.task_histories(task_keys={jobs[0].task_key})[jobs[0].task_key]
    assert [round(r.mean_gpu_util, 2) for r in history.runs] == utils[5:]
    assert len(history.run_s) == selectors.HISTORY_RUNS == 20
