"""Reads for the colocation app."""
from cluster import types as ct
from colocation.models import Node


def node_views() -> list[ct.NodeView]:
    """The inventory as the cluster backends and policies see it (static part: sizes, pool, state)."""
    return [
        ct.NodeView(
            name=n.name, resource_group=n.resource_group.name, gpu_model=n.gpu_model.name if n.gpu_model else None,
            gpu_count=n.gpu_count, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, pool=ct.Pool(n.pool),
            state=ct.NodeState(n.state),
        )
        for n in Node.objects.select_related("resource_group", "gpu_model")
    ]
