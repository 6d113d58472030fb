"""Celery tasks of the experiments: each only calls the experiment's entry point."""
from celery import shared_task

from experiments import whatif_run
from experiments.fragmentation import experiment


@shared_task(name="experiments.fragmentation_run")
def fragmentation_run(nodes: str, pods: str, tune: float, seeds: list[int], policy: str, seed: int,
                      interference: str | None = None) -> dict:
    """One run (policy x seed) of `manage.py fragmentation --celery`."""
    return experiment.run_remote(nodes, pods, tune, seeds, policy, seed, interference)


@shared_task(name="experiments.replay", ignore_result=True)
def replay_run(run_id: int) -> str:
    return whatif_run.replay_execute(run_id=run_id).status
