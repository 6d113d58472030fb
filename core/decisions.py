"""The decision log's one writer: every decision is stored with its reason, for the people it affects
(docs/architecture.md#rules-that-keep-it-that-way)."""
from core.models import Decision, Department


def decision_record(
    *, kind: str, subject: str, reason: str, message: str, department: Department | None = None, data: dict | None = None
) -> Decision:
    return Decision.objects.create(
        kind=kind, subject=subject, reason=reason, message=message, department=department, data=data or {}
    )
