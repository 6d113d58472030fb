"""FilterSets shared by the API and the console."""
import django_filters

from core.filtersets import StrictBooleanFilter
from profiling.models import ForecastModel, TaskProfile


class TaskProfileFilterSet(django_filters.FilterSet):
    task_key_prefix = django_filters.CharFilter(field_name="task_key", lookup_expr="startswith")

    class Meta:
        model = TaskProfile
        fields = ["task_key", "task_key_prefix"]


class ForecastModelFilterSet(django_filters.FilterSet):
    usable = StrictBooleanFilter()

    class Meta:
        model = ForecastModel
        fields = ["target", "usable"]
