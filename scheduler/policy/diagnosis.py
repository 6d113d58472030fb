"""Why a job could not start, as data (kube-scheduler's Diagnosis, Kueue's flavor assigner's reasons): one `NoRoom`
per GPU model whose quota had room but whose nodes did not, and what every model's quota refused. sentences.py turns
them into words, only for the jobs that wait."""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.types import QuotaKind
from scheduler.policy.decisions import Reason
from scheduler.policy.framework import PodRequest
from scheduler.policy.quota import JobQuota, Shortfall

NO_FREE = (0, 0.0)


# Plain (not frozen) slotted dataclasses: built for nearly every model of every waiting job, and a frozen dataclass
# takes about 4x as long to construct.
@dataclass(slots=True)
class NoRoom:
    """A model whose quota had room but whose nodes did not."""

    pod: PodRequest
    kind: QuotaKind | None
    bounds: tuple[float, float, int, int] | None  # most free on one node (upper bounds); None: not shown
    free: tuple[int, float] = NO_FREE  # wholly free and idle GPUs across the model's nodes, when shown
    gang: str | None = None  # a gang's shortfall (sentences.shortfall), when shown
    frame: tuple[str, str] | None = None  # the gang's, split where the worker's CPU goes (None: more depends on it)
    # own-class work whose quota-tree level has no room until borrowed work under it is reclaimed: that level's index
    # and its refusal (nodes were not tried)
    reclaim: tuple[int, Shortfall] | None = None
    shared_badly: bool = False  # a share with room, on GPUs whose jobs the interference model refuses it beside

    @property
    def templated(self) -> bool:
        """Whether the sentence depends on the request's CPU only where it is written."""
        return self.gang is None or self.frame is not None


@dataclass(slots=True)
class Diagnosis:
    """Every model tried for a job and why each failed, in the order tried: `refusals` has (model, why) for every
    model (why: a quota Shortfall, a NoRoom, or None for a model only named), `attempts` the NoRooms."""

    attempts: list[NoRoom] = field(default_factory=list)
    refusals: list[tuple[str | None, object]] = field(default_factory=list)
    quota: JobQuota | None = None  # the job's quota checker (None: no quotas)

    def host_fits(self) -> bool:
        """The job's CPU and memory fit its department's own and borrowed quota."""
        return self.quota is None or self.quota.host_fits()

    def reason(self, models: tuple) -> Reason:
        if not models:
            return Reason.NO_COMPATIBLE_MODEL
        if not self.refusals:
            return Reason.NO_CAPACITY
        if not self.attempts:
            return Reason.QUOTA_EXHAUSTED
        if any(a.kind is not QuotaKind.BORROWED for a in self.attempts):
            return Reason.NO_CAPACITY
        return Reason.NO_IDLE_CAPACITY
