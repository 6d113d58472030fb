"""Department isolation over every console page: for each URL pattern of frontend/urls.py, the status each role
gets for a GET and for a POST (with the page's CSRF token, after the same POST without it was refused), that a
refused write changes nothing and an allowed one takes effect, and that no response shows another department's
objects or a secret (test_security.known_secrets), nor template syntax (console_pages). A new pattern without a GET and a POST row fails
`test_matrix_covers_every_console_pattern`.

Roles, in column order: anonymous, outsider (member of ml-ads), other_admin (admin of ml-ads), member and
dept_admin of ml-search, operator (staff). The objects in URLs and forms belong to ml-search.
"""
import re
from dataclasses import dataclass
from typing import Callable

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, reverse

from colocation.models import InferenceService, Node
from frontend import urls as console_urls
from core.models import Department, Membership
from notifications.models import DepartmentSubscription, Preference
from scheduler.models import JobStatus, Quota, ReplayRun, TrainingJob
from tests.integration.console_pages import assert_no_template_syntax
from tests.integration.test_security import assert_no_secret, secrets_in_play  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "outsider", "other_admin", "member", "dept_admin", "operator")
SEARCH = ("zz-search-job", "zz-search-svc", "ml-search")  # what only ml-search's people and operators may see
ADS = ("zz-ads-job", "zz-ads-svc", "ml-ads")
FOREIGN = {"anonymous": SEARCH + ADS, "outsider": SEARCH, "other_admin": SEARCH, "member": ADS, "dept_admin": ADS,
           "operator": ()}
PUBLIC = {"metrics"}  # Prometheus' scrape target: aggregate counts by department, no login
# (docs/operations/dashboards.md#metrics)


@dataclass
class Objects:
    job: TrainingJob  # ml-search's, submitted by the member
    service: InferenceService
    membership: Membership  # the member's, in ml-search
    quota: Quota  # ml-search's T4 quota
    replay: ReplayRun  # a finished replay with one plot


@dataclass(frozen=True)
class Row:
    expected: str  # one status per role, in ROLES order
    args: Callable[[Objects], list] = lambda o: []
    query: str | Callable[[Objects], str] = ""
    data: Callable[[Objects], dict] = lambda o: {}
    htmx: bool = False
    writes: str = ""  # the roles whose POST takes effect; everyone else's changes nothing
    done: Callable[[Client], bool] | None = None  # the write took effect (read back from the database or session)

    def status(self, role: str) -> int:
        return int(self.expected.split()[ROLES.index(role)])


def _job(o: Objects) -> list:
    return [o.job.pk]


def _service(o: Objects) -> list:
    return [o.service.name]


def _job_form(o: Objects) -> dict:
    return {"department": "ml-search", "name": "zz-new-job", "image": "registry/bert:1", "command": "python train.py",
            "framework": o.job.framework_id, "gpu_model": "T4", "gpus": "1", "cpu_milli": "4000",
            "memory_mib": "16384", "expected_duration_min": "", "task_key": ""}


def _service_form(name: str, replicas: int) -> Callable[[Objects], dict]:
    def form(_o: Objects) -> dict:
        return {"name": name, "department": "ml-search", "gpu_model": "T4", "priority": "5", "autoscaling": "on",
                "replicas": str(replicas), "min_replicas": "1", "max_replicas": "8", "gpus_per_replica": "1",
                "cpu_milli_per_replica": "4000", "memory_mib_per_replica": "16384",
                "t-gpu-min_rate": "0.2", "t-gpu-expect_rate": "0.5", "t-gpu-max_rate": "0.8"}
    return form


def _job_is(**fields) -> Callable[[Client], bool]:
    return lambda _client: TrainingJob.objects.filter(name="zz-search-job", **fields).exists()


def _signed_in_as(client: Client, username: str) -> bool:
    return client.session.get("_auth_user_id") == str(get_user_model().objects.get(username=username).pk)


def _search_membership(username: str, **fields) -> bool:
    return Membership.objects.filter(department__name="ml-search", user__username=username, **fields).exists()


#                                        anon out oadm mem adm op
MATRIX: dict[tuple[str, str, str], Row] = {
    # the frame: sign-in, sign-out, the department switcher, Prometheus' /metrics
    ("GET", "home", ""): Row("302 302 302 302 302 302"),
    ("POST", "home", ""): Row("302 302 302 302 302 302"),
    ("GET", "login", ""): Row("200 302 302 302 302 302"),
    ("POST", "login", ""): Row("302 302 302 302 302 302", data=lambda o: {"username": "nina", "password": "pw"},
                               writes="anonymous", done=lambda client: _signed_in_as(client, "nina")),
    ("GET", "logout", ""): Row("405 405 405 405 405 405"),
    ("POST", "logout", ""): Row("302 302 302 302 302 302"),
    ("GET", "department-switch", ""): Row("302 405 405 405 405 405"),
    ("POST", "department-switch", ""): Row("302 302 302 302 302 302", data=lambda o: {"department": "ml-search"},
                                           writes="member dept_admin operator",
                                           done=lambda client: client.session.get("console_department") == "ml-search"),
    ("GET", "metrics", ""): Row("200 200 200 200 200 200"),
    ("POST", "metrics", ""): Row("405 405 405 405 405 405"),
    # jobs
    ("GET", "jobs", ""): Row("302 200 200 200 200 200"),
    ("GET", "jobs", "all"): Row("302 200 200 200 200 200", query="?scope=departments"),
    ("GET", "jobs", "search"): Row("302 200 200 200 200 200", query="?scope=departments&department=ml-search"),
    ("GET", "jobs", "htmx"): Row("302 200 200 200 200 200", query="?scope=departments", htmx=True),
    ("POST", "jobs", ""): Row("302 200 200 200 200 200"),
    ("GET", "jobs-cancel", ""): Row("302 405 405 405 405 405"),
    ("POST", "jobs-cancel", ""): Row("302 302 302 302 302 302", data=lambda o: {"job": [o.job.pk]}, writes="member",
                                     done=_job_is(status=JobStatus.CANCELLED)),  # bulk: own pending jobs only
    ("GET", "job-submit", ""): Row("302 200 200 200 200 200"),
    ("GET", "job-submit", "again"): Row("302 404 404 200 200 200", query=lambda o: f"?from={o.job.pk}"),
    ("POST", "job-submit", ""): Row("302 200 200 302 302 302", data=_job_form, writes="member dept_admin operator",
                                    done=lambda c: TrainingJob.objects.filter(name="zz-new-job").exists()),
    ("GET", "job-gpu-models", ""): Row("302 200 200 200 200 200", query=lambda o: f"?framework={o.job.framework_id}"),
    ("POST", "job-gpu-models", ""): Row("302 200 200 200 200 200"),
    ("GET", "job", ""): Row("302 404 404 200 200 200", _job),
    ("GET", "job", "htmx"): Row("302 404 404 200 200 200", _job, htmx=True),
    ("POST", "job", ""): Row("302 404 404 200 200 200", _job),
    ("GET", "job-cancel", ""): Row("302 404 404 200 200 200", _job),
    ("POST", "job-cancel", ""): Row("302 404 404 302 302 302", _job, writes="member dept_admin operator",
                                    done=_job_is(status=JobStatus.CANCELLED)),
    ("GET", "job-keep-request", ""): Row("302 405 405 405 405 405", _job),
    ("POST", "job-keep-request", ""): Row("302 404 404 403 302 302", _job, data=lambda o: {"keep": "1"},
                                          writes="dept_admin operator", done=_job_is(keep_request=True)),
    # departments and their members
    ("GET", "departments", ""): Row("302 200 200 200 200 200"),
    ("POST", "departments", ""): Row("302 200 200 200 200 200"),
    ("GET", "department", ""): Row("302 404 404 200 200 200", lambda o: ["ml-search"]),
    ("POST", "department", ""): Row("302 404 404 200 200 200", lambda o: ["ml-search"]),
    ("GET", "department-member-add", ""): Row("302 405 405 405 405 405", lambda o: ["ml-search"]),
    ("POST", "department-member-add", ""): Row(
        "302 404 404 403 302 302", lambda o: ["ml-search"], data=lambda o: {"username": "olga", "role": "member"},
        writes="dept_admin operator", done=lambda c: _search_membership("olga")),
    ("GET", "department-member", ""): Row("302 405 405 405 405 405", lambda o: ["ml-search", o.membership.pk]),
    ("POST", "department-member", ""): Row(
        "302 404 404 403 302 302", lambda o: ["ml-search", o.membership.pk], data=lambda o: {"role": "admin"},
        writes="dept_admin operator", done=lambda c: _search_membership("mia", role="admin")),
    ("POST", "department-member", "remove"): Row(
        "302 404 404 403 302 302", lambda o: ["ml-search", o.membership.pk], data=lambda o: {"remove": "1"},
        writes="dept_admin operator", done=lambda c: not _search_membership("mia")),
    # the quota tree: each sees their part; weights are set by the admins above a department (ml-search is at the
    # top: operators only)
    ("GET", "department-tree", ""): Row("302 200 200 200 200 200"),
    ("POST", "department-tree", ""): Row("302 200 200 200 200 200"),
    ("GET", "department-weight", ""): Row("302 405 405 405 405 405", lambda o: ["ml-search"]),
    ("POST", "department-weight", ""): Row(
        "302 404 404 403 403 302", lambda o: ["ml-search"], data=lambda o: {"weight": "2"}, writes="operator",
        done=lambda c: Department.objects.get(name="ml-search").weight == 2),
    # the tree's forms: an admin adds under their department and changes the ones below it (not their own: its
    # parent's call; test_console_tree.py has their writes), the root is the operators'; a name or place that is not
    # among the user's choices is a 400; members may not post
    ("GET", "department-child", ""): Row("302 405 405 405 405 405"),
    ("POST", "department-child", ""): Row(
        "302 403 400 403 400 302", data=lambda o: {"child-name": "zz-child", "child-parent": ""},
        writes="operator", done=lambda c: Department.objects.filter(name="zz-child", parent=None).exists()),
    ("GET", "department-move", ""): Row("302 405 405 405 405 405"),
    ("POST", "department-move", ""): Row(  # (where it is: the operator's move changes nothing)
        "302 403 400 403 400 302", data=lambda o: {"move-department": "ml-search", "move-parent": ""}),
    ("GET", "department-quota", ""): Row("302 405 405 405 405 405"),
    ("POST", "department-quota", ""): Row(
        "302 403 400 403 400 302", data=lambda o: {"quota-department": "ml-search", "quota-resource": "T4",
                                                   "quota-own": "7", "quota-borrowed": "0"},
        writes="operator", done=lambda c: Quota.objects.get(department__name="ml-search", gpu_model__name="T4").own == 7),
    # ml-search's membership through ml-ads' URL: ml-ads' admin may not reach it that way either
    ("POST", "department-member", "across"): Row(
        "302 403 404 404 404 404", lambda o: ["ml-ads", o.membership.pk], data=lambda o: {"role": "admin"}),
    # inference services
    ("GET", "services", ""): Row("302 200 200 200 200 200"),
    ("GET", "services", "search"): Row("302 200 200 200 200 200", query="?department=ml-search"),
    ("POST", "services", ""): Row("302 200 200 200 200 200"),
    ("GET", "service-create", ""): Row("302 200 200 200 200 200"),
    ("POST", "service-create", ""): Row("302 400 400 403 302 302", data=_service_form("zz-new-svc", 2),
                                        writes="dept_admin operator",
                                        done=lambda c: InferenceService.objects.filter(name="zz-new-svc").exists()),
    ("GET", "service", ""): Row("302 404 404 200 200 200", _service),
    ("POST", "service", ""): Row("302 404 404 200 200 200", _service),
    ("GET", "service-edit", ""): Row("302 404 404 403 200 200", _service),
    ("POST", "service-edit", ""): Row(
        "302 404 404 403 302 302", _service, data=_service_form("zz-search-svc", 3), writes="dept_admin operator",
        done=lambda c: InferenceService.objects.filter(name="zz-search-svc", replicas=3).exists()),
    # operations dashboards: operators; department admins read their departments' quotas and decisions
    ("GET", "ops", ""): Row("302 403 403 403 403 200"),
    ("POST", "ops", ""): Row("302 403 403 403 403 200"),
    ("GET", "ops-nodes", ""): Row("302 403 403 403 403 200"),
    ("GET", "ops-nodes", "node"): Row("302 403 403 403 403 200", query="?node=t4-0"),
    ("POST", "ops-nodes", ""): Row("302 403 403 403 403 200"),
    ("GET", "ops-node-action", ""): Row("302 403 403 403 403 405", lambda o: ["t4-0", "pin"]),
    ("POST", "ops-node-action", ""): Row("302 403 403 403 403 302", lambda o: ["t4-0", "pin"], writes="operator",
                                         done=lambda c: Node.objects.get(name="t4-0").pinned),
    ("GET", "ops-quotas", ""): Row("302 403 200 403 200 200"),
    ("POST", "ops-quotas", ""): Row(
        "302 403 403 403 403 302", data=lambda o: {"quota": o.quota.pk, f"q{o.quota.pk}-own": "3",
                                                   f"q{o.quota.pk}-borrowed": "1"},
        writes="operator", done=lambda c: Quota.objects.filter(department__name="ml-search", gpu_model__name="T4",
                                                               own=3).exists()),
    ("GET", "ops-autoscaling", ""): Row("302 403 403 403 403 200"),
    ("POST", "ops-autoscaling", ""): Row("302 403 403 403 403 200"),
    ("GET", "ops-decisions", ""): Row("302 403 200 403 200 200"),
    ("GET", "ops-decisions", "search"): Row("302 403 200 403 200 200", query="?department=ml-search"),
    ("POST", "ops-decisions", ""): Row("302 403 200 403 200 200"),
    ("GET", "ops-replays", ""): Row("302 403 403 403 403 200"),
    ("POST", "ops-replays", ""): Row(
        "302 403 403 403 403 302", data=lambda o: {"what": "colocation", "sim-days": "1", "sim-small": "on"},
        writes="operator", done=lambda c: ReplayRun.objects.filter(kind=ReplayRun.Kind.COLOCATION).exists()),
    ("GET", "ops-replay", ""): Row("302 403 403 403 403 200", lambda o: [o.replay.pk]),
    ("POST", "ops-replay", ""): Row("302 403 403 403 403 200", lambda o: [o.replay.pk]),
    ("GET", "ops-replay-plot", ""): Row("302 403 403 403 403 200", lambda o: [o.replay.pk, "waits.png"]),
    ("POST", "ops-replay-plot", ""): Row("302 403 403 403 403 200", lambda o: [o.replay.pk, "waits.png"]),
    # notifications: everyone's own settings; admins subscribe to their departments' events
    ("GET", "notifications", ""): Row("302 200 200 200 200 200"),
    ("POST", "notifications", ""): Row("302 200 200 200 200 200"),
    ("GET", "notification-preferences-save", ""): Row("302 405 405 405 405 405"),
    ("POST", "notification-preferences-save", ""): Row(
        "302 302 302 302 302 302", data=lambda o: {"events": ["failed"], "waiting_hours": "2", "email": "on"},
        writes="outsider other_admin member dept_admin operator",
        done=lambda c: Preference.objects.filter(user_id=c.session.get("_auth_user_id"), waiting_hours=2).exists()),
    ("GET", "notification-subscription", ""): Row("302 405 405 405 405 405", lambda o: ["ml-search"]),
    ("POST", "notification-subscription", ""): Row(
        "302 404 404 404 302 302", lambda o: ["ml-search"],
        data=lambda o: {f"d{o.quota.department_id}-events": ["quota_full"], f"d{o.quota.department_id}-email": "on"},
        writes="dept_admin operator",
        done=lambda c: DepartmentSubscription.objects.filter(user_id=c.session.get("_auth_user_id")).exists()),
}


def _pattern_names(patterns, prefix: str = "") -> set[str]:
    names = set()
    for p in patterns:
        if isinstance(p, URLResolver):
            names |= _pattern_names(p.url_patterns, f"{prefix}{p.namespace}:" if p.namespace else prefix)
        elif isinstance(p, URLPattern):
            assert p.name, f"console pattern {p.pattern} has no name"
            names.add(prefix + p.name)
    return names


def test_matrix_covers_every_console_pattern():
    names = _pattern_names(console_urls.urlpatterns)
    for method in ("GET", "POST"):
        assert {name for (m, name, _) in MATRIX if m == method} == names, method


@pytest.fixture
def objects(world, tmp_path) -> Objects:
    get_user_model().objects.create_user("nina", password="pw")  # in no department: signs in at /login/
    world.users["other_admin"] = get_user_model().objects.create_user("odin", password="pw")
    Membership.objects.create(user=world.users["other_admin"], department=world.departments["ml-ads"],
                              role=Membership.Role.ADMIN)
    job = world.submit("member", name="zz-search-job")
    world.submit("outsider", name="zz-ads-job", department="ml-ads")
    service = world.service("ml-search", name="zz-search-svc")
    world.service("ml-ads", name="zz-ads-svc")
    (tmp_path / "waits.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    replay = ReplayRun.objects.create(requested_by=world.users["operator"], trace="gpuspec10", policies=["tidal"],
                                      status=ReplayRun.Status.DONE, report_dir=str(tmp_path))
    return Objects(job=job, service=service, membership=Membership.objects.get(user=world.users["member"]),
                   quota=Quota.objects.get(department=world.departments["ml-search"], gpu_model__name="T4"),
                   replay=replay)


def browser(world, role: str) -> tuple[Client, str]:
    """A browser signed in as `role` that enforces CSRF, and the token its first page carried."""
    client = Client(enforce_csrf_checks=True)
    if role != "anonymous":
        client.force_login(world.users[role])
    page = client.get(reverse("login" if role == "anonymous" else "jobs")).content.decode()
    return client, re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


def body(response) -> str:
    if response.streaming:  # the replay's plot
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode()


def assert_no_foreign_objects(role: str, name: str, url: str, data: dict, html: str) -> None:
    """Nothing of a department the role does not belong to (names it typed itself may come back)."""
    if name in PUBLIC:
        return
    typed = url + repr(data)
    leaked = [marker for marker in FOREIGN[role] if marker in html and marker not in typed]
    assert not leaked, f"{role} sees {leaked} at {url}"


@pytest.mark.parametrize(
    ("method", "name", "variant", "role"),
    [(*key, role) for key in MATRIX for role in ROLES],
    ids=lambda value: value or "-",
)
def test_console_matrix(world, objects, secrets_in_play, method, name, variant, role):
    row = MATRIX[(method, name, variant)]
    client, token = browser(world, role)
    query = row.query(objects) if callable(row.query) else row.query
    url = reverse(name, args=row.args(objects)) + query
    headers = {"HTTP_HX_REQUEST": "true"} if row.htmx else {}
    data = row.data(objects)
    if method == "GET":
        response = client.get(url, **headers)
    else:
        before = world.snapshot()
        refused = client.post(url, data, **headers)  # a forged form: no token
        assert refused.status_code == 403 and world.snapshot() == before
        response = client.post(url, {**data, "csrfmiddlewaretoken": token}, **headers)
    html = body(response)
    assert response.status_code == row.status(role), html[:500]
    writes = role in row.writes.split()
    if role == "anonymous" and response.status_code == 302 and not writes:
        assert response["Location"].startswith(reverse("login")), response["Location"]
    assert_no_foreign_objects(role, name, url, data, html)
    assert_no_secret(html, secrets_in_play(), url)
    if response.get("Content-Type", "").startswith("text/html"):
        assert_no_template_syntax(html, f"{role} {method} {url}")
    if method == "POST":
        if writes:
            assert row.done(client), f"{role}'s {name} did not take effect"
        else:
            assert world.snapshot() == before, f"{role}'s refused {name} changed the database"
            assert row.done is None or not row.done(client)
