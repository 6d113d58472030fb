"""Writes for the colocation app."""
from django.core.exceptions import PermissionDenied
from django.db import transaction

from colocation.models import InferenceService, ScalingThreshold
from scheduler import selectors as scheduler_selectors
from scheduler.errors import ApplicationError
from scheduler.models import Department

SERVICE_FIELDS = (
    "name", "gpu_model", "priority", "replicas", "min_replicas", "max_replicas", "gpus_per_replica",
    "cpu_milli_per_replica", "memory_mib_per_replica", "autoscaling",
)


def _require_admin(*, actor, department: Department) -> None:
    if not scheduler_selectors.can_administer(user=actor, department=department):
        raise PermissionDenied(f"only operators and admins of {department} manage its inference services")


def _check_bounds(values: dict) -> None:
    low, high, replicas = values["min_replicas"], values["max_replicas"], values["replicas"]
    errors = {}
    if low > high:
        errors["min_replicas"] = [f"min_replicas {low} is above max_replicas {high}"]
    elif not low <= replicas <= high:
        errors["replicas"] = [f"replicas {replicas} is outside [{low}, {high}]"]
    if errors:
        raise ApplicationError("replica bounds are inconsistent", fields=errors)


def _check_thresholds(thresholds: list[dict]) -> None:
    errors = []
    for t in thresholds:
        if not 0 <= t["min_rate"] <= t["expect_rate"] <= t["max_rate"] <= 1:
            errors.append(
                f"{t['metric']}: need 0 ≤ min_rate ≤ expect_rate ≤ max_rate ≤ 1, got "
                f"{t['min_rate']}/{t['expect_rate']}/{t['max_rate']}"
            )
    metrics = [t["metric"] for t in thresholds]
    if len(metrics) != len(set(metrics)):
        errors.append("each metric appears at most once")
    if errors:
        raise ApplicationError("invalid scaling thresholds", fields={"thresholds": errors})


def _set_thresholds(service: InferenceService, thresholds: list[dict]) -> None:
    service.thresholds.all().delete()
    ScalingThreshold.objects.bulk_create(ScalingThreshold(service=service, **t) for t in thresholds)


@transaction.atomic
def service_create(*, actor, department: Department, thresholds: list[dict], **fields) -> InferenceService:
    _require_admin(actor=actor, department=department)
    defaults = {f.name: f.get_default() for f in InferenceService._meta.fields if f.name in SERVICE_FIELDS}
    _check_bounds({**defaults, **fields})
    _check_thresholds(thresholds)
    service = InferenceService.objects.create(department=department, **fields)
    _set_thresholds(service, thresholds)
    return service


@transaction.atomic
def service_update(*, service: InferenceService, actor, thresholds: list[dict] | None = None, **fields) -> InferenceService:
    _require_admin(actor=actor, department=service.department)
    if fields.pop("department", service.department) != service.department:
        raise ApplicationError.for_field("department", "a service cannot move to another department")
    current = {name: getattr(service, name) for name in SERVICE_FIELDS}
    _check_bounds({**current, **fields})
    if thresholds is not None:
        _check_thresholds(thresholds)
        _set_thresholds(service, thresholds)
    for name, value in fields.items():
        setattr(service, name, value)
    service.save()
    return service
