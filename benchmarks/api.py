"""`bench api`: the REST API under load — Locust's users against gunicorn and PostgreSQL, on 127.0.0.1 only.

Like `bench console` it builds its own throwaway database (Django's test database next to the configured one,
named `test_<db>_bench_api` so that it never meets a test run's, migrated, seeded, dropped at the end), so it runs
on a fresh clone and never touches real data. gunicorn serves it with production settings (DEBUG off, a throwaway
secret key, plain HTTP, throttles raised so that the test measures the API rather than the rate limits); the users
(benchmarks/locustfile.py) run in a separate gevent process, whose CPU share of the same machine is reported."""
from __future__ import annotations

import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, connections
from django.test.utils import setup_databases, teardown_databases
from django.utils import timezone

from benchmarks.machine import reference_ms
from tidal import gunicorn as web

GOALS_P99_MS = {"jobs: list mine": 100, "jobs: list filtered": 100, "jobs: submit": 200}
RAISED_RATE = "1000000/min"  # TIDAL_SUBMIT_RATE and TIDAL_SIGN_IN_RATE while the test runs
GPU_MODELS = {"T4": 16, "A10": 24, "V100": 32, "A100": 80}
FRAMEWORKS = {("pytorch", "2.1"): ("T4", "A10", "V100", "A100"), ("pytorch", "1.13"): ("T4", "V100"),
              ("tensorflow", "2.14"): ("T4", "V100", "A100"), ("jax", "0.4"): ("A100",)}
NAME_PARTS = ("resnet50", "bert-large", "gpt2-ft", "vit-b16", "wav2vec", "ranker", "yolo", "t5-small")
STATUSES = {"pending": 0.25, "admitted": 0.03, "running": 0.17, "succeeded": 0.45, "failed": 0.05, "cancelled": 0.05}


@dataclass(frozen=True)
class LoadOptions:
    users: int = 100
    duration_s: float = 60
    workers: int = web.workers  # as Tidal's web processes run (tidal/gunicorn.py) unless told otherwise
    threads: int = web.threads  # 1: sync workers
    jobs: int = 5000
    departments: int = 40
    wait_s: float = 2.0  # each user waits 0.5–1.5 × this between two requests
    settle_s: float = 5.0  # counted from this long after every user runs (their first requests open connections)
    spawn_rate: float = 50
    seed: int = 7


@dataclass(frozen=True)
class KindFigures:
    kind: str
    count: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    rps: float

    @property
    def goal_ms(self) -> int | None:
        return GOALS_P99_MS.get(self.kind)

    @property
    def goal_met(self) -> bool | None:
        return None if self.goal_ms is None else self.p99_ms < self.goal_ms and self.errors == 0


@dataclass(frozen=True)
class LoadReport:
    options: LoadOptions
    duration_s: float
    locust_cpu_pct: float
    kinds: list[KindFigures]
    gunicorn_cpu_ms: float  # CPU per request, on average over every kind
    postgres_cpu_ms: float
    reference_ms: float  # this machine's speed just before the run (`reference_ms()`)
    errors: list[dict] = field(default_factory=list)
    settling: dict = field(default_factory=dict)  # the start-up before the figures: count, errors, p99_ms, max_ms

    @property
    def goals_met(self) -> bool:
        return not self.errors and all(k.goal_met is not False for k in self.kinds)

    def figures(self) -> dict:
        o = self.options
        figures: dict = {"users": o.users, "duration_s": round(self.duration_s, 1), "workers": o.workers,
                         "threads": o.threads, "jobs": o.jobs, "departments": o.departments, "wait_s": o.wait_s,
                         "settle_s": o.settle_s, **{f"settling_{k}": v for k, v in self.settling.items()},
                         "locust_cpu_pct": self.locust_cpu_pct, "gunicorn_cpu_ms_per_request": self.gunicorn_cpu_ms,
                         "postgres_cpu_ms_per_request": self.postgres_cpu_ms, "reference_ms": self.reference_ms}
        for k in self.kinds:
            slug = k.kind.replace("jobs: ", "jobs_").replace("departments: ", "department_").replace(" ", "_")
            figures |= {f"{slug}_{name}": getattr(k, name)
                        for name in ("count", "errors", "p50_ms", "p95_ms", "p99_ms", "max_ms", "rps")}
        exceptions = sum(e["count"] for e in self.errors if e["kind"] == "locust")  # a user's task that raised
        return figures | {"errors": sum(k.errors for k in self.kinds) + exceptions, "goals_met": self.goals_met}


def bench_api(options: LoadOptions, *, progress: Callable[[dict], None] = lambda _event: None) -> LoadReport:
    """Seed a throwaway database, serve it with gunicorn, run Locust's users for `duration_s` once all run."""
    if connection.vendor != "postgresql":
        raise RuntimeError("bench api needs PostgreSQL: set DATABASE_URL (eval \"$(bash platform/stack.sh env)\")")
    connection.settings_dict["TEST"]["NAME"] = f"test_{connection.settings_dict['NAME']}_bench_api"
    old = setup_databases(verbosity=0, interactive=False)
    try:
        plan = _seed(options, random.Random(options.seed))
        with connection.cursor() as cursor:  # statistics, as a database in service has; fresh tables have none
            cursor.execute("ANALYZE")
        connections.close_all()  # gunicorn's workers open their own
        reference = reference_ms()
        with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp, _gunicorn(options, Path(tmp)) as (host, pid):
            meter = ServerCpu(gunicorn_pid=pid, database=connection.settings_dict["NAME"])

            def observe(event: dict) -> None:
                {"spawned": meter.start, "tick": meter.sample, "done": meter.sample}[event["event"]]()
                progress(event)

            done = _locust(plan | {"host": host}, Path(tmp), observe)
    finally:
        connections.close_all()
        teardown_databases(old, verbosity=0)
    return _report(options, done, meter.used, reference)


@dataclass
class ServerCpu:
    """CPU seconds the server side used while the figures were counted: gunicorn's processes and PostgreSQL's
    backends of the throwaway database, read from /proc every second (backends come and go: CONN_MAX_AGE) — so for
    a PostgreSQL on this machine, as here; another host's reads 0. Unlike latencies, the cost per request hardly
    depends on what else the machine runs."""

    gunicorn_pid: int
    database: str
    _first: dict[tuple[str, int], float] = field(default_factory=dict)
    _last: dict[tuple[str, int], float] = field(default_factory=dict)

    def start(self) -> None:
        self._first = self._read()
        self._last = dict(self._first)

    def sample(self) -> None:
        self._last |= self._read()

    @property
    def used(self) -> tuple[float, float]:
        """gunicorn's and PostgreSQL's CPU seconds since `start`."""
        spent = {"gunicorn": 0.0, "postgres": 0.0}
        for (side, pid), cpu in self._last.items():
            spent[side] += cpu - self._first.get((side, pid), 0.0)
        return spent["gunicorn"], spent["postgres"]

    def _read(self) -> dict[tuple[str, int], float]:
        children = Path(f"/proc/{self.gunicorn_pid}/task/{self.gunicorn_pid}/children")
        workers = [self.gunicorn_pid, *map(int, children.read_text().split())] if children.exists() else []
        backends = []
        host = connection.settings_dict["HOST"]
        if host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/"):  # its pids are this machine's
            with connection.cursor() as cursor:
                cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                               [self.database])
                backends = [pid for pid, in cursor.fetchall()]
        return ({("gunicorn", pid): cpu for pid, cpu in _cpu_s(workers).items()}
                | {("postgres", pid): cpu for pid, cpu in _cpu_s(backends).items()})


def _cpu_s(pids: list[int]) -> dict[int, float]:
    cpu = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone, or not on this machine
            continue
        cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, proc(5)
    return cpu


def _report(options: LoadOptions, done: dict, server_cpu: tuple[float, float], reference: float) -> LoadReport:
    duration = done["duration_s"]
    kinds = [KindFigures(kind=kind, rps=round(s["count"] / duration, 1), **s) for kind, s in done["stats"].items()]
    errors = done["errors"] + [{"kind": "locust", "error": e, "count": 1} for e in done["exceptions"]]
    requests = max(1, sum(k.count for k in kinds))
    return LoadReport(options=options, duration_s=duration, kinds=kinds, errors=errors, settling=done["settling"],
                      locust_cpu_pct=round(100 * done["cpu_s"] / duration, 1),
                      gunicorn_cpu_ms=round(1000 * server_cpu[0] / requests, 2),
                      postgres_cpu_ms=round(1000 * server_cpu[1] / requests, 2), reference_ms=reference)


def render(report: LoadReport) -> Iterator[object]:
    """What the command prints: how it ran, then one row per request kind (rich renderables and strings)."""
    from rich.table import Table

    o = report.options
    kind = f"gthread workers × {o.threads} threads" if o.threads > 1 else "sync workers"
    yield (f"{o.users} users (each waits {0.5 * o.wait_s:g}–{1.5 * o.wait_s:g} s between requests) for "
           f"{report.duration_s:.0f} s from {o.settle_s:g} s after all were running, against gunicorn ({o.workers} {kind}) "
           f"with production settings (DEBUG off) and PostgreSQL on 127.0.0.1; {o.jobs:,} jobs, {o.departments} "
           "departments.")
    yield (f"Throttles raised for the test (TIDAL_SUBMIT_RATE = TIDAL_SIGN_IN_RATE = {RAISED_RATE}). Locust ran in "
           f"its own gevent process (FastHttpUser) on the same 2 cores and used {report.locust_cpu_pct:.0f}% of one.")
    table = Table(title="API under load (Locust's percentiles, ms)")
    for column in ("request", "count", "errors", "p50", "p95", "p99", "max", "req/s", "goal"):
        table.add_column(column, justify="left" if column in ("request", "goal") else "right")
    for k in report.kinds:
        goal = "" if k.goal_ms is None else f"p99 < {k.goal_ms}: {'met' if k.goal_met else 'MISSED'}"
        table.add_row(k.kind, f"{k.count:,}", str(k.errors), *(f"{v:g}" for v in (k.p50_ms, k.p95_ms, k.p99_ms)),
                      f"{k.max_ms:g}", f"{k.rps:.1f}", goal)
    yield table
    per_request = report.gunicorn_cpu_ms + report.postgres_cpu_ms
    yield (f"CPU per request, all kinds: gunicorn {report.gunicorn_cpu_ms:.1f} ms, PostgreSQL "
           f"{report.postgres_cpu_ms:.1f} ms (2 idle cores would serve about {2000 / max(0.1, per_request):.0f} "
           f"requests/s); the latencies above depend on what else the machine runs. This machine's speed just before "
           f"the run: {report.reference_ms:.1f} ms of reference work (the lower, the faster; to compare runs).")
    s = report.settling
    yield (f"Before the figures (users starting, then {o.settle_s:g} s): {s['count']:,} requests, {s['errors']} errors, "
           f"p99 {s['p99_ms']:g} ms, max {s['max_ms']:g} ms.")
    for error in report.errors[:10]:
        yield f"error: {error['kind']}: {error['error']} ×{error['count']}"
    yield f"goals (list p99 < 100 ms, submit p99 < 200 ms, zero errors): {'met' if report.goals_met else 'MISSED'}"


@contextmanager
def _gunicorn(options: LoadOptions, tmp: Path) -> Iterator[tuple[str, int]]:
    db = connection.settings_dict
    auth = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    env = {**os.environ, "DATABASE_URL": f"postgres://{auth}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
           "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "TIDAL_HTTPS": "0",
           "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "TIDAL_SUBMIT_RATE": RAISED_RATE, "TIDAL_SIGN_IN_RATE": RAISED_RATE,
           # its own throttle counters, apart from a Tidal running beside it
           "TIDAL_REDIS_NAMESPACE": f"{settings.TIDAL_REDIS_NAMESPACE}-bench-api"}
    port = _free_port()
    workers = ["-w", str(options.workers), "-k", "gthread" if options.threads > 1 else "sync",
               "--threads", str(options.threads)]
    log_path = tmp / "gunicorn.log"
    with open(log_path, "w") as log:  # a pipe nobody reads would fill up and stall the workers
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "tidal.wsgi", "-c", "python:tidal.gunicorn",
                                   "-b", f"127.0.0.1:{port}", *workers],
                                  cwd=settings.BASE_DIR, env=env, stdout=log, stderr=subprocess.STDOUT)
    host = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(f"{host}/readyz", server, log_path)
        yield host, server.pid
    finally:
        server.terminate()
        server.wait(timeout=60)


def _wait_ready(url: str, server: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited ({server.returncode}):\n{log_path.read_text()[-4000:]}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer {url} within 60 s:\n{log_path.read_text()[-4000:]}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _locust(plan: dict, tmp: Path, progress: Callable[[dict], None]) -> dict:
    (tmp / "plan.json").write_text(json.dumps(plan))
    with open(tmp / "locust.log", "w") as log:
        users = subprocess.Popen([sys.executable, "-m", "benchmarks.locustfile", str(tmp / "plan.json")],
                                 cwd=settings.BASE_DIR, stdout=subprocess.PIPE, stderr=log, text=True)
        done = None
        for line in users.stdout:
            event = json.loads(line)
            progress(event)
            done = event if event["event"] == "done" else done
        users.wait()
    if users.returncode != 0 or done is None:
        raise RuntimeError(f"Locust exited ({users.returncode}):\n{(tmp / 'locust.log').read_text()[-4000:]}")
    return done


def _seed(options: LoadOptions, rng: random.Random) -> dict:
    """A cluster's worth of rows; returns the plan Locust's users follow (who they are, what they may read)."""
    from colocation.models import Node, NodeState, ResourceGroup
    from rest_framework.authtoken.models import Token

    from core.models import Department, GPUModel, Membership
    from scheduler.models import Framework, Quota

    models = {name: GPUModel.objects.create(name=name, memory_gib=gib) for name, gib in GPU_MODELS.items()}
    for (name, version), on in FRAMEWORKS.items():
        Framework.objects.create(name=name, version=version).certified_on.set([models[m] for m in on])
    nodes = []
    for name, model in models.items():
        group = ResourceGroup.objects.create(name=name.lower(), hardware_class=name, gpu_model=model)
        nodes += Node.objects.bulk_create(
            Node(name=f"{name.lower()}-{i:03d}", resource_group=group, gpu_model=model, gpu_count=8, cpu_milli=96000,
                 memory_mib=786432, state=rng.choice([NodeState.OFFLINE_NORMAL, NodeState.ONLINE_NORMAL]))
            for i in range(50))
    depts = Department.objects.bulk_create(Department(name=f"dept-{i:02d}") for i in range(options.departments))
    Quota.objects.bulk_create(q for d in depts for q in (
        Quota(department=d, resource_kind="gpu", gpu_model=models[rng.choice(list(models))], own=16, borrowed=8),
        Quota(department=d, resource_kind="cpu", own=512000, borrowed=128000),
        Quota(department=d, resource_kind="memory", own=4194304, borrowed=1048576)))
    users = get_user_model().objects.bulk_create(get_user_model()(username=f"user-{i:03d}")
                                                 for i in range(max(options.users, options.departments)))
    tokens = Token.objects.bulk_create(Token(user=u, key=Token.generate_key()) for u in users)
    member_of = {u.pk: [depts[i % len(depts)]] for i, u in enumerate(users)}  # every department has members
    for u in users:  # members of several departments: 50% one, 30% two, 20% three
        extra = rng.choices([0, 1, 2], [0.5, 0.3, 0.2])[0]
        member_of[u.pk] += [d for d in rng.sample(depts, min(extra, len(depts))) if d not in member_of[u.pk]]
    Membership.objects.bulk_create(Membership(user=u, department=d, role="admin" if rng.random() < 0.2 else "member")
                                   for u in users for d in member_of[u.pk])
    jobs_of = _jobs(options, rng, users=users, member_of=member_of, models=models, nodes=nodes)
    identities = []
    for user, token in zip(users[:options.users], tokens):
        readable = [job for d in member_of[user.pk] for job in jobs_of.get(d.pk, [])]
        identities.append({"username": user.username, "token": token.key,
                           "departments": [{"id": d.pk, "name": d.name} for d in member_of[user.pk]],
                           "jobs": rng.sample(readable, min(50, len(readable)))})
    certified = [(f"{name}-{version}", m) for (name, version), on in FRAMEWORKS.items() for m in on]
    return {"users": options.users, "duration_s": options.duration_s, "settle_s": options.settle_s,
            "spawn_rate": options.spawn_rate, "wait_s": [0.5 * options.wait_s, 1.5 * options.wait_s], "identities": identities,
            "gpu_models": list(GPU_MODELS), "certified": certified, "name_parts": list(NAME_PARTS)}


def _jobs(options: LoadOptions, rng: random.Random, *, users, member_of, models, nodes) -> dict[int, list[int]]:
    """Jobs over the last two weeks, with runs and decisions; returns their ids by department."""
    from core.models import Decision
    from scheduler.models import Framework, JobRun, TrainingJob

    members: dict[int, list] = {}
    for u in users:
        for d in member_of[u.pk]:
            members.setdefault(d.pk, []).append((u, d))
    frameworks = list(Framework.objects.prefetch_related("certified_on"))
    now = timezone.now()
    rows = []
    for i in range(options.jobs):
        user, dept = rng.choice(members[rng.choice(list(members))])
        status = rng.choices(list(STATUSES), list(STATUSES.values()))[0]
        framework = rng.choice(frameworks)
        model = rng.choice(list(framework.certified_on.all()))
        submitted = now - timedelta(days=14) * (options.jobs - i) / options.jobs
        holding = status in ("admitted", "running")
        started = status not in ("pending", "admitted")
        gpus = Decimal(rng.choice(["0.5", "1", "2", "4"]))
        rows.append(TrainingJob(
            name=f"{rng.choice(NAME_PARTS)}-{i}", task_key=f"{dept.name}/task-{i % 300}", department=dept,
            submitter=user, image="registry.local/train:3", command="python train.py", framework=framework,
            gpu_model=model, gpus=gpus, cpu_milli=8000, memory_mib=32768, status=status,
            queue_position=i + 1 if status == "pending" else None,
            pending_reason="quota-exhausted" if status == "pending" else "",
            score={"base": 1000000, "utilization": 0, "aging": 3, "total": 1000003} if status == "pending" else {},
            quota_kind="own" if holding else "", assigned_gpu_model=model if holding else None,
            alloc_gpus=gpus if holding else None, node=rng.choice(nodes) if status == "running" else None,
            submitted_at=submitted, admitted_at=submitted + timedelta(minutes=5) if holding or started else None,
            started_at=submitted + timedelta(minutes=6) if status == "running" or started else None,
            finished_at=submitted + timedelta(hours=3) if status in ("succeeded", "failed", "cancelled") else None))
    created = TrainingJob.objects.bulk_create(rows, batch_size=2000)
    TrainingJob.objects.bulk_update(created, ["submitted_at"], batch_size=1000)  # bulk_create stamps "now"
    JobRun.objects.bulk_create(
        (JobRun(job=j, attempt=1, node=j.node or rng.choice(nodes), gpu_model=j.gpu_model, pod=f"job-{j.pk}-1",
                started_at=j.started_at, ended_at=j.finished_at, outcome=j.status)
         for j in created if j.started_at), batch_size=2000)
    Decision.objects.bulk_create((Decision(kind=kind, subject=f"job:{j.pk}", department=j.department, reason=reason,
                                           message=f"{kind}: {reason}")
                                  for j in created for kind, reason in (("pending", "submitted"),
                                                                        ("pending", "quota-exhausted"))),
                                 batch_size=4000)
    jobs_of: dict[int, list[int]] = {}
    for j in created:
        jobs_of.setdefault(j.department_id, []).append(j.pk)
    return jobs_of
