"""FilterSets shared by the API and the console."""
import django_filters
from django import forms
from drf_spectacular.utils import extend_schema_field

from colocation.models import InferenceService, Node, NodeTransition, ResourceGroup
from core.filtersets import StrictBooleanFilter


class ResourceGroupFilterSet(django_filters.FilterSet):
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")

    class Meta:
        model = ResourceGroup
        fields = ["name", "hardware_class", "gpu_model"]


class IntegerFilter(django_filters.NumberFilter):
    """A whole number (NumberFilter takes decimals, which the schema of an integer field does not admit); the schema
    states its bounds."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        bounds = {"minimum": kwargs.get("min_value"), "maximum": kwargs.get("max_value")}
        extend_schema_field({"type": "integer", **{k: v for k, v in bounds.items() if v is not None}})(self)


class NodeFilterSet(django_filters.FilterSet):
    resource_group = django_filters.CharFilter(field_name="resource_group__name")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    state = django_filters.MultipleChoiceFilter(choices=Node._meta.get_field("state").choices)
    min_gpus = IntegerFilter(field_name="gpu_count", lookup_expr="gte", min_value=0)
    pinned = StrictBooleanFilter()

    class Meta:
        model = Node
        fields = ["resource_group", "gpu_model", "pool", "state", "min_gpus", "pinned"]


class InferenceServiceFilterSet(django_filters.FilterSet):
    department = django_filters.CharFilter(field_name="department__name")
    autoscaling = StrictBooleanFilter()

    class Meta:
        model = InferenceService
        fields = ["department", "autoscaling"]


class TransitionFilterSet(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name")
    resource_group = django_filters.CharFilter(field_name="node__resource_group__name")

    class Meta:
        model = NodeTransition
        fields = ["node", "resource_group", "direction", "status"]
