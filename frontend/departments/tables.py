import django_tables2 as tables

from core.models import Department
from frontend.templatetags.console import gpus


class DepartmentTable(tables.Table):
    name = tables.Column(linkify=("department", {"name": tables.A("name")}))
    members = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    pending = tables.Column(verbose_name="Pending jobs", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    pending_gpus = tables.Column(verbose_name="Pending GPUs", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    running = tables.Column(verbose_name="Running jobs", attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    description = tables.Column(orderable=False)

    class Meta:
        model = Department
        fields = ("name", "members", "pending", "pending_gpus", "running", "description")
        order_by = ("name",)
        empty_text = "You belong to no department yet: ask a department admin or an operator to add you."

    def render_pending_gpus(self, value):
        """Workers x GPUs of every pending job: a gang of 4 x 8 weighs 32, not one job."""
        return gpus(value)
