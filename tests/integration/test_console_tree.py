"""The console's quota tree: bars per department and GPU model, weights changed by the admins above, errors beside
the field with nothing written, and the page's queries bounded however many departments there are."""
import re

import pytest
from django.test import Client
from django.urls import reverse

from core.models import Department, Membership

pytestmark = pytest.mark.django_db


def signed_in(world, role: str) -> Client:
    client = Client()
    client.force_login(world.users[role])
    return client


@pytest.fixture
def tree(world):
    """ml-search with two teams below it (adam administers ml-search), each wanting 6 A100 of the cluster's 8."""
    search = world.departments["ml-search"]
    teams = [Department.objects.create(name=name, parent=search) for name in ("search-a", "search-b")]
    for team in teams:
        Membership.objects.create(user=world.users["member"], department=team)
        for n in range(3):
            world.submit(department=team.name, name=f"{team.name}-{n}", gpu_model="A100", gpus="2")
    return teams


def _fair(html: str, node: str) -> str:
    row = re.search(rf'<tr data-node="{node}">.*?</tr>', html, re.S).group(0)
    return re.search(r'class="fair-share">([\d.]+)<', row).group(1)


def test_an_admin_changes_a_childs_weight_and_the_fair_shares_move(world, tree):
    admin = signed_in(world, "dept_admin")
    html = admin.get(reverse("department-tree")).content.decode()
    assert (_fair(html, "search-a"), _fair(html, "search-b")) == ("4", "4")
    assert 'id="weight-search-a"' in html and 'id="weight-ml-search"' not in html  # their children, not their own
    response = admin.post(reverse("department-weight", args=["search-a"]), {"weight": "3"}, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.startswith("<section")  # the tree alone, for htmx to swap
    assert (_fair(html, "search-a"), _fair(html, "search-b")) == ("6", "2")
    assert Department.objects.get(name="search-a").weight == 3


def test_an_admin_fences_a_child_from_its_row(world, tree):
    admin = signed_in(world, "dept_admin")
    response = admin.post(reverse("department-weight", args=["search-a"]), {"weight": "1", "fence": "on"},
                          HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and 'id="fence-search-a" checked' in html
    assert 'id="fence-search-b">' in html  # (not fenced)
    assert Department.objects.get(name="search-a").fence
    admin.post(reverse("department-weight", args=["search-a"]), {"weight": "1"})  # unticked: the fence is off
    assert not Department.objects.get(name="search-a").fence
    assert "· fenced" not in signed_in(world, "member").get(reverse("department-tree")).content.decode()
    Department.objects.filter(name="search-b").update(fence=True)
    assert "· fenced" in signed_in(world, "member").get(reverse("department-tree")).content.decode()


def test_a_bad_weight_shows_its_error_beside_the_field_and_writes_nothing(world, tree):
    response = signed_in(world, "dept_admin").post(reverse("department-weight", args=["search-a"]), {"weight": "-1"})
    html = response.content.decode()
    assert response.status_code == 400 and 'id="weight-search-a-error"' in html
    assert "greater than or equal to 0" in html and 'value="-1"' in html
    assert Department.objects.get(name="search-a").weight == 1


def test_a_member_reads_the_tree_and_may_not_change_weights(world, tree):
    member = signed_in(world, "member")
    html = member.get(reverse("department-tree")).content.decode()
    assert "search-a" in html and 'name="weight"' not in html and "ml-ads" not in html
    response = member.post(reverse("department-weight", args=["search-a"]), {"weight": "3"})
    assert response.status_code == 403
    assert Department.objects.get(name="search-a").weight == 1


def test_the_tree_warns_when_quotas_sum_past_the_cluster(world):
    from scheduler.models import Quota

    Quota.objects.filter(gpu_model__name="A100").update(own=6)
    html = signed_in(world, "operator").get(reverse("department-tree")).content.decode()
    assert "Warning: own A100 quotas sum to 12 GPUs; the cluster has 8." in html


@pytest.mark.parametrize("role", ["operator", "dept_admin"])
def test_the_tree_page_queries_do_not_grow_with_departments(world, django_assert_num_queries, role):
    """The same number of queries with 3 or 90 departments more (the page, its forms' choices and the frame)."""
    search = world.departments["ml-search"]
    client = signed_in(world, role)
    divisions = Department.objects.bulk_create(Department(name=f"div-{d}") for d in range(3))
    Department.objects.filter(pk=search.pk).update(parent=divisions[0])
    Department.objects.bulk_create(Department(name=f"team-{d}", parent=search) for d in range(3))
    client.get(reverse("department-tree"))  # (the session's first request loads what later ones reuse)
    with django_assert_num_queries(QUERIES[role]) as small:
        assert client.get(reverse("department-tree")).status_code == 200
    Department.objects.bulk_create(Department(name=f"team-{d}-{t}", parent=divisions[d]) for d in range(3)
                                   for t in range(30))
    with django_assert_num_queries(len(small.captured_queries)):
        assert client.get(reverse("department-tree")).status_code == 200


QUERIES = {"operator": 12, "dept_admin": 15}  # an admin's rights and visible part of the tree: 2 + 1 more


def test_an_admin_adds_a_child_and_the_tree_shows_it(world, tree):
    admin = signed_in(world, "dept_admin")
    response = admin.post(reverse("department-child"), {"child-name": "search-c", "child-parent": "ml-search"},
                          HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert response.status_code == 200 and html.startswith('<div id="tree-manage">')  # forms and tree, for htmx
    assert '<tr data-node="search-c">' in html
    assert Department.objects.get(name="search-c").parent.name == "ml-search"


@pytest.mark.parametrize("form, data, field, problem", [
    ("department-child", {"child-name": "search-x", "child-parent": "search-a"}, "id_child-parent",
     "search-a has 3 unfinished jobs"),  # only leaves run jobs
    ("department-child", {"child-name": "search-x", "child-parent": "ml-ads"}, "id_child-parent",
     "Select a valid choice"),  # outside their subtree
    ("department-child", {"child-name": "search-a", "child-parent": "ml-search"}, "id_child-name",
     "a department named search-a exists"),
    ("department-child", {"child-name": "no spaces", "child-parent": "ml-search"}, "id_child-name", "slug"),
    ("department-move", {"move-department": "search-b", "move-parent": "search-a"}, "id_move-parent",
     "unfinished jobs"),
    ("department-move", {"move-department": "ml-search", "move-parent": "search-b"}, "id_move-department",
     "Select a valid choice"),  # their own department's place is its parent's call
    ("department-quota", {"quota-department": "search-a", "quota-resource": "A100", "quota-own": "2",
                          "quota-borrowed": "0", "quota-lend_limit": "3"}, "id_quota-lend_limit",
     "must be between 0 and own (2)"),
    ("department-quota", {"quota-department": "search-a", "quota-resource": "A100", "quota-own": "-1",
                          "quota-borrowed": "0"}, "id_quota-own", "greater than or equal to 0"),
    ("department-quota", {"quota-department": "ml-ads", "quota-resource": "A100", "quota-own": "1",
                          "quota-borrowed": "0"}, "id_quota-department", "Select a valid choice"),
])
def test_a_refused_tree_change_shows_its_error_beside_the_field_and_writes_nothing(world, tree, form, data, field,
                                                                                 problem):
    admin = signed_in(world, "dept_admin")
    before = (list(Department.objects.order_by("pk").values()), world.snapshot())
    response = admin.post(reverse(form), data)
    html = response.content.decode()
    assert response.status_code == 400
    error = re.search(rf'<ul class="errorlist" id="{field}_error".*?</ul>', html, re.S)
    assert error and problem in error.group(0), html[html.find("tree-forms"):][:3000]
    assert (list(Department.objects.order_by("pk").values()), world.snapshot()) == before


def test_an_admin_moves_a_department_and_sets_its_quota(world, tree):
    from scheduler.models import Quota

    admin = signed_in(world, "dept_admin")
    for name in ("search-c", "search-d"):
        admin.post(reverse("department-child"), {"child-name": name, "child-parent": "ml-search"})
    moved = admin.post(reverse("department-move"), {"move-department": "search-d", "move-parent": "search-c"},
                       HTTP_HX_REQUEST="true")
    assert moved.status_code == 200 and Department.objects.get(name="search-d").parent.name == "search-c"
    cycle = admin.post(reverse("department-move"), {"move-department": "search-c", "move-parent": "search-d"})
    assert cycle.status_code == 400 and "would have a cycle" in cycle.content.decode()
    quota = admin.post(reverse("department-quota"), {"quota-department": "search-d", "quota-resource": "A100",
                                                      "quota-own": "2", "quota-borrowed": "1", "quota-lend_limit": "1"})
    assert quota.status_code == 302
    row = Quota.objects.get(department__name="search-d", gpu_model__name="A100")
    assert (row.own, row.borrowed, row.lend_limit) == (2, 1, 1)
    cpu = admin.post(reverse("department-quota"), {"quota-department": "search-d", "quota-resource": "cpu",
                                                    "quota-own": "8000", "quota-borrowed": "0"})
    assert cpu.status_code == 302 and Quota.objects.get(department__name="search-d", resource_kind="cpu").own == 8000


def test_a_member_sees_no_tree_forms_and_may_not_post_them(world, tree):
    member = signed_in(world, "member")
    assert 'id="tree-forms"' not in member.get(reverse("department-tree")).content.decode()
    response = member.post(reverse("department-child"), {"child-name": "x", "child-parent": "ml-search"})
    assert response.status_code == 403 and not Department.objects.filter(name="x").exists()
