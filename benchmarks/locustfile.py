"""The API's users for `bench api` (benchmarks/api.py), run headless by Locust as a library.

`python -m benchmarks.locustfile PLAN.json` runs in a process of its own: Locust monkey-patches the standard library
for gevent, which the Django process that seeds the database must not be, and its CPU is then its own (the machine
is shared with gunicorn and PostgreSQL; the parent reports what this process used). No Django here: the plan file
says who the users are (tokens, departments, jobs they may read). It writes JSON lines on stdout: `spawned`, one
`tick` a second, then `done` with Locust's figures per request kind, counted from `settle_s` after every user runs.
"""
from locust import FastHttpUser, between, task  # first: it patches the standard library for gevent
from locust.env import Environment

import itertools
import json
import random
import resource
import sys
import time
from datetime import datetime, timedelta, timezone

import gevent

KINDS = ("jobs: list mine", "jobs: list filtered", "jobs: detail", "jobs: submit", "departments: usage")


class ApiUser(FastHttpUser):
    """One person or script on the API with a token, a member of one or more departments."""

    plan: dict = {}
    identities: itertools.cycle

    def on_start(self) -> None:
        self.me = next(self.identities)
        self.headers = {"Authorization": f"Token {self.me['token']}"}
        self.rng = random.Random(self.me["username"])

    def _get(self, path: str, kind: str) -> None:
        self.client.get(path, name=kind, headers=self.headers)

    @task(4)
    def list_mine(self) -> None:
        self._get(f"/api/jobs/?submitter={self.me['username']}", "jobs: list mine")

    @task(3)
    def list_filtered(self) -> None:
        department = self.rng.choice(self.me["departments"])["name"]
        since = (datetime.now(timezone.utc) - timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        query = self.rng.choice([
            f"department={department}&status=pending&status=running",
            f"department={department}&gpu_model={self.rng.choice(self.plan['gpu_models'])}&ordering=-submitted_at",
            f"status=succeeded&submitted_after={since}&limit=20",
            f"name={self.rng.choice(self.plan['name_parts'])}&ordering=status",
        ])
        self._get(f"/api/jobs/?{query}", "jobs: list filtered")

    @task(3)
    def detail(self) -> None:
        self._get(f"/api/jobs/{self.rng.choice(self.me['jobs'])}/", "jobs: detail")

    @task(1)
    def submit(self) -> None:
        framework, gpu_model = self.rng.choice(self.plan["certified"])
        body = {"name": f"{self.rng.choice(self.plan['name_parts'])}-{self.rng.randrange(10**6)}",
                "department": self.rng.choice(self.me["departments"])["name"], "image": "registry.local/train:3",
                "command": "python train.py --epochs 10", "framework": framework, "gpu_model": gpu_model,
                "gpus": self.rng.choice(["0.5", "1", "2", "4"]), "cpu_milli": 8000, "memory_mib": 32768}
        self.client.post("/api/jobs/", json=body, name="jobs: submit", headers=self.headers)

    @task(1)
    def usage(self) -> None:
        self._get(f"/api/departments/{self.rng.choice(self.me['departments'])['id']}/usage/", "departments: usage")


def run(plan: dict) -> None:
    ApiUser.plan = plan
    ApiUser.identities = itertools.cycle(plan["identities"])
    ApiUser.wait_time = between(*plan["wait_s"])
    env = Environment(user_classes=[ApiUser], host=plan["host"])
    runner = env.create_local_runner()
    runner.start(plan["users"], spawn_rate=plan["spawn_rate"])
    while runner.user_count < plan["users"]:
        gevent.sleep(0.05)
    # The figures are the steady state: counted from `settle_s` after every user runs, once the users' first
    # requests (new connections, each server thread's first database connection) are answered. What the start-up
    # saw is reported apart.
    gevent.sleep(plan["settle_s"])
    start_up = env.stats.total
    settling = {"count": start_up.num_requests, "errors": start_up.num_failures,
                "p99_ms": start_up.get_response_time_percentile(0.99),
                "max_ms": round(start_up.max_response_time or 0, 1)}
    env.stats.reset_all()
    _emit(event="spawned")
    started, cpu_started = time.monotonic(), _cpu_s()
    while (elapsed := time.monotonic() - started) < plan["duration_s"]:
        gevent.sleep(min(1.0, plan["duration_s"] - elapsed))
        _emit(event="tick", elapsed_s=round(time.monotonic() - started, 1), requests=env.stats.total.num_requests,
              failures=env.stats.total.num_failures)
    duration_s, cpu_s = time.monotonic() - started, _cpu_s() - cpu_started
    runner.quit()
    _emit(event="done", duration_s=duration_s, cpu_s=cpu_s, stats=_stats(env), errors=_errors(env), settling=settling,
          exceptions=[e["msg"] for e in runner.exceptions.values()])


def _stats(env: Environment) -> dict:
    figures = {}
    for kind in KINDS:
        entry = env.stats.get(kind, "POST" if kind == "jobs: submit" else "GET")
        figures[kind] = {"count": entry.num_requests, "errors": entry.num_failures,
                         "p50_ms": entry.get_response_time_percentile(0.5),
                         "p95_ms": entry.get_response_time_percentile(0.95),
                         "p99_ms": entry.get_response_time_percentile(0.99),
                         "max_ms": round(entry.max_response_time or 0, 1)}
    return figures


def _errors(env: Environment) -> list[dict]:
    return [{"kind": e.name, "error": str(e.error), "count": e.occurrences} for e in env.stats.errors.values()]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _emit(**event: object) -> None:
    print(json.dumps(event), flush=True)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run(json.load(f))
