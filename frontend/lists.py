"""A list page, declared once (NetBox's ObjectListView): what the user may see of a selector's rows
(`restrict(user)`), filtered by the API's FilterSet, in a django-tables2 table sorted and paged by the query string;
an htmx request gets the page's partial alone."""
from dataclasses import dataclass

import django_filters
import django_tables2 as tables
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


@dataclass(frozen=True)
class ObjectList:
    table: type[tables.Table]
    template: str
    per_page: int
    filterset: type[django_filters.FilterSet] | None = None
    filter_fields: tuple[str, ...] = ()  # the FilterSet's filters the page's form shows (frontend/_filters.html)
    partial: str | None = None  # the template an htmx request gets
    role: str | None = None  # only the departments where the user holds this role (an admin's slice)

    def render(self, request: HttpRequest, rows: QuerySet, table_kwargs: dict | None = None,
               **context) -> HttpResponse:
        template = self.partial if self.partial and request.htmx else self.template
        return render(request, template, {**self._listed(request, rows, table_kwargs or {}), **context})

    def _listed(self, request: HttpRequest, rows: QuerySet, table_kwargs: dict) -> dict:
        """The table of what the user may see of `rows`, the FilterSet, and the fields of its form the page shows."""
        rows = rows.restrict(request.user, self.role)
        filters = self.filterset(request.GET, queryset=rows) if self.filterset else None
        if filters is not None:
            rows = filters.qs if filters.is_valid() else rows.none()
        table = self.table(rows, **table_kwargs)
        tables.RequestConfig(request, paginate={"per_page": self.per_page}).configure(table)
        fields = [filters.form[name] for name in self.filter_fields] if filters is not None else []
        return {"table": table, "filters": filters, "filter_fields": fields}
