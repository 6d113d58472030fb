"""Quota usage accounting and admission: own quota first, then borrowed quota.

Whether borrowed work really lands on idle capacity is decided by placement (a borrowed job
is only placed where capacity is free, never by preemption), not by counting other
departments' unused own quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, Allocation, JobView, QuotaKind, QuotaView, Resources

# (quota resource key, amount) pairs, zeros dropped, in the order of Resources.amounts()
Demand = tuple[tuple[str, float], ...]


def demand(gpu_model: str | None, gpus: float, cpu_milli: int, memory_mib: int) -> Demand:
    """What a request charges: Resources.of(...).amounts() as pairs, without the dict."""
    return gpu_demand(gpu_model, gpus) + host_demand(cpu_milli, memory_mib)


def gpu_demand(gpu_model: str | None, gpus: float) -> Demand:
    return ((gpu_model, float(gpus)),) if gpu_model and gpus > 0 else ()


def host_demand(cpu_milli: int, memory_mib: int) -> Demand:
    """The CPU and memory part of a demand (the same on every GPU model a job may use)."""
    return ((CPU_KEY, cpu_milli),) * bool(cpu_milli) + ((MEMORY_KEY, memory_mib),) * bool(memory_mib)


def demand_of(resources: Resources) -> Demand:
    return tuple(resources.amounts().items())


def allocation_demand(alloc: Allocation) -> Demand:
    """demand_of(alloc.resources) without building the Resources and its dict."""
    return demand(alloc.gpu_model, alloc.gpus, alloc.cpu_milli, alloc.memory_mib)


class Bound(str, Enum):
    """Which limit of a quota-tree level refuses borrowed work."""

    BORROW = "borrow"  # the level's borrow limit: what its subtree may take past its own
    LEND = "lend"  # the lend limits of the levels whose quota it would borrow
    POOL = "pool"  # everything the tree lends is in use


@dataclass(slots=True)
class Shortfall:
    """A quota without room; written out (sentences.quota_refused) only if someone reads it (most never are). Not
    frozen: built for nearly every model of every waiting job, and frozen dataclasses are 4x slower to build."""

    kind: QuotaKind
    resource: str
    used: float
    limit: float
    amount: float
    node: str | None = None  # the quota-tree level that refuses (None: the job's own department, flat)
    bound: Bound | None = None  # which of the level's limits (None: a flat quota); used and limit are its figures


@dataclass(slots=True)  # not frozen, as Shortfall
class QuotaCheck:
    kind: QuotaKind | None  # None: neither own nor borrowed quota has room
    refused: tuple[Shortfall, ...]  # own (and borrowed) refusals; empty when own quota had room


_OWN_ROOM = QuotaCheck(QuotaKind.OWN, ())
_NO_QUOTA = (0.0, 0.0, 0.0, 0.0)  # a resource without a quota row: nothing may be admitted on it

# Row layout: [own limit, borrowed limit, own used, borrowed used]; (limit, used) index per kind.
_SLOTS = MappingProxyType({QuotaKind.OWN: (0, 2), QuotaKind.BORROWED: (1, 3)})
(_OWN_LIMIT, _OWN_USED), (_BORROWED_LIMIT, _BORROWED_USED) = _SLOTS[QuotaKind.OWN], _SLOTS[QuotaKind.BORROWED]
_NO_ROWS: Mapping[str, tuple[float, float, float, float]] = MappingProxyType({})

Limits = Mapping[str, Mapping[str, tuple[float, float, float, float]]]


def quota_limits(quotas: Iterable[QuotaView]) -> Limits:
    """The ledger's rows before anything is charged (limits, nothing used), per department and resource; a loop
    keeps them while it passes the same tuple of (frozen) QuotaViews again (CycleCache)."""
    limits: dict[str, dict[str, tuple[float, float, float, float]]] = {}
    for q in quotas:
        limits.setdefault(q.department, {})[q.resource] = (q.own, q.borrowed, 0.0, 0.0)
    return limits


def held(holders: Iterable[JobView]) -> list[tuple[str, QuotaKind, Demand]]:
    """What running jobs charge, per department and kind: GPU models first, then CPU and memory. Summed per department
    and kind first, in holder order: each GPU model's sum is the one charging allocation by allocation makes, and CPU
    and memory are whole numbers, exact in any order."""
    gpus: dict[tuple[str, QuotaKind, str], float] = {}
    host: dict[tuple[str, QuotaKind], list[int]] = {}
    for job in holders:
        department = job.department
        for alloc in job.allocations:  # a gang holds quota for every worker
            kind = alloc.quota_kind
            if kind is None:
                continue
            for resource, amount in gpu_demand(alloc.gpu_model, alloc.gpus):
                key = (department, kind, resource)
                gpus[key] = gpus.get(key, 0.0) + amount
            summed = host.get((department, kind))
            if summed is None:
                summed = host[(department, kind)] = [0, 0]
            summed[0] += alloc.cpu_milli
            summed[1] += alloc.memory_mib
    return ([(department, kind, ((resource, amount),)) for (department, kind, resource), amount in gpus.items()]
            + [(department, kind, host_demand(cpu, memory)) for (department, kind), (cpu, memory) in host.items()])


class QuotaLedger:
    """Own and borrowed usage per department and resource key, charged by admitted/running jobs."""

    def __init__(self, quotas: Iterable[QuotaView], holders: Iterable[JobView], limits: Limits | None = None) -> None:
        self._limits = quota_limits(quotas) if limits is None else limits
        self._rows: dict[str, dict[str, list[float]]] = {}  # a department's rows, copied when first charged
        # per department, until it is next charged: need -> (own, borrowed) shortfall; thousands of waiting
        # jobs ask for the same few GPU parts (model, count) each cycle
        self._checked: dict[str, dict[Demand, tuple[_Short | None, _Short | None]]] = {}
        self._host_checked: dict[str, dict[Demand, tuple[bool, bool]]] = {}  # host_fits(), the same way
        for department, kind, need in held(holders):
            self.charge(department, kind, need)

    def _read(self, department: str) -> Mapping[str, Sequence[float]]:
        rows = self._rows.get(department)
        return self._limits.get(department, _NO_ROWS) if rows is None else rows

    def _write(self, department: str) -> dict[str, list[float]]:
        rows = self._rows.get(department)
        if rows is None:
            rows = self._rows[department] = {r: list(row) for r, row in self._limits.get(department, _NO_ROWS).items()}
        return rows

    def has_own_room(self, department: str, need: Demand, host: Demand = ()) -> bool:
        """Own quota has room for `need` + `host` (each resource is checked on its own, so in two parts)."""
        rows = self._read(department)
        return _part(rows, self._checked.setdefault(department, {}), need)[0] is None and \
            _no_room(rows, host, _OWN_LIMIT, _OWN_USED) is None

    def host_fits(self, department: str, host: Demand, borrowing: bool) -> bool:
        """`host` (a CPU and memory demand) fits the department's own quota, and its borrowed quota when borrowing."""
        checked = self._host_checked.setdefault(department, {})
        fits = checked.get(host)
        if fits is None:
            rows = self._read(department)
            fits = checked[host] = (_no_room(rows, host, _OWN_LIMIT, _OWN_USED) is None,
                                    _no_room(rows, host, _BORROWED_LIMIT, _BORROWED_USED) is None)
        return fits[0] and (fits[1] or not borrowing)

    def choose(self, department: str, need: Demand, borrowing: bool) -> QuotaCheck:
        """Own quota when every resource has room there, else borrowed quota when it has room."""
        return self.checker(department, (), borrowing).choose(need)

    def checker(self, department: str, host: Demand, borrowing: bool) -> JobQuota:
        """Quota checks of one job on each GPU model it may use, until the ledger next changes."""
        return JobQuota(self._read(department), host, borrowing, self._checked.setdefault(department, {}))

    def charge(self, department: str, kind: QuotaKind, need: Demand, sign: int = 1) -> None:
        rows = self._write(department)
        self._checked.pop(department, None)
        self._host_checked.pop(department, None)
        slot = _SLOTS[kind][1]
        for resource, amount in need:
            row = rows.get(resource)
            if row is None:  # no quota set: usage is still counted
                row = rows[resource] = list(_NO_QUOTA)
            row[slot] += sign * amount

    def release(self, department: str, kind: QuotaKind, need: Demand) -> None:
        self.charge(department, kind, need, sign=-1)

    def usage(self) -> tuple:
        """Every row charged so far, as values (to tell whether a release and charge left the ledger as it was)."""
        return tuple((d, r, *row) for d, rows in self._rows.items() for r, row in rows.items())


class JobQuota:
    """`QuotaLedger.choose` for one job on each of its GPU models. The CPU and memory part of its
    demand is the same on every model, so it is checked once (a job waiting for room is checked on
    every certified model, every cycle). Valid until the ledger next changes."""

    def __init__(self, rows: Mapping[str, Sequence[float]], host: Demand, borrowing: bool,
                 checked: dict[Demand, tuple[_Short | None, _Short | None]] | None = None) -> None:
        self.rows = rows
        self.borrowing = borrowing
        self.host = host
        self.checked = {} if checked is None else checked  # the ledger's memo of GPU parts for this department
        self.own_host = _no_room(rows, host, _OWN_LIMIT, _OWN_USED)
        self._borrowed_host: _Short | None | bool = False  # False: not checked yet

    def choose(self, gpu: Demand) -> QuotaCheck:
        """= ledger.choose(department, gpu + host, borrowing)."""
        kind, own, borrowed = self._check(gpu)
        if own is None:
            return _OWN_ROOM
        refused = (Shortfall(QuotaKind.OWN, *own),) if borrowed is None else \
            (Shortfall(QuotaKind.OWN, *own), Shortfall(QuotaKind.BORROWED, *borrowed))
        return QuotaCheck(kind, refused)

    def host_fits(self) -> bool:
        """= QuotaLedger.host_fits(department, host, borrowing), from what this job's checks already read."""
        if self.own_host is not None:
            return False
        if not self.borrowing:
            return True
        if self._borrowed_host is False:
            self._borrowed_host = _no_room(self.rows, self.host, _BORROWED_LIMIT, _BORROWED_USED)
        return self._borrowed_host is None

    def kind(self, gpu: Demand) -> QuotaKind | None:
        """choose(gpu).kind, without building the refusals (for models a message only names)."""
        return self._check(gpu)[0]

    def _check(self, gpu: Demand) -> tuple[QuotaKind | None, _Short | None, _Short | None]:
        """The kind and the first own and borrowed resource without room. Resources are checked in
        the order of the demand (GPUs first), so that is the GPU or else the host's."""
        own_gpu, borrowed = _part(self.rows, self.checked, gpu)
        own = own_gpu or self.own_host
        if own is None:
            return QuotaKind.OWN, None, None
        if not self.borrowing:
            return None, own, None
        if borrowed is None:
            if self._borrowed_host is False:
                self._borrowed_host = _no_room(self.rows, self.host, _BORROWED_LIMIT, _BORROWED_USED)
            borrowed = self._borrowed_host
            if borrowed is None:
                return QuotaKind.BORROWED, own, None
        return None, own, borrowed


_Short = tuple[str, float, float, float]  # (resource, used, limit, amount): a Shortfall's fields after its kind


def _part(rows: Mapping[str, Sequence[float]], checked: dict[Demand, tuple[_Short | None, _Short | None]],
          need: Demand) -> tuple[_Short | None, _Short | None]:
    """The first own and the first borrowed resource of `need` without room, through the memo `checked`."""
    part = checked.get(need)
    if part is None:
        part = checked[need] = (_no_room(rows, need, _OWN_LIMIT, _OWN_USED),
                                _no_room(rows, need, _BORROWED_LIMIT, _BORROWED_USED))
    return part


def _no_room(rows: Mapping[str, Sequence[float]], need: Demand, limit_slot: int, used_slot: int) -> _Short | None:
    """The first resource without room, or None when all fit; a plain tuple, not yet a Shortfall
    (this runs several times for every waiting job of every cycle)."""
    for resource, amount in need:
        row = rows.get(resource, _NO_QUOTA)
        limit, used = row[limit_slot], row[used_slot]
        if used + amount > limit + GPU_EPS:
            return resource, used, limit, amount
    return None
