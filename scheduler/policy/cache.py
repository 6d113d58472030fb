"""What a scheduling loop keeps from one cycle to the next (Kueue's `pkg/cache`, owned by the scheduler).

The loop that calls `schedule()` owns one `CycleCache` and passes it to every cycle it runs: the live loop, replay,
the co-location simulation and the benchmark each hold their own, so nothing is shared through the module. Between
two cycles most of the snapshot is the very same frozen objects (NodeViews, JobViews, the QuotaView tuple); entries
are checked by identity, so the cache only saves work: a cycle decides exactly what it decides with a fresh one.
One cache serves one loop at a time (a second, concurrent loop needs its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cluster.types import JobView, QuotaView
from scheduler.policy.nodes import Layout, NodeTable, node_tables
from scheduler.policy.priority import utilization_points
from scheduler.policy.profile import Profile
from scheduler.policy.quota import Demand, Limits, host_demand, quota_limits
from scheduler.policy.quotatree import QuotaTree
from scheduler.policy.rightsizing import Request, rightsize

# (job, right-sized request, utilization points, host demand of every worker, shape: what the waiting cache reads of
# the job but its CPU, pool and score)
JobEntry = tuple[JobView, Request, int, Demand, tuple]


class PerJob:
    """What only depends on a job and the profile, kept for the jobs of the last cycle only."""

    def __init__(self) -> None:
        self.profile: Profile | None = None
        self.last: dict[int, JobEntry] = {}
        self.now: dict[int, JobEntry] = {}

    def start(self, profile: Profile) -> None:
        if self.profile is not profile and self.profile != profile:
            self.last = {}
        self.profile = profile

    def get(self, job: JobView, profile: Profile) -> JobEntry:
        entry = self.last.get(id(job))
        if entry is None or entry[0] is not job:
            request = rightsize(job, profile)
            entry = (job, request, utilization_points(job, profile),  # the host demand is the whole gang's
                     host_demand(request.cpu_request_milli * job.workers, request.memory_mib * job.workers),
                     (job.department, job.framework, job.gpu_model, request.gpus, request.memory_mib, job.workers,
                      job.topology))
        self.now[id(job)] = entry
        return entry

    def finish(self) -> None:
        self.last, self.now = self.now, {}


@dataclass(frozen=True, slots=True)
class _BuiltTree:
    quotas: object  # compared by identity: a snapshot's tuple comes again unchanged while nothing changed
    nodes: object
    departments: set[str]
    capacity: Mapping[str, float]
    tree: QuotaTree


@dataclass(slots=True)
class CycleCache:
    """The last cycle's node layout, quota limits, per-job figures and running jobs' victim scores."""

    layout: Layout | None = None
    quotas: tuple[QuotaView, ...] | None = None
    limits: Limits | None = None
    per_job: PerJob = field(default_factory=PerJob)
    # id(job) -> (job, profile, its score as a victim): a running job's no longer grows once it started
    victim_scores: dict[int, tuple[JobView, Profile, int]] = field(default_factory=dict)
    # The waiting cache (cycle.py): off, every waiting job is tried in full, its sentence written plainly; the same
    # decisions either way (the tests compare both).
    remember_waits: bool = True
    tried: int = 0  # jobs the cycles using this cache tried
    tried_in_full: int = 0  # of them, tried in full (the others waited as one that read the same)
    tree: _BuiltTree | None = None  # the last cycle's quota tree and what it was built from

    def quota_tree(self, quotas, nodes, departments: Callable[[], set[str]],
                   capacity: Callable[[], Mapping[str, float]]) -> QuotaTree:
        """QuotaTree.build(...), kept while the same quotas and tree nodes come again over the same departments and
        capacity."""
        names, room = departments(), capacity()
        last = self.tree
        if last is None or last.quotas is not quotas or last.nodes is not nodes or last.departments != names \
                or last.capacity != room:
            last = self.tree = _BuiltTree(quotas, nodes, names, room, QuotaTree.build(quotas, nodes, names, room))
        return last.tree

    def node_tables(self, nodes) -> dict[str | None, NodeTable]:
        """node_tables(nodes), re-reading only the nodes whose object changed since the last cycle."""
        tables, self.layout = node_tables(nodes, self.layout)
        return tables

    def quota_limits(self, quotas) -> Limits:
        """quota_limits(quotas), kept while the same tuple of frozen QuotaViews comes again."""
        if self.limits is None or quotas is not self.quotas:
            self.limits = quota_limits(quotas)
            self.quotas = quotas if type(quotas) is tuple else None
        return self.limits
