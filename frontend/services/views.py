"""Inference services: list, detail with load chart, create and edit (department admins and operators)."""
from datetime import datetime, timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django_tables2 import RequestConfig
from redis import RedisError

from colocation import selectors, services
from colocation.filtersets import InferenceServiceFilterSet
from colocation.live_backend import serving_namespace
from colocation.models import InferenceService
from colocation.serving_signals import SERVICE, of_services, queries
from core.errors import ApplicationError
from core.models import Decision
from core.selectors import can_administer
from frontend import scope
from frontend.dashboards import prometheus
from frontend.forms import apply_errors
from frontend.lists import ObjectList
from frontend.services.forms import (POLICY_FIELDS, ServiceForm, apply_schedule_errors, apply_threshold_errors,
                                     schedule_forms, schedules_of, threshold_forms, thresholds_of)
from frontend.services.tables import GatewayLoad, ScalingHistoryTable, ServiceTable
from profiling.models import ServiceMinute
from profiling.selectors import forecasts_vs_actuals, service_load

LOAD_WINDOW = timedelta(hours=3)
SERVICE_LIST = ObjectList(table=ServiceTable, filterset=InferenceServiceFilterSet, per_page=50,
                          template="frontend/services/list.html")


# Requests/s per service at the gateway (Istio's server side) between the newest two scrapes of its pods (irate, as the
# profile publisher reads it: a rate over the minute understates a pod that started within it), by the pods' service
# label, in the services' Kubernetes namespace: live, where the service-load profiles come minutes behind (the profile
# pipeline's window and lateness)
_SERVER_SIDE_RATE = 'irate(istio_requests_total{reporter!="source"}[1m])'


def gateway_qps(namespace: str) -> str:
    """PromQL: the gateway's requests/s per service of the pods in `namespace` (the services' own)."""
    return f"sum by ({SERVICE}) ({of_services(_SERVER_SIDE_RATE, namespace)})"


GATEWAY_CACHE_KEY = "services:gateway-qps"
GATEWAY_TTL_S = 15  # the column says "last min": a figure 15 s old tells the reader the same
GATEWAY_TIMEOUT_S = 1.0  # an instant query of one rate answers in milliseconds; past this the column falls back


@login_required
def service_list(request):
    can_create = request.user.is_staff or any(m.role == "admin" for m in scope.memberships(request))
    return SERVICE_LIST.render(request, selectors.listed_services(department=scope.current_department(request)),
                               table_kwargs={"gateway": gateway_load(timezone.now())}, can_create=can_create,
                               breadcrumbs=[("Inference services", None)])


def gateway_load(now: datetime) -> GatewayLoad:
    """The gateway's requests/s per service, read at most once per GATEWAY_TTL_S across renders and workers (the
    project's cache): a slow or down Prometheus costs one render GATEWAY_TIMEOUT_S, not every render; a down one is
    remembered as long. Without the cache (Redis down), read on each render."""
    try:
        return cache.get_or_set(GATEWAY_CACHE_KEY, lambda: _read_gateway(now), GATEWAY_TTL_S)
    except RedisError:
        return _read_gateway(now)


def _read_gateway(now: datetime) -> GatewayLoad:
    try:
        return GatewayLoad(prometheus.latest(gateway_qps(serving_namespace()), by=SERVICE, now=now.timestamp(),
                                             timeout_s=GATEWAY_TIMEOUT_S))
    except prometheus.PrometheusDown as down:
        return GatewayLoad({}, down=str(down))


@login_required
def service_detail(request, name: str):
    service = scope.visible(selectors.services(prefetch=("thresholds", "schedules")), request, name=name)
    now = timezone.now()
    since = now - LOAD_WINDOW
    load = list(service_load(service_id=service.pk, since=since, until=now))
    history = ScalingHistoryTable(selectors.scaling_history(service=service), prefix="h-")
    RequestConfig(request, paginate={"per_page": 15}).configure(history)
    scaled = selectors.scaling_history(service=service, since=since, kind=Decision.Kind.SCALING).select_related(None)
    forecast = forecast_charts(forecasts_vs_actuals(service_id=service.pk, since=since, until=now, horizon=5))
    return render(request, "frontend/services/detail.html", {
        "service": service, "history": history, "measured": load[-1] if load else None,
        "replica_charts": [replica_chart(service, list(scaled)[::-1], load, since, now),
                           *slo_charts(service, since, now)],
        "charts": load_charts(load), "forecast_charts": forecast,
        "can_edit": can_administer(user=request.user, department=service.department),
        "groups": selectors.service_groups(service=service) if service.group_size > 1 else [],
        "breadcrumbs": [("Inference services", reverse("services")), (service.name, None)],
    })


def _ms(at) -> int:
    return int(at.timestamp() * 1000)


def replica_chart(service: InferenceService, scaled: list[Decision], load: list[ServiceMinute], since, now) -> dict:
    """Desired replicas over the window (from the service's creation when later) from the scaling decisions' data
    (current → target, oldest first), against the pods the service-load profiles saw."""
    steps = [(d.created_at, d.data.get("current"), d.data.get("target")) for d in scaled
             if isinstance((d.data or {}).get("target"), int) and isinstance(d.data.get("current"), int)]
    begun = max(since, service.created_at)  # a service made within the window had no count before
    begun = min([begun, *(at for at, _, _ in steps[:1])])
    desired = [[_ms(begun), steps[0][1] if steps else service.replicas]]
    desired += [[_ms(at), target] for at, _, target in steps] + [[_ms(now), service.replicas]]
    # a replica of a group service is a group: the pods seen count in groups, so both lines share one unit
    per, unit = service.group_size, "groups" if service.group_size > 1 else "pods"
    seen = [[_ms(m.minute), round(m.replicas / per, 2)] for m in load if m.replicas is not None]
    return {"id": "chart-desired", "title": "Desired and seen", "note": f"the autoscaler's decisions; {unit} the "
            "load profiles saw" + (f" (their pods ÷ {per})" if per > 1 else ""), "x_min": _ms(since), "x_max": _ms(now),
            "series": [{"label": "desired", "points": desired, "stepped": True},
                       {"label": f"{unit} seen", "points": seen, "stepped": True, "dash": [4, 3]}]}


# An LLM service's serving signals against its targets, read from Prometheus under the engine's metric names
# (colocation/serving_signals.py): one point per SLO_STEP_S, each over the minute before it.
SLO_STEP_S = 30
SLO_WINDOW = "1m"
SLO_TARGETS = (  # signal, the service's target field, title, unit
    ("ttft_p99", "ttft_p99_target_s", "Time to first token, p99", "s"),
    ("tpot_p99", "tpot_p99_target_s", "Time per output token, p99", "s"),
    ("kv_cache", "kv_cache_target", "KV-cache use", None),
)
SLO_EMPTY = ("No value in Prometheus for this service in this range: its engines publish no vLLM or SGLang series, "
             "or took no requests.")


def slo_charts(service: InferenceService, since: datetime, now: datetime) -> list[dict]:
    """One chart per serving target the service sets: the signal, and the target as a dashed line."""
    charts, read = [], queries(SLO_WINDOW, serving_namespace())
    for signal, field, title, unit in SLO_TARGETS:
        target = getattr(service, field)
        if target is None:
            continue
        chart = {"id": f"chart-{signal.replace('_', '-')}", "title": title, "x_min": _ms(since), "x_max": _ms(now),
                 "note": f"from the serving engines' Prometheus metrics; target {target:g}{' ' + unit if unit else ''}",
                 **({"y_label": unit} if unit else {"percent": True})}
        try:
            mine = [line.points for line in prometheus.lines(read[signal], span_s=int((now - since).total_seconds()),
                                                              step_s=SLO_STEP_S, now=now.timestamp(), by=(SERVICE,))
                    if line.label == service.name]
        except prometheus.PrometheusDown as down:
            charts.append({**chart, "note": str(down), "series": []})
            continue
        points = mine[0] if mine else []
        if not any(v is not None for _, v in points):  # idle engines' latencies are 0/0: a series of gaps
            charts.append({**chart, "series": [], "empty": SLO_EMPTY})
            continue
        line = [[_ms(since), target], [_ms(now), target]]
        charts.append({**chart, "series": [{"label": title, "points": points},
                                           {"label": "target", "points": line, "dash": [6, 4]}]})
    return charts


@login_required
def service_create(request):
    return _edit(request, None)


@login_required
def service_edit(request, name: str):
    service = scope.visible(selectors.services(prefetch=("thresholds",)), request, name=name)
    if not can_administer(user=request.user, department=service.department):
        raise PermissionDenied(f"only operators and admins of {service.department} change its services")
    return _edit(request, service)


def _edit(request, service: InferenceService | None):
    data = request.POST if request.method == "POST" else None
    initial = {"department": scope.current_department(request) or scope.first_department(request)} if not service else None
    form = ServiceForm(data, instance=service, initial=initial, user=request.user)
    thresholds = threshold_forms(data, service)
    schedules = schedule_forms(data, service)
    if data is not None and form.is_valid() and all(f.is_valid() for f in thresholds + schedules):
        try:
            saved = _save(request, form, thresholds, schedules, service)
        except ApplicationError as error:
            fields = dict((error.extra or {}).get("fields") or {})
            apply_schedule_errors(schedules, fields.pop("schedules", {}))
            apply_threshold_errors(thresholds, fields.pop("thresholds", {}))
            apply_errors(form, ApplicationError(error.message, fields=fields))
        else:
            messages.success(request, f"Service {saved.name} saved.")
            return redirect("service", name=saved.name)
    crumbs = [("Inference services", reverse("services"))]
    crumbs += [(service.name, reverse("service", args=[service.name])), ("Edit", None)] if service else [("New", None)]
    return render(request, "frontend/services/form.html", {
        "form": form, "thresholds": thresholds, "schedules": schedules, "service": service, "breadcrumbs": crumbs,
        "policy_fields": [form[name] for name in POLICY_FIELDS]}, status=400 if data else 200)


def _save(request, form: ServiceForm, thresholds, schedules, service: InferenceService | None) -> InferenceService:
    values = {**form.values(), "thresholds": thresholds_of(thresholds), "schedules": schedules_of(schedules)}
    if service is None:
        return services.service_create(actor=request.user, **values)
    return services.service_update(service=service, actor=request.user, **values)


def load_charts(load: list[ServiceMinute]) -> list[dict]:
    """Utilization, traffic and replicas per minute, from the service-load profiles."""
    def points(field: str) -> list:
        return [[int(m.minute.timestamp() * 1000), getattr(m, field)] for m in load if getattr(m, field) is not None]

    return [
        {"id": "chart-util", "title": "Utilization (mean over pods)", "percent": True, "note": _util_note(load),
         "series": [{"label": "GPU util", "points": points("gpu_util_mean")},
                    {"label": "SM active", "points": points("sm_active_mean")},
                    {"label": "CPU", "points": points("cpu_util_mean")}]},
        {"id": "chart-traffic", "title": "Traffic", "y_label": "requests/s", "series": [
            {"label": "QPS", "points": points("qps")}, {"label": "errors/s", "points": points("errors_per_s")}]},
        {"id": "chart-latency", "title": "Latency", "y_label": "ms", "series": [
            {"label": "mean", "points": points("latency_mean_ms")}, {"label": "p99", "points": points("latency_p99_ms")}]},
    ] if load else []


def _util_note(load: list[ServiceMinute]) -> str:
    """GPU util counts any kernel's time slice, SM active how busy the SMs were; say which minutes were estimated."""
    if not any(m.sm_active_mean is not None for m in load):
        gpu = any(m.gpu_util_mean is not None for m in load)
        return "SM active: not measured (the exporter does not publish DCGM_FI_PROF_SM_ACTIVE)" if gpu else ""
    estimated = sum(1 for m in load if m.estimated)
    return f"SM active estimated for {estimated} of {len(load)} minutes (a shared GPU)" if estimated else ""


def forecast_charts(rows: list[dict]) -> list[dict]:
    """GPU utilization forecast 5 minutes earlier against what was measured (only once forecasts exist)."""
    def points(field: str) -> list:
        return [[int(r["minute"].timestamp() * 1000), r[field]] for r in rows if r[field] is not None]

    if not any(r["forecast"] is not None for r in rows):
        return []
    return [{"id": "chart-forecast", "title": "GPU utilization: forecast 5 minutes ahead vs actual", "percent": True,
             "series": [{"label": "actual", "points": points("actual")},
                        {"label": "forecast", "points": points("forecast")}]}]
