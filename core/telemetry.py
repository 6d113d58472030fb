"""What the control loops measure about themselves, kept in Redis: the loops run in Celery workers, while
`/metrics` is served by the web processes, so neither process-local nor per-process registries would do.

- loop durations as Prometheus histograms (cumulative bucket counters, sum, count);
- the latest per-resource-group allocation, as the lending tick saw it on the cluster backend;
- the autoscaler's alerts, a counter per (service, reason);
- the loops' ticks, a counter per (loop, outcome), and each loop's skipped ticks in a row.
"""
import json
import math
from dataclasses import dataclass

ACTED = "acted"  # the outcome of a tick that acted on the cluster (the others say why it did not)
LOOP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class HistogramValue:
    buckets: tuple[tuple[float, int], ...]  # (upper bound, cumulative count), +Inf last
    sum: float
    count: int


def _key(namespace: str, name: str) -> str:
    return f"{namespace}:telemetry:{name}"


def observe(redis, namespace: str, loop: str, seconds: float) -> None:
    """One duration of `loop` (e.g. "scheduler_cycle"): every bucket it falls in, the sum and the count."""
    key = _key(namespace, f"loop:{loop}")
    pipe = redis.pipeline(transaction=True)
    for bound in LOOP_BUCKETS:
        if seconds <= bound:
            pipe.hincrby(key, repr(bound), 1)
    pipe.hincrby(key, "+Inf", 1)
    pipe.hincrbyfloat(key, "sum", seconds)
    pipe.execute()


def histogram(redis, namespace: str, loop: str) -> HistogramValue:
    raw = {k.decode(): v for k, v in redis.hgetall(_key(namespace, f"loop:{loop}")).items()}
    buckets = tuple((b, int(raw.get(repr(b), 0))) for b in LOOP_BUCKETS) + ((math.inf, int(raw.get("+Inf", 0))),)
    return HistogramValue(buckets, float(raw.get("sum", 0.0)), buckets[-1][1])


def put_groups(redis, namespace: str, groups: dict[str, dict[str, float]], now: float) -> None:
    """{group: {"gpu_capacity": …, "gpu_allocated": …, "cpu_capacity": …, …}} as the backend reports it."""
    redis.set(_key(namespace, "groups"), json.dumps({"at": now, "groups": groups}))


def groups(redis, namespace: str) -> tuple[float | None, dict[str, dict[str, float]]]:
    raw = redis.get(_key(namespace, "groups"))
    if raw is None:
        return None, {}
    value = json.loads(raw)
    return value["at"], value["groups"]


def count_alert(redis, namespace: str, service: str, reason: str) -> None:
    """One more autoscaler alert (colocation/autoscaler.py) of `service` for `reason`."""
    redis.hincrby(_key(namespace, "autoscaler-alerts"), f"{service}|{reason}", 1)


def alerts(redis, namespace: str) -> dict[tuple[str, str], int]:
    """{(service, reason): alerts raised so far}."""
    raw = redis.hgetall(_key(namespace, "autoscaler-alerts"))
    return {tuple(k.decode().split("|", 1)): int(v) for k, v in raw.items()}


def count_tick(redis, namespace: str, loop: str, outcome: str, *, skipped: bool) -> int:
    """One more tick of `loop` ended with `outcome`. Returns the loop's skipped ticks in a row: counting this one
    when `skipped`; else the streak this tick ends (kept at 0 after an acting tick; unchanged by ticks that neither
    acted nor count as skipped, such as a standby's)."""
    streak = _key(namespace, "loop-skips")
    pipe = redis.pipeline(transaction=True)
    pipe.hincrby(_key(namespace, "loop-ticks"), f"{loop}|{outcome}", 1)
    if skipped:
        pipe.hincrby(streak, loop, 1)
    else:
        pipe.hget(streak, loop)
        if outcome == ACTED:
            pipe.hset(streak, loop, 0)
    return int(pipe.execute()[1] or 0)


def ticks(redis, namespace: str) -> dict[tuple[str, str], int]:
    """{(loop, outcome): ticks so far}."""
    raw = redis.hgetall(_key(namespace, "loop-ticks"))
    return {tuple(k.decode().split("|", 1)): int(v) for k, v in raw.items()}


def web_target(namespace: str) -> str:
    """The file_sd target name (and `service` label) of the web server of the Tidal stored under `namespace`."""
    return f"tidal-web-{namespace}"
