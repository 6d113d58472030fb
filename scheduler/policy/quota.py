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
class Shortfall:
    """A quota without room; formatted only if someone reads it (most never are)."""

    kind: QuotaKind
    resource: str
    used: float
    limit: float
    amount: float

    def __str__(self) -> str:
        r = self.resource
        return (f"{self.kind.value} {describe(r)} quota {fmt(self.used, r)}/{fmt(self.limit, r)} used, "
                f"needs {fmt(self.amount, r)}")


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    kind: QuotaKind | None  # None: neither own nor borrowed quota has room
    refused: tuple[Shortfall, ...]  # own (and borrowed) refusals; empty when own quota had room

    @property
    def message(self) -> str:
        return "; ".join(map(str, self.refused))


class QuotaLedger:
    """Own and borrowed usage per (department, resource key), charged by admitted/running jobs."""

    def __init__(self, quotas: Iterable[QuotaView], holders: Iterable[JobView]) -> None:
        # (department, resource) -> [own limit, borrowed limit, own used, borrowed used]
        self._rows: dict[Key, list[float]] = {(q.department, q.resource): [q.own, q.borrowed, 0.0, 0.0]
                                              for q in quotas}
        for job in holders:
            alloc = job.allocation
            if alloc is not None and alloc.quota_kind is not None:
                self.charge(job.department, alloc.quota_kind, alloc.resources)

    def used(self, department: str, resource: str, kind: QuotaKind) -> float:
        return self._row((department, resource))[2 + (kind is QuotaKind.BORROWED)]

    def limit(self, department: str, resource: str, kind: QuotaKind) -> float:
        return self._row((department, resource))[kind is QuotaKind.BORROWED]

    def choose(self, department: str, demand: Resources, borrowing: bool) -> QuotaCheck:
        """Own quota when every resource has room there, else borrowed quota when it has room."""
        amounts = demand.amounts()
        own_short = self._shortfall(department, amounts, QuotaKind.OWN)
        if own_short is None:
            return QuotaCheck(QuotaKind.OWN, ())
        if not borrowing:
            return QuotaCheck(None, (own_short,))
        borrowed_short = self._shortfall(department, amounts, QuotaKind.BORROWED)
        if borrowed_short is None:
            return QuotaCheck(QuotaKind.BORROWED, (own_short,))
        return QuotaCheck(None, (own_short, borrowed_short))

    def charge(self, department: str, kind: QuotaKind, demand: Resources, sign: int = 1) -> None:
        slot = 2 + (kind is QuotaKind.BORROWED)
        for resource, amount in demand.amounts().items():
            self._row((department, resource))[slot] += sign * amount

    def release(self, department: str, kind: QuotaKind, demand: Resources) -> None:
        self.charge(department, kind, demand, sign=-1)

    def _row(self, key: Key) -> list[float]:
        row = self._rows.get(key)
        if row is None:  # no quota set: nothing may be admitted on it, but usage is still counted
            row = self._rows[key] = [0.0, 0.0, 0.0, 0.0]
        return row

    def _shortfall(self, department: str, amounts: dict[str, float], kind: QuotaKind) -> Shortfall | None:
        """The first resource without room, or None when all fit."""
        slot = kind is QuotaKind.BORROWED
        for resource, amount in amounts.items():
            row = self._row((department, resource))
            limit, used = row[slot], row[2 + slot]
            if used + amount > limit + GPU_EPS:
                return Shortfall(kind, resource, used, limit, amount)
        return None


def describe(resource: str) -> str:
    return {CPU_KEY: "CPU", MEMORY_KEY: "memory"}.get(resource, resource)


def fmt(amount: float, resource: str) -> str:
    if resource == CPU_KEY:
        return f"{amount:g}m"
    if resource == MEMORY_KEY:
        return f"{amount:g} MiB"
    return f"{round(amount, 3):g}"
