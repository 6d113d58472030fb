"""Writes for core's own entities: departments, their members and GPU models (HackSoft's services: keyword-only,
`<entity>_<action>`)."""
from django.core.exceptions import PermissionDenied
from django.db import transaction

from cluster.types import JobStatus
from core import selectors
from core.errors import ApplicationError, Conflict
from core.models import CPU, MEMORY, Department, GPUModel, Membership


FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


# --- departments and members -------------------------------------------------------------------


@transaction.atomic
def department_create(*, name: str, description: str = "", actor=None, **tree) -> Department:
    """A new department, under `tree["parent"]` if given. `actor` (None: the system): operators anywhere, department
    admins within their subtree (docs/reference/permissions.md)."""
    if actor is not None and not selectors.may_place_under(user=actor, parent=tree.get("parent")):
        raise PermissionDenied("only operators add top-level departments; a department admin adds them under "
                               "the departments they administer")
    _check_tree(None, tree)
    _check_parent_runs_no_jobs(tree.get("parent"))
    if Department.objects.filter(name=name).exists():
        raise Conflict.for_field("name", f"a department named {name} exists; names are unique")
    return Department.objects.create(name=name, description=description, **tree)


@transaction.atomic
def department_update(*, department: Department, actor=None, **fields) -> Department:
    """Change a department (its place in the tree, weight, description). `actor` as in department_create: a
    department admin changes the departments below theirs, and moves them only within their subtree."""
    if actor is not None:
        managed = selectors.managed_departments(user=actor)
        if managed is not None and department.pk not in managed:
            raise PermissionDenied(f"only operators and admins of a department above {department} change it")
        if "parent" in fields and not selectors.may_place_under(user=actor, parent=fields["parent"]):
            raise PermissionDenied(f"{fields['parent'] or 'the root'} is outside the departments you administer")
    _check_name_kept(department, fields)
    _check_tree(department, fields)
    if "parent" in fields and fields["parent"] != department.parent:
        _check_parent_runs_no_jobs(fields["parent"])
    for name, value in fields.items():
        setattr(department, name, value)
    department.save(update_fields=list(fields))
    return department


def _check_tree(department: Department | None, fields: dict) -> None:
    """A parent that would put the department under itself, or a negative weight or minimum run time: a 400 naming the
    field, nothing written."""
    for field in ("weight", "reclaim_min_runtime_s"):
        if field in fields and fields[field] < 0:
            raise ApplicationError.for_field(field, f"must be zero or more, got {fields[field]}")
    parent = fields.get("parent")
    seen = set()
    while parent is not None and department is not None:
        if parent.pk == department.pk:
            raise ApplicationError.for_field("parent", f"{fields['parent']} is {department} or under it: the quota "
                                                       "tree would have a cycle")
        if parent.pk in seen:
            break
        seen.add(parent.pk)
        parent = parent.parent


def _check_parent_runs_no_jobs(parent: Department | None) -> None:
    """Only leaves run jobs: a department with unfinished jobs (waiting, admitted, running or preempted) takes no
    child until they end or are cancelled (a 409 naming `parent`, nothing written). The parent's row stays locked
    to the end of the transaction, so a job submitted to it meanwhile (job_submit locks it too) cannot slip in."""
    if parent is None:
        return
    Department.objects.select_for_update().get(pk=parent.pk)
    unfinished = parent.jobs.exclude(status__in=[s.value for s in FINISHED]).count()  # (jobs: scheduler's model)
    if unfinished:
        raise Conflict.for_field("parent", f"{parent} has {unfinished} unfinished job{'s' * (unfinished > 1)} and only "
                                           f"the leaves of the quota tree run jobs: let them end or cancel them "
                                           f"before putting a department under it")


def _keep_an_admin(*, department: Department, leaving: Membership | None, actor) -> None:
    """A department admin cannot leave the department without one; operators can (they administer it anyway)."""
    if actor.is_staff or leaving is None or leaving.role != Membership.Role.ADMIN:
        return
    others = department.memberships.filter(role=Membership.Role.ADMIN).exclude(pk=leaving.pk)
    if not others.exists():
        raise Conflict.for_field("role", f"{leaving.user} is the last admin of {department}; "
                                                 "make someone else admin first")


@transaction.atomic
def membership_set(*, department: Department, user, role: str, actor) -> Membership:
    """Add `user` to `department` with `role`, or change the role of an existing member."""
    if not selectors.can_administer(user=actor, department=department):
        raise PermissionDenied(f"only operators and admins of {department} manage its members")
    current = Membership.objects.select_for_update().filter(user=user, department=department).first()
    if role != Membership.Role.ADMIN:
        _keep_an_admin(department=department, leaving=current, actor=actor)
    membership, _ = Membership.objects.update_or_create(user=user, department=department, defaults={"role": role})
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor) -> None:
    if not selectors.can_administer(user=actor, department=membership.department):
        raise PermissionDenied(f"only operators and admins of {membership.department} manage its members")
    _keep_an_admin(department=membership.department, leaving=membership, actor=actor)
    membership.delete()


# --- GPU models ----------------------------------------------------------------------------------


def _check_gpu_model_name(name: str) -> None:
    if name.lower() in (CPU, MEMORY):
        raise ApplicationError.for_field("name", f"{name!r} is reserved for quotas")


def gpu_model_create(*, name: str, memory_gib: int) -> GPUModel:
    _check_gpu_model_name(name)
    return GPUModel.objects.create(name=name, memory_gib=memory_gib)


def _check_name_kept(entity, fields: dict) -> None:
    """Names are permanent: quotas, decisions and automation refer to departments and GPU models by name."""
    if "name" in fields and fields["name"] != entity.name:
        raise Conflict.for_field(
            "name", f"{entity.name} cannot be renamed (decisions and quotas refer to it by name); create a new one"
        )


def gpu_model_update(*, gpu_model: GPUModel, **fields) -> GPUModel:
    if "name" in fields:
        _check_gpu_model_name(fields["name"])
    _check_name_kept(gpu_model, fields)
    for name, value in fields.items():
        setattr(gpu_model, name, value)
    gpu_model.save(update_fields=list(fields))
    return gpu_model
