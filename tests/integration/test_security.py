"""Production settings pass Django's deployment checks; sign-in and submissions are throttled; every session write
of the API needs the CSRF token; no response or log shows a secret."""
import logging
import os
import re
import secrets
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings
from drf_spectacular.generators import SchemaGenerator
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.api.throttling import SignInThrottle, SubmitThrottle
from scheduler.models import TrainingJob
from tests.integration.test_api_permissions import MATRIX, _json, _objects

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
              "DJANGO_ALLOWED_HOSTS": "tidal.example.org"}


def manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    # Without the browser tests' DJANGO_ALLOW_ASYNC_UNSAFE (their Playwright loop needs it; production never sets it).
    base = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**base, **env},
                          capture_output=True, text=True, timeout=120)


def test_production_settings_pass_the_deployment_checks():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_refuses_the_public_development_key():
    result = manage("check", env={**PRODUCTION, "DJANGO_SECRET_KEY": "tidal-dev-only-not-secret"})
    assert result.returncode != 0 and "needs DJANGO_SECRET_KEY" in result.stderr


@pytest.mark.django_db
def test_production_responses_carry_security_headers_and_secure_cookies(settings, client):
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = True
    response = client.get("/login/", secure=True)
    assert response["X-Frame-Options"] == "DENY" and response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response.cookies["csrftoken"]["secure"] and response.cookies["csrftoken"]["httponly"]


@pytest.fixture
def person(db):
    name = f"guess-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(name, password="right-password")
    return name


def test_token_requests_are_throttled_per_address_and_user(monkeypatch, person, world):
    monkeypatch.setattr(SignInThrottle, "rate", "3/min", raising=False)
    api = world.client("anonymous")
    statuses = [api.post("/api/auth/token/", {"username": person, "password": "wrong"}).status_code for _ in range(4)]
    assert statuses == [400, 400, 400, 429]
    assert api.post("/api/auth/token/", {"username": person, "password": "right-password"}).status_code == 429
    other = f"other-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(other, password="pw")
    assert api.post("/api/auth/token/", {"username": other, "password": "pw"}).status_code == 200  # another user


@pytest.mark.parametrize("page", ["/login/", "/admin/login/"])
def test_sign_in_pages_are_throttled_too(monkeypatch, person, page):
    """The console's and the admin site's: the same passwords are guessed on both."""
    get_user_model().objects.filter(username=person).update(is_staff=True)  # the admin site signs in staff only
    monkeypatch.setattr(SignInThrottle, "rate", "3/min", raising=False)
    browser = Client()
    for _ in range(3):
        assert browser.post(page, {"username": person, "password": "wrong"}).status_code == 200
    response = browser.post(page, {"username": person, "password": "right-password"})
    assert response.status_code == 429 and "Too many sign-in attempts" in response.content.decode()
    assert "_auth_user_id" not in browser.session  # even the right password waits
    assert Client().post(page, {"username": person, "password": "right-password"}).status_code == 429  # same address
    assert browser.get(page).status_code == 200  # the page itself still shows
    other = f"other-{uuid.uuid4().hex[:8]}"
    get_user_model().objects.create_user(other, password="pw", is_staff=True)
    assert browser.post(page, {"username": other, "password": "pw"}).status_code == 302  # another user signs in


def test_job_submissions_are_throttled_per_user(monkeypatch, world):
    monkeypatch.setattr(SubmitThrottle, "rate", "2/min", raising=False)
    api = world.client("member")
    statuses = [api.post("/api/jobs/", world.job_payload(name=f"j{i}"), format="json").status_code for i in range(3)]
    assert statuses == [201, 201, 429] and TrainingJob.objects.count() == 2
    assert world.client("dept_admin").post("/api/jobs/", world.job_payload(), format="json").status_code == 201


# --- CSRF on every session-authenticated write of the API -------------------------------------------------------

WRITES = ("POST", "PUT", "PATCH", "DELETE")
SIGNED_IN = ("outsider", "member", "dept_admin", "operator")


def _schema_operations(methods: tuple[str, ...]) -> list[tuple[str, str]]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return sorted((m.upper(), path) for path, item in schema["paths"].items() for m in item if m.upper() in methods)


def _state(world) -> dict:
    """Every domain row and every API token: what a refused write must leave alone."""
    return {**world.snapshot(), "tokens": sorted(Token.objects.values_list("user_id", "key"))}


def _page_token(client) -> str:
    """The CSRF token a console page hands its forms (the cookie is HttpOnly: scripts take it from the page)."""
    page = client.get("/jobs/").content.decode()
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


@pytest.mark.parametrize(("method", "path", "role"),
                         [(*operation, role) for operation in _schema_operations(WRITES) for role in SIGNED_IN],
                         ids=lambda value: value)
def test_session_writes_to_the_api_need_the_csrf_token(world, method, path, role):
    """A signed-in browser session (no API token) cannot be made to write by another site: without the page's token
    every write is a 403 that changes nothing; with it, the permission matrix's status."""
    row = MATRIX[(method, path)]
    url = path.format(id=_objects(world)[row.target]) if row.target else path
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(world.users[role])
    token = _page_token(browser)
    before = _state(world)
    refused = browser.generic(method, url, *_json(row.request_body(role)))
    assert refused.status_code == 403 and "CSRF" in refused.json()["message"], refused.content[:300]
    assert _state(world) == before
    allowed = browser.generic(method, url, *_json(row.request_body(role)), HTTP_X_CSRFTOKEN=token)
    assert allowed.status_code == row.status(role), allowed.content[:300]


# --- no secret in any response or log ---------------------------------------------------------------------------


@pytest.fixture
def secrets_in_play(world, settings, monkeypatch) -> Callable[[], list[str]]:
    """A secret key and a database password worth finding, an API token for every user; returns what must never be
    shown: those, every password hash (and its digest alone) and every token key, read when called."""
    settings.SECRET_KEY = f"zz-secret-key-{secrets.token_urlsafe(40)}"
    # The open connection keeps working: only a new one would use the (never used) password.
    monkeypatch.setitem(connection.settings_dict, "PASSWORD", f"zz-db-password-{secrets.token_urlsafe(16)}")
    for user in world.users.values():
        Token.objects.get_or_create(user=user)
    return known_secrets


def known_secrets() -> list[str]:
    """The secret key, the database password, every user's password hash and every API token key."""
    from django.conf import settings  # as the `settings` fixture left it

    hashes = list(get_user_model().objects.values_list("password", flat=True))
    found = [settings.SECRET_KEY, connection.settings_dict["PASSWORD"],
             urlsplit(os.environ.get("DATABASE_URL", "")).password,
             *hashes, *(h.rsplit("$", 1)[-1] for h in hashes), *Token.objects.values_list("key", flat=True)]
    return [s for s in found if s and len(s) >= 8]


def assert_no_secret(text: str, secrets_: list[str], where: str) -> None:
    shown = [s[:12] + "…" for s in secrets_ if s in text]
    assert not shown, f"{where} shows secrets: {shown}"


def test_no_api_read_shows_a_secret(world, secrets_in_play):
    """Every GET of the schema (and the API root, schema and docs), as the operator, who sees the most."""
    objects = _objects(world)
    paths = [path.format(id=objects[MATRIX[("GET", path)].target]) if MATRIX[("GET", path)].target else path
             for _, path in _schema_operations(("GET",))]
    api = world.client("operator")
    for path in paths + ["/api/", "/api/schema/", "/api/docs/"]:
        response = api.get(path)
        assert response.status_code == 200, (path, response.status_code)
        assert_no_secret(response.content.decode(), secrets_in_play(), path)
    assert len(paths) >= 30


def test_a_user_reads_their_own_token_only_at_the_token_endpoint(world, secrets_in_play):
    response = world.client("anonymous").post("/api/auth/token/", {"username": "mia", "password": "pw"})
    own = Token.objects.get(user=world.users["member"]).key
    assert response.json() == {"token": own}
    assert_no_secret(response.content.decode(), [s for s in secrets_in_play() if s != own], "/api/auth/token/")


def test_admin_pages_show_no_secret(world, secrets_in_play):
    """Every list and add page of the Django admin, as a superuser (the demo's operator is one)."""
    from django.contrib import admin
    from django.urls import reverse

    operator = world.users["operator"]
    operator.is_superuser = True
    operator.save(update_fields=["is_superuser"])
    world.submit("member")
    browser = Client()
    browser.force_login(operator)
    user = world.users["member"]
    pages = [reverse("admin:index"), reverse("admin:auth_user_change", args=[user.pk])]
    for model in admin.site._registry:
        meta = model._meta
        pages += [reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"),
                  reverse(f"admin:{meta.app_label}_{meta.model_name}_add")]
    for page in pages:
        response = browser.get(page)
        assert response.status_code in (200, 403), (page, response.status_code)
        assert_no_secret(response.content.decode(), secrets_in_play(), page)


@pytest.fixture
def failing(monkeypatch):
    """Sign-in (API and console) and the jobs list fail with an exception no handler knows, as a bug would."""
    from django.contrib.auth.forms import AuthenticationForm
    from rest_framework.authtoken.serializers import AuthTokenSerializer

    from scheduler import selectors

    def fail(*_args, **_kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(AuthTokenSerializer, "validate", fail)
    monkeypatch.setattr(AuthenticationForm, "clean", fail)
    monkeypatch.setattr(selectors, "with_latest_message", fail)


@override_settings(DEBUG=False)
def test_a_failing_request_logs_its_traceback_but_no_secret(world, secrets_in_play, failing, caplog):
    """With production settings a 500 answers without the traceback (JSON under /api/) and the log has the
    traceback — but neither holds a secret, the session cookie nor the password that was typed."""
    token = Token.objects.get(user=world.users["member"]).key
    browser = Client(HTTP_AUTHORIZATION=f"Token {token}")
    browser.force_login(world.users["member"])
    browser.raise_request_exception = False  # answer as the server would
    typed = "typed-password-" + secrets.token_urlsafe(12)
    with caplog.at_level(logging.INFO):
        responses = [browser.post("/api/auth/token/", {"username": "mia", "password": typed}),
                     browser.get("/jobs/"),
                     Client(raise_request_exception=False).post("/login/", {"username": "mia", "password": typed})]
    assert [r.status_code for r in responses] == [500, 500, 500]
    assert responses[0]["Content-Type"] == "application/json" and set(responses[0].json()) == {"message", "extra"}
    log = caplog.text
    assert log.count("Traceback") == 3 and "RuntimeError: a bug" in log
    never = [*secrets_in_play(), typed, browser.cookies["sessionid"].value]
    for response in responses:
        assert "Traceback" not in response.content.decode() and "a bug" not in response.content.decode()
        assert_no_secret(response.content.decode(), never, response.request["PATH_INFO"])
    assert_no_secret(log, never, "the log")


def test_prometheus_credentials_stay_off_the_overview(world, settings):
    """The overview says where Prometheus did not answer, without the basic-auth password in its URL."""
    password = secrets.token_urlsafe(16)
    settings.PROMETHEUS_URL = f"http://tidal:{password}@127.0.0.1:9"  # port 9: nobody listens
    browser = Client()
    browser.force_login(world.users["operator"])
    html = browser.get("/ops/").content.decode()
    assert "Prometheus at http://127.0.0.1:9 did not answer" in html and password not in html
