"""Production settings pass Django's deployment checks; sign-in and submissions are throttled."""
import os
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from scheduler.models import TrainingJob
from tidal.throttling import SignInThrottle, SubmitThrottle

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


def test_console_sign_in_is_throttled_too(monkeypatch, person):
    monkeypatch.setattr(SignInThrottle, "rate", "3/min", raising=False)
    browser = Client()
    for _ in range(3):
        assert browser.post("/login/", {"username": person, "password": "wrong"}).status_code == 200
    response = browser.post("/login/", {"username": person, "password": "right-password"})
    assert response.status_code == 429 and "Too many sign-in attempts" in response.content.decode()
    assert "_auth_user_id" not in browser.session  # even the right password waits


def test_job_submissions_are_throttled_per_user(monkeypatch, world):
    monkeypatch.setattr(SubmitThrottle, "rate", "2/min", raising=False)
    api = world.client("member")
    statuses = [api.post("/api/jobs/", world.job_payload(name=f"j{i}"), format="json").status_code for i in range(3)]
    assert statuses == [201, 201, 429] and TrainingJob.objects.count() == 2
    assert world.client("dept_admin").post("/api/jobs/", world.job_payload(), format="json").status_code == 201
