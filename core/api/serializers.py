"""Fields and shapes every app's API shares."""
from drf_spectacular.utils import extend_schema_field
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
    """A decimal that is never negative (min_value 0), as a JSON string whose schema pattern has no sign; a sign is
    refused, "-0" too, so the pattern and the field agree on every string."""

    def __init__(self, **kwargs) -> None:
        super().__init__(min_value=0, **kwargs)
        extend_schema_field({"type": "string", "format": "decimal", "pattern": self.pattern()})(self)

    def pattern(self) -> str:
        whole, places = self.max_digits - self.decimal_places, self.decimal_places
        return rf"^(?:\d{{1,{whole}}}(?:\.\d{{0,{places}}})?|\.\d{{1,{places}}})$"

    def to_internal_value(self, data):
        if isinstance(data, str) and data.lstrip().startswith(("-", "+")):
            self.fail("min_value", min_value=0)
        return super().to_internal_value(data)


def gpu_model_field(**kwargs) -> serializers.SlugRelatedField:
    return NameField(slug_field="name", queryset=GPUModel.objects.all(), **kwargs)


class DecisionSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = Decision
        fields = ["id", "kind", "subject", "department", "reason", "message", "data", "created_at"]
