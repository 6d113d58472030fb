"""The quota tree through the API (issue 41): departments nest, weigh and lend; bad trees are 400s naming the field,
with nothing written; the scheduler's snapshot carries the tree."""
import pytest
from django.test import Client

from core.models import Department
from scheduler.models import Quota
from scheduler.observe import quota_tree

pytestmark = pytest.mark.django_db


def test_departments_nest_and_the_snapshot_carries_the_tree(world):
    client = world.client("operator")
    division = client.post("/api/departments/", {"name": "ml", "weight": "2"}, format="json")
    assert division.status_code == 201, division.json()
    moved = client.patch(f"/api/departments/{world.departments['ml-search'].pk}/",
                         {"parent": "ml", "reclaim_min_runtime_s": 120}, format="json")
    assert moved.status_code == 200, moved.json()
    assert (moved.json()["parent"], moved.json()["weight"]) == ("ml", "1.000")
    nodes = {n.name: n for n in quota_tree()}
    assert (nodes["ml-search"].parent, nodes["ml-search"].reclaim_min_runtime_s) == ("ml", 120.0)
    assert (nodes["ml"].parent, nodes["ml"].weight) == (None, 2.0)


def test_a_fence_goes_through_the_api_into_the_snapshot(world):
    """A fenced department's work preempts only inside its subtree (scenario 11 is the policy's table test)."""
    admin = world.client("dept_admin")  # adam administers ml-search
    child = admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search", "fence": True},
                       format="json")
    assert child.status_code == 201 and child.json()["fence"] is True, child.json()
    assert {n.name: n.fence for n in quota_tree()}["search-ranking"] is True
    tree = {n["name"]: n["fence"] for n in admin.get("/api/departments/tree/").json()["nodes"]}
    assert (tree["search-ranking"], tree["ml-search"]) == (True, False)
    off = admin.patch(f"/api/departments/{child.json()['id']}/", {"fence": False}, format="json")
    assert off.status_code == 200 and off.json()["fence"] is False
    refused = admin.patch(f"/api/departments/{world.departments['ml-search'].pk}/", {"fence": True}, format="json")
    assert refused.status_code == 403 and not Department.objects.get(name="ml-search").fence  # their own: 403
    assert admin.patch(f"/api/departments/{child.json()['id']}/", {"fence": "maybe"},
                       format="json").status_code == 400


def test_flat_departments_give_no_tree(world):
    assert quota_tree() == ()


def test_a_cycle_in_the_tree_is_refused_and_nothing_is_written(world):
    client = world.client("operator")
    assert client.post("/api/departments/", {"name": "ml", "parent": "ml-search"}, format="json").status_code == 201
    response = client.patch(f"/api/departments/{world.departments['ml-search'].pk}/", {"parent": "ml"},
                            format="json")
    assert response.status_code == 400 and "parent" in str(response.json()), response.json()
    assert Department.objects.get(name="ml-search").parent is None


@pytest.mark.parametrize("field, value", [("weight", "-1"), ("reclaim_min_runtime_s", -5)])
def test_a_negative_weight_or_run_time_is_refused(world, field, value):
    response = world.client("operator").post("/api/departments/", {"name": "ml", field: value}, format="json")
    assert response.status_code == 400 and field in str(response.json()), response.json()
    assert not Department.objects.filter(name="ml").exists()


@pytest.mark.parametrize("lend", ["9", "-1"])
def test_a_lend_limit_above_own_or_negative_is_refused(world, lend):
    payload = {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "4", "lend_limit": lend}
    response = world.client("operator").post("/api/quotas/", payload, format="json")
    assert response.status_code == 400 and "lend_limit" in str(response.json()), response.json()
    assert not Quota.objects.filter(department__name="ml-search", gpu_model__name="P40").exists()


def test_a_lend_limit_is_kept_when_amounts_change(world):
    client = world.client("operator")
    payload = {"department": "ml-search", "resource_kind": "gpu", "gpu_model": "P40", "own": "4", "lend_limit": "1"}
    created = client.post("/api/quotas/", payload, format="json")
    assert created.status_code == 201, created.json()
    changed = client.patch(f"/api/quotas/{created.json()['id']}/", {"own": "6"}, format="json")
    assert changed.status_code == 200 and changed.json()["lend_limit"] == "1.000", changed.json()


def _tree(world) -> None:
    """ml above ml-search and ml-ads."""
    assert world.client("operator").post("/api/departments/", {"name": "ml"}, format="json").status_code == 201
    for name in ("ml-search", "ml-ads"):
        Department.objects.filter(name=name).update(parent=Department.objects.get(name="ml"))


def test_the_tree_shows_each_nodes_quota_usage_and_fair_share_per_model(world):
    _tree(world)
    for n in range(3):  # ml-search: 3 of its own 4 A100 in use, and 2 more waiting
        world.hold(world.submit(name=f"run-{n}", gpu_model="A100"), gpu_model="A100")
    world.submit(name="waiting", gpu_model="A100", gpus="2")
    world.submit("outsider", department="ml-ads", name="ads", gpu_model="A100", gpus="8")
    body = world.client("operator").get("/api/departments/tree/").json()
    assert body["capacity"] == {"A100": 8.0, "T4": 4.0} and body["warnings"] == []
    assert [(n["name"], n["parent"], n["depth"], n["leaf"]) for n in body["nodes"]] == [
        ("ml", None, 0, False), ("ml-ads", "ml", 1, True), ("ml-search", "ml", 1, True)]
    a100 = {n["name"]: next(q for q in n["quotas"] if q["gpu_model"] == "A100") for n in body["nodes"]}
    assert (a100["ml-search"]["own"], a100["ml-search"]["used"], a100["ml-search"]["pending"]) == (4, 3, 2)
    assert a100["ml-search"]["borrow_limit"] == 2 and a100["ml-search"]["lend_limit"] is None
    assert (a100["ml"]["subtree_own"], a100["ml"]["used"], a100["ml"]["pending"]) == (8, 3, 10)
    # 8 A100: each leaf its own demand up to its own (ml-search 4 of 5, ml-ads 4 of 8), nothing left to split
    assert (a100["ml-search"]["fair_share"], a100["ml-ads"]["fair_share"], a100["ml"]["fair_share"]) == (4, 4, 8)


def test_a_job_with_an_open_gpu_model_is_pending_on_its_most_idle_certified_model(world):
    """pytorch is certified on T4 (4 GPUs, 2 held) and A100 (8 idle): the open job counts on A100, where the queue
    tries it first."""
    world.hold(world.submit(name="t4-run", gpu_model="T4", gpus="2"), gpu_model="T4")
    world.submit(name="open", gpu_model=None, gpus="3")
    body = world.client("member").get("/api/departments/tree/").json()
    search = next(n for n in body["nodes"] if n["name"] == "ml-search")
    assert {q["gpu_model"]: q["pending"] for q in search["quotas"]} == {"A100": 3, "T4": 0}, search


def test_quotas_past_the_cluster_are_a_warning(world):
    Quota.objects.filter(department__name="ml-ads", gpu_model__name="T4").update(own=3)
    body = world.client("member").get("/api/departments/tree/").json()
    assert body["warnings"] == ["own T4 quotas sum to 5 GPUs; the cluster has 4"]


def test_only_the_leaves_of_the_tree_run_jobs(world):
    world.client("operator").post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"},
                                  format="json")
    before = world.snapshot()
    response = world.client("member").post("/api/jobs/", world.job_payload(), format="json")
    assert response.status_code == 400, response.json()
    assert "only the leaves" in response.json()["extra"]["fields"]["department"][0]
    assert world.snapshot() == before


def test_a_member_reads_their_part_of_the_tree(world):
    _tree(world)
    world.client("operator").post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"},
                                  format="json")
    names = [n["name"] for n in world.client("member").get("/api/departments/tree/").json()["nodes"]]
    assert names == ["ml", "ml-search", "search-ranking"]  # above and below, not the sibling ml-ads
    assert world.client("anonymous").get("/api/departments/tree/").status_code == 401


def test_a_department_admin_manages_the_children_of_their_department(world):
    _tree(world)
    admin = world.client("dept_admin")  # adam administers ml-search
    created = admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"}, format="json")
    assert created.status_code == 201, created.json()
    child = created.json()["id"]
    assert admin.post("/api/departments/", {"name": "search-infra", "parent": "search-ranking"},
                      format="json").status_code == 201
    weighed = admin.patch(f"/api/departments/{child}/", {"weight": "3"}, format="json")
    assert weighed.status_code == 200 and weighed.json()["weight"] == "3.000"
    infra = Department.objects.get(name="search-infra")
    assert admin.patch(f"/api/departments/{infra.pk}/", {"parent": "ml-search"}, format="json").status_code == 200
    refused = [
        admin.patch(f"/api/departments/{child}/", {"parent": "ml-ads"}, format="json"),  # out of their subtree
        admin.patch(f"/api/departments/{child}/", {"parent": None}, format="json"),
        admin.patch(f"/api/departments/{world.departments['ml-search'].pk}/", {"weight": "5"}, format="json"),
        admin.post("/api/departments/", {"name": "top", "parent": None}, format="json"),
        admin.post("/api/departments/", {"name": "ads-team", "parent": "ml-ads"}, format="json"),
        admin.delete(f"/api/departments/{child}/"),
    ]
    assert [r.status_code for r in refused] == [403] * 6
    assert world.client("member").patch(f"/api/departments/{child}/", {"weight": "2"},
                                        format="json").status_code == 404  # not one of theirs
    assert Department.objects.get(pk=child).parent.name == "ml-search"
    assert not Department.objects.filter(name__in=["top", "ads-team"]).exists()


def test_a_department_admin_sets_the_quotas_of_the_departments_below_theirs(world):
    admin = world.client("dept_admin")  # adam administers ml-search
    assert admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"},
                      format="json").status_code == 201
    body = {"department": "search-ranking", "resource_kind": "gpu", "gpu_model": "A100", "own": "2", "borrowed": "1",
            "lend_limit": "1"}
    created = admin.post("/api/quotas/", body, format="json")
    assert created.status_code == 201, created.json()
    changed = admin.patch(f"/api/quotas/{created.json()['id']}/", {"own": "3", "lend_limit": "2"}, format="json")
    assert changed.status_code == 200 and (changed.json()["own"], changed.json()["lend_limit"]) == ("3.000", "2.000")
    cpu = admin.post("/api/quotas/", {"department": "search-ranking", "resource_kind": "cpu", "own": "8000"},
                     format="json")
    assert cpu.status_code == 201, cpu.json()
    own_quota = Quota.objects.get(department__name="ml-search", gpu_model__name="A100")
    refused = [
        admin.post("/api/quotas/", {**body, "department": "ml-search"}, format="json"),  # their own: a 403
        admin.patch(f"/api/quotas/{own_quota.pk}/", {"own": "9"}, format="json"),
    ]
    assert [r.status_code for r in refused] == [403, 403]
    outside = admin.post("/api/quotas/", {**body, "department": "ml-ads"}, format="json")
    assert outside.status_code == 400 and "department" in outside.json()["extra"]["fields"], outside.json()
    ads = Quota.objects.get(department__name="ml-ads", gpu_model__name="A100")
    assert admin.patch(f"/api/quotas/{ads.pk}/", {"own": "9"}, format="json").status_code == 404
    assert Quota.objects.get(pk=own_quota.pk).own == own_quota.own and Quota.objects.get(pk=ads.pk).own == ads.own


@pytest.mark.parametrize("body, field", [
    ({"own": "-1"}, "own"), ({"borrowed": "-2"}, "borrowed"), ({"own": "2", "lend_limit": "3"}, "lend_limit"),
    ({"lend_limit": "-1"}, "lend_limit"), ({"gpu_model": "H999"}, "gpu_model"), ({"department": "nowhere"},
                                                                                   "department"),
])
def test_a_bad_quota_by_an_admin_is_a_400_naming_the_field_and_writes_nothing(world, body, field):
    admin = world.client("dept_admin")
    admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"}, format="json")
    before = world.snapshot()
    response = admin.post("/api/quotas/", {"department": "search-ranking", "resource_kind": "gpu",
                                           "gpu_model": "A100", "own": "1", **body}, format="json")
    assert response.status_code == 400 and field in response.json()["extra"]["fields"], response.json()
    assert world.snapshot() == before


def test_a_department_with_unfinished_jobs_takes_no_child(world):
    """Only leaves run jobs: ml-search has a waiting job, so nothing goes under it until the job ends."""
    job = world.submit(name="waiting")
    admin, operator = world.client("dept_admin"), world.client("operator")
    assert operator.post("/api/departments/", {"name": "spare"}, format="json").status_code == 201
    before = list(Department.objects.order_by("pk").values())
    refused = [admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"}, format="json"),
               operator.patch(f"/api/departments/{Department.objects.get(name='spare').pk}/",
                              {"parent": "ml-search"}, format="json")]
    for response in refused:
        assert response.status_code == 409, response.json()
        assert "1 unfinished job" in response.json()["extra"]["fields"]["parent"][0], response.json()
    assert list(Department.objects.order_by("pk").values()) == before
    job.status = "cancelled"
    job.save()
    assert admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"},
                      format="json").status_code == 201


@pytest.mark.parametrize("body, field", [({"weight": "-1"}, "weight"), ({"weight": "x"}, "weight"),
                                         ({"parent": "nowhere"}, "parent"), ({"parent": "search-ranking"}, "parent")])
def test_a_bad_change_by_an_admin_is_a_400_naming_the_field_and_writes_nothing(world, body, field):
    admin = world.client("dept_admin")
    child = admin.post("/api/departments/", {"name": "search-ranking", "parent": "ml-search"}, format="json")
    before = list(Department.objects.order_by("pk").values())
    response = admin.patch(f"/api/departments/{child.json()['id']}/", body, format="json")
    assert response.status_code == 400 and field in response.json()["extra"]["fields"], response.json()
    assert list(Department.objects.order_by("pk").values()) == before


def test_a_wait_blocked_above_the_department_names_the_level(world):
    """ml-search sits under ml, which may borrow nothing from outside: with its own A100 in use, ml-search's next job
    is refused by ml's limit (not its own borrowed quota), and its pending sentence names ml."""
    import time

    from cluster.clock import VirtualClock
    from cluster.simulated import store
    from cluster.simulated.engine import SimulatedCluster
    from colocation.selectors import node_views
    from scheduler import live
    from scheduler.policy.profile import get_profile

    client = world.client("operator")
    assert client.post("/api/departments/", {"name": "ml"}, format="json").status_code == 201
    for model in ("A100", "T4"):
        assert client.post("/api/quotas/", {"department": "ml", "resource_kind": "gpu", "gpu_model": model,
                                            "own": "0", "borrowed": "0"}, format="json").status_code == 201
    Department.objects.filter(name="ml-search").update(parent=Department.objects.get(name="ml"))
    Quota.objects.filter(department__name="ml-search", gpu_model__name="T4").delete()  # no T4 to fall back on
    world.hold(world.submit(name="own", gpu_model="A100", gpus="4"), gpu_model="A100")
    waiting = world.submit(name="next", gpu_model="A100", gpus="1")
    cluster = SimulatedCluster(node_views(), VirtualClock(time.time()), store.labelled_runtime)
    live.scheduler_tick(backend=cluster, now=time.time(), profile=get_profile("tidal"))
    body = world.client("member").get(f"/api/jobs/{waiting.pk}/").json()
    assert body["status"] == "pending", body
    sentence = "department ml may borrow at most 0 A100; 0 borrowed, needs 1"
    assert sentence in body["latest_decision"]["message"], body
    page = Client()  # the job's console page says the same under "Why is it waiting?"
    page.force_login(world.users["member"])
    html = page.get(f"/jobs/{waiting.pk}/").content.decode()
    assert sentence in html[html.index('id="why"'):]



@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("first, second", [("child", "job"), ("job", "child")])
def test_a_job_and_a_child_racing_for_one_department_wait_for_each_other(world, first, second):
    """Only leaves run jobs, also under a race: submitting to a department and adding a child under it both lock the
    department's row, so the second write waits for the first (here until its lock timeout) instead of missing it."""
    import threading

    from django.db import OperationalError, connection, transaction

    from core.services import department_create

    writes = {"job": lambda: world.submit(name="racing"),
              "child": lambda: department_create(name="search-ranking", parent=Department.objects.get(name="ml-search"))}
    begun, release = threading.Event(), threading.Event()

    def hold_first():  # the first write, in its own session, uncommitted until released
        try:
            with transaction.atomic():
                writes[first]()
                begun.set()
                release.wait(10)
                transaction.set_rollback(True)
        finally:
            connection.close()

    thread = threading.Thread(target=hold_first)
    thread.start()
    try:
        assert begun.wait(10)
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '300ms'")
            writes[second]()
    finally:
        release.set()
        thread.join()
    assert not Department.objects.filter(name="search-ranking").exists()
    assert not world.departments["ml-search"].jobs.exists()
