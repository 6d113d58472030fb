"""The operator admin base every app's admin builds on, and the admin of core's own entities."""
from django.contrib import admin

from core.models import Decision, Department, GPUModel, Membership


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


class MembershipInline(OperatorInline):
    model = Membership
    autocomplete_fields = ["user"]


@admin.register(Department)
class DepartmentAdmin(OperatorAdmin):
    list_display = ["name", "description", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(OperatorAdmin):
    list_display = ["user", "department", "role"]
    list_filter = ["role", "department"]
    search_fields = ["user__username", "department__name"]


@admin.register(GPUModel)
class GPUModelAdmin(OperatorAdmin):
    list_display = ["name", "memory_gib"]
    search_fields = ["name"]


@admin.register(Decision)
class DecisionAdmin(OperatorAdmin):
    list_display = ["created_at", "kind", "subject", "reason", "message"]
    list_filter = ["kind", "reason", "department"]
    search_fields = ["subject", "message"]
    date_hierarchy = "created_at"
