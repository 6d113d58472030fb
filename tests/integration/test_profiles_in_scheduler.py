"""Profiles feed the live scheduler (docs/concepts/profiles.md#historical-profiles-and-their-use): one
`scheduler.tick` right-sizes a job
from its task's run summaries, adds the ±20 utilization term, and sends a task whose past runs were long to the fixed
pool."""

import pytest

from cluster.simulated import store
from core.models import Decision
from profiling.models import RunSummary
from scheduler.models import JobRun, JobStatus, TrainingJob
from tests.integration.livecluster import tick
from tests.integration.profiles import end_run, past_jobs, start_run

pytestmark = pytest.mark.django_db


def submit(world, **kw) -> TrainingJob:
    job = world.submit(**kw)
    job.annotations = {store.RUNTIME_LABEL: "600"}
    job.save()
    return job


def test_task_with_summaries_is_rightsized_and_scored(world, cluster):
    # ml-search/low: 3 past runs at 40% GPU, 30% peak GPU memory, 1 core mean, 1.5 cores peak.
    past_jobs(world, *[{"gpu": (0.4, 0.5), "gpu_mem": (0.2, 0.3), "cores": (1.0, 1.5)}] * 3,
              name="low", gpus="2", cpu_milli=8000)
    # ml-search/high: 3 past runs at 80% GPU on A100, 3 cores mean, 5 cores peak.
    past_jobs(world, *[{"gpu": (0.8, 0.9), "gpu_mem": (0.5, 0.6), "cores": (3.0, 5.0)}] * 3,
              name="high", gpu_model="A100", gpus="2", cpu_milli=8000)
    low = submit(world, name="low", gpus="2", cpu_milli=8000)
    high = submit(world, name="high", gpu_model="A100", gpus="2", cpu_milli=8000)
    fresh = submit(world, name="fresh", gpu_model="A100", gpus="1", cpu_milli=8000)

    report = tick(cluster)
    assert report.admitted == 3
    for job in (low, high, fresh):
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING

    # GPUs = ceil(2 × max(0.4, 0.3) / 0.9) = 1; CPU request = 1000m / 0.5, limit = 1500m / 0.5
    assert (low.alloc_gpus, low.alloc_cpu_milli, low.cpu_limit_milli) == (1, 2000, 3000)
    assert low.score["utilization"] == -20  # mean GPU utilization 0.4 < target 0.5
    # GPUs = ceil(2 × 0.8 / 0.9) = 2; CPU request 6000m, limit 10000m capped at the 8000m asked
    assert (high.alloc_gpus, high.alloc_cpu_milli, high.cpu_limit_milli) == (2, 6000, 8000)
    assert high.score["utilization"] == 20
    assert (fresh.alloc_gpus, fresh.alloc_cpu_milli, fresh.score["utilization"]) == (1, 8000, 0)  # no history

    pods = {p.spec.name: p.spec for p in cluster[0].pods()}
    assert pods[low.runs.get().pod].cpu_milli == 2000  # bound right-sized
    admission = Decision.objects.get(subject=f"job:{low.pk}", kind="admission")
    assert admission.data["score"]["utilization"] == -20 and "1 GPU" in admission.data["rightsized"]


def test_past_run_times_send_a_long_task_to_the_fixed_pool(world, cluster):
    done = world.submit(name="long", gpu_model="A100", gpus="1")
    end_run(start_run(done), minute=20 * 60)  # one succeeded run of 20 h: a long job whenever it comes
    TrainingJob.objects.filter(pk=done.pk).update(status=JobStatus.SUCCEEDED)
    long = submit(world, name="long", gpu_model="A100", gpus="1")
    short = submit(world, name="short", gpu_model="A100", gpus="1")

    tick(cluster)
    long.refresh_from_db()
    short.refresh_from_db()
    assert short.status == JobStatus.RUNNING and short.node.name == "a100-0"  # co-location pool first
    # the only A100 node is in the co-location pool: the long job goes to the fixed pool's T4 node (pytorch is
    # certified on both models)
    assert long.status == JobStatus.RUNNING and long.node.name == "t4-0" and long.assigned_gpu_model.name == "T4"


def test_a_run_ended_by_the_loop_is_summarized_at_once(world, cluster):
    job = submit(world, name="quick", gpus="1")
    tick(cluster)
    tick(cluster, seconds=601)  # the pod finished: the loop ends the run
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED
    summary = RunSummary.objects.get(run=job.runs.get())
    assert summary.outcome == "succeeded" and summary.run_s == pytest.approx(601, abs=5) and summary.samples == 0


def test_finished_runs_pair_each_real_run_time_with_the_estimate_it_was_placed_with(world):
    from colocation.policy.calibration import EstimateSource, FinishedRun, calibrate
    from colocation.selectors import finished_runs, lending_profile

    stated = world.submit(name="stated")
    TrainingJob.objects.filter(pk=stated.pk).update(expected_duration_s=600)
    end_run(start_run(stated, minute=0), minute=15)  # stated 10 min, ran 15
    first = world.submit(name="profiled")  # no stated duration and no past run: no estimate, left out
    end_run(start_run(first, minute=0), minute=60)
    second = world.submit(name="profiled")
    TrainingJob.objects.filter(pk=second.pk).update(expected_duration_s=60)  # its task's past runs win
    end_run(start_run(second, minute=70), minute=160)  # placed with the mean of the runs before it: 60 min
    failed = world.submit(name="stated")
    end_run(start_run(failed, minute=20), minute=21, outcome=JobRun.Outcome.FAILED)  # not finished: left out

    assert finished_runs() == [FinishedRun(3600.0, 5400.0, EstimateSource.PAST_RUNS),
                               FinishedRun(600.0, 900.0, EstimateSource.STATED)]
    assert finished_runs(limit=1) == [FinishedRun(3600.0, 5400.0, EstimateSource.PAST_RUNS)]
    assert lending_profile().runtime == calibrate(finished_runs())  # two jobs: the prior


def test_a_loops_calibration_is_read_again_only_once_a_minute_old(world, django_assert_num_queries):
    from colocation.policy.calibration import MIN_FINISHED, PRIOR_FACTOR, EstimateSource
    from colocation.selectors import lending_profile
    from core.expiring import Expiring

    def stated_runs(n: int) -> None:  # stated 10 min, each ran 20: a factor of 2 once there are enough
        for _ in range(n):
            job = world.submit(name="stated")
            TrainingJob.objects.filter(pk=job.pk).update(expected_duration_s=600)
            end_run(start_run(job, minute=0), minute=20)

    calibration, now = Expiring(), 1_000.0
    assert lending_profile(now=now, calibration=calibration).runtime.factor(EstimateSource.STATED).value == PRIOR_FACTOR
    stated_runs(MIN_FINISHED)
    with django_assert_num_queries(0):  # within the minute: the runs that finished since are not read
        profile = lending_profile(now=now + 59.9, calibration=calibration)
    assert profile.runtime.factor(EstimateSource.STATED).value == PRIOR_FACTOR
    with django_assert_num_queries(2):
        profile = lending_profile(now=now + 60, calibration=calibration)
    assert profile.runtime.factor(EstimateSource.STATED).value == 2.0 and calibration.reads == 2
    assert lending_profile().runtime == profile.runtime  # no cache: read each time, as before
