"""Tidal's own metrics for Prometheus (`/metrics`, no login; no personal data: departments, groups and nodes
only). Read at scrape time from the database (counts and counters over all time: Prometheus derives rates)
and from what the control loops keep in Redis (loop durations, allocation per resource group)."""
import time
from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from colocation import selectors as colocation
from core import telemetry
from profiling import selectors as profiling
from scheduler import selectors as scheduler
from streaming.publisher import cursor_key

WAIT_BUCKETS = (10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 24 * 3600.0)
RESOURCES = {"gpu": "GPUs", "cpu": "CPU cores", "memory": "bytes of memory"}


class TidalCollector:
    def __init__(self, *, redis, namespace: str, topic_prefix: str):
        self.redis, self.namespace, self.topic_prefix = redis, namespace, topic_prefix

    def collect(self) -> Iterator[Metric]:
        yield from self._groups()
        yield from self._nodes()
        yield from self._service_groups()
        yield from self._jobs()
        yield from self._decisions()
        yield from self._loops()
        yield from self._pipeline()

    def _groups(self) -> Iterator[Metric]:
        at, groups = telemetry.groups(self.redis, self.namespace)
        capacity = GaugeMetricFamily("tidal_resource_group_capacity", "Capacity per resource group and resource "
                                     "(GPUs, CPU cores, bytes), as the lending tick saw the cluster",
                                     labels=["group", "resource"])
        allocated = GaugeMetricFamily("tidal_resource_group_allocated", "Bound to pods (training and inference) "
                                      "per resource group and resource", labels=["group", "resource"])
        for group, figures in sorted(groups.items()):
            for resource in RESOURCES:
                capacity.add_metric([group, resource], figures[f"{resource}_capacity"])
                allocated.add_metric([group, resource], figures[f"{resource}_allocated"])
        yield capacity
        yield allocated
        yield from self._fragmentation(groups)
        if at is not None:
            yield GaugeMetricFamily("tidal_resource_group_observed_timestamp_seconds",
                                    "When the lending tick last read the allocation", value=at)
        used = GaugeMetricFamily("tidal_resource_group_gpus_used", "GPUs really busy (utilization x GPUs of the "
                                 "newest profiled minute) per resource group", labels=["group"])
        for group, busy in sorted(profiling.gpus_in_use_now(now=timezone.now())[1].items()):
            used.add_metric([group], busy)
        yield used

    @staticmethod
    def _fragmentation(groups: dict[str, dict[str, float]]) -> Iterator[Metric]:
        """Idle GPUs the learned target workload could not use, per resource group
        (docs/concepts/placement.md#the-clusters-typical-jobs)."""
        amount = GaugeMetricFamily("tidal_gpu_fragmented_gpus", "Idle GPUs that the typical jobs of the last week "
                                   "could not use (FGD's fragmentation), per resource group", labels=["group"])
        ratio = GaugeMetricFamily("tidal_gpu_fragmentation_ratio", "Fragmented share of the idle GPUs, per resource "
                                  "group (absent while none is idle)", labels=["group"])
        for group, figures in sorted(groups.items()):
            if "gpu_fragmented" not in figures:
                continue
            amount.add_metric([group], figures["gpu_fragmented"])
            idle = figures["gpu_capacity"] - figures["gpu_allocated"]
            if idle > 1e-9:
                ratio.add_metric([group], figures["gpu_fragmented"] / idle)
        yield amount
        yield ratio

    def _nodes(self) -> Iterator[Metric]:
        nodes = GaugeMetricFamily("tidal_nodes", "Nodes by resource group, state, pool and pin",
                                  labels=["group", "state", "pool", "pinned"])
        for group, state, pool, pinned, n in colocation.node_counts():
            nodes.add_metric([group, state, pool, str(pinned).lower()], n)
        yield nodes
        open_ = GaugeMetricFamily("tidal_transitions_open", "Node transitions in progress", labels=["direction"])
        ended = CounterMetricFamily("tidal_transitions", "Node transitions ended", labels=["direction", "outcome"])
        for direction, status, n in colocation.transition_counts():
            if status == "open":
                open_.add_metric([direction], n)
            else:
                ended.add_metric([direction, status], n)
        yield open_
        yield ended

    def _service_groups(self) -> Iterator[Metric]:
        """docs/concepts/service-groups.md#what-is-measured"""
        groups = GaugeMetricFamily("tidal_service_groups", "Groups of services whose replica is a group of pods, by "
                                   "state (ready, starting, waiting)", labels=["service", "state"])
        for service, state, n in colocation.group_states():
            groups.add_metric([service, state], n)
        yield groups
        unready = CounterMetricFamily("tidal_service_group_unready_gpu_seconds", "GPU-seconds held by groups that "
                                      "are not fully ready (their pods still starting)", labels=["service"])
        for service, seconds in colocation.unready_gpu_seconds():
            unready.add_metric([service], seconds)
        yield unready

    def _jobs(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily("tidal_jobs_pending", "Pending training jobs by department and reason",
                                    labels=["department", "reason"])
        for department, reason, n in scheduler.pending_counts():
            pending.add_metric([department, reason or "new"], n)
        yield pending
        counts, total, count = scheduler.first_wait_histogram(WAIT_BUCKETS)
        yield HistogramMetricFamily("tidal_queue_wait_seconds", "Queue wait of each job before its first run",
                                    buckets=[*((repr(b), c) for b, c in zip(WAIT_BUCKETS, counts)), ("+Inf", count)],
                                    sum_value=total)
        runs = CounterMetricFamily("tidal_job_runs_ended", "Ended runs by outcome (killed: by a take-back)",
                                   labels=["outcome"])
        kills = 0
        for outcome, n in scheduler.run_outcome_counts():
            runs.add_metric([outcome], n)
            kills += n if outcome == "killed" else 0
        yield runs
        yield CounterMetricFamily("tidal_kills", "Training runs killed by a take-back", value=kills)

    def _decisions(self) -> Iterator[Metric]:
        decisions = CounterMetricFamily("tidal_decisions", "Decisions by kind and reason", labels=["kind", "reason"])
        preemptions = CounterMetricFamily("tidal_preemptions", "Preemptions by reason", labels=["reason"])
        scaling = CounterMetricFamily("tidal_autoscaling_actions", "Scaling decisions by reason", labels=["reason"])
        admissions = 0
        for kind, reason, n in scheduler.decision_counts():
            decisions.add_metric([kind, reason], n)
            admissions += n if kind == "admission" else 0
            if kind == "preemption":
                preemptions.add_metric([reason], n)
            elif kind == "scaling":
                scaling.add_metric([reason], n)
        yield decisions
        yield CounterMetricFamily("tidal_admissions", "Training jobs admitted", value=admissions)
        yield preemptions
        yield scaling

    def _loops(self) -> Iterator[Metric]:
        alerts = CounterMetricFamily("tidal_autoscaler_alerts", "Autoscaler alerts (failed scale, a service short "
                                     "of its replicas, capped by priority) by service and reason",
                                     labels=["service", "reason"])
        for (service, reason), n in sorted(telemetry.alerts(self.redis, self.namespace).items()):
            alerts.add_metric([service, reason], n)
        yield alerts
        ticks = CounterMetricFamily("tidal_loop_ticks", "Control-loop ticks by loop and outcome: acted, or why not "
                                    "(busy: another tick held the cluster lock past the wait; backoff, "
                                    "cluster-unavailable, not-leader, redis-unreachable, lock-lost, error)",
                                    labels=["loop", "outcome"])
        for (loop, outcome), n in sorted(telemetry.ticks(self.redis, self.namespace).items()):
            ticks.add_metric([loop, outcome], n)
        yield ticks
        for loop, help_ in (("scheduler_cycle", "Scheduling cycle duration"),
                            ("lending_tick", "Lending tick duration"), ("autoscale_tick", "Autoscaling tick duration")):
            h = telemetry.histogram(self.redis, self.namespace, loop)
            yield HistogramMetricFamily(f"tidal_{loop}_seconds", help_, sum_value=h.sum,
                                        buckets=[("+Inf" if b == float("inf") else repr(b), c) for b, c in h.buckets])

    def _pipeline(self) -> Iterator[Metric]:
        now = time.time()
        cursor = self.redis.get(cursor_key(self.topic_prefix))
        if cursor is not None:
            yield GaugeMetricFamily("tidal_pipeline_publisher_cursor_age_seconds",
                                    "Seconds between now and the last step the publisher sent to Kafka",
                                    value=now - int(cursor) / 1000)
        lag = GaugeMetricFamily("tidal_pipeline_sink_lag_seconds", "Seconds between now and the end of the newest "
                                "minute the profile sink wrote", labels=["profile"])
        for kind, minute in profiling.newest_minutes().items():
            if minute is not None:
                lag.add_metric([kind], now - (minute.timestamp() + 60))
        yield lag
