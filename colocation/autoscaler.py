"""The live inference autoscaler (docs/concepts/autoscaling.md#live-loop): every tick, under the cluster lock, observe each
service (replicas and ready pods on the backend, its recent loads, its forecast), let the pure policy decide per
resource group (`colocation.policy.autoscaling.decide_group`), apply changed targets through the backend's
ReplicaSets, record the decisions and raise alerts. The lending controller then sees the new online usage.

Two clocks: `now` is real epoch seconds (what is stored); the policy runs on `clock.demo(now)` when a demo
clock is given (the live demo compresses a day into minutes), else on `now` itself.
"""
from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from redis.exceptions import RedisError

from cluster.backend import BackendError, ClusterBackend, serving_pods
from cluster.clock import utc
from cluster.types import Pool
from colocation import alerts, groups as service_groups, loads as load_sources, replicas, serving_signals, services
from colocation.live_backend import live_cluster, serving_namespace
from colocation.models import InferenceService
from colocation.policy import autoscaling, schedules, vertical
from colocation.policy.serving import ServingTargets
from colocation.policy.autoscaling import Rates, ScaleDecision, ScalingPolicy, ServiceView
from colocation.policy.group import capacity as node_capacity
from colocation.policy.windows import zone
from core import telemetry
from core.decisions import decision_record
from core.models import Decision
from profiling import forecasting
from profiling.selectors import service_load

log = logging.getLogger(__name__)
VERTICAL_EVERY_S = 3600.0  # vertical recommendations are recomputed at most this often (real time)
VERTICAL_KEY = "autoscaler:vertical-at"  # Redis hash: service -> when its recommendation was last computed

Forecasts = Callable[[InferenceService, float], tuple[tuple, str]]


@dataclass
class AutoscaleReport:
    decisions: dict[str, str] = field(default_factory=dict)  # service -> reason
    scaled: dict[str, tuple[int, int]] = field(default_factory=dict)  # service -> (from, to)
    recorded: int = 0
    alerts: list[str] = field(default_factory=list)
    recommended: list[str] = field(default_factory=list)


# --- forecasts ---------------------------------------------------------------------------------------


def profile_forecast(service: InferenceService, now: float) -> tuple[tuple, str]:
    """The forecasting models' next 5 minutes (profiling.forecasting.forecast_service); never raises."""
    try:
        forecast, note = forecasting.forecast_service(service=service, now=utc(now))
        return tuple(forecast), note
    except Exception as error:  # a broken model must not stop scaling
        log.warning("forecast of %s failed: %s", service.name, error)
        return (), f"no forecast: the model failed ({error})"


def no_forecast(service: InferenceService, now: float) -> tuple[tuple, str]:
    return (), "no forecast: the demo's compressed clock is not what the models were trained on"


# --- the tick ----------------------------------------------------------------------------------------


def autoscale_tick(*, backend: ClusterBackend, now: float, loads: load_sources.LoadSource,
                   forecasts: Forecasts = profile_forecast, clock: load_sources.DemoClock | None = None, redis=None,
                   namespace: str = "tidal") -> AutoscaleReport:
    report = AutoscaleReport()
    policy_now = clock.demo(now) if clock else now
    services_ = list(InferenceService.objects.select_related("gpu_model", "department")
                     .prefetch_related("thresholds", "schedules"))
    groups = replicas.groups_of(services_)
    replicas.ensure_replicasets(backend, services_, groups)
    serving = serving_counts(backend, services_)
    capacity = inference_capacity(backend)
    views: dict[str, list[ServiceView]] = defaultdict(list)
    for service in services_:
        views[groups[service.name]].append(service_view(service, backend, serving, now, policy_now, loads, forecasts,
                                                        clock))
    by_name = {s.name: s for s in services_}
    for group, members in sorted(views.items()):
        for d in autoscaling.decide_group(members, capacity.get(group, 0.0), policy_now):
            _act(d, by_name[d.service], backend, group, now, report, redis, namespace)
            report.alerts += alerts.watch_short(by_name[d.service], d, serving.get(d.service, 0), now, redis, namespace)
    for service in services_:
        _recommend(service, now, report, redis, namespace)
    return report


def serving_counts(backend: ClusterBackend, services_: Iterable[InferenceService] = ()) -> dict[str, int]:
    """Pods serving each ReplicaSet (cluster.backend.serving_pods), 0 for a ReplicaSet none serves; for a service
    whose replica is a group, its groups with every pod ready (a replica count is a count of groups)."""
    pods = backend.pods()
    out = {rs.name: 0 for rs in backend.replicasets()}
    out |= {name: len(serving) for name, serving in serving_pods(pods).items()}
    out |= {s.name: service_groups.ready_groups(pods, s) for s in services_ if s.group_size > 1}
    return out


def inference_capacity(backend: ClusterBackend) -> dict[str, float]:
    """What inference could have of each group: its online and co-location nodes, not the fixed pool (GPUs, or
    CPU millicores for a CPU group)."""
    out: dict[str, float] = defaultdict(float)
    for node in backend.nodes():
        if node.pool is not Pool.FIXED:
            out[node.resource_group] += node_capacity(node)
    return dict(out)


# --- observing one service ---------------------------------------------------------------------------


def scaling_policy(service: InferenceService) -> ScalingPolicy:
    peak = (service.peak_start, service.peak_end) if service.peak_start and service.peak_end else None
    return ScalingPolicy(
        thresholds=tuple((t.metric, Rates(t.min_rate, t.expect_rate, t.max_rate)) for t in service.thresholds.all()),
        min_replicas=service.min_replicas, max_replicas=service.max_replicas, priority=service.priority,
        autoscaling=service.autoscaling, peak_window=peak, scale_to_zero_idle_min=service.scale_to_zero_idle_min,
        schedules=tuple(_schedules(service)),
        busy_signal=service.busy_signal, tz=settings.TIME_ZONE, serving=serving_targets(service),
        startup_min=math.ceil(service.startup_s / 60))


def serving_targets(service: InferenceService) -> ServingTargets | None:
    """The service's LLM serving targets, None when it sets none."""
    values = (service.ttft_p99_target_s, service.tpot_p99_target_s, service.kv_cache_target, service.queue_target,
              service.slo_ttft_s, service.slo_tpot_s, service.slo_min_gain)
    if all(v is None for v in values):
        return None
    return ServingTargets(*values)


def _schedules(service: InferenceService):
    """The service's schedules; one whose stored weekdays do not parse (written around the API) is skipped, not
    a reason to stop scaling every service."""
    for s in service.schedules.all():
        try:
            yield schedules.Schedule(schedules.parse_weekdays(s.weekdays), s.start, s.end, s.min_replicas)
        except ValueError as error:
            log.warning("%s: schedule %s ignored: %s", service.name, s.pk, error)


def service_view(service: InferenceService, backend: ClusterBackend, serving: dict[str, int], now: float,
                 policy_now: float, loads: load_sources.LoadSource, forecasts: Forecasts,
                 clock: load_sources.DemoClock | None) -> ServiceView:
    to_policy = clock.demo if clock else (lambda t: t)
    try:
        desired = backend.replicaset(service.name).replicas
    except BackendError:
        desired = service.replicas
    changed = to_policy(service.replicas_changed_at.timestamp()) if service.replicas_changed_at else None
    forecast, note = forecasts(service, now)
    return ServiceView(
        service.name, scaling_policy(service), desired, serving.get(service.name, 0),
        loads.recent(service, policy_now), changed, service.offline, service.manual_deploy,
        tuple(forecast), note, yesterday_max(service, policy_now, clock), replicas.per_replica(service))


def yesterday_max(service: InferenceService, policy_now: float, clock: load_sources.DemoClock | None) -> int | None:
    """The most replicas the scaling decisions of the policy's yesterday (local calendar day) named."""
    today = datetime.fromtimestamp(policy_now, zone(settings.TIME_ZONE)).replace(hour=0, minute=0, second=0,
                                                                                 microsecond=0)
    start, end = (today - timedelta(days=1)).timestamp(), today.timestamp()
    if clock:
        start, end = clock.real(start), clock.real(end)
    rows = Decision.objects.filter(kind=Decision.Kind.SCALING, subject=f"service:{service.name}",
                                   created_at__gte=utc(start), created_at__lt=utc(end)).values_list("data", flat=True)
    seen = [v for data in rows for k in ("current", "target") if isinstance(v := (data or {}).get(k), int)]
    return max(seen, default=None)


# --- acting ------------------------------------------------------------------------------------------


def _act(d: ScaleDecision, service: InferenceService, backend: ClusterBackend, group: str, now: float,
         report: AutoscaleReport, redis, namespace: str) -> None:
    report.decisions[d.service] = d.reason.value
    if d.changes:
        try:
            replicas.apply(backend, service, d.target, group, now)
        except BackendError as error:
            raised = alerts.alert(service, "scale-failed", f"{service.name}: scaling from {d.current} to {d.target} "
                                  f"replicas failed: {error}", {"current": d.current, "target": d.target},
                                  now, redis, namespace)
            report.alerts += [raised] if raised else []
            return
        alerts.close(service, "scale-failed", redis, namespace)
        services.service_scale(service=service, replicas=d.target, now=utc(now))
        report.scaled[d.service] = (d.current, d.target)
    elif _same_as_last(service, d.reason.value):
        return
    decision_record(kind=Decision.Kind.SCALING, subject=f"service:{service.name}", reason=d.reason.value,
                    message=d.message, department=service.department,
                    data={**alerts.jsonable(d.data), "current": d.current, "target": d.target})
    report.recorded += 1


def _same_as_last(service: InferenceService, reason: str) -> bool:
    """A hold or skip is recorded only when its reason differs from the service's previous scaling decision."""
    last = (Decision.objects.filter(kind=Decision.Kind.SCALING, subject=f"service:{service.name}")
            .values_list("reason", flat=True).first())
    return last == reason


# --- vertical ----------------------------------------------------------------------------------------


def _recommend(service: InferenceService, now: float, report: AutoscaleReport, redis, namespace: str) -> None:
    """At most every VERTICAL_EVERY_S: recommend per-replica resources from the last day of the service's
    profile; store and record it when it changed."""
    if redis is not None:
        last = redis.hget(f"{namespace}:{VERTICAL_KEY}", service.name)
        if last is not None and now - float(last) < VERTICAL_EVERY_S:
            return
        redis.hset(f"{namespace}:{VERTICAL_KEY}", service.name, now)
    rows = service_load(service_id=service.pk, since=utc(now - 86400), until=utc(now))
    gpu, cpu = [], []
    for g, c in rows.values_list("gpu_util_mean", "cpu_util_mean"):
        if g is not None:
            gpu.append(g)
        if c is not None:
            cpu.append(c)
    expect = {t.metric: t.expect_rate for t in service.thresholds.all()}
    current = vertical.Resources(float(service.gpus_per_replica) if service.gpu_model_id else 0.0,
                                 service.cpu_milli_per_replica, service.memory_mib_per_replica)
    rec = vertical.recommend(current, vertical.Usage(tuple(gpu), tuple(cpu), ()),
                             gpu_expect=expect.get("gpu", vertical.DEFAULT_EXPECT),
                             cpu_expect=expect.get("cpu", vertical.DEFAULT_EXPECT))
    if rec is None:
        return
    stored = (None if service.recommended_gpus_per_replica is None else float(service.recommended_gpus_per_replica),
              service.recommended_cpu_milli, service.recommended_memory_mib)
    if stored == (rec.resources.gpus, rec.resources.cpu_milli, rec.resources.memory_mib):
        return
    services.service_recommend(service=service, gpus=rec.resources.gpus, cpu_milli=rec.resources.cpu_milli,
                               memory_mib=rec.resources.memory_mib)
    applied = "applied on the next rollout" if service.vertical else "not applied (vertical scaling is off)"
    decision_record(kind=Decision.Kind.SCALING, subject=f"service:{service.name}", reason="vertical-recommendation",
                    message=f"{service.name}: {rec.message}; {applied}", department=service.department,
                    data={"gpus": rec.resources.gpus, "cpu_milli": rec.resources.cpu_milli,
                          "memory_mib": rec.resources.memory_mib, "minutes": rec.minutes})
    report.recommended.append(service.name)


# --- the loop's entry point --------------------------------------------------------------------------


def run_autoscale_tick(*, redis, namespace: str) -> AutoscaleReport | None:
    """One autoscaling tick on the configured cluster, unless this worker must not act now (None).
    With TIDAL_DEMO_TRAFFIC the demo's traffic and clock drive the policy; else the service-load profiles. The demo's
    clock and traffic and the LLM services' serving signals are read before the tick takes the cluster lock, and the
    tick decides at the moment they were read: Prometheus's range queries take seconds on a busy machine, and the
    scheduler and lending loops wait for that lock (held through them, the scheduler skipped 17 of 249 ticks)."""
    now = time.time()
    try:
        demo = _demo(redis, namespace, now)
    except RedisError:
        demo = None  # live_cluster skips the tick
    signals = _serving_signals(demo[0] if demo else None, now)
    with live_cluster(redis=redis, namespace=namespace, loop="autoscaler",
                      interval_s=settings.TIDAL_AUTOSCALE_INTERVAL_S) as cluster:
        if cluster is None:
            return None
        started = time.perf_counter()
        loads, forecasts, clock = _sources(cluster, redis, namespace, demo, signals)
        report = autoscale_tick(backend=cluster, now=now, loads=loads, forecasts=forecasts, clock=clock, redis=redis,
                                namespace=namespace)
        telemetry.observe(redis, namespace, "autoscale_tick", time.perf_counter() - started)
        return report


def _demo(redis, namespace: str, now: float) -> tuple[load_sources.DemoClock, load_sources.DemoTraffic] | None:
    """The demo's clock and traffic with TIDAL_DEMO_TRAFFIC and its traces; else None (the service-load profiles)."""
    if not settings.TIDAL_DEMO_TRAFFIC:
        return None
    clock = load_sources.demo_clock(redis=redis, namespace=namespace, now=now)
    traffic = load_sources.demo_traffic(clock=clock)
    return None if traffic is None else (clock, traffic)


def _serving_signals(clock: load_sources.DemoClock | None, now: float) -> serving_signals.ServingSignals:
    """The serving signals of the services' Kubernetes namespace, read at `now` when a service sets a serving target
    (a tick reads them once), as many minutes back as those services' policies read."""
    timing = dict(to_real=clock.real, to_policy=clock.demo, speed=clock.speed) if clock else {}
    wanting = [s for s in InferenceService.objects.all() if wanted(s)]
    minutes = serving_signals.minutes_for(scaling_policy(s) for s in wanting)
    signals = serving_signals.ServingSignals(settings.PROMETHEUS_URL, serving_namespace(), minutes=minutes, **timing)
    if wanting:
        signals.read(clock.demo(now) if clock else now)
    return signals


def wanted(service: InferenceService) -> bool:
    """Whether the service's loads carry its serving signals: it sets a serving target."""
    return serving_targets(service) is not None


def _sources(cluster: ClusterBackend, redis, namespace: str, demo, signals: serving_signals.ServingSignals):
    """The loads (with the serving signals of every service that sets a serving target), the forecasts and the
    policy's clock."""
    if demo is None:
        profiles = load_sources.ProfileLoads(keep=keep_minutes)
        return serving_signals.WithServingSignals(profiles, signals, wanted), profile_forecast, None
    clock, traffic = demo
    # a group service's replicas are its ready groups: without it they read 0, and every minute full
    loads = load_sources.DemoLoads(redis=redis, namespace=namespace, traffic=traffic, clock=clock,
                                   serving=serving_counts(cluster, InferenceService.objects.filter(group_size__gt=1)),
                                   keep=keep_minutes)
    return serving_signals.WithServingSignals(loads, signals, wanted), no_forecast, clock


def keep_minutes(service: InferenceService) -> int:
    """Minutes of loads the service's policy reads (a service sized to its request SLO: hours of request rates)."""
    return autoscaling.keep_minutes(scaling_policy(service))
