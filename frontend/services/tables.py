import django_tables2 as tables

from colocation.models import InferenceService
from frontend.templatetags.console import badge, pct


class ServiceTable(tables.Table):
    name = tables.Column(linkify=("service", {"name": tables.A("name")}))
    department = tables.Column(verbose_name="Department", accessor="department__name", order_by="department__name")
    gpu_model = tables.Column(verbose_name="GPU model", accessor="gpu_model__name", default="—")
    replicas = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    bounds = tables.Column(verbose_name="Min–max", accessor="min_replicas", orderable=False)
    priority = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    autoscaling = tables.Column()
    load_qps = tables.Column(verbose_name="QPS (last min)", orderable=False, attrs={"td": {"class": "num"}})
    load_gpu = tables.Column(verbose_name="GPU util (last min)", orderable=False, attrs={"td": {"class": "num"}})

    class Meta:
        model = InferenceService
        fields = ()
        sequence = ("name", "department", "gpu_model", "replicas", "bounds", "priority", "autoscaling", "load_qps",
                    "load_gpu")
        order_by = ("name",)
        empty_text = "No inference services yet. Department admins create them with “New service”."

    def render_bounds(self, record):
        return f"{record.min_replicas}–{record.max_replicas}"

    def render_autoscaling(self, value):
        return badge("running" if value else "cancelled", "on" if value else "off")

    def render_load_qps(self, value):
        return f"{value:.2f}"

    def render_load_gpu(self, value):
        return pct(value)
