"""Tidal settings. Every value that differs between machines comes from the environment (docs/reference/configuration.md)."""
import json
import os
from pathlib import Path

import dj_database_url
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
RUN_DIR = Path(os.environ.get("TIDAL_RUN_DIR", BASE_DIR / ".run"))
TRACES_DIR = Path(os.environ.get("TIDAL_TRACES_DIR", BASE_DIR.parent / "shared" / "traces"))

DEV_SECRET_KEY = "tidal-dev-only-not-secret"
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", DEV_SECRET_KEY)
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",")
if not DEBUG and SECRET_KEY == DEV_SECRET_KEY:
    raise RuntimeError("DJANGO_DEBUG=0 needs DJANGO_SECRET_KEY (a long random string); the development key is public")

# Production (DEBUG off) is served over HTTPS: secure cookies, HSTS, redirects. TIDAL_HTTPS=0 turns that off
# (a plain-HTTP test deployment); behind a TLS-terminating proxy set TIDAL_PROXY_SSL_HEADER=1 so that the
# proxy's X-Forwarded-Proto is trusted.
HTTPS = os.environ.get("TIDAL_HTTPS", "0" if DEBUG else "1") == "1"
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
SECURE_HSTS_SECONDS = 31536000 if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = SECURE_HSTS_PRELOAD = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz/?$", r"^readyz/?$", r"^metrics/?$"]  # probes and scrapes come over HTTP
if os.environ.get("TIDAL_PROXY_SSL_HEADER") == "1":
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_HTTPONLY = CSRF_COOKIE_HTTPONLY = True  # htmx sends the token from the page, not the cookie
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc as static files: /api/docs/ works offline
    "django_htmx",
    "django_tables2",
    "core",
    "scheduler",
    "colocation",
    "profiling",
    "notifications",
    "experiments",
    "frontend",
    "demo",
    "benchmarks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "tidal.urls"
WSGI_APPLICATION = "tidal.wsgi.application"
ASGI_APPLICATION = "tidal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context_processors.console",
            ],
        },
    },
]

# SQLite only for the zero-setup demo; tests and production set DATABASE_URL to PostgreSQL.
DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{RUN_DIR / 'tidal.sqlite3'}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The demo's web server, worker and beat share one file: wait for locks instead of failing, and let
    # readers run beside the writer.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = os.environ.get("TIDAL_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = RUN_DIR / "static"
DJANGO_TABLES2_TEMPLATE = "frontend/table.html"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header turns "not signed in" into a 401, not a 403.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "core.api.filtering.StrictFilterBackend",  # django-filter's, with no empty non-text values
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.Pagination",
    # The API speaks JSON (automation's format; a form body cannot say null, an empty list or a boolean plainly).
    # The token endpoint keeps DRF's form parsers, so `curl -d username=… -d password=…` works.
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
    "DEFAULT_THROTTLE_RATES": {  # core/api/throttling.py; counted in the Redis cache, shared by every web worker
        "sign-in": os.environ.get("TIDAL_SIGN_IN_RATE", "10/min"),
        "submit": os.environ.get("TIDAL_SUBMIT_RATE", "120/min"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Tidal API",
    "DESCRIPTION": "Control plane of a shared GPU cluster: quotas, training jobs, nodes, "
    "inference services and the decisions taken about them.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # served from drf-spectacular-sidecar's static files, never a CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "core.api.schema.document_errors"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "scheduler.models.JobStatus",
        "NodeStateEnum": "colocation.models.NODE_STATE_CHOICES",
        "MembershipRoleEnum": "core.models.Membership.Role",
        "QuotaKindEnum": "scheduler.models.QuotaKind",
    },
}

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
TIDAL_REDIS_NAMESPACE = os.environ.get("TIDAL_REDIS_NAMESPACE", "tidal")  # prefix of Tidal's own Redis keys
CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                      "KEY_PREFIX": f"{TIDAL_REDIS_NAMESPACE}:cache"}}
CELERY_BROKER_URL = REDIS_URL
if TIDAL_REDIS_NAMESPACE != "tidal":
    # A namespace of its own has a task queue of its own too (the default one keeps Celery's, `celery`): a demo or
    # test run on it beside another Tidal on the same Redis neither takes the other's loop ticks nor gives its own.
    CELERY_TASK_DEFAULT_QUEUE = f"{TIDAL_REDIS_NAMESPACE}:celery"
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = TIME_ZONE

# The live loops. The scheduler ticks every TIDAL_SCHEDULER_INTERVAL_S with the policy profile named here
# (the same profile objects replay and the simulator load).
TIDAL_SCHEDULER_PROFILE = os.environ.get("TIDAL_SCHEDULER_PROFILE", "tidal")
TIDAL_SCHEDULER_INTERVAL_S = float(os.environ.get("TIDAL_SCHEDULER_INTERVAL_S", "5"))
# The demo workload (make run): Alibaba 2023 pods submitted at TIDAL_DEMO_SPEEDUP × trace speed.
TIDAL_DEMO_WORKLOAD = os.environ.get("TIDAL_DEMO_WORKLOAD", "0") == "1"
TIDAL_DEMO_SPEEDUP = float(os.environ.get("TIDAL_DEMO_SPEEDUP", "120"))
TIDAL_DEMO_LOAD_FACTOR = float(os.environ.get("TIDAL_DEMO_LOAD_FACTOR", "20"))
TIDAL_DEMO_TRACE_START_S = int(os.environ.get("TIDAL_DEMO_TRACE_START_S", str(120 * 86400)))
TIDAL_DEMO_MAX_PER_TICK = int(os.environ.get("TIDAL_DEMO_MAX_PER_TICK", "20"))
TIDAL_LENDING_INTERVAL_S = float(os.environ.get("TIDAL_LENDING_INTERVAL_S", "10"))
# Forecast-driven lending (docs/concepts/lending.md#forecast-driven-lending): take back ahead of the forecast rise,
# lend only what stays idle,
# keep jobs off lent nodes they would outlive. Off by default: the seasonal forecast needs a day of recorded demand
# (the lending tick records it either way), and the demo's compressed day has no real-time daily rhythm.
CELERY_BEAT_SCHEDULE: dict = {
    "scheduler-tick": {"task": "scheduler.tick", "schedule": TIDAL_SCHEDULER_INTERVAL_S},
    "lending-tick": {"task": "colocation.lending_tick", "schedule": TIDAL_LENDING_INTERVAL_S},
}
if TIDAL_DEMO_WORKLOAD:
    CELERY_BEAT_SCHEDULE["demo-workload"] = {"task": "scheduler.demo_workload", "schedule": 5.0}
# The fragmentation measure's target workload, learned from the last week's submissions (scheduler.learn_workload):
# hourly; every minute under the demo's sped-up workload.
TIDAL_WORKLOAD_LEARN_S = float(os.environ.get("TIDAL_WORKLOAD_LEARN_S", "60" if TIDAL_DEMO_WORKLOAD else "3600"))
CELERY_BEAT_SCHEDULE["learn-workload"] = {"task": "scheduler.learn_workload", "schedule": TIDAL_WORKLOAD_LEARN_S}
# The live demo's inference traffic (make run): World Cup 98 on a compressed clock, one demo day in
# TIDAL_DEMO_DAY_S real seconds from TIDAL_DEMO_START_HOUR (cluster/simulated/traffic.py, colocation/loads.py).
TIDAL_DEMO_TRAFFIC = os.environ.get("TIDAL_DEMO_TRAFFIC", "0") == "1"
TIDAL_DEMO_DAY_S = float(os.environ.get("TIDAL_DEMO_DAY_S", "600"))
TIDAL_DEMO_START_HOUR = float(os.environ.get("TIDAL_DEMO_START_HOUR", "22"))
# The inference autoscaler (colocation/autoscaler.py): every minute; every 5 s under the demo traffic (12 demo minutes).
TIDAL_AUTOSCALE_INTERVAL_S = float(os.environ.get("TIDAL_AUTOSCALE_INTERVAL_S", "5" if TIDAL_DEMO_TRAFFIC else "60"))
TIDAL_ALERT_WEBHOOK_URL = os.environ.get("TIDAL_ALERT_WEBHOOK_URL", "")  # the operators' webhook: every alert decision (notifications)
CELERY_BEAT_SCHEDULE["autoscale-tick"] = {"task": "colocation.autoscale_tick", "schedule": TIDAL_AUTOSCALE_INTERVAL_S}

# The cluster the live loops act on (colocation/live_backend.py): the embedded simulated one, or Kubernetes through
# TIDAL_KUBECONFIG (empty: the in-cluster service account). docs/how-to/kubernetes.md#the-backend.
TIDAL_CLUSTER_BACKEND = os.environ.get("TIDAL_CLUSTER_BACKEND", "simulated")
if TIDAL_CLUSTER_BACKEND not in ("simulated", "kubernetes"):
    raise ImproperlyConfigured(f"TIDAL_CLUSTER_BACKEND must be simulated or kubernetes, not {TIDAL_CLUSTER_BACKEND!r}")
TIDAL_KUBECONFIG = os.environ.get("TIDAL_KUBECONFIG", "")
TIDAL_K8S_NAMESPACE = os.environ.get("TIDAL_K8S_NAMESPACE", "tidal-workloads")  # Tidal's pods and ReplicaSets
TIDAL_K8S_LEASE_NAMESPACE = os.environ.get("TIDAL_K8S_LEASE_NAMESPACE", TIDAL_K8S_NAMESPACE)
TIDAL_K8S_LEASE_S = int(os.environ.get("TIDAL_K8S_LEASE_S", "60"))  # a silent leader is replaced after this
TIDAL_K8S_POD_IMAGE = os.environ.get("TIDAL_K8S_POD_IMAGE", "busybox:1.37")  # for pods that name no image
TIDAL_LEADER_ID = os.environ.get("TIDAL_LEADER_ID", "")  # default: the hostname (a worker pod)
TIDAL_CLUSTER_LOCK_S = float(os.environ.get("TIDAL_CLUSTER_LOCK_S", "30"))  # cluster lock expiry, renewed while held
TIDAL_CLUSTER_BACKOFF_S = float(os.environ.get("TIDAL_CLUSTER_BACKOFF_S", "5"))  # doubles per failed tick, max 300
TIDAL_CLUSTER_ALERT_AFTER = int(os.environ.get("TIDAL_CLUSTER_ALERT_AFTER", "3"))  # failed ticks before an alert
TIDAL_LOOP_SKIP_ALERT_AFTER = int(os.environ.get("TIDAL_LOOP_SKIP_ALERT_AFTER", "3"))  # a loop's skips in a row

KAFKA_BOOTSTRAP = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
PROMETHEUS_URL = os.environ.get("PROMETHEUS_URL", "http://127.0.0.1:9090")
PUSHGATEWAY_URL = os.environ.get("PUSHGATEWAY_URL", "http://127.0.0.1:9091")

# The profile pipeline (docs/concepts/profiles.md#the-pipeline): exporter -> Prometheus -> publisher -> Kafka ->
# Flink -> Kafka -> sink.
TIDAL_TOPIC_PREFIX = os.environ.get("TIDAL_TOPIC_PREFIX", "tidal")  # streaming.topics.Topics(prefix)
TIDAL_EXPORTER_PORT = int(os.environ.get("TIDAL_EXPORTER_PORT", "9108"))  # simulated cluster's /metrics
TIDAL_METRICS_STEP_S = int(os.environ.get("TIDAL_METRICS_STEP_S", "5"))  # one PodSample per pod per step
TIDAL_PUBLISHER_INTERVAL_S = float(os.environ.get("TIDAL_PUBLISHER_INTERVAL_S", "10"))
TIDAL_PUBLISHER_DELAY_S = int(os.environ.get("TIDAL_PUBLISHER_DELAY_S", "10"))  # let scrapes land first
TIDAL_PUBLISHER_SELECTOR = os.environ.get("TIDAL_PUBLISHER_SELECTOR", "")  # PromQL label matchers; empty: all pods
PROMETHEUS_SD_DIR = os.environ.get("PROMETHEUS_SD_DIR", str(BASE_DIR / ".run" / "prometheus-sd" / "targets"))
CELERY_BEAT_SCHEDULE["task-profiles-daily"] = {
    "task": "profiling.task_profiles_daily", "schedule": crontab(hour=3, minute=0),
}
CELERY_BEAT_SCHEDULE["forecast-train-daily"] = {
    "task": "profiling.forecast_train_daily", "schedule": crontab(hour=4, minute=0),
}

# Notifications (docs/concepts/notifications.md#events-and-channels): e-mail through Django's mail framework; with
# DEBUG on and no EMAIL_BACKEND
# given, sent mail is printed to the worker's log (the console backend) instead of reaching a real server.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend" if DEBUG
                               else "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = os.environ.get("EMAIL_USE_TLS", "0") == "1"
EMAIL_TIMEOUT = float(os.environ.get("EMAIL_TIMEOUT", "10"))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "tidal@localhost")
# The scan turns new decisions into events every TIDAL_NOTIFY_SCAN_S; decisions younger than TIDAL_NOTIFY_SETTLE_S
# wait for the next scan (a transaction that wrote a lower id may not have committed yet).
TIDAL_NOTIFY_SCAN_S = float(os.environ.get("TIDAL_NOTIFY_SCAN_S", "5"))
TIDAL_NOTIFY_SETTLE_S = float(os.environ.get("TIDAL_NOTIFY_SETTLE_S", "5"))
TIDAL_NOTIFY_WEBHOOK_TIMEOUT_S = float(os.environ.get("TIDAL_NOTIFY_WEBHOOK_TIMEOUT_S", "5"))
TIDAL_NOTIFY_FAILURES = int(os.environ.get("TIDAL_NOTIFY_FAILURES", "3"))  # department failures in an hour to alert
TIDAL_PUBLIC_URL = os.environ.get("TIDAL_PUBLIC_URL", "")  # links in notifications, e.g. https://tidal.example.com
CELERY_BEAT_SCHEDULE["notifications-scan"] = {"task": "notifications.scan", "schedule": TIDAL_NOTIFY_SCAN_S}

# Job logs (docs/concepts/job-logs.md#archive; scheduler/logs.py): when a run ends, the last TIDAL_LOG_ARCHIVE_BYTES
# of each worker's
# log are saved through the "logs" storage — FileSystemStorage under TIDAL_RUN_DIR/logs unless TIDAL_LOG_STORAGE names
# another Django storage class (e.g. storages.backends.s3.S3Storage) with TIDAL_LOG_STORAGE_OPTIONS as its JSON
# options — and deleted after TIDAL_LOG_RETENTION_DAYS by a daily task. A followed log is cut after
# TIDAL_LOG_FOLLOW_MAX_S.
TIDAL_LOG_ARCHIVE_BYTES = int(os.environ.get("TIDAL_LOG_ARCHIVE_BYTES", str(1024 * 1024)))
TIDAL_LOG_RETENTION_DAYS = int(os.environ.get("TIDAL_LOG_RETENTION_DAYS", "30"))
TIDAL_LOG_FOLLOW_MAX_S = float(os.environ.get("TIDAL_LOG_FOLLOW_MAX_S", "3600"))
if TIDAL_LOG_ARCHIVE_BYTES < 1 or TIDAL_LOG_RETENTION_DAYS < 1 or TIDAL_LOG_FOLLOW_MAX_S <= 0:
    raise ImproperlyConfigured("TIDAL_LOG_ARCHIVE_BYTES, TIDAL_LOG_RETENTION_DAYS and TIDAL_LOG_FOLLOW_MAX_S must be "
                               "positive")
_LOG_STORAGE = os.environ.get("TIDAL_LOG_STORAGE", "django.core.files.storage.FileSystemStorage")
try:
    _LOG_STORAGE_OPTIONS = json.loads(os.environ.get("TIDAL_LOG_STORAGE_OPTIONS") or "{}")
except ValueError as _error:
    raise ImproperlyConfigured(f"TIDAL_LOG_STORAGE_OPTIONS is not JSON: {_error}") from None
if not isinstance(_LOG_STORAGE_OPTIONS, dict):
    raise ImproperlyConfigured("TIDAL_LOG_STORAGE_OPTIONS must be a JSON object of the storage's options")
if _LOG_STORAGE.endswith(".FileSystemStorage"):
    _LOG_STORAGE_OPTIONS.setdefault("location", str(RUN_DIR / "logs"))
STORAGES = {  # Django's defaults for the first two
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "logs": {"BACKEND": _LOG_STORAGE, "OPTIONS": _LOG_STORAGE_OPTIONS},
}
CELERY_BEAT_SCHEDULE["logs-expire"] = {"task": "scheduler.logs_expire", "schedule": crontab(hour=2, minute=30)}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("TIDAL_LOG_LEVEL", "INFO")},
}
