"""One permission-restricted queryset for the API and the console (NetBox's RestrictedQuerySet idea)."""
from django.db import models


class DepartmentScopedQuerySet(models.QuerySet):
    """Rows that belong to a department; `department_path` names the lookup to it."""

    department_path = "department"

    def restrict(self, user) -> "DepartmentScopedQuerySet":
        """What `user` may see: operators (staff) everything, others their departments' rows."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(**{f"{self.department_path}__memberships__user": user}).distinct()
