"""Fragmentation per resource group, as the lending tick reports it (colocation.observe.group_allocation)."""
from cluster.types import NodeState, NodeView, Pool
from colocation.observe import group_allocation
from scheduler.policy.workload import Shape, TargetWorkload

ONE_GPU = Shape(4000, 1000, 1, ("T4",))
CPU_ONLY = Shape(4000, 0, 0, ())


def _node(name: str, used: tuple[float, ...] = (), group: str = "t4", gpus: int = 4) -> NodeView:
    return NodeView(name, group, "T4" if gpus else None, gpus, 64000, 262144, Pool.COLOCATION,
                    NodeState.OFFLINE_NORMAL, gpu_used=used)


def test_idle_gpu_too_small_for_the_typical_job_is_fragmented():
    workload = TargetWorkload((ONE_GPU,), (1,), 1)
    groups = group_allocation((_node("a", (0.5, 0.0, 0.0, 0.0)), _node("b")), workload)
    assert groups["t4"]["gpu_fragmented"] == 0.5  # the half-used GPU; an all-free node (b) has none


def test_the_fragmentation_is_weighted_by_how_often_each_shape_comes():
    # half the jobs are CPU-only: for them every idle GPU is a fragment (3.5 of node a), half of it counts
    workload = TargetWorkload((ONE_GPU, CPU_ONLY), (1, 1), 2)
    groups = group_allocation((_node("a", (0.5, 0.0, 0.0, 0.0)), _node("c", gpus=0, group="cpu")), workload)
    assert groups["t4"]["gpu_fragmented"] == 0.5 * 0.5 + 0.5 * 3.5
    assert "gpu_fragmented" not in groups["cpu"]


def test_without_a_learned_workload_nothing_is_said():
    assert "gpu_fragmented" not in group_allocation((_node("a", (0.5,)),))["t4"]
