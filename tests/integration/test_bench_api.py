"""`bench api` at a tiny size, as a user runs it: it builds its own database, serves it with gunicorn (production
settings), runs Locust's users in their own process and drops the database; every request kind gets figures and
none fails. Its timings are printed by the command, never asserted here."""
import json
import os
import subprocess
import sys
from pathlib import Path

import dj_database_url
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("jobs_list_mine", "jobs_list_filtered", "jobs_detail", "jobs_submit", "department_usage")


def test_every_request_kind_is_measured_without_an_error(tmp_path, db):
    out = tmp_path / "api.json"
    result = subprocess.run(
        [sys.executable, "manage.py", "bench", "api", "--users", "5", "--duration", "5", "--settle", "1", "--wait", "0.05",
         "--jobs", "300", "--departments", "4", "--workers", "2", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    figures = json.loads(out.read_text())
    text = " ".join(result.stdout.split())  # rich wraps the sentences at 80 columns where its number widths fall
    assert figures["users"] == 5 and figures["jobs"] == 300
    for kind in KINDS:
        assert figures[f"{kind}_count"] > 0, kind
        assert figures[f"{kind}_errors"] == 0, kind
        assert 0 < figures[f"{kind}_p50_ms"] <= figures[f"{kind}_p99_ms"], kind
    assert figures["errors"] == 0
    assert figures["reference_ms"] > 0 and "ms of reference work" in text
    assert figures["settle_s"] == 1 and figures["settling_count"] > 0 and figures["settling_errors"] == 0
    assert "jobs: submit" in text and "Throttles raised for the test" in text
    assert "Before the figures (users starting, then 1 s)" in text

    throwaway = f"test_{dj_database_url.parse(os.environ['DATABASE_URL'])['NAME']}_bench_api"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [throwaway])
        assert cursor.fetchone() == (0,), f"{throwaway} was left behind"
