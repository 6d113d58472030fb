import django_tables2 as tables

from core.models import Department


class DepartmentTable(tables.Table):
    name = tables.Column(linkify=("department", {"name": tables.A("name")}))
    members = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    pending = tables.Column(verbose_name="Pending jobs", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    running = tables.Column(verbose_name="Running jobs", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    description = tables.Column(orderable=False)

    class Meta:
        model = Department
        fields = ("name", "members", "pending", "running", "description")
        order_by = ("name",)
        empty_text = "You belong to no department yet: ask a department admin or an operator to add you."
