"""`bench streaming` on a fresh clone: its profile sink starts without DJANGO_SECRET_KEY (it runs with DEBUG off,
which refuses the public development key), and a sink that dies fails the bench at once with its log, not after
the 10-minute wait for rows. The bench's figures are printed by the command, never asserted here."""
import subprocess
import sys
import time
import uuid

import pytest

from benchmarks.streaming import check_alive, sink_log, start_sink


@pytest.fixture
def run_dir(settings, tmp_path):
    settings.RUN_DIR = tmp_path
    return tmp_path


def test_the_bench_sink_starts_without_a_secret_key(monkeypatch, run_dir):
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    sink = start_sink(f"test-bench-{uuid.uuid4().hex[:8]}")  # topics nobody writes: it reads nothing
    try:
        deadline = time.monotonic() + 60
        while "profile sink: group" not in sink_log().read_text() and time.monotonic() < deadline:
            check_alive(sink)  # was: RuntimeError "DJANGO_DEBUG=0 needs DJANGO_SECRET_KEY" at import
            time.sleep(0.2)
        check_alive(sink)
        assert "profile sink: group" in sink_log().read_text()
    finally:
        sink.terminate()
        sink.wait(timeout=30)


def test_a_sink_that_exited_fails_the_bench_with_its_log(run_dir):
    sink_log().parent.mkdir(parents=True)
    with open(sink_log(), "wb") as out:
        dead = subprocess.Popen([sys.executable, "-c", "import sys; print('sink broke'); sys.exit(3)"], stdout=out)
    dead.wait(timeout=30)
    with pytest.raises(RuntimeError, match=r"exited \(3\)[\s\S]*sink broke"):
        check_alive(dead)
