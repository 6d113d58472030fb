"""PostgreSQL restarted in the middle of a live scheduler tick and of a lending step (issue 14, faults).

The code under test runs as in production: the real Celery tasks in a real worker process, on a private
PostgreSQL started for this module (the shared one is never stopped), with the simulated cluster kept in Redis.
"The middle" is found without timing: the test holds a row lock the tick must take part-way through (a job the
tick admits second, the node a lending step marks, a job a take-back requeues), waits until PostgreSQL shows the
tick's session waiting on it — its earlier work committed — and then crashes PostgreSQL (immediate stop) and
starts it again. The next ticks must finish the work, and then every invariant holds (tests/system/
fault_invariants.py): no job lost or doubled, no node half-way, every decision recorded once."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from redis import Redis

from colocation.tasks import lending_tick
from scheduler.tasks import scheduler_tick
from tests.integration.services import REDIS_URL, ROOT
from tests.system.private_services import PrivatePostgres, private_postgres

TEMPLATE = "tidal_faults_template"
WAIT_S = 60.0


@pytest.fixture(scope="module")
def pg():
    """A private PostgreSQL with a migrated template database; each test copies it."""
    with private_postgres() as server:
        url = server.create_database(TEMPLATE)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                       env={**os.environ, "DATABASE_URL": url})
        yield server


class Lab:
    """One test's database on the private server, its Redis namespace, and a Celery worker acting on both."""

    def __init__(self, server: PrivatePostgres, tmp_path: Path):
        self.server, self.name = server, f"faults_{uuid.uuid4().hex[:8]}"
        self.url = server.create_database(self.name, template=TEMPLATE)
        self.namespace = self.queue = f"test-faults-{uuid.uuid4().hex[:8]}"
        self.env = {**os.environ, "DATABASE_URL": self.url, "TIDAL_REDIS_NAMESPACE": self.namespace,
                    "TIDAL_CLUSTER_BACKEND": "simulated", "TIDAL_REQUIRE_POSTGRES": "1"}
        self.log = tmp_path / "worker.log"
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tidal", "worker", "--pool", "solo", "--queues", self.queue,
             "--hostname", f"{self.queue}@%h", "--loglevel", "INFO", "--without-mingle", "--without-gossip",
             "--without-heartbeat"], cwd=ROOT, env=self.env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)

    def django(self, code: str) -> str:
        """Run `code` with Django on this test's database (as a management shell would); its stdout."""
        done = subprocess.run([sys.executable, "manage.py", "shell", "--no-imports", "-c", code], cwd=ROOT,
                              env=self.env, check=True, capture_output=True, text=True)
        return done.stdout

    def tick(self, task) -> str:
        """Send one tick to the worker, as beat does; its task id."""
        return task.apply_async(queue=self.queue).id

    def outcome(self, task_id: str) -> dict | str:
        """The tick's report, or the error it raised, as the worker logged it (the ticks store no result)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            for line in self.log.read_text().splitlines():
                if f"[{task_id}] succeeded" in line:
                    return ast.literal_eval(line.split(": ", 2)[2])
                if f"[{task_id}] raised" in line:
                    return line.split("raised ", 1)[1]
            time.sleep(0.05)
        raise AssertionError(f"tick {task_id} did not end; worker log:\n{self.tail()}")

    def findings(self) -> dict:
        return json.loads(self.django("from tests.system.fault_invariants import main; main()").splitlines()[-1])

    def connect(self, **kw) -> psycopg.Connection:
        return psycopg.connect(self.url, **kw)

    def crash_when_blocked(self, lock_sql: str, params=()) -> None:
        """Hold `lock_sql`'s row locks; once the worker's tick waits on them, crash and restart PostgreSQL."""
        locker = self.connect()
        locker.execute(lock_sql, params)
        with self.connect(autocommit=True) as observer:
            deadline = time.monotonic() + WAIT_S
            while not observer.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND "
                                       "wait_event_type = 'Lock'", (self.name,)).fetchone()[0]:
                assert time.monotonic() < deadline, f"the tick never reached the lock; worker log:\n{self.tail()}"
                time.sleep(0.02)
        self.server.restart("immediate")
        locker.close()

    def tail(self) -> str:
        return self.log.read_text()[-4000:]

    def close(self) -> None:
        self.worker.terminate()
        self.worker.wait(timeout=30)
        redis = Redis.from_url(REDIS_URL)
        for key in redis.scan_iter(f"{self.namespace}:*"):
            redis.delete(key)


@pytest.fixture
def lab(pg, tmp_path):
    lab = Lab(pg, tmp_path)
    yield lab
    lab.close()


def seed(*, online: int, offline: int, jobs: int, expected_duration_s: int | None = None) -> None:
    """Inventory and queue, run in a `Lab.django` subprocess: one T4 group of 4-GPU co-location nodes (`offline`
    lent to training, `online` serving), one department whose own quota fits every job, `jobs` 1-GPU jobs of which
    the first waited 25 minutes (so the policy admits it first), each running an hour once started."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from cluster.backend import RUNTIME_LABEL
    from cluster.types import Pool
    from colocation.models import Node, NodeState, ResourceGroup
    from core.models import Department, GPUModel, Membership
    from scheduler import submission
    from scheduler.models import Framework, Quota, TrainingJob

    t4 = GPUModel.objects.create(name="T4", memory_gib=16)
    pytorch = Framework.objects.create(name="pytorch", version="2.1")
    pytorch.certified_on.set([t4])
    group = ResourceGroup.objects.create(name="t4", hardware_class="T4", gpu_model=t4, lending=False)
    states = [NodeState.OFFLINE_NORMAL] * offline + [NodeState.ONLINE_NORMAL] * online
    for i, state in enumerate(states):
        Node.objects.create(name=f"t4-{i}", resource_group=group, gpu_model=t4, gpu_count=4, cpu_milli=64000,
                            memory_mib=262144, pool=Pool.COLOCATION, state=state)
    department = Department.objects.create(name="ml-search")
    Quota.objects.create(department=department, resource_kind="gpu", gpu_model=t4, own=16, borrowed=0)
    Quota.objects.create(department=department, resource_kind="cpu", own=256000, borrowed=0)
    Quota.objects.create(department=department, resource_kind="memory", own=1048576, borrowed=0)
    user = get_user_model().objects.create_user("mia", password="pw")
    Membership.objects.create(user=user, department=department, role=Membership.Role.MEMBER)
    for i in range(jobs):
        job = submission.job_submit(submitter=user, department=department, name=f"train-{i}", image="registry/t:1",
                                  command="python train.py", framework=pytorch, gpu_model=t4, gpus=Decimal(1),
                                  cpu_milli=4000, memory_mib=16384, expected_duration_s=expected_duration_s,
                                  annotations={RUNTIME_LABEL: "3600"})
        waited = timedelta(minutes=25 if i == 0 else 1)
        TrainingJob.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - waited)


def seeded(**kw) -> str:
    return f"from tests.system.test_faults_database import seed; seed(**{kw!r})"


# --- the scheduler --------------------------------------------------------------------------------------------


def test_postgres_restarted_mid_scheduler_tick_loses_and_doubles_nothing(lab):
    lab.django(seeded(online=0, offline=2, jobs=6))
    with lab.connect() as db:
        first = db.execute("SELECT min(id) FROM scheduler_trainingjob").fetchone()[0]
    interrupted = lab.tick(scheduler_tick)
    # The tick records the oldest job's admission (committed: its run and its decision; the cycle's pods are bound
    # together after every admission is recorded), then waits on the next.
    lab.crash_when_blocked("SELECT id FROM scheduler_trainingjob WHERE id <> %s FOR UPDATE", (first,))
    assert "OperationalError" in lab.outcome(interrupted)  # the tick lost its database: it stopped where it was

    report = lab.outcome(lab.tick(scheduler_tick))  # the next tick, on PostgreSQL back up
    assert report["repaired"] == [f"job {first}: no pod, requeued"], lab.tail()  # admitted, never bound
    assert report["admitted"] == 6, lab.tail()
    found = lab.findings()
    assert found["violations"] == []
    assert [status for status, _, _ in found["jobs"].values()] == ["running"] * 6
    decisions = found["decisions"][f"job:{first}"]
    assert decisions[:2] == ["submitted", "admitted-own-quota"] and decisions[-1] == "admitted-own-quota"


# --- the lending controller -----------------------------------------------------------------------------------

SEAMS = {
    # the node's row: the tick has marked the node online-unnormal on the cluster, not yet in the database
    "marking the node": ("SELECT id FROM colocation_node WHERE name = 't4-0' FOR UPDATE", ()),
    # one job's row: the tick has evicted that job's pod, not yet requeued the job
    "requeueing an evicted job": ("SELECT id FROM scheduler_trainingjob WHERE id = (SELECT max(id) FROM "
                                  "scheduler_trainingjob) FOR UPDATE", ()),
}


@pytest.mark.parametrize("seam", SEAMS)
def test_postgres_restarted_mid_take_back_completes_it_once(lab, seam):
    # Short at every hour, so they go to the lent node t4-0: 600 s × the stated durations' prior factor (1.5) stays
    # under the long-job bar, which is never below the night's slack (1 h). An hour-long job was long from 07:30 UTC.
    lab.django(seeded(online=1, offline=1, jobs=2, expected_duration_s=600))
    assert lab.outcome(lab.tick(scheduler_tick))["admitted"] == 2, lab.tail()
    lab.django("from colocation import services; from colocation.models import Node; "
               "from colocation.policy import Direction; services.transition_request(node=Node.objects.get("
               "name='t4-0'), direction=Direction.TAKE_BACK, actor=None, reason='operator', message='peak')")
    interrupted = lab.tick(lending_tick)
    lab.crash_when_blocked(*SEAMS[seam])
    assert "OperationalError" in lab.outcome(interrupted)

    for _ in range(5):  # the next lending ticks resume the take-back from what they observe on the node
        if lab.outcome(lab.tick(lending_tick))["done"]:
            break
    lab.outcome(lab.tick(scheduler_tick))  # the scheduler sees the evictions
    found = lab.findings()
    assert found["violations"] == []
    assert found["decisions"]["node:t4-0"] == ["operator", "node-take-back", "node-take-back-done", "transition-done"]
    assert list(found["jobs"].values()) == [["pending", "fixed", ["killed"]]] * 2  # requeued for the fixed pool
