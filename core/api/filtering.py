"""The API's filter backend: the shared FilterSets, held to the schema. An HTML form sends an empty value for "any"
(the console's selects do, and django-filter reads it as no filter), but the schema of a choice, a boolean, a number
or a time admits no empty value: `?status=` or `?min_gpus=` is a 400 naming the parameter (leave it out to not
filter). Free text is unchanged: every string is schema-valid, and an empty one is no filter (`?name=`)."""
import django_filters
from django_filters import utils
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError


class StrictFilterBackend(DjangoFilterBackend):
    # DjangoFilterBackend.filter_queryset with the empty check first, on the one FilterSet it builds.
    def filter_queryset(self, request, queryset, view):
        filterset = self.get_filterset(request, queryset, view)
        if filterset is None:
            return queryset
        empty = {name: ["must not be empty; leave the parameter out to not filter"]
                 for name, filter_ in filterset.filters.items()
                 if not isinstance(filter_, django_filters.CharFilter) and "" in request.query_params.getlist(name)}
        if empty:
            raise ValidationError(empty)
        if not filterset.is_valid() and self.raise_exception:
            raise utils.translate_validation(filterset.errors)
        return filterset.qs
