"""JSON bodies are held to the types the schema states. DRF coerces leniently ("5" or true as an integer, 0 as a
string or a boolean, {} as a list, decimals as numbers): a client with a wrong type would get a 2xx for a request
the schema says is invalid, and whatever DRF guessed would be written. Refused here as field errors, before any
coercion, beside the other fields' errors. Amounts (GPUs, quotas: `UnsignedDecimalField`) take a JSON number or a
decimal string, as people write them."""
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.relations import ManyRelatedField, SlugRelatedField

NUMBER = (int, float)


def wrong_type(field: serializers.Field, value: Any) -> str | None:
    """What is wrong with the JSON type of `value` for `field`, or None; null is left to the field (allow_null)."""
    if value is None:
        return None
    if isinstance(field, serializers.BooleanField):
        return None if isinstance(value, bool) else "Must be true or false."
    if isinstance(field, (serializers.IntegerField, serializers.FloatField)):  # 1.0 is left to the field
        return None if isinstance(value, NUMBER) and not isinstance(value, bool) else "Must be a number."
    if isinstance(field, serializers.DecimalField) and getattr(field, "json_numbers", False):  # amounts: 2 or "2"
        return None if isinstance(value, (str, *NUMBER)) and not isinstance(value, bool) else \
            "Must be a number or a decimal string."
    if isinstance(field, (serializers.CharField, serializers.DecimalField, SlugRelatedField)):
        return None if isinstance(value, str) else "Must be a string."  # other decimals are strings in this API
    if isinstance(field, ManyRelatedField):
        if not isinstance(value, list):
            return "Must be a list."
        return next((wrong for item in value if (wrong := wrong_type(field.child_relation, item))), None)
    return None  # nested serializers, lists of them and choices check their own input


# Serializer mixin (first base): each wrong JSON type a field error, with the other fields' errors. A comment, not a
# docstring: drf-spectacular would describe every serializer without its own docstring with it.
class JSONTypes:

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return super().to_internal_value(data)  # "Expected a dictionary": DRF's own message
        wrong = {name: [message] for name, field in self.fields.items()
                 if not field.read_only and name in data and (message := wrong_type(field, data[name]))}
        if not wrong:
            return super().to_internal_value(data)
        try:  # the rest of the body, so every bad field is named at once
            super().to_internal_value({k: v for k, v in data.items() if k not in wrong})
        except ValidationError as exc:
            if isinstance(exc.detail, Mapping):
                raise ValidationError({**exc.detail, **wrong}) from None
        raise ValidationError(wrong)
