"""Fault: a Celery worker killed with SIGKILL in the middle of a tick (issue 14): a scheduler tick, and a lending
tick half-way through a take-back.

Two real workers of the project's Celery app (prefork, as deployed) on queues of their own, the shared Redis as
broker under a namespace of their own, the test's PostgreSQL database, the simulated cluster kept in Redis. Worker A
runs the live `scheduler.tick` on a queue of 320 jobs and 40 nodes, admitting them one by one. "Mid-tick" is found
without timing: the test holds the row of the 101st job, so A stops there with 100 admissions committed and its
next transaction open, waiting (PostgreSQL shows it). While A is stuck longer than its lock's expiry (A renews it),
a tick sent to worker B must find the lock held and skip: never two actors. Then A — the whole worker, its pool
process included — is killed with SIGKILL. The lock A held expires within TIDAL_CLUSTER_LOCK_S (nobody releases
it: A is dead), B's next tick runs to the end, and every invariant holds: no job lost or doubled, at most one open
run per job, every admitted job with exactly one pod on the cluster, no node half-way, each decision recorded once.

What A did is partly lost: its binds lived in its copy of the simulated cluster, which is saved only when a tick
ends. The database says which jobs A admitted; B finds no pod for them and requeues them (`pod-missing`), then
admits them again — the repair the live loop documents for any crash between admission and the saved cluster.

A node's state is another matter: if it un-happened, the next lending tick would take it for an operator's revert
and fail the transition, leaving the database and the cluster disagreeing about the node. The simulated cluster
therefore saves node states and detached pods at once (cluster/simulated/store.py); the take-back test kills A
after the node was marked and one of its two jobs evicted, and B must finish the take-back once.
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from redis import Redis

from cluster.simulated import store
from colocation import services as colocation_services
from cluster.types import Pool
from colocation.models import Node, NodeState, NodeTransition
from colocation.policy import Direction
from colocation.tasks import lending_tick
from core.models import Decision
from scheduler.live import run_live_tick
from scheduler.models import JobRun, JobStatus, Quota, TrainingJob
from scheduler.policy.profile import get_profile
from scheduler.tasks import scheduler_tick
from tests.integration.services import REDIS_URL, ROOT
from tests.system import fault_invariants
from tidal.celery import ping

NODES, JOBS = 40, 320  # 8 T4 GPUs a node: every job fits, so the tick admits all of them one by one
BLOCKED_AT = 100  # the test holds the row of the job admitted after this many: A's tick stops there
LOCK_S = 4.0  # the workers' TIDAL_CLUSTER_LOCK_S: renewed every 1.3 s while a tick runs


def wait_for(condition, what: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def DSN() -> str:  # noqa: N802 - the test database, as the workers reach it
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


class Worker:
    """`celery -A tidal worker` (prefork, one pool process) on a queue of its own, in a process group of its own."""

    def __init__(self, name: str, env: dict, log: Path) -> None:
        self.queue = f"{env['TIDAL_REDIS_NAMESPACE']}-{name}"
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tidal", "worker", "--concurrency", "1", "--queues", self.queue,
             "--hostname", f"{self.queue}@%h", "--loglevel", "INFO", "--without-mingle", "--without-gossip",
             "--without-heartbeat"],
            cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)

    def ready(self) -> None:
        assert ping.apply_async(args=["ready"], queue=self.queue).get(timeout=60)["echo"] == "ready"

    def send_tick(self, task=scheduler_tick) -> str:
        """One tick, sent as beat sends it; its task id."""
        return task.apply_async(queue=self.queue).id

    def tick(self, task=scheduler_tick) -> str:
        """One tick; what it returned, read from the worker's log (the task stores no result): "None" when it did
        not act (the cluster lock was held), else its report."""
        task_id = self.send_tick(task)
        done = re.compile(rf"Task {re.escape(task.name)}\[{task_id}\] succeeded in [0-9.]+s: (.*)$", re.MULTILINE)
        return wait_for(lambda: done.search(self.log.read_text()), f"tick {task_id} on {self.queue}", 120).group(1)

    def kill(self) -> None:
        """SIGKILL to the whole worker: its main process and its pool process, no chance to clean up."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@contextlib.contextmanager
def two_workers(prefix: str, env: dict, tmp_path: Path, leader_ids: bool = False):
    """Workers A and B in a Redis namespace of their own (`prefix`-…), killed and their keys removed afterwards."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    started = [Worker(name, {**env, "TIDAL_REDIS_NAMESPACE": namespace,
                             **({"TIDAL_LEADER_ID": f"worker-{name}"} if leader_ids else {})},
                      tmp_path / f"worker-{name}.log") for name in ("a", "b")]
    try:
        yield namespace, *started
    finally:
        for worker in started:
            worker.kill()  # nothing of theirs is needed any more
        redis = Redis.from_url(REDIS_URL)
        for key in redis.scan_iter(f"{namespace}:*"):
            redis.delete(key)


@pytest.fixture
def workers(tmp_path):
    """Workers A and B on this test's database (committed data: a transactional test) and Redis namespace."""
    env = {**os.environ, "TIDAL_CLUSTER_BACKEND": "simulated", "TIDAL_CLUSTER_LOCK_S": str(LOCK_S),
           "DATABASE_URL": DSN()}
    with two_workers("test-pfaults", env, tmp_path) as started:
        yield started


def big_queue(world) -> None:
    """40 T4 nodes of the fixed pool and 320 one-GPU jobs of ml-search, with quota for all of them."""
    group, t4 = world.groups["t4"], world.gpu_models["T4"]
    Node.objects.bulk_create(
        Node(name=f"big-t4-{i}", resource_group=group, gpu_model=t4, gpu_count=8, cpu_milli=96000,
             memory_mib=1048576, pool=Pool.FIXED, state=NodeState.OFFLINE_NORMAL) for i in range(NODES))
    Quota.objects.filter(department=world.departments["ml-search"]).update(own=10**9)
    TrainingJob.objects.bulk_create(
        TrainingJob(name=f"train-{i}", task_key=f"ml-search/train-{i}", department=world.departments["ml-search"],
                    submitter=world.users["member"], image="registry/resnet:1", command="python train.py",
                    framework=world.frameworks["pytorch-2.1"], gpu_model=t4, gpus=1, cpu_milli=4000,
                    memory_mib=16384, annotations={store.RUNTIME_LABEL: "86400"})
        for i in range(JOBS))


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_tick_leaves_nothing_lost_doubled_or_locked(world, workers):
    namespace, a, b = workers
    big_queue(world)
    redis, lock_key = Redis.from_url(REDIS_URL), f"{namespace}:{store.LOCK}"
    a.ready()
    b.ready()
    admissions = Decision.objects.filter(kind=Decision.Kind.ADMISSION)
    jobs = TrainingJob.objects.filter(name__startswith="train-").order_by("pk")
    held = jobs[BLOCKED_AT]  # admitted after BLOCKED_AT others (equal scores: in order of submission)

    with psycopg.connect(DSN()) as locker, psycopg.connect(DSN(), autocommit=True) as observer:
        locker.execute("SELECT 1 FROM scheduler_trainingjob WHERE id = %s FOR UPDATE", (held.pk,))
        a.send_tick()
        # The seam: A's admissions up to `held` are committed and A waits on its row, inside its next transaction.
        wait_for(lambda: observer.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                          "AND wait_event_type = 'Lock'").fetchone()[0], "A to reach the held job")
        lost = admissions.count()
        assert lost == BLOCKED_AT
        token = redis.get(lock_key)
        assert token is not None
        held_since = time.monotonic()
        wait_for(lambda: time.monotonic() - held_since > LOCK_S + 1, "A's lock to outlive its own expiry")
        assert redis.get(lock_key) == token, "A's lock must be renewed while its tick runs"
        assert b.tick() == "None", "B must not act while A holds the cluster"
        assert redis.get(lock_key) == token and a.process.poll() is None and admissions.count() == lost

        a.kill()  # mid-tick, inside an open transaction
        killed_at = time.monotonic()
        assert redis.get(lock_key) == token  # the dead worker's lock is still there: nobody released it
        locker.rollback()

    skipped, sent_at = 0, time.monotonic()
    while (report := b.tick()) == "None":  # B's ticks skip until the dead worker's lock expires, then one runs
        skipped += 1
        assert time.monotonic() - killed_at < LOCK_S + 30, "the dead worker's lock never expired"
        time.sleep(0.25)  # beat would send the next tick after TIDAL_SCHEDULER_INTERVAL_S
        sent_at = time.monotonic()
    print(f"A admitted {lost} jobs before SIGKILL; B skipped {skipped} ticks; the tick sent {sent_at - killed_at:.1f} s "
          f"after the kill acted and took {time.monotonic() - sent_at:.1f} s: {report[:100]}")
    assert report.startswith(f"{{'admitted': {JOBS}, 'preempted': 0, 'pending': 0, 'finished': 0,"), report

    cluster = store.load(redis, namespace)
    assert fault_invariants.violations(cluster) == []
    assert jobs.count() == JOBS and set(jobs.values_list("status", flat=True)) == {JobStatus.RUNNING}
    pods = Counter(p.spec.job_id for p in cluster.pods())
    assert set(pods) == set(jobs.values_list("pk", flat=True)) and set(pods.values()) == {1}
    requeued = set(Decision.objects.filter(reason="pod-missing").values_list("subject", flat=True))
    assert len(requeued) == lost  # A's admissions, and only them, found without a pod and requeued
    for job in jobs.filter(pk__in=[int(s.split(":")[1]) for s in requeued]).prefetch_related("runs"):
        runs = sorted(job.runs.all(), key=lambda r: r.attempt)
        assert [(r.attempt, r.outcome, r.ended_at is None) for r in runs] == [
            (1, JobRun.Outcome.FAILED, False), (2, JobRun.Outcome.RUNNING, True)]
    assert not JobRun.objects.filter(job=held, attempt=2).exists()  # the job A died on: admitted once, by B
    # each decision once: one admission per run, one pod-missing requeue per job A admitted
    per_run = Counter((d.subject, d.data["attempt"]) for d in admissions)
    assert set(per_run.values()) == {1} and len(per_run) == JOBS + lost


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_take_back_leaves_no_node_half_way(world, workers):
    """The lending controller's tick killed in the middle of a take-back of a100-0 (lent to training, two jobs on
    it): the node is marked online-unnormal and the first job evicted and requeued (committed); A waits on the
    second job's row, which the test holds, and is killed there. B's ticks must finish the take-back once."""
    namespace, a, b = workers
    redis = Redis.from_url(REDIS_URL)
    for i in range(2):
        job = world.submit(name=f"lent-{i}", gpu_model="A100", gpus="1")
        TrainingJob.objects.filter(pk=job.pk).update(annotations={store.RUNTIME_LABEL: "86400"})
    assert run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal")).admitted == 2
    node = Node.objects.get(name="a100-0")
    colocation_services.transition_request(node=node, direction=Direction.TAKE_BACK, actor=None, reason="operator",
                                           message="operator: a100-0 back to inference")
    second = TrainingJob.objects.filter(name="lent-1").get()
    a.ready()
    b.ready()

    with psycopg.connect(DSN()) as locker, psycopg.connect(DSN(), autocommit=True) as observer:
        locker.execute("SELECT 1 FROM scheduler_trainingjob WHERE id = %s FOR UPDATE", (second.pk,))
        a.send_tick(lending_tick)
        wait_for(lambda: observer.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                          "AND wait_event_type = 'Lock'").fetchone()[0], "A to reach the held job")
        # committed before the seam: the node marked, the first job evicted and requeued
        assert Node.objects.get(name="a100-0").state == NodeState.ONLINE_UNNORMAL
        assert TrainingJob.objects.get(name="lent-0").status == JobStatus.PENDING
        a.kill()
        locker.rollback()

    for _ in range(20):  # B's lending ticks: skipped until A's lock expires, then they resume the take-back
        report = b.tick(lending_tick)
        if "'done': ['a100-0']" in report:
            break
        time.sleep(0.25)
    else:
        pytest.fail(f"the take-back never finished: {report}")
    b.tick()  # the scheduler places the requeued jobs again
    cluster = store.load(redis, namespace)
    assert fault_invariants.violations(cluster) == []
    transition = NodeTransition.objects.get(node=node)
    assert (transition.status, transition.step) == (NodeTransition.Status.DONE, "done")
    assert fault_invariants.decisions_about("node:a100-0") == [
        "operator", "node-take-back", "node-take-back-done", "transition-done"]
    for job in TrainingJob.objects.filter(name__startswith="lent-"):  # killed once, then on the fixed pool's t4-0
        runs = [(r.outcome, r.node.name) for r in job.runs.order_by("attempt").select_related("node")]
        assert (job.status, job.pool_preference, runs) == (
            JobStatus.RUNNING, "fixed", [(JobRun.Outcome.KILLED, "a100-0"), (JobRun.Outcome.RUNNING, "t4-0")]), job.name
        assert fault_invariants.decisions_about(f"job:{job.pk}").count("taken-back") == 1
