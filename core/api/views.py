"""What every app's API views share, and the API of core's own entities: the signed-in user, departments,
memberships, GPU models and the decision log."""
from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import viewsets
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from core import selectors as core_selectors, services as core_services
from core.api import serializers as s
from core.api.permissions import IsOperatorOrReadOnly
from core.filtersets import DecisionFilterSet, MembershipFilterSet
from core.models import Decision, Department, GPUModel, Membership


class RestrictedMixin:
    """Every list and detail goes through the model's `restrict(user)`: 404 for what a user may not see."""

    base_queryset = None

    def get_queryset(self):
        return self.base_queryset.restrict(self.request.user)


class MeView(APIView):
    @extend_schema(responses=s.MeSerializer)
    def get(self, request):
        """The signed-in user, whether they are an operator, and their departments with roles."""
        return Response(s.MeSerializer(request.user).data)


@extend_schema_view(
    create=extend_schema(description=(
        "Add a department: operators anywhere, department admins under the departments they administer. Beyond the "
        "schema (a 400 naming the field): `parent` names an existing department. Only leaves run jobs: a `parent` "
        "with unfinished jobs is a 409 naming `parent`, as is a name taken.")),
    update=extend_schema(description=(
        "Change a department: operators any, department admins those below theirs (moved only within their "
        "subtree). Beyond the schema (a 400 naming the field): `parent` exists and is neither the department nor "
        "below it. A new `parent` with unfinished jobs is a 409 naming `parent`.")),
    partial_update=extend_schema(description=(
        "Change a department's place in the quota tree, weight or description: operators any, department admins "
        "those below theirs (moved only within their subtree). Beyond the schema (a 400 naming the field): `parent` "
        "exists and is neither the department nor below it. A new `parent` with unfinished jobs is a 409 naming "
        "`parent`.")),
)
class DepartmentViewSet(RestrictedMixin, viewsets.ModelViewSet):
    """Departments, the nodes of the quota tree: operators manage them all, department admins the departments
    below theirs; members see theirs."""

    base_queryset = Department.objects.all()
    serializer_class = s.DepartmentSerializer
    permission_classes = [IsAuthenticated]
    filterset_fields = ["name"]
    ordering_fields = ["name", "created_at"]

    def get_queryset(self):
        """Members see their departments; an admin also sees (and may change) the departments below theirs."""
        rows = super().get_queryset()
        managed = core_selectors.managed_departments(user=self.request.user)
        return rows if not managed else rows | self.base_queryset.filter(pk__in=managed)

    def perform_create(self, serializer):
        serializer.instance = core_services.department_create(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = core_services.department_update(department=serializer.instance, actor=self.request.user,
                                                              **serializer.validated_data)

    def perform_destroy(self, instance):
        if not self.request.user.is_staff:
            raise PermissionDenied("only platform operators delete departments")
        super().perform_destroy(instance)


@extend_schema_view(create=extend_schema(description=(
    "Add a member to a department, or change their role if they already are one (operators and the department's "
    "admins). Beyond the schema (a 400 naming the field): `user` and `department` name an existing user and "
    "department.")))
class MembershipViewSet(RestrictedMixin, viewsets.ModelViewSet):
    """Members of departments. Operators and the department's admins add, change and remove members."""

    base_queryset = Membership.objects.select_related("user", "department")
    serializer_class = s.MembershipSerializer
    filterset_class = MembershipFilterSet
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_serializer_class(self):
        return s.MembershipRoleSerializer if self.action == "partial_update" else s.MembershipSerializer

    def perform_create(self, serializer):
        serializer.instance = core_services.membership_set(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        membership = serializer.instance  # a PATCH without a role changes nothing (but is still checked)
        serializer.instance = core_services.membership_set(
            department=membership.department, user=membership.user, actor=self.request.user,
            role=serializer.validated_data.get("role", membership.role),
        )

    def perform_destroy(self, instance):
        core_services.membership_remove(membership=instance, actor=self.request.user)


class GPUModelViewSet(viewsets.ModelViewSet):
    queryset = GPUModel.objects.all()
    serializer_class = s.GPUModelSerializer
    permission_classes = [IsOperatorOrReadOnly]
    filterset_fields = ["name"]

    def perform_create(self, serializer):
        serializer.instance = core_services.gpu_model_create(**serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = core_services.gpu_model_update(gpu_model=serializer.instance, **serializer.validated_data)


class DecisionViewSet(RestrictedMixin, viewsets.ReadOnlyModelViewSet):
    """Every decision with its reason; filter by `subject` (e.g. `job:42`) and `kind`."""

    base_queryset = Decision.objects.select_related("department")
    serializer_class = s.DecisionSerializer
    filterset_class = DecisionFilterSet
    ordering_fields = ["created_at"]
