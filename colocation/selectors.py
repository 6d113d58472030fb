"""Reads for the colocation app."""
from django.conf import settings

from cluster import types as ct
from colocation.models import Node
from colocation.policy import LendingProfile


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


def lending_profile() -> LendingProfile:
    """The one lending profile of the live loops (busy windows and the night rule in the site's time zone)."""
    return LendingProfile(tz=settings.TIME_ZONE)
