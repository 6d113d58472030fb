"""Fields and shapes every app's API shares."""
import math
from decimal import Decimal

from django.contrib.auth import get_user_model
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from core.api.jsontypes import JSONTypes
from core.models import Decision, Department, GPUModel, Membership


class NameField(serializers.SlugRelatedField):
    """An object by its unique name. A name with a NUL character names nothing (PostgreSQL text cannot hold one,
    so it must not reach the query)."""

    def run_validation(self, data=serializers.empty):
        if data == "":  # DRF reads "" as null for a relation (a form's habit); in JSON it is a name, and no name
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        return super().run_validation(data)

    def to_internal_value(self, data):
        if "\x00" in str(data):
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        return super().to_internal_value(data)


class UnsignedDecimalField(serializers.DecimalField):
    """A decimal that is never negative (min_value 0), as people write it: a JSON number (`2`, `0.5`) or a decimal
    string whose schema pattern has no sign ("2", "0.5"). A sign in a string is refused, "-0" too, so the pattern and
    the field agree on every string; booleans, NaN and infinities are refused (docs/how-to/rest-api.md#values-and-errors)."""

    json_numbers = True  # core/api/jsontypes.py: a number is this field's type too

    def __init__(self, **kwargs) -> None:
        super().__init__(min_value=0, **kwargs)

    def pattern(self) -> str:
        whole, places = self.max_digits - self.decimal_places, self.decimal_places
        return rf"^(?:\d{{1,{whole}}}(?:\.\d{{0,{places}}})?|\.\d{{1,{places}}})$"

    def number_schemas(self) -> list[dict]:
        """The JSON numbers it takes: at most max_digits digits, decimal_places of them after the point."""
        return [{"type": "number", "minimum": 0, "maximum": float(self.largest()), "multipleOf": self.step()}]

    def step(self) -> float:
        return float(Decimal(1).scaleb(-self.decimal_places))

    def largest(self) -> Decimal:
        return Decimal(10) ** (self.max_digits - self.decimal_places) - Decimal(1).scaleb(-self.decimal_places)

    def validate_empty_values(self, data):
        if isinstance(data, str) and not data.strip():  # DRF reads "" as null; the pattern takes no blank string
            self.fail("invalid")
        return super().validate_empty_values(data)

    def to_internal_value(self, data):
        if isinstance(data, bool) or isinstance(data, float) and not math.isfinite(data):
            self.fail("invalid")
        if isinstance(data, float):  # the number's shortest spelling: 0.1 is "0.1", not 0.1000000000000000055…
            data = repr(data) if data else "0"  # -0.0 is 0
        elif isinstance(data, str) and data.lstrip().startswith(("-", "+")):
            self.fail("min_value", min_value=0)
        return super().to_internal_value(data)


class UnsignedDecimalSchema(OpenApiSerializerFieldExtension):
    """Requests take a number or a decimal string (oneOf); responses are decimal strings, as DRF writes them."""

    target_class = UnsignedDecimalField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction) -> dict:
        text = {"type": "string", "format": "decimal", "pattern": self.target.pattern()}
        if direction == "response":
            return text
        return {"oneOf": [*self.target.number_schemas(), text]}


class WholeItem:
    """An item of a list that a write replaces whole (a service's thresholds, its schedules): its required fields
    stay required under PATCH too. DRF passes the root's partial to nested serializers and skips their missing
    fields, which would hand the domain layer an item without them."""

    def validate(self, attrs: dict) -> dict:
        missing = {name: [serializers.Field.default_error_messages["required"]] for name, field in self.fields.items()
                   if field.required and not field.read_only and name not in attrs}
        if missing:
            raise serializers.ValidationError(missing)
        return super().validate(attrs)


def gpu_model_field(**kwargs) -> serializers.SlugRelatedField:
    return NameField(slug_field="name", queryset=GPUModel.objects.all(), **kwargs)


class DecisionSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = Decision
        fields = ["id", "kind", "subject", "department", "reason", "message", "data", "created_at"]


# --- core's own entities ---------------------------------------------------------------------------


class DepartmentSerializer(JSONTypes, serializers.ModelSerializer):
    parent = NameField(slug_field="name", queryset=Department.objects.all(), required=False, allow_null=True,
                       help_text="The department above it in the quota tree (none: under the root)")
    weight = UnsignedDecimalField(max_digits=8, decimal_places=3, required=False,
                                  help_text="Fair-share weight of idle capacity (0: leftovers only)")

    class Meta:
        model = Department
        fields = ["id", "name", "description", "created_at", "parent", "weight", "reclaim_min_runtime_s", "fence"]


class MembershipSerializer(JSONTypes, serializers.ModelSerializer):
    user = NameField(slug_field="username", queryset=get_user_model().objects.all())
    department = NameField(slug_field="name", queryset=Department.objects.all())
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER)

    class Meta:
        model = Membership
        fields = ["id", "user", "department", "role"]
        validators = []  # uniqueness is an upsert in membership_set (after its permission check), not an error


class MembershipRoleSerializer(JSONTypes, serializers.ModelSerializer):
    class Meta:
        model = Membership
        fields = ["role"]


class GPUModelSerializer(JSONTypes, serializers.ModelSerializer):
    class Meta:
        model = GPUModel
        fields = ["id", "name", "memory_gib"]
        extra_kwargs = {"memory_gib": {"min_value": 1}}


class MeMembershipSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Membership
        fields = ["department", "role"]


class MeSerializer(serializers.ModelSerializer):
    is_operator = serializers.BooleanField(source="is_staff", read_only=True)
    memberships = MeMembershipSerializer(many=True, read_only=True)

    class Meta:
        model = get_user_model()
        fields = ["id", "username", "is_operator", "memberships"]
