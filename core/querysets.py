"""One permission-restricted queryset for the API and the console (NetBox's RestrictedQuerySet idea)."""
from django.apps import apps
from django.db import models


def departments_of(user, role: str | None = None) -> models.QuerySet:
    """The ids of the user's departments (those where they hold `role`, when given), as a subquery:
    `department__in` needs no join and no DISTINCT, so a restricted list still sorts and pages with the database's
    indexes."""
    memberships = apps.get_model("core", "Membership").objects.filter(user=user)
    return (memberships.filter(role=role) if role else memberships).values("department")


class DepartmentScopedQuerySet(models.QuerySet):
    """Rows that belong to a department; `department_path` names the lookup to it."""

    department_path = "department"

    def restrict(self, user, role: str | None = None) -> "DepartmentScopedQuerySet":
        """What `user` may see: operators (staff) everything, others their departments' rows (those of the
        departments where they hold `role`, when given: an admin's slice)."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(**{f"{self.department_path}__in": departments_of(user, role)})
