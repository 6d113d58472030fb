"""Bind sets of pods whole or not at all: a training gang (scheduler/live.py) and a service group (colocation/groups.py)
start with every pod or none. Each set's headless Service first (its pods resolve each other before any is ready),
then the pods of every set in one batch (`bind_many`: the backend creates them concurrently); a set the cluster
refused any part of is reported with the pods it did bind, which `unbind` (or the caller's own stop) removes.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cluster.backend import BackendError, ClusterBackend, PodSpec


@dataclass(frozen=True, slots=True)
class PodSet:
    """Pods that start together, each on its node, in rank order; with the headless Service `service` ("": none)."""

    pods: tuple[tuple[PodSpec, str], ...]
    service: str = ""
    selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Refused:
    """What the cluster refused of a set: its Service, or some pods (by name); and the pods it bound meanwhile."""

    service_error: BackendError | None
    pods: Mapping[str, BackendError]
    bound: tuple[str, ...]

    def first(self, podset: PodSet) -> tuple[int, PodSpec, str, BackendError] | None:
        """The lowest-ranked refused pod: (rank, pod, node, error); None when the Service was refused."""
        return next(((rank, spec, node, self.pods[spec.name]) for rank, (spec, node) in enumerate(podset.pods)
                     if spec.name in self.pods), None)


def bind_whole(backend: ClusterBackend, sets: Sequence[PodSet]) -> list[Refused | None]:
    """Per set, in order: None when every pod is bound, else what was refused. BackendUnavailable (from bind_many)
    when the cluster could not be asked: the caller's next tick finds the sets half there."""
    verdicts: list[Refused | None] = [None] * len(sets)
    binding = []
    for i, podset in enumerate(sets):
        try:
            if podset.service:
                backend.apply_headless_service(podset.service, podset.selector)
        except BackendError as error:
            verdicts[i] = Refused(error, {}, ())
            continue
        binding.append(i)
    refused = backend.bind_many([pod for i in binding for pod in sets[i].pods])
    for i in binding:
        names = [spec.name for spec, _ in sets[i].pods]
        if errors := {name: refused[name] for name in names if name in refused}:
            verdicts[i] = Refused(None, errors, tuple(name for name in names if name not in errors))
    return verdicts


def unbind(backend: ClusterBackend, podset: PodSet, refused: Refused, reason: str) -> None:
    """Remove what a refused set bound, and its Service: a set starts whole or not at all."""
    for name in refused.bound:
        try:
            backend.evict(name, reason)
        except BackendError:  # gone already
            pass
    if podset.service:
        backend.delete_service(podset.service)
