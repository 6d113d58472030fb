"""One permission-restricted queryset for the API and the console (NetBox's RestrictedQuerySet idea)."""
from django.apps import apps
from django.db import models


def departments_of(user) -> models.QuerySet:
    """The ids of the user's departments, as a subquery: `department__in` needs no join and no DISTINCT, so a
    restricted list still sorts and pages with the database's indexes."""
    return apps.get_model("scheduler", "Membership").objects.filter(user=user).values("department")


class DepartmentScopedQuerySet(models.QuerySet):
    """Rows that belong to a department; `department_path` names the lookup to it."""

    department_path = "department"

    def restrict(self, user) -> "DepartmentScopedQuerySet":
        """What `user` may see: operators (staff) everything, others their departments' rows."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(**{f"{self.department_path}__in": departments_of(user)})
