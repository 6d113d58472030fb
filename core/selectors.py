"""Reads of core's own entities: departments, memberships, GPU models and the decision log."""
from django.db.models import QuerySet

from core.models import Decision, Department, GPUModel, Membership


def is_member(*, user, department: Department, role: str | None = None) -> bool:
    memberships = Membership.objects.filter(user=user, department=department)
    if role is not None:
        memberships = memberships.filter(role=role)
    return memberships.exists()


def can_administer(*, user, department: Department) -> bool:
    """Operators and the department's admins manage its members and services."""
    return user.is_staff or is_member(user=user, department=department, role=Membership.Role.ADMIN)


def tree_links() -> dict[int, int | None]:
    """Every department's id -> its parent's id (None: under the root), in one query."""
    return dict(Department.objects.values_list("pk", "parent_id"))


def subtrees(links: dict[int, int | None], roots: set[int]) -> set[int]:
    """The ids of `roots` and of every department below them."""
    found, changed = set(roots), True
    while changed:
        grown = found | {pk for pk, parent in links.items() if parent in found}
        changed, found = grown != found, grown
    return found


def managed_departments(*, user) -> set[int] | None:
    """The departments whose place, weight and quotas in the quota tree `user` manages: below the ones they
    administer (a department admin manages their subtree's children, not their own department); None: every one
    (operators)."""
    return tree_rights(user=user)[0]


def tree_rights(*, user) -> tuple[set[int] | None, set[int] | None]:
    """(the departments `user` manages, the departments they may put a department under): an admin manages the
    departments below theirs and adds under those and their own; None: every one (operators). Two queries."""
    if user.is_staff:
        return None, None
    if not user.is_authenticated:
        return set(), set()
    admin_of = set(Membership.objects.filter(user=user, role=Membership.Role.ADMIN).values_list("department_id",
                                                                                                   flat=True))
    if not admin_of:
        return set(), set()
    links = tree_links()
    managed = subtrees(links, {pk for pk, parent in links.items() if parent in admin_of})
    return managed, managed | admin_of


def may_place_under(*, user, parent: Department | None) -> bool:
    """Whether `user` may put a department under `parent` (None: under the root, operators only): operators, and
    admins of `parent` or of a department above it."""
    if user.is_staff:
        return True
    if parent is None or not user.is_authenticated:
        return False
    managed = managed_departments(user=user)
    return parent.pk in managed or is_member(user=user, department=parent, role=Membership.Role.ADMIN)


def gpu_model_names() -> QuerySet[str]:
    return GPUModel.objects.values_list("name", flat=True)


def departments() -> QuerySet[Department]:
    return Department.objects.all()


def department_names(*, user, role: str | None = None, containing: str = "") -> QuerySet[str]:
    """The names of the departments `user` may see (holds `role` in, when given), those containing `containing`."""
    rows = Department.objects.restrict(user, role)
    return (rows.filter(name__icontains=containing) if containing else rows).order_by("name").values_list(
        "name", flat=True)


def departments_named(names: list[str]) -> QuerySet[Department]:
    return Department.objects.filter(name__in=names)


def memberships(*, user) -> QuerySet[Membership]:
    """The user's memberships with their departments, by department name."""
    return Membership.objects.filter(user=user).select_related("department").order_by("department__name")


def members(*, department: Department) -> QuerySet[Membership]:
    """A department's memberships with their users, by user name."""
    return Membership.objects.filter(department=department).select_related("user", "department").order_by(
        "user__username")


def decision_log() -> QuerySet[Decision]:
    """Every decision with its department, newest first."""
    return Decision.objects.select_related("department")
