"""The API's pagination: `?limit=&offset=`, strict and bounded as the schema says (a value that is not a number,
or out of range, is a 400 rather than silently the default, and no number reaches the database as an overflow)."""
from drf_spectacular.utils import OpenApiParameter
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 10**15  # far past any table; beyond a 64-bit OFFSET, PostgreSQL would raise


class Pagination(LimitOffsetPagination):
    max_limit = 1000

    def get_schema_operation_parameters(self, view) -> list[dict]:
        parameters = super().get_schema_operation_parameters(view)
        bounds = {self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
                  self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET}}
        for parameter in parameters:
            parameter["schema"].update(bounds.get(parameter["name"], {}))
        return parameters

    def paginate_queryset(self, queryset, request, view=None) -> list:
        """DRF's, but the page first: a page shorter than the limit is the last one, so its end is the count and no
        COUNT query runs (most lists a person asks for fit on one page: a user's jobs, a department's pending ones).
        A full page, or an offset past the end, still counts."""
        self.request, self.limit, self.offset = request, self.get_limit(request), self.get_offset(request)
        page = list(queryset[self.offset:self.offset + self.limit])
        short = len(page) < self.limit and (page or self.offset == 0)
        self.count = self.offset + len(page) if short else self.get_count(queryset)
        self.display_page_controls = self.count > self.limit and self.template is not None
        return page

    def get_limit(self, request) -> int:
        return self._number(request, self.limit_query_param, least=1, most=self.max_limit, default=self.default_limit)

    def get_offset(self, request) -> int:
        return self._number(request, self.offset_query_param, least=0, most=MAX_OFFSET, default=0)

    @staticmethod
    def _number(request, name: str, *, least: int, most: int, default: int) -> int:
        values = request.query_params.getlist(name)
        if not values:
            return default
        try:
            value = int(values[-1])
        except ValueError:
            value = least - 1
        if len(values) > 1 or not least <= value <= most:
            raise ValidationError({name: [f"one whole number from {least} to {most}"]})
        return value


# For a paginated @action, which drf-spectacular does not paginate by itself.
PAGE_PARAMETERS = [
    OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": Pagination.max_limit},
                     description="Number of results to return per page."),
    OpenApiParameter("offset", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
                     description="The initial index from which to return the results."),
]
