"""The live lending controller on the real database against the simulated cluster: operator and automatic
conversions, create-before-delete migration, take-backs that requeue training, and a crash at every step."""
import time
from datetime import datetime

import pytest

from cluster.backend import INFERENCE, KIND_LABEL, RESOURCE_GROUP_LABEL, SERVICE_LABEL, PodSpec
from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from cluster.types import GpuShare, Pool
from colocation import controller, services
from colocation.models import Node, NodeState, NodeTransition
from colocation.policy import DEFAULT, Direction
from colocation.selectors import node_views
from core.models import Decision
from scheduler import live
from scheduler.models import JobStatus
from scheduler.policy.profile import get_profile
from tests.integration.livecluster import T0

pytestmark = pytest.mark.django_db


class Crash(Exception):
    """Stands for the worker dying between acting and recording."""


@pytest.fixture
def lab(world):
    """World plus two more T4 co-location nodes: t4-2 online (room for replacements), t4-3 lent (offline)."""
    t4 = world.groups["t4"]
    for name, state in (("t4-2", NodeState.ONLINE_NORMAL), ("t4-3", NodeState.OFFLINE_NORMAL)):
        Node.objects.create(name=name, resource_group=t4, gpu_model=world.gpu_models["T4"], gpu_count=2,
                            cpu_milli=32000, memory_mib=131072, pool=Pool.COLOCATION, state=state)
    for group in world.groups.values():  # automation off unless a test turns it on
        group.lending = False
        group.save()
    clock = VirtualClock(T0)
    return world, SimulatedCluster(node_views(), clock, store.labelled_runtime), clock


def lending(lab, seconds: float = 5):
    world, cluster, clock = lab
    clock.advance(seconds)
    cluster.advance()
    return controller.lending_tick(backend=cluster, now=clock.now(), profile=DEFAULT)


def scheduling(lab):
    world, cluster, clock = lab
    clock.advance(5)
    cluster.advance()
    return live.scheduler_tick(backend=cluster, now=clock.now(), profile=get_profile("tidal"))


def serve(cluster, replicas: int = 1, name: str = "search-api") -> None:
    template = PodSpec(name=name, job_id=None, gpu_model="T4", gpu_shares=(GpuShare(0, 1.0),), cpu_milli=2000,
                       memory_mib=4096, labels={KIND_LABEL: INFERENCE, SERVICE_LABEL: name})
    cluster.apply_replicaset(name, template, replicas, node_selector={RESOURCE_GROUP_LABEL: "t4"})


def request(world, node: str, direction: Direction) -> NodeTransition:
    return services.transition_request(node=Node.objects.get(name=node), direction=direction,
                                       actor=world.users["operator"], reason="operator", message="by hand")


def state_of(cluster, node: str) -> str:
    return next(n.state.value for n in cluster.nodes() if n.name == node)


def test_take_back_evicts_training_and_requeues_it_for_the_fixed_pool(lab):
    world, cluster, _ = lab
    job = world.submit(gpus="1", gpu_model="A100")
    scheduling(lab)
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and job.node.name == "a100-0"
    request(world, "a100-0", Direction.TAKE_BACK)

    report = lending(lab)
    assert report.done == ["a100-0"]
    assert state_of(cluster, "a100-0") == Node.objects.get(name="a100-0").state == "online-normal"
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.pool_preference == "fixed"
    assert [r.outcome for r in job.runs.all()] == ["killed"]
    reasons = list(Decision.objects.filter(subject="node:a100-0").values_list("reason", flat=True))
    assert {"node-take-back", "node-take-back-done", "transition-done"} <= set(reasons)
    assert NodeTransition.objects.get(node__name="a100-0").status == "done"


def test_lend_moves_inference_create_before_delete(lab):
    world, cluster, _ = lab
    world.service("ml-ads", name="search-api", gpu_model=world.gpu_models["T4"], replicas=1, min_replicas=1,
                  cpu_milli_per_replica=2000, memory_mib_per_replica=4096)
    serve(cluster)
    lending(lab, seconds=31)  # the replica on t4-1 becomes ready
    (old,) = [p for p in cluster.pods() if p.node == "t4-1"]
    assert old.ready
    request(world, "t4-1", Direction.LEND)

    first = lending(lab)
    assert first.waiting == {"t4-1": first.waiting["t4-1"]} and first.done == []
    names = {p.spec.name: p for p in cluster.pods()}
    assert old.spec.name in names  # still serving while its replacement starts
    (replacement,) = [p for p in names.values() if p.spec.name != old.spec.name]
    assert replacement.node == "t4-2" and not replacement.ready
    assert state_of(cluster, "t4-1") == "offline-unnormal"
    assert names[old.spec.name].ready  # the detached pod keeps serving: the service never drops a replica

    second = lending(lab, seconds=31)
    assert second.done == ["t4-1"]
    assert [(p.node, p.ready) for p in cluster.pods()] == [("t4-2", True)]
    assert state_of(cluster, "t4-1") == Node.objects.get(name="t4-1").state == "offline-normal"
    (migrating,) = Decision.objects.filter(reason="pod-migrating")  # the pod's name is its service's: kept in its department
    assert migrating.department.name == "ml-ads" and old.spec.name in migrating.message


@pytest.mark.parametrize("crash_at", range(5))
def test_a_crash_at_any_step_is_resumed_by_the_next_tick(lab, monkeypatch, crash_at):
    world, cluster, _ = lab
    serve(cluster, replicas=2)  # t4-1 takes both
    lending(lab, seconds=31)
    request(world, "t4-1", Direction.LEND)
    persisted = controller.step_persist
    calls = {"n": 0}

    def crash_once(record, action, now, report):
        calls["n"] += 1
        if calls["n"] == crash_at + 1:
            raise Crash()  # the action was executed, its step never recorded
        persisted(record, action, now, report)

    monkeypatch.setattr(controller, "step_persist", crash_once)
    for _ in range(10):
        try:
            lending(lab, seconds=31)
        except Crash:
            continue
        if NodeTransition.objects.get(node__name="t4-1").status == "done":
            break
    record = NodeTransition.objects.get(node__name="t4-1")
    assert record.status == "done" and calls["n"] > crash_at
    assert state_of(cluster, "t4-1") == Node.objects.get(name="t4-1").state == "offline-normal"
    pods = cluster.pods()
    assert len(pods) == 2 and all(p.node == "t4-2" and p.ready for p in pods)  # nothing lost, nothing doubled
    assert cluster.replicaset("search-api").ready == 2


def test_automation_lends_idle_online_nodes_when_training_waits(lab):
    world, cluster, _ = lab
    t4 = world.groups["t4"]
    t4.lending = True
    t4.save()
    world.submit(gpus="2", gpu_model="T4", name="wants-t4")  # waiting for T4 capacity
    report = lending(lab)
    assert report.opened == report.done and len(report.opened) == 1  # t4-1 or t4-2: one node stays online
    (name,) = report.opened
    assert state_of(cluster, name) == "offline-normal"
    opened = Decision.objects.filter(subject=f"node:{name}").order_by("id").first()
    assert "online usage" in opened.message and opened.data["direction"] == "online-to-offline"


def test_automation_takes_back_a_lent_node_when_online_pods_wait(lab):
    world, cluster, _ = lab
    t4 = world.groups["t4"]
    t4.lending = True
    t4.save()
    serve(cluster, replicas=5)  # 4 fit on t4-1 and t4-2 (2 GPUs each); one waits
    assert len(cluster.pending_pods()) == 1
    report = lending(lab)
    assert report.done == ["t4-3"] and state_of(cluster, "t4-3") == "online-normal"
    lending(lab)
    assert not cluster.pending_pods()
    assert Node.objects.get(name="t4-0").state == "offline-normal"  # the fixed pool never moves


def test_pinned_nodes_are_left_alone_by_automation(lab):
    world, cluster, _ = lab
    t4 = world.groups["t4"]
    t4.lending = True
    t4.save()
    serve(cluster, replicas=5)
    Node.objects.filter(name="t4-3").update(pinned=True)
    report = lending(lab)
    assert report.opened == [] and state_of(cluster, "t4-3") == "offline-normal"


def test_the_lending_task_runs_a_tick_on_the_live_cluster(lab, settings):
    from redis import Redis

    from colocation.tasks import lending_tick

    world, _, _ = lab
    settings.TIDAL_REDIS_NAMESPACE = f"test-{time.monotonic_ns()}"
    request(world, "a100-0", Direction.TAKE_BACK)
    try:
        report = lending_tick()
        assert report["done"] == ["a100-0"]
        assert Node.objects.get(name="a100-0").state == "online-normal"
    finally:
        Redis.from_url(settings.REDIS_URL).delete(f"{settings.TIDAL_REDIS_NAMESPACE}:{store.KEY}")


# --- forecast-driven lending ------------------------------------------------------------------------


@pytest.fixture
def demand_store(settings):
    from redis import Redis

    redis = Redis.from_url(settings.REDIS_URL)
    namespace = settings.TIDAL_REDIS_NAMESPACE = f"test-{time.monotonic_ns()}"
    yield redis, namespace
    for key in redis.scan_iter(f"{namespace}:*"):
        redis.delete(key)


def fill_history(redis, namespace: str, group: str, now: float, demand, days: float = 2) -> None:
    """`days` days of per-minute demand before `now`: demand(minute offset from now, negative) per minute."""
    from colocation.demand_history import KEEP_DAYS, _demand_key
    from colocation.policy.forecast import DAY_MIN

    end = int(now // 60)
    by_day: dict[int, dict[int, str]] = {}
    for minute in range(end - int(days * DAY_MIN), end):
        day, of_day = divmod(minute, DAY_MIN)
        by_day.setdefault(day, {})[of_day] = repr(float(demand(minute - end)))
    for day, fields in by_day.items():
        redis.hset(_demand_key(namespace, group, day), mapping=fields)
        redis.expire(_demand_key(namespace, group, day), KEEP_DAYS * 86400)


def daily_rise(offset: int) -> float:
    """2 GPUs, 4 from 20 to 60 minutes after the minute the test runs at, every day (the seasonal profile looks
    10 minutes either side: it sees the rise from minute 10, inside the 15 min drain)."""
    return 4.0 if 20 <= offset % 1440 < 60 else 2.0


@pytest.mark.parametrize("forecast", [True, False])
def test_a_forecast_take_back_is_stored_with_its_sentence(lab, demand_store, forecast):
    world, cluster, clock = lab
    redis, namespace = demand_store
    t4 = world.groups["t4"]
    t4.lending = True
    t4.save()
    serve(cluster, replicas=2)  # 2 of the 4 online GPUs: 50%, no threshold fires
    fill_history(redis, namespace, "t4", clock.now() + 5, daily_rise)
    clock.advance(5)
    cluster.advance()
    profile = DEFAULT.with_(forecast=forecast)
    report = controller.lending_tick(backend=cluster, now=clock.now(), profile=profile, redis=redis,
                                     namespace=namespace)
    from colocation import demand_history

    if not forecast:  # today's threshold rules: nothing moves; demand is still recorded
        assert report.opened == [] and demand_history.take_back_by(redis, namespace) == ()
        assert demand_history.history(redis, namespace, "t4", clock.now() + 60)[-1] == 2.0
        return
    assert report.opened == ["t4-3"]
    decision = Decision.objects.filter(subject="node:t4-3", reason="forecast-above-max").get()
    rise = time.strftime("%H:%M", time.gmtime(clock.now() - clock.now() % 60 + 600))
    assert decision.message.startswith(f"take back t4-3: forecast {rise} online 100% > maxRate 80%; ")
    assert NodeTransition.objects.get(node__name="t4-3").reason == "forecast-above-max"
    (model, at), = demand_history.take_back_by(redis, namespace)
    assert model == "T4" and at == pytest.approx(clock.now() - clock.now() % 60 + 600 - profile.drain_s)


def test_the_scheduler_reads_the_predicted_take_back_by_default(demand_store):
    from colocation import demand_history
    from colocation.selectors import lending_profile

    redis, namespace = demand_store
    assert lending_profile().forecast and lending_profile().take_back_by == ()
    demand_history.put_take_back_by(redis, namespace, {"T4": 1234.0}, ttl_s=60)
    assert lending_profile().take_back_by == (("T4", 1234.0),)


def _cold_tick(lab, demand_store, offset_min: int, value: float):
    """A forecast-driven lending tick of t4 (2 replicas serving) after 3 h of demand history, no seasonal profile:
    2 GPUs every minute but `value` at `offset_min`."""
    world, cluster, clock = lab
    redis, namespace = demand_store
    t4 = world.groups["t4"]
    t4.lending = True
    t4.save()
    serve(cluster, replicas=2)
    fill_history(redis, namespace, "t4", clock.now() + 5, lambda offset: value if offset == offset_min else 2.0,
                 days=0.125)
    clock.advance(5)
    cluster.advance()
    return controller.lending_tick(backend=cluster, now=clock.now(), profile=DEFAULT.with_(forecast=True),
                                   redis=redis, namespace=namespace)


@pytest.mark.parametrize("high", [4.0, 2.0])
def test_a_cold_group_takes_back_for_its_recent_high(lab, demand_store, high):
    # 3 h of history (no seasonal profile): 2 GPUs, `high` an hour ago. 4 on the 4 online GPUs is 100% > maxRate:
    # the lent node comes back now, the decision naming the recent forecast; 2 (50%) moves nothing
    report = _cold_tick(lab, demand_store, offset_min=-60, value=high)
    if high == 2.0:
        assert report.opened == []
        return
    assert report.opened == ["t4-3"]
    decision = Decision.objects.filter(subject="node:t4-3", reason="forecast-above-max").get()
    assert decision.message.startswith("take back t4-3: forecast (recent) ")
    assert "online 100% > maxRate 80%" in decision.message


@pytest.mark.parametrize("burst", [4.0, 2.0])
def test_a_cold_group_plans_for_its_bursts_without_evicting(lab, demand_store, burst):
    # 3 h of history (no seasonal profile): 2 GPUs, `burst` 2.5 h ago (outside the recent high: its level says 2 of
    # the 4 online GPUs). Demand doubled within 2 h before, so its burst band is 4 = 100% > maxRate: the lent node
    # takes no new job (its predicted take-back is now), and nothing is taken back or evicted for it
    from colocation import demand_history

    (_, _, clock), (redis, namespace) = lab, demand_store
    report = _cold_tick(lab, demand_store, offset_min=-150, value=burst)
    assert report.opened == []
    if burst == 2.0:
        assert demand_history.take_back_by(redis, namespace) == ()
        return
    (model, at), = demand_history.take_back_by(redis, namespace)
    assert model == "T4" and at <= clock.now()


def test_a_group_with_forecast_driven_lending_off_keeps_the_threshold_rules(lab, demand_store):
    world, cluster, clock = lab
    redis, namespace = demand_store
    t4 = world.groups["t4"]
    t4.lending, t4.lending_forecast = True, False
    t4.save()
    serve(cluster, replicas=2)
    fill_history(redis, namespace, "t4", clock.now() + 5, daily_rise)
    clock.advance(5)
    cluster.advance()
    report = controller.lending_tick(backend=cluster, now=clock.now(), profile=DEFAULT.with_(forecast=True),
                                     redis=redis, namespace=namespace)
    from colocation import demand_history

    assert report.opened == [] and demand_history.take_back_by(redis, namespace) == ()


def test_the_history_cache_reads_redis_once_a_minute(demand_store):
    from colocation import demand_history

    redis, namespace = demand_store
    now = 1_800_000_000.0  # a minute's start
    fill_history(redis, namespace, "t4", now, lambda offset: 2.0, days=1)
    cache = demand_history.HistoryCache()
    first = cache.history(redis, namespace, "t4", now + 5)
    demand_history.record(redis, namespace, {"t4": 9.0}, now + 10)  # within the minute: not in the history yet
    assert cache.history(redis, namespace, "t4", now + 50) is first and cache.reads == 1
    later = cache.history(redis, namespace, "t4", now + 65)  # the minute ended: read again, it holds the 9
    assert cache.reads == 2 and later[-1] == 9.0 and len(later) == len(first) + 1


def graceful_setup(lab):
    """A T4 job on the lent t4-3 (another on the fixed t4-0), and 4 one-GPU replicas filling t4-1 and t4-2:
    online usage 100% > maxRate with nothing pending, so the automation takes t4-3 back gracefully."""
    world, cluster, clock = lab
    t4 = world.groups["t4"]
    t4.lending = True
    t4.save()
    jobs = [world.submit(gpus="2", gpu_model="T4", name=f"t4-job-{i}") for i in range(2)]
    scheduling(lab)
    (lent_job,) = [j for j in jobs if (j.refresh_from_db() or j).node.name == "t4-3"]
    serve(cluster, replicas=4)
    lending(lab, seconds=31)  # the replicas become ready; the take-back opens and cordons t4-3
    return lent_job


def test_a_graceful_take_back_waits_then_evicts_at_its_deadline(lab):
    world, cluster, clock = lab
    job = graceful_setup(lab)
    record = NodeTransition.objects.get(node__name="t4-3", status="open")
    assert record.reason == "online-usage-above-max"
    assert record.evict_at.timestamp() == pytest.approx(clock.now() + DEFAULT.take_back_grace_s, abs=60)
    deadline = record.evict_at.timestamp()
    assert state_of(cluster, "t4-3") == "online-unnormal"  # cordoned at once: no new training lands there
    assert record.waiting_for.startswith("cordoned: 1 training pods may finish until ")
    assert "cordoned, evicting what still runs at" in record.message
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING  # not killed yet
    from django.test import Client

    ops = Client()
    ops.force_login(world.users["operator"])
    assert "cordoned: 1 training pods may finish until" in ops.get("/ops/nodes/").content.decode()  # as operators see it
    (api,) = ops.get("/api/transitions/", {"node": "t4-3", "status": "open"}).json()["results"]  # and automation
    assert datetime.fromisoformat(api["evict_at"]).timestamp() == pytest.approx(deadline, abs=1)

    lending(lab, seconds=deadline - clock.now() - 10)  # just before the deadline: still waiting
    job.refresh_from_db()
    assert job.status == JobStatus.RUNNING and "t4-3" in lending(lab, seconds=1).waiting

    report = lending(lab, seconds=deadline - clock.now())  # the deadline: what still runs is evicted
    job.refresh_from_db()
    assert job.status == JobStatus.PENDING and job.pool_preference == "fixed"
    lending(lab)
    assert NodeTransition.objects.get(node__name="t4-3").status == "done", report


def test_online_pods_pending_expedite_a_graceful_take_back(lab):
    world, cluster, clock = lab
    job = graceful_setup(lab)
    record = NodeTransition.objects.get(node__name="t4-3", status="open")
    assert record.evict_at.timestamp() > clock.now() + 600
    serve(cluster, replicas=5)  # one more replica finds no room: online service wins
    lending(lab)
    record.refresh_from_db()
    job.refresh_from_db()
    assert record.evict_at.timestamp() <= clock.now()
    assert job.status == JobStatus.PENDING
    assert Decision.objects.filter(subject="node:t4-3", reason="take-back-expedited").exists()
    lending(lab, seconds=31)
    assert not cluster.pending_pods() and state_of(cluster, "t4-3") == "online-normal"


def test_the_near_term_demand_comes_from_a_usable_xgboost_forecast(lab):
    from datetime import timedelta

    from cluster.clock import utc
    from colocation.models import InferenceService
    from profiling.models import Forecast, ForecastModel

    world, cluster, clock = lab
    serve(cluster, replicas=2, name="chat")
    cluster.advance()
    service = InferenceService.objects.create(name="chat", department=world.departments["ml-search"],
                                              gpu_model=world.gpu_models["T4"], replicas=2)
    made_at = utc(clock.now() - clock.now() % 60 - 60)
    for usable, version in ((False, 1), (True, 2)):
        model = ForecastModel.objects.create(target="gpu", version=version, trained_from=made_at,
                                             trained_to=made_at, minutes=1, usable=usable, blob=b"")
        for h, value in enumerate((0.5, 0.6, 0.9, 0.9, 0.9) if usable else (0.1,) * 5, start=1):
            Forecast.objects.create(service=service, model=model, target="gpu", made_at=made_at - timedelta(
                minutes=0 if usable else 1), horizon=h, minute=made_at + timedelta(minutes=h), value=value, replicas=2)
    world.groups["t4"].lending = True
    world.groups["t4"].save()
    (t4,) = [g for g in controller.group_views(cluster) if g.name == "t4"]
    # ceil(0.9 × 2 / 0.6) = 3 replicas from minute 3 on; the default expectRate 0.6 (no gpu threshold set)
    assert controller.near_term([t4], clock.now()) == {"t4": (2.0, 2.0, 3.0, 3.0, 3.0)}
    assert controller.near_term([t4], clock.now() + 600) == {}  # too old: not used


def test_lending_keeps_room_for_a_whole_group_and_looks_ahead_its_start_up(lab):
    """Issue 42: a replica of 2 pods × 2 T4 takes 4 GPUs, and a take-back starts the group's 600 s start-up early."""
    from colocation.models import InferenceService

    world, cluster, clock = lab
    InferenceService.objects.create(name="llm", department=world.departments["ml-search"],
                                    gpu_model=world.gpu_models["T4"], replicas=1, min_replicas=1, gpus_per_replica=2, group_size=2,
                                    startup_s=600)
    InferenceService.objects.create(name="small", department=world.departments["ml-search"],
                                    gpu_model=world.gpu_models["T4"], replicas=1, min_replicas=1, gpus_per_replica=1, startup_s=30)
    world.groups["t4"].lending = True
    world.groups["t4"].save()
    (t4,) = [g for g in controller.group_views(cluster) if g.name == "t4"]
    assert (t4.largest_replica, t4.startup_s) == (4.0, 600.0)


def test_a_take_back_frees_whole_machines_for_a_waiting_group_at_once(world):
    """Issue 42: a group of 2 pods × 2 T4 finds no room online; one take-back decision names it and brings back both
    machines it needs together, past max_parallel 1, and the group is then placed whole on them."""
    from colocation.models import InferenceService

    t4 = world.groups["t4"]
    for name in ("t4-2", "t4-3", "t4-4"):
        Node.objects.create(name=name, resource_group=t4, gpu_model=world.gpu_models["T4"], gpu_count=2,
                            cpu_milli=32000, memory_mib=131072, pool=Pool.COLOCATION,
                            state=NodeState.ONLINE_NORMAL if name == "t4-2" else NodeState.OFFLINE_NORMAL)
    t4.lending = True
    t4.save()
    clock = VirtualClock(T0)
    cluster = SimulatedCluster(node_views(), clock, store.labelled_runtime)
    lab = (world, cluster, clock)
    serve(cluster, replicas=4)  # t4-1 and t4-2 full
    InferenceService.objects.create(name="llm", department=world.departments["ml-search"],
                                    gpu_model=world.gpu_models["T4"], replicas=1, min_replicas=1, gpus_per_replica=2,
                                    group_size=2, startup_s=0)
    profile = DEFAULT.with_(max_parallel=1)
    clock.advance(5)
    cluster.advance()
    report = controller.lending_tick(backend=cluster, now=clock.now(), profile=profile)
    assert sorted(report.opened) == ["t4-3", "t4-4"]  # one decision, both machines
    for node in ("t4-3", "t4-4"):
        (opened,) = Decision.objects.filter(subject=f"node:{node}", reason="online-pods-pending")
        assert "frees 2 machines at once for group 0 of llm, past max 1 converting" in opened.message
    for _ in range(3):
        clock.advance(5)
        cluster.advance()
        controller.lending_tick(backend=cluster, now=clock.now(), profile=profile)
    llm = sorted((p.spec.name, p.node) for p in cluster.pods() if p.spec.labels.get(SERVICE_LABEL) == "llm")
    assert llm == [("llm-0", "t4-3"), ("llm-0-1", "t4-4")]
    assert state_of(cluster, "t4-3") == state_of(cluster, "t4-4") == "online-normal"


def test_group_views_carry_the_latest_take_back_for_lendings_hysteresis(lab):
    """A group's latest take-back (operator or automation) holds lending for relend_after_s: the view carries it."""
    world, cluster, _ = lab
    world.groups["t4"].lending = True
    world.groups["t4"].save()
    (t4,) = [g for g in controller.group_views(cluster) if g.name == "t4"]
    assert t4.last_take_back is None
    request(world, "t4-2", Direction.LEND)  # a lend is no take-back
    latest = request(world, "t4-3", Direction.TAKE_BACK)
    (t4,) = [g for g in controller.group_views(cluster) if g.name == "t4"]
    assert t4.last_take_back == latest.started_at.timestamp()
