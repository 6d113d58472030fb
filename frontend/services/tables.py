from collections.abc import Mapping
from dataclasses import dataclass

import django_tables2 as tables
from django.utils.html import format_html
from django.utils.timesince import timesince

from colocation.models import InferenceService
from colocation.policy.autoscaling import span
from core.models import Decision
from frontend.templatetags.console import badge, pct, when

ESTIMATED_TITLE = "a GPU shared with other pods: its SM activity split by the pods' GPU util"
GATEWAY_TITLE = "requests/s at the gateway, from Prometheus' newest scrapes of its pods"


@dataclass(frozen=True)
class GatewayLoad:
    """Requests/s per service at the gateway over the last minute, read from Prometheus as the list is shown; `down`
    says why there is none when Prometheus did not answer."""

    qps: Mapping[str, float]
    down: str = ""


class ServiceTable(tables.Table):
    name = tables.Column(linkify=("service", {"name": tables.A("name")}))
    department = tables.Column(verbose_name="Department", accessor="department__name", order_by="department__name")
    gpu_model = tables.Column(verbose_name="GPU model", accessor="gpu_model__name", default="—")
    replicas = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    bounds = tables.Column(verbose_name="Min–max", accessor="min_replicas", orderable=False)
    priority = tables.Column(attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    autoscaling = tables.Column()
    # the newest measurement: the gateway's (live) before the service-load profile's (minutes behind)
    load_qps = tables.Column(verbose_name="QPS (last min)", orderable=False, empty_values=(),
                             attrs={"td": {"class": "num"}})
    load_gpu = tables.Column(verbose_name="GPU util (last min)", orderable=False, attrs={"td": {"class": "num"}})
    # GPU util counts any kernel's time slice; SM active how busy the SMs were (docs/reference/gpu-metrics.md)
    load_sm_active = tables.Column(verbose_name="SM active (last min)", orderable=False, default="—",
                                   attrs={"td": {"class": "num"}})

    class Meta:
        model = InferenceService
        fields = ()
        sequence = ("name", "department", "gpu_model", "replicas", "bounds", "priority", "autoscaling", "load_qps",
                    "load_gpu", "load_sm_active")
        order_by = ("name",)
        empty_text = "No inference services yet. Department admins create them with “New service”."

    def render_bounds(self, record):
        return f"{record.min_replicas}–{record.max_replicas}"

    def render_autoscaling(self, value):
        return badge("running" if value else "cancelled", "on" if value else "off")

    def __init__(self, *args, gateway: GatewayLoad | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.gateway = gateway or GatewayLoad({})

    def render_load_qps(self, record):
        if (qps := self.gateway.qps.get(record.name)) is not None:
            return format_html('<span title="{}">{}</span>', GATEWAY_TITLE,
                               f"{qps:.2f}")
        if record.load_qps is not None:
            return format_html('<span title="{}">{}</span>', "the service-load profile's newest minute, "
                               f"{timesince(record.load_minute)} ago", f"{record.load_qps:.2f}")
        why = self.gateway.down or "Prometheus has no request count of its pods in the last minute"
        return format_html('<span title="{}">—</span>', f"No measurement yet: {why}, and the profile pipeline has "
                           "written no minute of it (its first comes 3–4 minutes after a pod is ready).")

    def render_load_gpu(self, value):
        return pct(value)

    def render_load_sm_active(self, value, record):
        if record.load_estimated:
            return format_html('{} <span class="small muted" title="{}">estimated</span>', pct(value), ESTIMATED_TITLE)
        return pct(value)


class ScalingHistoryTable(tables.Table):
    """A service's scaling decisions and alerts, newest first (the selector's order; not re-sortable)."""

    created_at = tables.Column(verbose_name="When", orderable=False)
    kind = tables.Column(orderable=False)
    reason = tables.Column(orderable=False, attrs={"td": {"class": "mono small"}})
    replicas = tables.Column(verbose_name="Replicas", accessor="data", orderable=False, default="—",
                             attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    band = tables.Column(verbose_name="GPU band", accessor="data", orderable=False, default="—",
                         attrs={"td": {"class": "num"}, "th": {"class": "num"}})
    message = tables.Column(verbose_name="Why", orderable=False)

    class Meta:
        model = Decision
        fields = ()
        sequence = ("created_at", "kind", "reason", "replicas", "band", "message")
        empty_text = "No scaling decision yet: the autoscaler records every scale, and each hold or skip once."

    def render_created_at(self, value) -> str:
        return when(value, "both")

    def render_kind(self, record) -> str:
        return badge("failed" if record.kind == Decision.Kind.ALERT else "running", record.get_kind_display())

    def render_replicas(self, value) -> str:
        current, target = (value or {}).get("current"), (value or {}).get("target")
        if not isinstance(current, int) or not isinstance(target, int):
            return "—"
        return f"{current} → {target}" if current != target else str(current)

    def render_band(self, value) -> str:
        """The GPU band the decision applied, marked where the SLO moved it from the owner's (the title says how)."""
        data = value or {}
        used, owner = (data.get("bands") or {}).get("gpu"), (data.get("owner_bands") or {}).get("gpu")
        if not used:
            return "—"
        if not owner:
            return _span(used)
        return format_html('{} <span class="small muted" title="owner\'s {}">{}</span>', _span(used), _span(owner),
                           data.get("band_note", "moved"))

    def render_message(self, value, record) -> str:
        """A sentence, capitalised, unless it begins with the service's name (which keeps its case: g2-serving)."""
        name = record.subject.removeprefix("service:")
        return value if value.startswith(name) else value[:1].upper() + value[1:]


def _span(rates: Mapping) -> str:
    """A band of a decision's data (_rates_data), phrased as the decision's sentence phrases it."""
    return span(float(rates["min_rate"]), float(rates["max_rate"]))
