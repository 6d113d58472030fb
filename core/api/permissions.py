"""Who may write what. Reads are narrowed by each model's `restrict(user)` queryset instead."""
from rest_framework.permissions import SAFE_METHODS, BasePermission


class IsOperatorOrReadOnly(BasePermission):
    """Platform operators (staff users) write; every signed-in user reads."""

    message = "only platform operators may change this"

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated) and (
            request.method in SAFE_METHODS or request.user.is_staff
        )


class IsOperator(BasePermission):
    """Platform operators only, for reads and writes alike."""

    message = "only platform operators may do this"

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)
