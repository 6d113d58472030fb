"""`make run` (manage.py up) runs the console as production does: DEBUG off, over plain HTTP on this machine, with a
secret key made once per install under .run/ (docs/reference/configuration.md)."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from demo.management.commands.up import demo_env

ROOT = Path(__file__).resolve().parents[2]
# Under the demo's settings: a missing page, a static file, and the 500 page (Django renders it without a request).
PAGES = """
import json
from django.conf import settings
from django.test import Client, RequestFactory
from core.api.errors import server_error
client = Client(raise_request_exception=False)
missing, css = client.get("/no-such-page/"), client.get("/static/frontend/console.css")
failed = server_error(RequestFactory().get("/jobs/"))
print(json.dumps({"debug": settings.DEBUG, "https": settings.SECURE_SSL_REDIRECT, "missing": missing.status_code,
                  "missing_page": missing.content.decode(), "css": css.status_code, "failed": failed.status_code,
                  "failed_page": failed.content.decode()}))
"""


def test_the_demo_runs_with_debug_off_and_a_key_of_its_own(tmp_path):
    env = demo_env({}, tmp_path)
    key = tmp_path / "secret-key"
    assert (env["DJANGO_DEBUG"], env["TIDAL_HTTPS"], env["DJANGO_SECRET_KEY"]) == ("0", "0", key.read_text())
    assert len(env["DJANGO_SECRET_KEY"]) >= 50 and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert demo_env({}, tmp_path)["DJANGO_SECRET_KEY"] == env["DJANGO_SECRET_KEY"]  # kept across restarts
    assert demo_env({}, tmp_path / "other")["DJANGO_SECRET_KEY"] != env["DJANGO_SECRET_KEY"]  # one per install
    asked = demo_env({"DJANGO_DEBUG": "1", "DJANGO_SECRET_KEY": "given"}, tmp_path / "debug")
    assert (asked["DJANGO_DEBUG"], asked["DJANGO_SECRET_KEY"]) == ("1", "given") and not (tmp_path / "debug").exists()


def test_a_404_under_the_demos_settings_lists_no_url_patterns(tmp_path):
    base = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_") and k != "TIDAL_HTTPS"}
    env = demo_env({**base, "TIDAL_RUN_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"},
                   tmp_path)
    run = [sys.executable, "manage.py"]
    subprocess.run(run + ["collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    out = subprocess.run(run + ["shell", "-c", PAGES], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pages = json.loads(out.stdout.strip().splitlines()[-1])
    assert (pages["debug"], pages["https"], pages["missing"], pages["css"], pages["failed"]) == \
        (False, False, 404, 200, 500)
    missing = pages["missing_page"]
    assert "Page not found" in missing and "/no-such-page/" in missing
    assert 'href="/static/frontend/console.css"' in missing  # the console's look
    for debug_only in ("URLconf", "URL patterns", "tidal.urls", "healthz", "[name="):  # Django's technical 404's
        assert debug_only not in missing
    assert "Something went wrong" in pages["failed_page"] and "Traceback" not in pages["failed_page"]
