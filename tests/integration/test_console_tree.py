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


def test_the_tree_page_queries_do_not_grow_with_departments(world, django_assert_max_num_queries):
    search = world.departments["ml-search"]
    divisions = Department.objects.bulk_create(Department(name=f"div-{d}") for d in range(3))
    Department.objects.bulk_create(Department(name=f"team-{d}-{t}", parent=divisions[d]) for d in range(3)
                                   for t in range(30))
    Department.objects.filter(pk=search.pk).update(parent=divisions[0])
    client = signed_in(world, "operator")
    with django_assert_max_num_queries(12):
        assert client.get(reverse("department-tree")).status_code == 200
