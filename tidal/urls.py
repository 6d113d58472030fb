from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.routers import DefaultRouter

from colocation.api.urls import ROUTES as COLOCATION_ROUTES, URLS as COLOCATION_URLS
from core.api.throttling import SignInThrottle
from core.api.urls import ROUTES as CORE_ROUTES
from core.api.views import MeView
from frontend import health, views
from notifications.api.urls import ROUTES as NOTIFICATION_ROUTES, URLS as NOTIFICATION_URLS
from profiling.api.urls import ROUTES as PROFILING_ROUTES, URLS as PROFILING_URLS
from scheduler.api.urls import ROUTES as SCHEDULER_ROUTES

router = DefaultRouter()  # one router, so /api/ lists every app's endpoints
for prefix, viewset, basename in CORE_ROUTES + SCHEDULER_ROUTES + COLOCATION_ROUTES + PROFILING_ROUTES + NOTIFICATION_ROUTES:
    router.register(prefix, viewset, basename=basename)

api = [
    *PROFILING_URLS,  # jobs/{id}/profile/: beside the router's jobs
    *COLOCATION_URLS,  # inference-services/{id}/load/ and forecasts/: beside the router's services
    *NOTIFICATION_URLS,  # notifications/preferences/: the caller's own, one object
    path("", include(router.urls)),
    path("me/", MeView.as_view(), name="me"),
    path("auth/token/", ObtainAuthToken.as_view(throttle_classes=[SignInThrottle]), name="token"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]

urlpatterns = [
    # Probes (frontend/health.py): no trailing slash, as Kubernetes and load balancers spell them.
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/login/", views.admin_login),  # before the admin's own: throttled
    path("admin/", admin.site.urls),
    path("api/", include(api)),
    path("", include("frontend.urls")),
]

handler404 = "core.api.errors.page_not_found"
handler500 = "core.api.errors.server_error"
