"""The operator admin base every app's admin builds on."""
from django.contrib import admin


class OperatorPermissions:
    """Platform operators are staff users: they manage every Tidal record without per-model permissions.
    (Users, groups and tokens stay with superusers.)"""

    def has_module_permission(self, request) -> bool:
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request, obj=None) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request, obj=None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self.has_module_permission(request)


class OperatorAdmin(OperatorPermissions, admin.ModelAdmin):
    pass


class OperatorInline(OperatorPermissions, admin.TabularInline):
    extra = 0
