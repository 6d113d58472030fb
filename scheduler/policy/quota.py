"""Quota usage accounting and admission: own quota first, then borrowed quota.

Whether borrowed work really lands on idle capacity is decided by placement (a borrowed job
is only placed where capacity is free, never by preemption), not by counting other
departments' unused own quota.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cluster.types import CPU_KEY, GPU_EPS, MEMORY_KEY, JobView, QuotaKind, QuotaView, Resources

Key = tuple[str, str]  # (department, resource key)


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    kind: QuotaKind | None  # None: neither own nor borrowed quota has room
    message: str  # why own (and borrowed) was refused; empty when own quota had room


class QuotaLedger:
    """Own and borrowed usage per (department, resource key), charged by admitted/running jobs."""

    def __init__(self, quotas: Iterable[QuotaView], holders: Iterable[JobView]) -> None:
        self._limit: dict[Key, tuple[float, float]] = {(q.department, q.resource): (q.own, q.borrowed)
                                                      for q in quotas}
        self._used: dict[Key, list[float]] = {}
        for job in holders:
            alloc = job.allocation
            if alloc is not None and alloc.quota_kind is not None:
                self.charge(job.department, alloc.quota_kind, alloc.resources)

    def used(self, department: str, resource: str, kind: QuotaKind) -> float:
        return self._used.get((department, resource), [0.0, 0.0])[kind is QuotaKind.BORROWED]

    def limit(self, department: str, resource: str, kind: QuotaKind) -> float:
        return self._limit.get((department, resource), (0.0, 0.0))[kind is QuotaKind.BORROWED]

    def choose(self, department: str, demand: Resources, borrowing: bool) -> QuotaCheck:
        """Own quota when every resource has room there, else borrowed quota when it has room."""
        amounts = demand.amounts()
        own_short = self._shortfall(department, amounts, QuotaKind.OWN)
        if own_short is None:
            return QuotaCheck(QuotaKind.OWN, "")
        if not borrowing:
            return QuotaCheck(None, own_short)
        borrowed_short = self._shortfall(department, amounts, QuotaKind.BORROWED)
        if borrowed_short is None:
            return QuotaCheck(QuotaKind.BORROWED, own_short)
        return QuotaCheck(None, f"{own_short}; {borrowed_short}")

    def charge(self, department: str, kind: QuotaKind, demand: Resources, sign: int = 1) -> None:
        slot = kind is QuotaKind.BORROWED
        for resource, amount in demand.amounts().items():
            self._used.setdefault((department, resource), [0.0, 0.0])[slot] += sign * amount

    def release(self, department: str, kind: QuotaKind, demand: Resources) -> None:
        self.charge(department, kind, demand, sign=-1)

    def _shortfall(self, department: str, amounts: dict[str, float], kind: QuotaKind) -> str | None:
        """A sentence about the first resource without room, or None when all fit."""
        for resource, amount in amounts.items():
            used = self.used(department, resource, kind)
            limit = self.limit(department, resource, kind)
            if used + amount > limit + GPU_EPS:
                return (f"{kind.value} {describe(resource)} quota {fmt(used, resource)}/"
                        f"{fmt(limit, resource)} used, needs {fmt(amount, resource)}")
        return None


def describe(resource: str) -> str:
    return {CPU_KEY: "CPU", MEMORY_KEY: "memory"}.get(resource, resource)


def fmt(amount: float, resource: str) -> str:
    if resource == CPU_KEY:
        return f"{amount:g}m"
    if resource == MEMORY_KEY:
        return f"{amount:g} MiB"
    return f"{round(amount, 3):g}"
