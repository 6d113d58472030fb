"""Fields and shapes every app's API shares."""
import math
from decimal import Decimal

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers

from core.models import Decision, GPUModel


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


def gpu_model_field(**kwargs) -> serializers.SlugRelatedField:
    return NameField(slug_field="name", queryset=GPUModel.objects.all(), **kwargs)


class DecisionSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = Decision
        fields = ["id", "kind", "subject", "department", "reason", "message", "data", "created_at"]
