"""Query parameters read through a serializer, as given. DRF reads a QueryDict as an HTML form, where an empty field
of a field that is not required means "left out": `?until=` or `?run=` would quietly mean no bound. The schema of a
time or a number admits no empty value, so it is a 400 naming the parameter (leave it out for the default)."""
from rest_framework import serializers
from rest_framework.request import Request


def parse_query(serializer_class: type[serializers.Serializer], request: Request) -> dict:
    query = serializer_class(data=request.query_params.dict())  # a plain dict: "" is a value, not an absence
    query.is_valid(raise_exception=True)
    return query.validated_data
