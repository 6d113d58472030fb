"""Redis down for 30 s (issue 14, faults): the control loops skip their ticks, saying why, and resume when it is
back; the cluster lock is never held by two loops at once.

Two loop processes (A and B) call the scheduler's and the lending controller's Celery tasks one after the other,
as a worker fed by beat does, against a private Redis (the shared one is never stopped) and the test database.
Each records when its critical section — the tick run under the cluster lock — begins and ends. To make the race
real, A's tick is slowed down just before the outage: it keeps acting on the cluster (reading its nodes) until
the test lets it go, which is after B has acted again. Redis comes back empty (as the stack runs it, unpersisted):
the lock A held is forgotten and B may take it at once, so A must have stopped acting by itself. Afterwards no two
recorded sections overlap, no section began while Redis was down, both loops acted again, and the invariants
after every fault hold (tests/system/fault_invariants.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.db import connection
from redis import Redis

from cluster.backend import RUNTIME_LABEL
from cluster.simulated import store
from scheduler import lifecycle, live
from scheduler.models import JobStatus, TrainingJob
from scheduler.observe import snapshot_from_db
from scheduler.policy.profile import get_profile
from tests.integration.services import ROOT
from tests.system.fault_invariants import violations
from tests.system.private_services import private_redis

pytestmark = pytest.mark.django_db(transaction=True)  # the loop processes read what the test commits
OUTAGE_S = 30.0
LOCK_S = 3.0  # the loops' TIDAL_CLUSTER_LOCK_S (renewed every second): short, so a lock left behind expires soon
WAIT_S = 60.0


# --- the loop processes ---------------------------------------------------------------------------------------


def loop(name: str, folder: str) -> None:
    """A control-loop process: the two ticks, as a worker runs them, until `stop` appears in `folder`."""
    import logging

    from colocation import controller
    from colocation.tasks import lending_tick
    from scheduler.tasks import scheduler_tick

    control = Path(folder)
    live.scheduler_tick = _recorded(name, live.scheduler_tick, control)
    controller.lending_tick = _recorded(name, controller.lending_tick, control)
    while not (control / "stop").exists():
        for task in (scheduler_tick, lending_tick):
            try:
                task()
            except Exception:  # noqa: BLE001 - a worker logs a failed task and takes the next one
                logging.getLogger("loop").exception("%s: tick failed", name)
        time.sleep(0.1)


def _recorded(name: str, tick, control: Path):
    """`tick` recording its critical section as "name entered exited"; A's first tick after `slow` appears keeps
    acting on the cluster until `release` appears (or its backend refuses: the lock is no longer surely held)."""

    def run(*, backend, now, profile, **more):  # more: what else the tick takes (the scheduler's cycle cache)
        entered = time.time()
        try:
            result = tick(backend=backend, now=now, profile=profile, **more)
            if name == "A" and (control / "slow").exists() and not (control / "slowed").exists():
                (control / "slowed").touch()
                while not (control / "release").exists():
                    backend.nodes()
                    time.sleep(0.05)
            return result
        finally:
            with (control / "sections").open("a") as sections:
                sections.write(f"{name} {entered} {time.time()}\n")

    return run


class Loops:
    def __init__(self, folder: Path, env: dict):
        self.folder = folder
        self.processes = {
            name: subprocess.Popen(
                [sys.executable, "manage.py", "shell", "--no-imports", "-c",
                 f"from tests.system.test_faults_redis import loop; loop({name!r}, {str(folder)!r})"],
                cwd=ROOT, env=env, stdout=(folder / f"{name}.log").open("w"), stderr=subprocess.STDOUT)
            for name in ("A", "B")}

    def sections(self) -> list[tuple[str, float, float]]:
        path = self.folder / "sections"
        lines = path.read_text().splitlines() if path.exists() else []
        return [(n, float(a), float(b)) for n, a, b in (line.split() for line in lines)]

    def wait(self, condition, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; A: {self.log('A')[-2000:]}"
            assert all(p.poll() is None for p in self.processes.values()), "a loop process died"
            time.sleep(0.05)

    def acted_since(self, name: str, since: float) -> bool:
        return any(n == name and entered > since for n, entered, _ in self.sections())

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()

    def stop(self) -> None:
        (self.folder / "stop").touch()
        (self.folder / "release").touch()
        for process in self.processes.values():
            process.wait(timeout=WAIT_S)


def overlaps(sections: list[tuple[str, float, float]]) -> list[str]:
    return [f"{a} and {b} overlap" for i, a in enumerate(sections) for b in sections[i + 1:]
            if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]]


# --- the test -------------------------------------------------------------------------------------------------


def test_redis_down_30s_loops_skip_and_resume_and_the_lock_is_never_held_twice(world, tmp_path):
    for i in range(3):
        job = world.submit(gpus="1", gpu_model="A100", name=f"train-{i}")
        TrainingJob.objects.filter(pk=job.pk).update(annotations={RUNTIME_LABEL: "3600"})
    namespace = f"test-faults-redis-{uuid.uuid4().hex[:8]}"
    database = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]
    with private_redis() as server:
        env = {**os.environ, "DATABASE_URL": database, "REDIS_URL": server.url, "TIDAL_REDIS_NAMESPACE": namespace,
               "TIDAL_CLUSTER_LOCK_S": str(LOCK_S), "TIDAL_CLUSTER_BACKEND": "simulated"}
        loops = Loops(tmp_path, env)
        try:
            loops.wait(lambda: {n for n, _, _ in loops.sections()} == {"A", "B"}, "both loops to act")
            (tmp_path / "slow").touch()
            loops.wait((tmp_path / "slowed").exists, "A's slow tick")  # A holds the lock and acts

            stopping_at = time.time()
            server.stop()
            down_at = time.time()  # the process is gone (while it shut down, open connections could still act)
            time.sleep(OUTAGE_S)  # the fault itself: Redis is down this long
            up_at = time.time()  # before start(): a loop may reconnect before start() has seen Redis answer
            server.start()
            loops.wait(lambda: loops.acted_since("B", up_at), "B to act again")
            (tmp_path / "release").touch()  # if A's slow tick still runs, it ends now
            loops.wait(lambda: loops.acted_since("A", up_at), "A to act again")
        finally:
            loops.stop()
        sections = sorted(loops.sections(), key=lambda s: s[1])
        (slow,) = [s for s in sections if s[1] < stopping_at < s[2]]  # A was acting when Redis went away
        back = next(s for s in sections if s[1] > up_at)
        print(f"{len(sections)} critical sections; A's slow one ended {slow[2] - stopping_at:.1f} s into the outage; "
              f"{back[0]} acted first after it, {back[1] - up_at:.1f} s after Redis came back")
        assert slow[0] == "A"
        assert overlaps(sections) == []
        assert not [s for s in sections if down_at < s[1] < up_at]  # no tick acted while Redis was down
        for name in ("A", "B"):
            assert "Redis unreachable" in loops.log(name) and "skipping this tick" in loops.log(name)  # skips say why
        assert "tick stopped: cluster lock" in loops.log("A")  # A's slow tick stopped at its next action

        redis = Redis.from_url(server.url)
        assert live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal")) is not None
        assert violations(store.load(redis, namespace)) == []
        assert set(TrainingJob.objects.values_list("status", flat=True)) == {JobStatus.RUNNING}


def test_a_tick_acting_on_a_stale_snapshot_undoes_nothing(world, cluster):
    """What keeps a second actor harmless if one ever slipped in (a holder cut off mid-action), and what a cancel
    landing mid-tick needs anyway: acting re-checks each job under its row lock. A job cancelled since the snapshot
    is not admitted, and a victim that finished since is not brought back to the queue."""
    from scheduler.policy.decisions import Admit, Preempt

    backend, clock = cluster
    for i in range(6):  # ml-ads' own 4 and borrowed 2 of a100-0's 8 GPUs
        world.submit("outsider", department="ml-ads", gpus="1", gpu_model="A100", name=f"ads-{i}")
    TrainingJob.objects.update(annotations={RUNTIME_LABEL: "3600"})
    clock.advance(5)
    live.scheduler_tick(backend=backend, now=clock.now(), profile=get_profile("tidal"))
    cancelled = world.submit(gpus="1", gpu_model="T4", name="cancelled")  # fits the fixed T4 node
    reclaiming = world.submit(gpus="4", gpu_model="A100", name="reclaiming")  # own quota: preempts 2 borrowers
    clock.advance(5)
    result = live.schedule(snapshot_from_db(backend, clock.now()), get_profile("tidal"), live.lending_profile())
    victims = [d.job_id for d in result.decisions if isinstance(d, Preempt)]
    assert {d.job_id for d in result.decisions if isinstance(d, Admit)} == {cancelled.pk, reclaiming.pk}
    assert len(victims) == 2

    lifecycle.job_cancel(job=cancelled, actor=world.users["member"])  # after the snapshot, before acting
    TrainingJob.objects.filter(pk=victims[0]).update(status=JobStatus.SUCCEEDED)  # it ended meanwhile
    report = live.TickReport()
    live.act(result, backend, clock.now(), report)
    assert TrainingJob.objects.get(pk=cancelled.pk).status == JobStatus.CANCELLED
    assert TrainingJob.objects.get(pk=victims[0]).status == JobStatus.SUCCEEDED
    assert TrainingJob.objects.get(pk=victims[1]).status == JobStatus.PENDING
    assert not [p for p in backend.pods() if p.spec.job_id == cancelled.pk]
