"""The operators' dashboards: who may open them, what they show, and what their actions do."""
import re
from datetime import timedelta

import pytest
from django.test import Client

from colocation.models import NodeTransition
from core.models import Decision, Membership
from scheduler.models import JobRun, Quota

PAGES = ["/ops/", "/ops/nodes/", "/ops/quotas/", "/ops/autoscaling/", "/ops/decisions/"]


def signed_in(world, role: str, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(world.users[role])
    return client


ADMIN_PAGES = ["/ops/quotas/", "/ops/decisions/"]


@pytest.mark.parametrize("path", PAGES)
def test_only_operators_open_the_dashboards(world, path):
    assert Client().get(path)["Location"].startswith("/login/?next=")
    for role in ("member", "outsider"):
        assert signed_in(world, role).get(path).status_code == 403
    admin = signed_in(world, "dept_admin").get(path).status_code
    assert admin == (200 if path in ADMIN_PAGES else 403)
    assert signed_in(world, "operator").get(path).status_code == 200


def test_a_department_admin_sees_their_departments_slice_read_only(world):
    Membership.objects.create(user=world.users["dept_admin"], department=world.departments["ml-ads"],
                              role=Membership.Role.MEMBER)  # a member there: not in the admin's slice
    admin = signed_in(world, "dept_admin")
    world.submit()  # a decision of ml-search
    world.submit(department="ml-ads", role="operator")  # a decision of ml-ads
    page = admin.get("/ops/quotas/")
    assert {r["department"] for r in page.context["rows"]} == {"ml-search"} and not page.context["can_edit"]
    assert "<form method=\"post\" class=\"inline-form\"" not in page.content.decode()
    assert [label for label, _ in page.context["tabs"]] == ["Quotas", "Decisions"]
    quota = Quota.objects.get(department__name="ml-search", gpu_model__name="T4")
    assert admin.post("/ops/quotas/", {"quota": quota.pk, f"q{quota.pk}-own": "9",
                                       f"q{quota.pk}-borrowed": "0"}).status_code == 403
    quota.refresh_from_db()
    assert quota.own == 2
    departments = {d.department.name for d in admin.get("/ops/decisions/").context["table"].rows.data.data
                   if d.department}
    assert departments == {"ml-search"}
    nav = admin.get("/jobs/").content.decode()
    assert 'href="/ops/quotas/"' in nav and 'href="/ops/"' not in nav


def test_the_operations_link_is_for_operators_only(world):
    assert 'href="/ops/"' in signed_in(world, "operator").get("/jobs/").content.decode()
    member = signed_in(world, "member").get("/jobs/").content.decode()
    assert 'href="/ops/"' not in member and 'href="/ops/quotas/"' not in member


def test_overview_reads_its_history_from_prometheus_and_says_when_it_cannot(world, settings):
    job = world.submit()
    JobRun.objects.create(job=job, attempt=1, started_at=job.submitted_at + timedelta(seconds=45))
    page = signed_in(world, "operator").get("/ops/?range=day")
    assert [(w["up_to"], w["jobs"]) for w in page.context["waits"] if w["jobs"]] == [(60.0, 1)]
    assert page.status_code == 200 and page.context["range"] == "day" and not page.context["error"]
    assert [c["id"] for c in page.context["charts"]][:2] == ["chart-allocated", "chart-used"]
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # nothing listens there
    page = signed_in(world, "operator").get("/ops/?range=nonsense")
    assert page.context["range"] == "hour" and "did not answer" in page.context["error"]
    assert "did not answer" in page.content.decode()


def test_nodes_page_shows_every_node_and_lends_one_as_a_decision_in_the_operators_name(world):
    operator = signed_in(world, "operator")
    page = operator.get("/ops/nodes/?node=t4-1")
    html = page.content.decode()
    assert all(f'title="{name}:' in html for name in world.nodes)
    assert page.context["selected"]["verbs"] == ["lend", "pin"]
    response = operator.post("/ops/nodes/t4-1/lend/")
    assert response.status_code == 302 and response["Location"] == "/ops/nodes/?node=t4-1"
    transition = NodeTransition.objects.get(node__name="t4-1")
    assert transition.status == "open" and transition.requested_by == world.users["operator"]
    decision = Decision.objects.get(subject="node:t4-1", reason="operator-lend")
    assert "otto" in decision.message
    page = operator.get("/ops/nodes/?node=t4-1")
    assert page.context["selected"]["verbs"] == ["pin"]  # no second move while one is open
    assert [t.node.name for t in page.context["open"]] == ["t4-1"] and len(page.context["timeline"]) == 1


def test_a_refused_node_action_says_why_and_changes_nothing(world):
    operator = signed_in(world, "operator")
    before = world.snapshot()
    page = operator.post("/ops/nodes/t4-0/lend/", follow=True)  # t4-0 is offline already (fixed pool)
    assert world.snapshot() == before
    assert any("t4-0" in str(m) for m in page.context["messages"])
    assert signed_in(world, "member").post("/ops/nodes/t4-1/lend/").status_code == 403
    assert not NodeTransition.objects.exists()


def test_pin_and_unpin(world):
    operator = signed_in(world, "operator")
    operator.post("/ops/nodes/a100-0/pin/")
    world.nodes["a100-0"].refresh_from_db()
    assert world.nodes["a100-0"].pinned
    assert operator.get("/ops/nodes/?node=a100-0").context["selected"]["verbs"] == ["unpin"]
    operator.post("/ops/nodes/a100-0/unpin/")
    world.nodes["a100-0"].refresh_from_db()
    assert not world.nodes["a100-0"].pinned


def test_quota_below_what_is_in_use_is_refused_beside_its_field(world):
    world.hold(world.submit(gpus="2"))  # ml-search holds 2 own T4
    quota = Quota.objects.get(department__name="ml-search", gpu_model__name="T4")
    operator = signed_in(world, "operator")
    before = world.snapshot()
    page = operator.post("/ops/quotas/", {"quota": quota.pk, f"q{quota.pk}-own": "1", f"q{quota.pk}-borrowed": "1"})
    assert page.status_code == 400 and world.snapshot() == before
    html = page.content.decode()
    pattern = rf'id="id_q{quota.pk}-own" value="1"[^>]*aria-invalid="true"[^>]*><span class="errorlist"[^>]*>[^<]*below the 2'
    assert re.search(pattern, html), "the error sits beside the own field, with what was typed"
    page = operator.post("/ops/quotas/", {"quota": quota.pk, f"q{quota.pk}-own": "-1", f"q{quota.pk}-borrowed": "x"})
    failed = next(r for r in page.context["rows"] if r["pk"] == quota.pk)
    assert page.status_code == 400 and set(failed["errors"]) == {"own", "borrowed"}
    assert failed["values"] == {"own": "-1", "borrowed": "x"}
    response = operator.post("/ops/quotas/", {"quota": quota.pk, f"q{quota.pk}-own": "6", f"q{quota.pk}-borrowed": "0"})
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.own, quota.borrowed) == (6, 0)
    assert Decision.objects.filter(kind="quota", department__name="ml-search", message__contains="otto").exists()


def test_quota_page_shows_who_borrows(world):
    world.hold(world.submit(gpus="1"), quota_kind="borrowed")
    page = signed_in(world, "operator").get("/ops/quotas/")
    borrowing = {b["resource"]: b for b in page.context["borrowing"]}
    assert set(borrowing) == {"T4", "cpu", "memory"}  # a job runs wholly on one kind of quota
    assert borrowing["T4"]["borrowers"] == [("ml-search", 1)]
    assert ("ml-ads", 2) in borrowing["T4"]["idle"]
    assert "ml-search</a> 1 GPU" in page.content.decode()


def test_decisions_are_searchable_and_linked_to_their_subject(world):
    job = world.submit()
    operator = signed_in(world, "operator")
    operator.post("/ops/nodes/a100-0/pin/")
    page = operator.get("/ops/decisions/?q=pinned")
    html = page.content.decode()
    assert '<a href="/ops/nodes/?node=a100-0">node:a100-0</a>' in html and f"job:{job.pk}" not in html
    page = operator.get(f"/ops/decisions/?subject=job:{job.pk}")
    assert f'<a href="/jobs/{job.pk}/">job:{job.pk}</a>' in page.content.decode()
    assert operator.get("/ops/decisions/?kind=bogus").context["table"].rows.data.data.count() == 0


def test_dashboard_forms_are_csrf_protected(world):
    operator = signed_in(world, "operator", enforce_csrf_checks=True)
    assert operator.post("/ops/nodes/t4-1/lend/").status_code == 403
    quota = Quota.objects.first()
    assert operator.post("/ops/quotas/", {"quota": quota.pk}).status_code == 403
    html = operator.get("/ops/nodes/?node=t4-1").content.decode() + operator.get("/ops/quotas/").content.decode()
    assert html.count("<form method=\"post\"") == html.count("csrfmiddlewaretoken")


def test_dashboards_query_counts_do_not_grow_with_the_cluster(world, django_assert_max_num_queries):
    operator = signed_in(world, "operator")
    for path, most in (("/ops/nodes/?node=t4-1", 14), ("/ops/quotas/", 10), ("/ops/decisions/", 10),
                       ("/ops/autoscaling/", 10), ("/ops/", 11)):
        with django_assert_max_num_queries(most):
            assert operator.get(path).status_code == 200


def test_charts_show_a_gap_where_samples_are_missing():
    from frontend.dashboards.prometheus import _with_gaps

    assert _with_gaps([[0, "1"], [15, "2"], [100, "NaN"], [115, "3"]], 15) == [
        [0, 1.0], [15000, 2.0], [30000, None], [100000, None], [115000, 3.0]]
