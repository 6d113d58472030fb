"""What every app points at: departments and their members, the GPU catalogue, and the decision log.

The tables kept their rows when these models moved here from the scheduler app (migrations core/0001-0002).
"""
from django.conf import settings
from django.db import models
from django.db.models import Q

from core.querysets import DepartmentScopedQuerySet, departments_of

CPU = "cpu"
MEMORY = "memory"
RESERVED_RESOURCE_NAMES = (CPU, MEMORY)


class DepartmentQuerySet(models.QuerySet):
    def restrict(self, user, role: str | None = None) -> "DepartmentQuerySet":
        """Operators see every department, other users the ones they belong to (hold `role` in, when given)."""
        if not user.is_authenticated:
            return self.none()
        return self if user.is_staff else self.filter(pk__in=departments_of(user, role))


class Department(models.Model):
    """A node of the quota tree (organisation -> division -> team); without a parent, under the root. Only leaves
    admit jobs (docs/concepts/quotas-and-priority.md#quota-trees-and-fair-sharing)."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    parent = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="children")
    weight = models.DecimalField(max_digits=8, decimal_places=3, default=1,
                                 help_text="Fair-share weight of idle capacity (0: leftovers only)")
    reclaim_min_runtime_s = models.FloatField(default=0, help_text="Its borrowed work younger than this is reclaimed "
                                                                   "last")
    fence = models.BooleanField(default=False, help_text="Its subtree's work preempts only inside the subtree "
                                                         "(YuniKorn's fence)")

    objects = DepartmentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=0) & Q(reclaim_min_runtime_s__gte=0),
                                   name="department_tree_non_negative"),
            models.CheckConstraint(condition=~Q(parent=models.F("pk")), name="department_not_its_own_parent"),
        ]

    def __str__(self) -> str:
        return self.name


class MembershipQuerySet(DepartmentScopedQuerySet):
    pass


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "Member"
        ADMIN = "admin", "Department admin"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "department"], name="membership_unique_user_department"),
            models.CheckConstraint(condition=Q(role__in=["member", "admin"]), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.department} ({self.role})"


class GPUModel(models.Model):
    name = models.CharField(max_length=32, unique=True)
    memory_gib = models.PositiveIntegerField()

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU model"
        constraints = [
            models.CheckConstraint(condition=Q(memory_gib__gt=0), name="gpumodel_memory_positive"),
            models.CheckConstraint(condition=~Q(name__in=RESERVED_RESOURCE_NAMES), name="gpumodel_name_not_reserved"),
        ]

    def __str__(self) -> str:
        return self.name


class DecisionQuerySet(DepartmentScopedQuerySet):
    def restrict(self, user, role: str | None = None) -> "DecisionQuerySet":
        """Cluster-wide decisions (no department) are visible to every signed-in user; `role` as in
        DepartmentScopedQuerySet."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self
        return self.filter(Q(department__isnull=True) | Q(department__in=departments_of(user, role)))


class Decision(models.Model):
    """Every admission, placement, preemption, lending or scaling decision, with why."""

    class Kind(models.TextChoices):
        ADMISSION = "admission", "Admission"
        PLACEMENT = "placement", "Placement"
        PREEMPTION = "preemption", "Preemption"
        PENDING = "pending", "Still pending"
        CANCELLATION = "cancellation", "Cancellation"
        QUOTA = "quota", "Quota change"
        LENDING = "lending", "Lending"
        SCALING = "scaling", "Scaling"
        RIGHTSIZING = "rightsizing", "Right-sizing"
        ALERT = "alert", "Alert"

    kind = models.CharField(max_length=16, choices=Kind.choices, db_index=True)
    subject = models.CharField(max_length=160, db_index=True, help_text='What it is about, e.g. "job:42", "node:n1".')
    department = models.ForeignKey(
        Department, on_delete=models.SET_NULL, null=True, blank=True, related_name="decisions"
    )
    reason = models.CharField(max_length=64, help_text="Machine-readable reason code.")
    message = models.TextField(help_text="The reason as a sentence for the people it affects.")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = DecisionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["subject", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.subject}: {self.message}"
