"""Writes for the scheduler's quotas, frameworks and learned workload. Each service checks its business
rules, writes in one transaction, and records a Decision where people need to know why something happened.
A job's submission is scheduler/submission.py, its lifecycle scheduler/lifecycle.py."""
import logging
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count

from core import selectors as core_selectors
from core.decisions import decision_record
from core.errors import ApplicationError, Conflict
from core.models import Decision, Department, GPUModel
from scheduler import selectors
from scheduler.models import Framework, LearnedWorkload, Quota, TrainingJob
from scheduler.policy.workload import Shape, TargetWorkload, job_shape

log = logging.getLogger(__name__)


# --- quotas ------------------------------------------------------------------------------------


def _check_manages(actor, department: Department) -> None:
    """Quotas are the tree's: a department admin sets those of the departments below theirs, not their own."""
    if actor is None:
        return
    managed = core_selectors.managed_departments(user=actor)
    if managed is not None and department.pk not in managed:
        raise PermissionDenied(f"only operators and admins of a department above {department} set its quotas")


def _quota_key(resource_kind: str, gpu_model: GPUModel | None) -> dict:
    if resource_kind == Quota.Resource.GPU:
        if gpu_model is None:
            raise ApplicationError.for_field("gpu_model", "a GPU quota names its GPU model")
        return {"resource_kind": resource_kind, "gpu_model": gpu_model}
    if gpu_model is not None:
        raise ApplicationError.for_field("gpu_model", f"a {resource_kind} quota has no GPU model")
    return {"resource_kind": resource_kind, "gpu_model": None}


@transaction.atomic
def quota_set(
    *, department: Department, resource_kind: str, gpu_model: GPUModel | None, own: Decimal, borrowed: Decimal, actor,
    lend_limit: Decimal | None = None,
) -> Quota:
    """Create or change a quota; it may not drop below what the department's jobs already hold, and lends at most its
    own. `actor` (None: the system): operators any, department admins those of the departments below theirs."""
    _check_manages(actor, department)
    key = _quota_key(resource_kind, gpu_model)
    resource = gpu_model.name if gpu_model else resource_kind
    Department.objects.select_for_update().get(pk=department.pk)  # serialize with admissions
    used = selectors.quota_used(department=department, resource=resource)
    amounts = (("own", own), ("borrowed", borrowed))
    negative = {kind: [f"must be zero or more, got {amount}"] for kind, amount in amounts if amount < 0}
    if lend_limit is not None and not 0 <= lend_limit <= own:
        negative["lend_limit"] = [f"must be between 0 and own ({own}), got {lend_limit}"]
    if negative:
        raise ApplicationError("a quota is never negative, and lends at most its own", fields=negative)
    below = {kind: [f"{kind} {resource} quota {amount} is below the {used[kind]} already in use"]
             for kind, amount in amounts if amount < used[kind]}
    if below:
        raise Conflict("quota below what is in use", fields=below)
    quota, created = Quota.objects.update_or_create(department=department, **key,
                                                    defaults={"own": own, "borrowed": borrowed, "lend_limit": lend_limit})
    decision_record(
        kind=Decision.Kind.QUOTA,
        subject=f"department:{department.name}",
        department=department,
        reason="quota_created" if created else "quota_changed",
        message=f"{department} {resource} quota set to own {own}, borrowed {borrowed} by {actor}",
        data={"resource": resource, "own": str(own), "borrowed": str(borrowed)},
    )
    return quota


@transaction.atomic
def quota_delete(*, quota: Quota, actor) -> None:
    _check_manages(actor, quota.department)
    used = selectors.quota_used(department=quota.department, resource=quota.resource)
    if any(used.values()):
        raise Conflict(f"{quota.department} still holds {quota.resource}: {used}; cannot delete its quota")
    decision_record(
        kind=Decision.Kind.QUOTA,
        subject=f"department:{quota.department.name}",
        department=quota.department,
        reason="quota_deleted",
        message=f"{quota.department} {quota.resource} quota deleted by {actor}",
    )
    quota.delete()


# --- catalogue ---------------------------------------------------------------------------------


@transaction.atomic
def framework_create(*, name: str, version: str, certified_on: list[GPUModel]) -> Framework:
    framework = Framework.objects.create(name=name, version=version)
    framework.certified_on.set(certified_on)
    return framework


@transaction.atomic
def framework_update(*, framework: Framework, certified_on: list[GPUModel] | None = None) -> Framework:
    if certified_on is not None:
        framework.certified_on.set(certified_on)
    return framework


# --- the target workload of the fragmentation measure ------------------------------------------------------
WORKLOAD_DAYS = 7
WORKLOADS_KEPT = 24


def workload_learn(*, now: datetime, days: int = WORKLOAD_DAYS) -> LearnedWorkload:
    """The typical shapes of the jobs submitted in the last `days` (docs/concepts/placement.md#the-clusters-typical-jobs):
    CPU, GPUs and the GPU models each may run on (its framework's certified models, else its preferred one), the most
    frequent covering 95 % of the jobs, as FGD learns its target workload. Older rows beyond the newest 24 are dropped."""
    rows = list(TrainingJob.objects.filter(submitted_at__gt=now - timedelta(days=days), submitted_at__lte=now)
                .values("cpu_milli", "gpus", "framework_id", "gpu_model__name")
                .annotate(n=Count("id")).order_by())
    certified = {f.pk: tuple(sorted(m.name for m in f.certified_on.all()))
                 for f in Framework.objects.prefetch_related("certified_on")}
    shapes: Counter[Shape] = Counter()
    for row in rows:
        shapes[_shape_of(row, certified)] += row["n"]
    jobs = sum(shapes.values())
    workload = TargetWorkload.from_shapes(shapes) if jobs else None
    learned = LearnedWorkload.objects.create(learned_at=now, window_days=days, jobs=jobs, shapes=[
        {"cpu_milli": s.cpu_milli, "gpu_milli": s.gpu_milli, "gpu_count": s.gpu_count, "models": list(s.models),
         "count": n} for s, n in zip(workload.shapes, workload.counts)] if workload else [])
    LearnedWorkload.objects.filter(pk__in=list(LearnedWorkload.objects.values_list("pk", flat=True)
                                               [WORKLOADS_KEPT:])).delete()
    return learned


def _shape_of(row: dict, certified: dict[int, tuple[str, ...]]) -> Shape:
    """A job's shape, allowed on its framework's certified models, else its preferred one."""
    models = certified.get(row["framework_id"]) or ((row["gpu_model__name"],) if row["gpu_model__name"] else ())
    return job_shape(row["cpu_milli"], float(row["gpus"]), models)
