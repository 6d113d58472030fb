"""Departments, memberships and /api/me/: who belongs where, and who manages members."""
import pytest

from core.models import Membership
from tests.conftest import listed

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("role", "operator", "memberships"),
    [
        ("member", False, [{"department": "ml-search", "role": "member"}]),
        ("dept_admin", False, [{"department": "ml-search", "role": "admin"}]),
        ("outsider", False, [{"department": "ml-ads", "role": "member"}]),
        ("operator", True, []),
    ],
)
def test_me_shows_operator_flag_and_roles(world, role, operator, memberships):
    me = world.client(role).get("/api/me/").json()
    assert (me["username"], me["is_operator"], me["memberships"]) == (world.users[role].username, operator, memberships)


@pytest.mark.parametrize(
    ("role", "departments"),
    [("member", {"ml-search"}), ("outsider", {"ml-ads"}), ("operator", {"ml-search", "ml-ads"})],
)
def test_users_list_their_departments(world, role, departments):
    assert listed(world.client(role).get("/api/departments/"), "name") == departments


def test_operator_creates_a_department(world):
    response = world.client("operator").post("/api/departments/", {"name": "ml-vision"}, format="json")
    assert response.status_code == 201, response.json()
    assert listed(world.client("operator").get("/api/departments/?name=ml-vision"), "name") == {"ml-vision"}


@pytest.mark.parametrize("name", ["ml-search", "not a slug", ""])
def test_bad_department_name_is_rejected_and_writes_nothing(world, name):
    before = world.snapshot()
    response = world.client("operator").post("/api/departments/", {"name": name}, format="json")
    assert response.status_code == (409 if name == "ml-search" else 400)  # a taken name is a conflict
    assert "name" in response.json()["extra"]["fields"]
    assert world.snapshot() == before


def test_department_cannot_be_renamed_but_its_description_can_change(world):
    search = world.departments["ml-search"]
    before = world.snapshot()
    renamed = world.client("operator").patch(f"/api/departments/{search.pk}/", {"name": "ml-find"}, format="json")
    assert renamed.status_code == 409 and "cannot be renamed" in renamed.json()["extra"]["fields"]["name"][0]
    assert world.snapshot() == before
    described = world.client("operator").patch(f"/api/departments/{search.pk}/", {"description": "web search"},
                                               format="json")
    assert described.status_code == 200 and described.json()["description"] == "web search"


def test_department_with_jobs_cannot_be_deleted(world):
    world.submit()
    before = world.snapshot()
    response = world.client("operator").delete(f"/api/departments/{world.departments['ml-search'].pk}/")
    assert response.status_code == 409
    assert world.snapshot() == before


@pytest.mark.parametrize(
    ("role", "query", "expected"),
    [
        ("operator", "", {("mia", "ml-search"), ("adam", "ml-search"), ("olga", "ml-ads")}),
        ("operator", "department=ml-search", {("mia", "ml-search"), ("adam", "ml-search")}),
        ("operator", "role=admin", {("adam", "ml-search")}),
        ("operator", "department=ml-ads&role=admin", set()),
        ("operator", "user=olga", {("olga", "ml-ads")}),
        ("member", "", {("mia", "ml-search"), ("adam", "ml-search")}),
        ("member", "department=ml-ads", set()),
        ("outsider", "", {("olga", "ml-ads")}),
    ],
)
def test_list_and_filter_memberships(world, role, query, expected):
    rows = world.client(role).get(f"/api/memberships/?{query}").json()["results"]
    assert {(row["user"], row["department"]) for row in rows} == expected


def test_department_admin_adds_changes_and_removes_a_member(world):
    admin = world.client("dept_admin")
    olga = world.client("outsider")
    job = world.submit()
    assert olga.get(f"/api/jobs/{job.pk}/").status_code == 404

    added = admin.post("/api/memberships/", {"user": "olga", "department": "ml-search"}, format="json")
    assert added.status_code == 201, added.json()
    assert added.json()["role"] == "member"
    assert olga.get(f"/api/jobs/{job.pk}/").status_code == 200

    changed = admin.patch(f"/api/memberships/{added.json()['id']}/", {"role": "admin"}, format="json")
    assert changed.status_code == 200, changed.json()
    assert Membership.objects.get(pk=added.json()["id"]).role == "admin"
    assert olga.post(f"/api/jobs/{job.pk}/cancel/").status_code == 200  # admins cancel anyone's job

    assert admin.delete(f"/api/memberships/{added.json()['id']}/").status_code == 204
    assert not Membership.objects.filter(user=world.users["outsider"], department=world.departments["ml-search"]).exists()
    assert olga.get(f"/api/jobs/{job.pk}/").status_code == 404


@pytest.mark.parametrize(
    ("role", "payload", "status"),
    [
        ("dept_admin", {"user": "mia", "department": "ml-ads"}, 403),  # admin of ml-search only
        ("member", {"user": "olga", "department": "ml-search"}, 403),
        ("member", {"user": "mia", "department": "ml-search", "role": "admin"}, 403),  # no self-promotion
        ("dept_admin", {"user": "olga", "department": "ml-search", "role": "owner"}, 400),
        ("dept_admin", {"user": "nobody", "department": "ml-search"}, 400),
        ("dept_admin", {"user": "olga", "department": "ml-nowhere"}, 400),
    ],
)
def test_bad_membership_is_rejected_and_writes_nothing(world, role, payload, status):
    before = world.snapshot()
    response = world.client(role).post("/api/memberships/", payload, format="json")
    assert response.status_code == status, response.json()
    assert world.snapshot() == before


def test_department_admin_cannot_touch_another_departments_members(world):
    olga = Membership.objects.get(user=world.users["outsider"])
    before = world.snapshot()
    admin = world.client("dept_admin")
    assert admin.patch(f"/api/memberships/{olga.pk}/", {"role": "admin"}, format="json").status_code == 404
    assert admin.delete(f"/api/memberships/{olga.pk}/").status_code == 404
    assert world.snapshot() == before


def test_bad_role_on_patch_is_rejected_and_writes_nothing(world):
    mia = Membership.objects.get(user=world.users["member"])
    before = world.snapshot()
    response = world.client("dept_admin").patch(f"/api/memberships/{mia.pk}/", {"role": "owner"}, format="json")
    assert response.status_code == 400 and "role" in response.json()["extra"]["fields"]
    assert world.snapshot() == before


def test_posting_an_existing_member_changes_the_role(world):
    response = world.client("dept_admin").post(
        "/api/memberships/", {"user": "mia", "department": "ml-search", "role": "admin"}, format="json"
    )
    assert response.status_code in (200, 201), response.json()
    assert list(Membership.objects.filter(user=world.users["member"]).values_list("role", flat=True)) == ["admin"]


@pytest.mark.parametrize("how", ["demote", "remove"])
def test_the_last_department_admin_cannot_leave_it_without_one(world, how):
    from core.models import Membership

    mine = Membership.objects.get(user=world.users["dept_admin"])
    client = world.client("dept_admin")
    before = world.snapshot()
    if how == "demote":
        response = client.patch(f"/api/memberships/{mine.pk}/", {"role": "member"}, format="json")
    else:
        response = client.delete(f"/api/memberships/{mine.pk}/")
    assert response.status_code == 409 and "last admin" in response.json()["message"] + str(response.json()["extra"])
    assert world.snapshot() == before
    promoted = client.post("/api/memberships/", {"user": "mia", "department": "ml-search", "role": "admin"},
                           format="json")
    assert promoted.status_code == 201
    assert client.delete(f"/api/memberships/{mine.pk}/").status_code == 204  # now someone else is admin


@pytest.mark.parametrize("format_, status", [("json", 200), ("multipart", 415)])
def test_patching_a_membership_without_a_role_changes_nothing(world, format_, status):
    """Was a 500 (TypeError) found by schemathesis, with either body; the API now reads JSON only."""
    from core.models import Membership

    membership = Membership.objects.get(user__username="mia")
    response = world.client("dept_admin").patch(f"/api/memberships/{membership.pk}/", {}, format=format_)
    assert response.status_code == status and Membership.objects.get(pk=membership.pk).role == "member"


@pytest.mark.parametrize("query, field", [
    ("limit=632555331597895204864", "limit"), ("offset=632555331597895204864", "offset"),  # were 500s (bigint)
    ("limit=1001", "limit"), ("limit=null", "limit"), ("limit=0", "limit"), ("offset=-1", "offset"),
    ("offset=x", "offset"), ("offset=1&offset=2", "offset"),
])
def test_paging_parameters_that_are_not_numbers_are_refused(world, query, field):
    response = world.client("operator").get(f"/api/departments/?{query}")
    assert response.status_code == 400 and field in response.json()["extra"]["fields"]


@pytest.mark.parametrize("limit, offset", [(2, 0), (3, 0), (5, 0), (6, 0), (2, 4), (2, 5), (2, 6), (3, 4), (1, 9)])
def test_every_page_counts_the_whole_list_and_a_short_one_without_a_count_query(world, limit, offset):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from core.models import Department

    Department.objects.bulk_create(Department(name=f"dept-{i}") for i in range(3))  # 5 in all, by name
    names = list(Department.objects.order_by("name").values_list("name", flat=True))
    with CaptureQueriesContext(connection) as queries:
        response = world.client("operator").get(f"/api/departments/?ordering=name&limit={limit}&offset={offset}")
    page = response.json()
    assert page["count"] == 5 and [d["name"] for d in page["results"]] == names[offset:offset + limit]
    assert (page["next"] is None) == (offset + limit >= 5) and (page["previous"] is None) == (offset == 0)
    counted = any("COUNT(" in q["sql"] for q in queries.captured_queries)
    assert counted == (offset + limit <= 5 or offset >= 5)  # a full page, or nothing past the end, counts


@pytest.mark.parametrize("url, parameter", [
    ("/api/quotas/?resource_kind=", "resource_kind"), ("/api/memberships/?role=", "role"),
    ("/api/jobs/?status=", "status"), ("/api/jobs/?status=pending&status=", "status"),
    ("/api/transitions/?status=", "status"), ("/api/decisions/?kind=", "kind"),
    ("/api/forecast-models/?target=", "target"), ("/api/inference-services/?autoscaling=", "autoscaling"),
    ("/api/jobs/?submitted_after=", "submitted_after"),
])
def test_an_empty_value_of_a_filter_that_is_not_text_is_refused(world, url, parameter):
    """The console's forms send "" for "any"; the API's schema admits no empty choice, boolean or time."""
    response = world.client("operator").get(url)
    assert response.status_code == 400 and parameter in response.json()["extra"]["fields"]


def test_the_schema_states_that_text_holds_no_nul(world):
    schema = world.client("operator").get("/api/schema/?format=json").json()
    quotas = {p["name"]: p["schema"] for p in schema["paths"]["/api/quotas/"]["get"]["parameters"]}
    assert quotas["department"]["pattern"] == r"^[^\x00]*$" and "pattern" not in quotas["ordering"]
    assert schema["components"]["schemas"]["GPUModelRequest"]["properties"]["name"]["pattern"] == r"^[^\x00]*$"
    response = world.client("operator").post("/api/gpu-models/", {"name": "H\x00100", "memory_gib": 80}, format="json")
    assert response.status_code == 400 and "name" in response.json()["extra"]["fields"]


def test_an_unknown_api_path_is_a_json_404(world):
    response = world.client("operator").get("/api/departments/1.5/")
    assert response.status_code == 404 and response.json() == {"message": "Not found.", "extra": {}}
