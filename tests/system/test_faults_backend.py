"""The cluster backend raising on every call for a while (issue 14, faults), on the simulated cluster the live
loops use by default: the outage starts in the middle of a scheduler tick (after its first pod is bound), both
loops keep ticking through it, and then it ends. The ticks back off instead of hammering the cluster, one
`cluster-unavailable` alert is raised and one `cluster-available` when it answers again, and afterwards the same
invariants as after every fault hold (tests/system/fault_invariants.py). The Kubernetes version of these
faults, on the real control plane, is tests/integration/test_kubernetes_live.py."""
from __future__ import annotations

import time
import uuid
from contextlib import contextmanager

import pytest
from redis import Redis

from cluster.backend import RUNTIME_LABEL, BackendUnavailable
from cluster.simulated import store
from colocation import controller, live_backend, services
from colocation.models import Node, NodeTransition
from colocation.policy import Direction
from colocation.selectors import lending_profile
from core import telemetry
from core.models import Decision
from scheduler import live
from scheduler.models import JobStatus, TrainingJob
from scheduler.policy.profile import get_profile
from tests.integration.test_kubernetes_live import until
from tests.system.fault_invariants import decisions_about, violations

pytestmark = pytest.mark.django_db(transaction=True)  # the ticks commit as in production
FAILED_TICKS = 5


class Outage:
    """Stands between the loops and the cluster: once `after_binds` pods were bound, every call raises
    BackendUnavailable (an unreachable API server) until `end()`. Counts the calls that reached it."""

    def __init__(self, after_binds: int):
        self.binds_left, self.down, self.calls = after_binds, False, 0

    def end(self) -> None:
        self.down, self.binds_left = False, -1

    def wrap(self, backend):
        outage = self

        class Unreachable:
            def __getattr__(self, name):
                real = getattr(backend, name)

                def call(*args, **kwargs):
                    outage.calls += 1
                    if outage.down:
                        raise BackendUnavailable(f"{name}: connection refused (test outage)")
                    if name == "bind_many" and len(args[0]) > outage.binds_left > 0:  # down mid-batch
                        real(args[0][:outage.binds_left])
                        outage.binds_left, outage.down = 0, True
                        raise BackendUnavailable("bind_many: connection refused (test outage)")
                    result = real(*args, **kwargs)
                    if name in ("bind", "bind_many"):
                        outage.binds_left -= 1 if name == "bind" else len(args[0])
                        outage.down = outage.binds_left == 0
                    return result

                return call if callable(real) else real

        return Unreachable()


@pytest.fixture
def loops(world, settings, monkeypatch):
    """The live loops on the world's simulated cluster, through an Outage; fast backoff so the test is short."""
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"test-faults-backend-{uuid.uuid4().hex[:8]}"
    settings.TIDAL_CLUSTER_BACKOFF_S, settings.TIDAL_CLUSTER_ALERT_AFTER = 0.25, 3
    outage = Outage(after_binds=1)
    session = live_backend._session

    @contextmanager
    def through_outage(redis, namespace, wait_s):
        with session(redis, namespace, wait_s) as backend:
            yield outage.wrap(backend)

    monkeypatch.setattr(live_backend, "_session", through_outage)
    redis = Redis.from_url(settings.REDIS_URL)
    yield world, outage, redis, namespace
    for key in redis.scan_iter(f"{namespace}:*"):
        redis.delete(key)


def scheduling(redis, namespace):
    return live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal"))


def lending(redis, namespace):
    return controller.run_lending_tick(redis=redis, namespace=namespace, profile=lending_profile())


def past_backoff(redis, namespace) -> None:
    """Wait until the loops may try the cluster again (the retry time the last failure set)."""
    retry_at = redis.get(f"{namespace}:{live_backend.RETRY_AT_KEY}")
    if retry_at is not None:
        time.sleep(max(0.0, float(retry_at) - time.time()) + 0.01)


def test_a_cluster_outage_is_backed_off_alerted_once_and_recovered_from(loops):
    world, outage, redis, namespace = loops
    jobs = [world.submit(gpus="1", gpu_model="A100", name=f"train-{i}") for i in range(4)]
    TrainingJob.objects.update(annotations={RUNTIME_LABEL: "3600"})
    services.transition_request(node=Node.objects.get(name="t4-1"), direction=Direction.LEND, actor=None,
                                reason="operator", message="for training")

    assert scheduling(redis, namespace) is None  # the outage began after the batch's first pod: the tick stopped
    assert set(TrainingJob.objects.values_list("status", flat=True)) == {JobStatus.ADMITTED}  # all 4 recorded
    found = violations(store.load(redis, namespace))
    stranded = [j for j in jobs if f"job {j.pk} is admitted but its pod is not on the cluster" in found]
    assert len(stranded) == 3  # recorded, their pods never created

    delays = []
    for tick in range(FAILED_TICKS - 1):  # both loops keep ticking through the outage
        past_backoff(redis, namespace)
        retry_at = float(redis.get(f"{namespace}:{live_backend.RETRY_AT_KEY}"))
        assert (lending if tick % 2 else scheduling)(redis, namespace) is None
        delays.append(float(redis.get(f"{namespace}:{live_backend.RETRY_AT_KEY}")) - retry_at)
        calls = outage.calls
        assert scheduling(redis, namespace) is None and lending(redis, namespace) is None  # in backoff:
        assert outage.calls == calls  # they did not even ask the cluster
    assert all(later > earlier for earlier, later in zip(delays, delays[1:]))  # the backoff grows
    outcomes = {outcome for _, outcome in telemetry.ticks(redis, namespace)}
    assert outcomes == {"cluster-unavailable", "backoff"}  # counted, each with why
    alerts = Decision.objects.filter(kind=Decision.Kind.ALERT, subject="cluster")
    assert list(alerts.values_list("reason", flat=True)) == ["cluster-unavailable"]
    assert f"{live_backend.settings.TIDAL_CLUSTER_ALERT_AFTER} ticks in a row" in alerts.get().message

    outage.end()
    past_backoff(redis, namespace)
    report = scheduling(redis, namespace)
    assert report is not None and report.admitted == 3  # the stranded admission is requeued and placed again
    assert list(alerts.order_by("id").values_list("reason", flat=True)) == ["cluster-unavailable", "cluster-available"]
    until(lambda: lending(redis, namespace),
          lambda: NodeTransition.objects.get(node__name="t4-1").status == NodeTransition.Status.DONE)

    cluster = store.load(redis, namespace)
    assert violations(cluster) == []
    assert set(TrainingJob.objects.values_list("status", flat=True)) == {JobStatus.RUNNING}
    assert TrainingJob.objects.count() == len(jobs)
    assert decisions_about("node:t4-1") == ["operator", "node-lend", "node-lend-done", "transition-done"]
