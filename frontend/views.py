"""The console's frame: home, sign-in, the department switcher and /metrics. Each area has its own views module."""
from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET, require_POST
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from redis import Redis

from core.api.throttling import SignInThrottle, retry_after
from frontend import scope
from frontend.forms import safe_next
from frontend.metrics import TidalCollector


@login_required
def home(request):
    return redirect("jobs")


class LoginView(auth_views.LoginView):
    """Django's sign-in, throttled like the API's token endpoint (per address and user name)."""

    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        if (refused := _sign_in_refused(request, self)) is None:
            return super().post(request, *args, **kwargs)
        form = self.get_form_class()(request, initial={"username": request.POST.get("username", "")})
        return self.render_to_response(self.get_context_data(form=form, throttled=refused), status=429)


def admin_login(request, extra_context=None):
    """The admin site's sign-in, throttled with the console's and the API's: the same passwords are guessed there."""
    if request.method == "POST" and (refused := _sign_in_refused(request)) is not None:
        return HttpResponse(f"{refused}\n", status=429, content_type="text/plain")
    return admin.site.login(request, extra_context)


def _sign_in_refused(request, view=None) -> str | None:
    """Why this sign-in attempt must wait (counted per address and user name), or None when it may go on."""
    throttle = SignInThrottle()
    return None if throttle.allow_request(request, view) else (
        f"Too many sign-in attempts; try again in {retry_after(throttle)} s.")


@login_required
@require_POST
def department_switch(request):
    """Narrow the console to one of the user's departments ("" = all of them); unknown names are ignored."""
    name = request.POST.get("department", "")
    allowed = {m.department.name for m in scope.memberships(request)}
    if name == "" or name in allowed or request.user.is_staff:
        request.session[scope.SESSION_KEY] = name
    return redirect(safe_next(request, "/"))


@require_GET
def metrics(request):
    """Prometheus exposition of Tidal's own metrics, for the scraper: no login, nothing personal."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TidalCollector(redis=Redis.from_url(settings.REDIS_URL), namespace=settings.TIDAL_REDIS_NAMESPACE,
                                     topic_prefix=settings.TIDAL_TOPIC_PREFIX))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
