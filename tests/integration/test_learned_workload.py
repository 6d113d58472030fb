"""The fragmentation measure's target workload, learned from the cluster's own last week of submissions
(docs/concepts/placement.md#the-clusters-typical-jobs)."""
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import selectors, services
from scheduler.policy.workload import Shape
from scheduler.models import LearnedWorkload, TrainingJob

pytestmark = pytest.mark.django_db


def _submit(world, n: int, **fields) -> None:
    for _ in range(n):
        world.submit(**fields)


def test_the_workload_is_the_weeks_typical_shapes_with_the_models_each_may_use(world):
    _submit(world, 6, gpus="1", gpu_model="T4")  # pytorch: certified on A100 and T4
    _submit(world, 3, gpus="0.5", gpu_model="T4")
    _submit(world, 1, gpus="0", gpu_model="")  # CPU only: no model
    _submit(world, 5, gpus="2", gpu_model="A100")  # last week's, not typical any more
    TrainingJob.objects.filter(gpus=2).update(submitted_at=timezone.now() - timedelta(days=8))
    learned = services.workload_learn(now=timezone.now())
    assert learned.jobs == 10 and learned.window_days == 7
    workload = selectors.learned_workload()
    cpu = TrainingJob.objects.first().cpu_milli
    assert dict(zip(workload.shapes, workload.counts)) == {
        Shape(cpu, 1000, 1, ("A100", "T4")): 6, Shape(cpu, 500, 1, ("A100", "T4")): 3, Shape(cpu, 0, 0, ()): 1}
    assert workload.shapes[0] == Shape(cpu, 1000, 1, ("A100", "T4"))  # most frequent first


def test_the_most_frequent_shapes_cover_95_percent_of_the_jobs(world):
    _submit(world, 20, gpus="1", gpu_model="T4")
    _submit(world, 1, gpus="2", gpu_model="T4")  # 1 job in 21: beyond the 95 % the typical shapes cover
    services.workload_learn(now=timezone.now())
    workload = selectors.learned_workload()
    assert [s.gpu_count for s in workload.shapes] == [1] and workload.pods == 21


def test_no_workload_before_any_submission_and_only_the_newest_rows_are_kept(world):
    assert selectors.learned_workload() is None
    now = timezone.now()
    for minutes in range(services.WORKLOADS_KEPT + 3):
        services.workload_learn(now=now + timedelta(minutes=minutes))
    assert selectors.learned_workload() is None  # learned, but from no job
    assert LearnedWorkload.objects.count() == services.WORKLOADS_KEPT
    assert LearnedWorkload.objects.first().learned_at == now + timedelta(minutes=services.WORKLOADS_KEPT + 2)


def test_the_live_scheduler_places_by_the_newest_learned_workload(world, cluster, monkeypatch):
    from scheduler import live
    from scheduler.policy.cycle import schedule
    from tests.integration.livecluster import tick

    seen = []  # the workload each tick's cycle was given
    monkeypatch.setattr(live, "schedule", lambda *args: seen.append(args[3]) or schedule(*args))
    tick(cluster)
    assert seen == [None]  # nothing learned yet: the cycle reads its snapshot's jobs
    _submit(world, 4, gpus="2", gpu_model="A100")
    services.workload_learn(now=timezone.now())
    tick(cluster)
    assert seen[-1] == selectors.learned_workload() and seen[-1].shapes[0].gpu_count == 2
