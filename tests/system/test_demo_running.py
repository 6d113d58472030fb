"""The demo as a newcomer meets it (issue 22): `manage.py up` — what `make run` runs — with its web server, Celery
worker and beat, and the whole profile pipeline (exporter, publisher, Flink, sink), on a fast demo clock (one demo
day in three real minutes), until three complete minutes of service load have left the pipeline (about four
minutes); then Ctrl-C stops everything it started. Under the whole suite the demo starts with the session and runs
beside the other tests while its load builds up (tests/system/conftest.py); these tests come after them.

What it must show, asserted on behaviour and never on timings:
- every control loop acted on at least 90 % of its ticks (the worker's log, and /metrics' tidal_loop_ticks_total);
- jobs were admitted, and every pending job that has seen a scheduling cycle says why it waits;
- the LLM service's groups are placed whole, become ready and are autoscaled;
- the demo services' load profiles follow the demo's traffic: each complete minute's QPS is the traffic's mean over
  that minute, the minutes rise and fall with the demo day, and the GPU work covers what the requests cost;
- every console page renders for each demo user, with no template syntax in what it sends.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter
from datetime import datetime, timezone
from http.cookiejar import CookieJar
from pathlib import Path
from statistics import mean

import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis

from cluster.simulated.traffic import DemoClock
from colocation.loads import DEMO_KEY, demo_traffic
from demo.data import DEMO_PASSWORD, LLM_SERVICE, OPERATOR, demo_load
from tests.integration.console_pages import assert_no_template_syntax

# All of them, so that pytest-django's ordering (database tests first) keeps the module's tests together and the
# demo runs once.
pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
DAY_S = 180  # one demo day in three real minutes: a real minute is eight demo hours
LOOPS = {"scheduler.tick": "scheduler", "colocation.lending_tick": "lending", "colocation.autoscale_tick": "autoscaler"}
CHILDREN = ("web", "worker", "beat", "exporter", "publisher", "flink", "sink")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Demo:
    """`manage.py up` on a database, Redis namespace, topics and ports of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.port = folder, _free_port()
        self.started = time.monotonic()
        self.base = f"http://127.0.0.1:{self.port}"
        self.namespace = f"test-demo-{self.port}"
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{folder / 'demo.sqlite3'}", "TIDAL_RUN_DIR": str(folder),
               "TIDAL_REDIS_NAMESPACE": self.namespace, "TIDAL_TOPIC_PREFIX": self.namespace,
               "TIDAL_EXPORTER_PORT": str(_free_port()), "TIDAL_DEMO_DAY_S": str(DAY_S), "PYTHONUNBUFFERED": "1",
               # rows leave the pipeline ~1.5 min after their minute instead of ~3.5 (the publisher's batches
               # span 5 s, well inside the lateness bound)
               "TIDAL_PROFILE_LATENESS_S": "20", "TIDAL_PUBLISHER_INTERVAL_S": "5"}
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "up", "--port", str(self.port), "--exit-after", "3600"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            # started the way `make run &` is: with SIGINT ignored; up must still stop on it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))

    def wait_up(self, timeout: float = 180) -> None:
        """Until the web server answers (up gives it 120 s: a busy machine boots everything at once)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, self.process.stdout.read()
            try:
                urllib.request.urlopen(f"{self.base}/api/schema/", timeout=15)
                return
            except OSError:
                assert time.monotonic() < deadline, "up did not answer"
                time.sleep(0.5)

    def wait_for_load(self, minutes: int, least_s: float = 150, most_s: float = 420) -> None:
        """Until every demo service has `minutes` rows of load with a rate (the first of them partial), `least_s`
        after the demo started at least; `most_s` more at most."""
        deadline = time.monotonic() + most_s
        while time.monotonic() < deadline:
            with self.db() as db:
                counts = [n for (n,) in db.execute(
                    "SELECT COUNT(qps) FROM profiling_serviceminute GROUP BY service_id")]
            if time.monotonic() - self.started >= least_s and len(counts) >= 3 and min(counts) >= minutes:
                return
            time.sleep(5)

    def stop(self) -> str:
        """Ctrl-C; what up printed. Fails if it does not stop within a minute."""
        self.process.send_signal(signal.SIGINT)
        try:
            output, _ = self.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.terminate()  # SIGTERM: up still stops its children (SIGKILL would orphan them)
            output, _ = self.process.communicate(timeout=60)
            pytest.fail(f"up did not stop within 60 s of Ctrl-C:\n{output}")
        return output

    def forget(self) -> None:
        """Its Redis keys gone (after it stopped)."""
        redis = Redis.from_url(settings.REDIS_URL)
        for key in redis.scan_iter(f"{self.namespace}:*"):
            redis.delete(key)

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(f"file:{self.folder / 'demo.sqlite3'}?mode=ro", uri=True, timeout=30)

    def log(self, name: str) -> str:
        return (self.folder / "logs" / f"{name}.log").read_text(errors="replace")

    def signed_in(self, username: str, password: str) -> urllib.request.OpenerDirector:
        return signed_in(self.base, username, password)


def signed_in(base: str, username: str, password: str) -> urllib.request.OpenerDirector:
    """A browser signed in through the console's form (CSRF token and cookie as a browser sends them)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    page = opener.open(f"{base}/login/").read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token})
    landed = opener.open(f"{base}/login/", data=form.encode())
    assert not landed.url.endswith("/login/"), f"{username} could not sign in"
    return opener


_EARLY: list[Demo] = []  # the demo started with the session


def start_early() -> None:
    """Start the demo now, for these tests to find it running when their turn comes (tests/system/conftest.py)."""
    _EARLY.append(Demo(Path(tempfile.mkdtemp(prefix="tidal-demo-"))))


def stop_early() -> None:
    """At the end of the session: a demo started early whose tests never ran (deselected, or the run stopped)."""
    while _EARLY:
        up = _EARLY.pop()
        if up.process.poll() is None:
            up.stop()
        up.forget()
        shutil.rmtree(up.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo once three complete minutes of service load left the pipeline, and what `up` printed when Ctrl-C
    stopped it."""
    early = _EARLY.pop() if _EARLY else None
    up = early or Demo(tmp_path_factory.mktemp("demo"))
    try:
        up.wait_up()
        up.wait_for_load(minutes=4)
        up.metrics = urllib.request.urlopen(f"{up.base}/metrics").read().decode()
        up.pages = {user: _render_pages(up, user, password) for user, password in
                    [OPERATOR, *((name, DEMO_PASSWORD) for name in ("alice", "bob", "carol"))]}
        up.clock = Redis.from_url(settings.REDIS_URL).get(f"{up.namespace}:{DEMO_KEY}:clock")
    finally:
        up.output = up.stop()
        up.forget()
    yield up
    if early:
        shutil.rmtree(up.folder, ignore_errors=True)


def test_ctrl_c_stops_everything_up_started(demo):
    assert demo.process.returncode == 0, demo.output
    assert "Tidal is up" in demo.output and "DEBUG is on" not in demo.output  # the demo serves with DEBUG off
    for child in CHILDREN:
        assert f"stopped {child}" in demo.output
    flink = demo.log("flink")  # its job cancelled through a JVM still there: no traceback on the way out
    assert "profile job cancelled" in flink and "Traceback" not in flink, flink[-3000:]
    worker = demo.log("worker")  # a warm shutdown: the tasks running then end, none is killed mid-way
    assert "Warm shutdown" in worker and "WorkerLostError" not in worker, worker[-3000:]


def test_every_loop_acts_on_at_least_nine_ticks_in_ten(demo):
    ticks, skipped = Counter(), Counter()
    for task, result in re.findall(r"Task ([a-z_.]+)\[[^\]]+\] (?:succeeded in [0-9.e-]+s: (\S+)|raised)", demo.log("worker")):
        if task in LOOPS:
            ticks[task] += 1
            skipped[task] += result in ("None", "")
    assert set(ticks) == set(LOOPS), ticks
    for task, n in ticks.items():
        assert n >= 10 and skipped[task] <= 0.1 * n, f"{task}: {skipped[task]} of {n} ticks did not act"
    counted = {(s.labels["loop"], s.labels["outcome"]): s.value for family in
               text_string_to_metric_families(demo.metrics) if family.name == "tidal_loop_ticks" for s in family.samples}
    for loop in LOOPS.values():
        total = sum(v for (name, _), v in counted.items() if name == loop)
        assert total >= 10 and counted.get((loop, "acted"), 0) >= 0.9 * total, counted


def test_jobs_are_admitted_and_every_pending_job_says_why(demo):
    last_cycle = _last_acting_scheduler_tick(demo.log("worker")).replace(tzinfo=None).isoformat(" ")
    with demo.db() as db:
        statuses = dict(db.execute("SELECT status, COUNT(*) FROM scheduler_trainingjob GROUP BY status").fetchall())
        # Submitted before the last cycle that acted, and not put back in the queue since (a take-back or a
        # preemption records a decision as it requeues): the cycle ranked it and said why it waits.
        silent = db.execute(
            "SELECT id FROM scheduler_trainingjob j WHERE status = 'pending' AND pending_reason = '' "
            "AND submitted_at < ? AND NOT EXISTS (SELECT 1 FROM core_decision d WHERE d.subject = "
            "'job:' || j.id AND d.created_at >= ?)", (last_cycle, last_cycle)).fetchall()
    assert statuses.get("running", 0) + statuses.get("succeeded", 0) > 50, statuses
    assert not silent, f"{len(silent)} pending jobs submitted before the last scheduling cycle have no reason"


def _last_acting_scheduler_tick(log: str) -> datetime:
    """When the last scheduler tick that acted was received (the worker logs in UTC, the demo's time zone)."""
    received = dict((task_id, stamp) for stamp, task_id in re.findall(
        r"\[([0-9-]+ [0-9:,]+): INFO/[^\]]+\] Task scheduler\.tick\[([^\]]+)\] received", log))
    acted = re.findall(r"Task scheduler\.tick\[([^\]]+)\] succeeded in [0-9.e-]+s: \{", log)
    return datetime.strptime(received[acted[-1]], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)


def test_service_loads_follow_the_demo_traffic(demo):
    clock = DemoClock(*json.loads(demo.clock))
    demo_load(traces_dir=Path(settings.TRACES_DIR))  # the same services in the test's database: the same traffic
    traffic = demo_traffic(clock=clock)
    with demo.db() as db:
        rows = db.execute("SELECT s.name, m.minute, m.qps, m.gpu_util_mean, m.replicas, m.samples "
                          "FROM profiling_serviceminute m JOIN colocation_inferenceservice s ON s.id = m.service_id "
                          "ORDER BY s.name, m.minute").fetchall()
    per_service: dict[str, list] = {}
    for name, minute, qps, gpu, replicas, samples in rows:
        per_service.setdefault(name, []).append((_epoch(minute), qps, gpu, replicas))
    assert set(per_service) == set(traffic.services), per_service.keys()
    for name, minutes in per_service.items():
        # A rate needs two scrapes: the minutes before the first with a QPS, and that one (its rate began with
        # the pods' second scrape, partway in), are not whole minutes of load.
        first = next((i for i, (_, qps, *_) in enumerate(minutes) if qps is not None), len(minutes))
        complete = minutes[first + 1:]
        assert len(complete) >= 3, f"{name}: {len(minutes)} minutes of load"
        expected = [mean(traffic.qps(name, clock.minute(clock.demo(start + s)) * 60) for s in range(60))
                    for start, *_ in complete]
        for (start, qps, gpu, replicas), want in zip(complete, expected, strict=True):
            assert qps == pytest.approx(want, rel=0.25), f"{name} at {start}: QPS {qps}, traffic {want}; {minutes}"
            # `replicas` counts every pod seen in the minute, more than served at once while the autoscaler
            # scales in: their GPU work, utilization x replicas, is at least what the minute's requests cost.
            work = traffic.model.per_qps * qps
            assert 0.5 * work <= gpu * replicas and gpu <= 1, f"{name} at {start}: GPU {gpu} x {replicas}, work {work}"
        assert max(expected) > 1.3 * min(expected), f"{name}: the demo day did not rise and fall: {expected}"


def test_the_llm_service_runs_whole_groups_that_become_ready_and_are_autoscaled(demo):
    """docs/concepts/demo-cluster.md#the-llm-service: its groups are placed whole, become ready after their start-up,
    and the autoscaler decides on the service itself (not only "still scaling" or "no metrics")."""
    with demo.db() as db:
        (service_id, size), = db.execute("SELECT id, group_size FROM colocation_inferenceservice WHERE name = ?",
                                         (LLM_SERVICE,)).fetchall()
        groups = db.execute("SELECT nodes, ready FROM colocation_servicegroup WHERE service_id = ?",
                            (service_id,)).fetchall()
        reasons = Counter(r for r, in db.execute("SELECT reason FROM core_decision WHERE subject = ?",
                                                 (f"service:{LLM_SERVICE}",)))
    placed = [json.loads(nodes) for nodes, _ in groups if json.loads(nodes)]
    assert placed and all(len(nodes) == size for nodes in placed), groups  # whole or not at all
    assert any(ready for _, ready in groups), groups
    assert reasons["group-placed"] >= 1 and not reasons["group-bind-refused"], reasons
    assert {"hold", "scale-in", "scale-out", "slo-scale-out"} & set(reasons), reasons
    ready = [s.value for family in text_string_to_metric_families(demo.metrics) if family.name == "tidal_service_groups"
             for s in family.samples if s.labels == {"service": LLM_SERVICE, "state": "ready"}]
    assert ready and ready[0] >= 1, ready


def _epoch(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


def _render_pages(demo: Demo, username: str, password: str) -> dict[str, tuple[int, str]]:
    """Every console page the user may open: {path: (status, the template syntax it shows or "")}."""
    browser = demo.signed_in(username, password)
    with demo.db() as db:
        jobs = [row[0] for row in db.execute(  # a pending and a running job of every department
            "SELECT MIN(id) FROM scheduler_trainingjob WHERE status IN ('pending', 'running') "
            "GROUP BY department_id, status")]
        departments = [row[0] for row in db.execute("SELECT name FROM core_department")]
        services = [row[0] for row in db.execute("SELECT name FROM colocation_inferenceservice")]
    paths = ["/jobs/", "/jobs/?scope=departments", "/jobs/new/", "/departments/", "/services/",
             *(f"/jobs/{pk}/" for pk in jobs), *(f"/departments/{name}/" for name in departments),
             *(f"/services/{name}/" for name in services)]
    if username == OPERATOR[0]:
        paths += ["/ops/", "/ops/nodes/", "/ops/quotas/", "/ops/autoscaling/", "/ops/decisions/", "/ops/replays/"]
    pages = {}
    for path in paths:
        try:
            response = browser.open(demo.base + path)
        except urllib.error.HTTPError as refused:  # another department's job, service or page: 404 or 403
            pages[path] = (refused.code, "")
            continue
        try:
            assert_no_template_syntax(response.read().decode(), f"{username} {path}")
            pages[path] = (response.status, "")
        except AssertionError as shown:
            pages[path] = (response.status, str(shown))
    return pages


def test_every_console_page_renders_for_every_demo_user(demo):
    for user, pages in demo.pages.items():
        statuses = {path: status for path, (status, _) in pages.items()}
        assert set(statuses.values()) <= {200, 403, 404}, (user, statuses)
        opened = [path for path, status in statuses.items() if status == 200]
        assert {"/jobs/", "/jobs/new/", "/services/"} <= set(opened), (user, statuses)
        assert any(path.startswith("/jobs/") and path[6:-1].isdigit() for path in opened), (user, statuses)
        assert not [shown for _, shown in pages.values() if shown], [shown for _, shown in pages.values() if shown]
    assert all(status == 200 for status, _ in demo.pages["operator"].values()), demo.pages["operator"]
