"""The autoscaler's alerts (docs/concepts/autoscaling.md#alerts): a Decision of kind alert and a counter in /metrics,
raised once per episode — an episode stays open in Redis until its cause clears — for a failed scale, a service
capped below what it asked by priority, or one short of its ready replicas. Like every alert decision, the
notifications app delivers it (the operators' webhook, TIDAL_ALERT_WEBHOOK_URL, and the department's subscribers)."""
import json

from colocation.models import InferenceService
from colocation.policy import autoscaling
from colocation.policy.autoscaling import ScaleDecision
from core import telemetry
from core.decisions import decision_record
from core.models import Decision

SHORT_AFTER_S = 300.0  # real seconds a service may stay below its desired replicas before an alert
EPISODES_KEY = "autoscaler:episodes"  # Redis hash: "service|reason" -> when the open episode began


def jsonable(data: dict) -> dict:
    return json.loads(json.dumps(data, default=str))


def watch_short(service: InferenceService, d: ScaleDecision, ready: int, now: float, redis,
                namespace: str) -> list[str]:
    """Alert once per episode when a service was capped below what it asked, or stays short of its desired
    replicas longer than SHORT_AFTER_S; the alerts raised now."""
    raised = []
    if d.reason is autoscaling.ScaleReason.PRIORITY:
        raised.append(alert(service, "priority-capped", d.message, {"current": d.current, "target": d.target,
                                                                    "asked": d.data.get("asked")}, now, redis, namespace))
    else:
        close(service, "priority-capped", redis, namespace)
    desired = d.target
    if ready >= desired or redis is None:
        close(service, "short", redis, namespace)
        return [r for r in raised if r]
    since = _episode(redis, namespace, service.name, "short-since")
    if since is None:
        _set_episode(redis, namespace, service.name, "short-since", now)
    elif now - since > SHORT_AFTER_S:
        raised.append(alert(service, "short", f"{service.name} has had only {ready} of {desired} replicas ready for "
                                              f"{int((now - since) // 60)} minutes", {"ready": ready, "desired": desired},
                            now, redis, namespace))
    return [r for r in raised if r]


def alert(service: InferenceService, reason: str, message: str, data: dict, now: float, redis,
          namespace: str) -> str | None:
    """Raise the alert unless its episode is open already: "service:reason" when raised, else None."""
    if redis is not None and _episode(redis, namespace, service.name, reason) is not None:
        return None  # this episode was already raised
    if redis is not None:
        _set_episode(redis, namespace, service.name, reason, now)
        telemetry.count_alert(redis, namespace, service.name, reason)
    decision_record(kind=Decision.Kind.ALERT, subject=f"service:{service.name}", reason=reason, message=message,
                    department=service.department, data=jsonable(data))
    return f"{service.name}:{reason}"


def close(service: InferenceService, reason: str, redis, namespace: str) -> None:
    """The episode's cause cleared: the next one alerts again."""
    if redis is not None:
        fields = [f"{service.name}|{reason}"] + ([f"{service.name}|short-since"] if reason == "short" else [])
        redis.hdel(f"{namespace}:{EPISODES_KEY}", *fields)


def _episode(redis, namespace: str, service: str, reason: str) -> float | None:
    raw = redis.hget(f"{namespace}:{EPISODES_KEY}", f"{service}|{reason}")
    return float(raw) if raw is not None else None


def _set_episode(redis, namespace: str, service: str, reason: str, now: float) -> None:
    redis.hset(f"{namespace}:{EPISODES_KEY}", f"{service}|{reason}", now)
