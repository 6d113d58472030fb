"""Probes for whatever runs Tidal (Kubernetes, a load balancer): /healthz and /readyz.

Plain Django views beside /metrics, not DRF: no authentication, session, CSRF (GET only) or throttle applies, and
drf-spectacular does not put them in the API schema. Both answer over plain HTTP (settings.SECURE_REDIRECT_EXEMPT).

- /healthz, liveness: the process answers. It touches nothing else, so an outage of the database or Redis never
  gets web pods restarted (a restart would not bring them back).
- /readyz, readiness: the process can serve: a trivial query on every configured database and a PING to Redis.
  503 names what failed, so that `kubectl describe pod` says why a pod left the Service.
"""
from django.conf import settings
from django.db import connections
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from redis import Redis

# Under the probes' timeoutSeconds (platform/kubernetes/chart/templates/web.yaml): a hung Redis fails the check,
# not the probe.
REDIS_TIMEOUT_S = 2.0


@never_cache
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request):
    checks = {"database": _database(), "redis": _redis()}
    failing = [name for name, result in checks.items() if result != "ok"]
    body = {"status": "ok" if not failing else "unavailable", "checks": checks}
    if failing:
        body["failing"] = failing
    return JsonResponse(body, status=503 if failing else 200)


def _database() -> str:
    try:
        for alias in connections:
            with connections[alias].cursor() as cursor:
                cursor.execute("SELECT 1")
                cursor.fetchone()
    except Exception as error:  # any failure means "not ready"; the probe wants a word, not a traceback
        return _failure(error)
    return "ok"


def _redis() -> str:
    redis = Redis.from_url(settings.REDIS_URL, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S)
    try:
        redis.ping()
    except Exception as error:
        return _failure(error)
    finally:
        redis.close()
    return "ok"


def _failure(error: Exception) -> str:
    # The class only: messages can carry host names and user names, and the endpoint is anonymous.
    return f"error: {type(error).__name__}"
