"""Quota usage accounting and admission: own quota first, then borrowed quota.

Whether borrowed work really lands on idle capacity is decided by placement (a borrowed job
is only placed where capacity is free, never by preemption), not by counting other
departments' unused own quota.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, JobView, QuotaKind, QuotaView, Resources

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


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A quota without room; formatted only if someone reads it (most never are)."""

    kind: QuotaKind
    resource: str
    used: float
    limit: float
    amount: float

    def __str__(self) -> str:
        unit = _UNITS.get(self.resource)
        if unit is None:  # GPUs
            return (f"{self.kind.value} {self.resource} quota {_gpus(self.used)}/{_gpus(self.limit)} used, "
                    f"needs {_gpus(self.amount)}")
        name, suffix = unit
        return (f"{self.kind.value} {name} quota {self.used:g}{suffix}/{self.limit:g}{suffix} used, "
                f"needs {self.amount:g}{suffix}")


_UNITS = {CPU_KEY: ("CPU", "m"), MEMORY_KEY: ("memory", " MiB")}


@lru_cache(maxsize=4096)
def _gpus(amount: float) -> str:
    """A GPU amount to 3 decimals; cached: round() is most of the cost of a waiting job's message
    and the same limits, usages and requests recur all cycle long."""
    return f"{round(amount, 3):g}"


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    kind: QuotaKind | None  # None: neither own nor borrowed quota has room
    refused: tuple[Shortfall, ...]  # own (and borrowed) refusals; empty when own quota had room


_OWN_ROOM = QuotaCheck(QuotaKind.OWN, ())
_NO_QUOTA = (0.0, 0.0, 0.0, 0.0)  # a resource without a quota row: nothing may be admitted on it

# Row layout: [own limit, borrowed limit, own used, borrowed used]; (limit, used) index per kind.
_SLOTS = {QuotaKind.OWN: (0, 2), QuotaKind.BORROWED: (1, 3)}


class QuotaLedger:
    """Own and borrowed usage per department and resource key, charged by admitted/running jobs."""

    def __init__(self, quotas: Iterable[QuotaView], holders: Iterable[JobView]) -> None:
        self._rows: defaultdict[str, dict[str, list[float]]] = defaultdict(dict)
        for q in quotas:
            self._rows[q.department][q.resource] = [q.own, q.borrowed, 0.0, 0.0]
        for job in holders:
            alloc = job.allocation
            if alloc is not None and alloc.quota_kind is not None:
                self.charge(job.department, alloc.quota_kind, demand_of(alloc.resources))

    def has_own_room(self, department: str, need: Demand) -> bool:
        return _shortfall(self._rows[department], need, QuotaKind.OWN) is None

    def choose(self, department: str, need: Demand, borrowing: bool) -> QuotaCheck:
        """Own quota when every resource has room there, else borrowed quota when it has room."""
        rows = self._rows[department]
        own_short = _shortfall(rows, need, QuotaKind.OWN)
        if own_short is None:
            return _OWN_ROOM
        if not borrowing:
            return QuotaCheck(None, (own_short,))
        borrowed_short = _shortfall(rows, need, QuotaKind.BORROWED)
        if borrowed_short is None:
            return QuotaCheck(QuotaKind.BORROWED, (own_short,))
        return QuotaCheck(None, (own_short, borrowed_short))

    def charge(self, department: str, kind: QuotaKind, need: Demand, sign: int = 1) -> None:
        rows = self._rows[department]
        slot = _SLOTS[kind][1]
        for resource, amount in need:
            row = rows.get(resource)
            if row is None:  # no quota set: usage is still counted
                row = rows[resource] = list(_NO_QUOTA)
            row[slot] += sign * amount

    def release(self, department: str, kind: QuotaKind, need: Demand) -> None:
        self.charge(department, kind, need, sign=-1)


def _shortfall(rows: dict[str, list[float]], need: Demand, kind: QuotaKind) -> Shortfall | None:
    """The first resource without room, or None when all fit."""
    limit_slot, used_slot = _SLOTS[kind]
    for resource, amount in need:
        row = rows.get(resource, _NO_QUOTA)
        limit, used = row[limit_slot], row[used_slot]
        if used + amount > limit + GPU_EPS:
            return Shortfall(kind, resource, used, limit, amount)
    return None
