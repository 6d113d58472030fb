"""The web console's views on the real database: permissions, forms through the services, CSRF, query counts,
and that no page points at another host."""
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

from core.models import Decision, Membership
from scheduler.models import JobStatus, TrainingJob

pytestmark = pytest.mark.django_db


def signed_in(world, role: str, **kwargs) -> Client:
    client = Client(**kwargs)
    if role != "anonymous":
        client.force_login(world.users[role])
    return client


@pytest.fixture
def pages(world):
    """Every console page for an object of ml-search (a job, a running gang, the department, a service)."""
    from scheduler.models import JobRun

    job = world.submit("member")
    gang = world.hold(_gang(world, name="gang", workers=2, gpus="2", gpu_model="A100"), gpu_model="A100")
    JobRun.objects.create(job=gang, attempt=1, node=world.nodes["a100-0"], started_at=gang.submitted_at, workers=[
        {"rank": r, "node": "a100-0", "pod": f"job-{gang.pk}-1-{r}", "gpu_shares": [[2 * r, 1.0], [2 * r + 1, 1.0]],
         "state": "running"} for r in range(2)])
    service = world.service("ml-search")
    return {
        "jobs": reverse("jobs"), "submit": reverse("job-submit"), "job": reverse("job", args=[job.pk]),
        "gang": reverse("job", args=[gang.pk]),
        "job-cancel": reverse("job-cancel", args=[job.pk]), "departments": reverse("departments"),
        "department": reverse("department", args=["ml-search"]), "tree": reverse("department-tree"),
        "services": reverse("services"),
        "service": reverse("service", args=[service.name]), "service-edit": reverse("service-edit", args=[service.name]),
        "service-create": reverse("service-create"), "submit-again": reverse("job-submit") + f"?from={job.pk}",
    }


def test_anonymous_is_sent_to_sign_in(world, pages):
    client = signed_in(world, "anonymous")
    for name, url in pages.items():
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/?next="), name


def test_every_page_renders_for_its_department(world, pages):
    client = signed_in(world, "dept_admin")
    for name, url in pages.items():
        assert client.get(url).status_code == 200, name


@pytest.mark.parametrize("page", ["job", "gang", "job-cancel", "department", "service", "service-edit",
                                  "submit-again"])
def test_another_department_gets_404(world, pages, page):
    """A member of ml-ads cannot open ml-search's objects, nor learn that they exist."""
    assert signed_in(world, "outsider").get(pages[page]).status_code == 404


def test_members_do_not_edit_services(world, pages):
    assert signed_in(world, "member").get(pages["service-edit"]).status_code == 403


def test_no_page_loads_anything_from_another_host(world, pages):
    client = signed_in(world, "operator")
    for name, url in {**pages, "docs": reverse("docs"), "login": reverse("login")}.items():
        html = client.get(url).content.decode()
        external = re.findall(r'(?:src|href|action)\s*=\s*["\'](?:https?:)?//[^"\']+', html)
        assert not external, f"{name} loads from another host: {external}"
        for asset in re.findall(r'(?:src|href)="/static/([^"]+)"', html):
            assert finders.find(asset), f"{name}: {asset} is not a static file of the project"


def test_api_docs_use_local_swagger_ui(world):
    html = signed_in(world, "member").get(reverse("docs")).content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in html


# --- My jobs -----------------------------------------------------------------------------------


def test_my_jobs_lists_mine_and_filters_in_the_query_string(world):
    mine = world.submit("member", name="mine-t4")
    world.submit("member", name="mine-a100", gpu_model="A100")
    theirs = world.submit("dept_admin", name="admins")
    client = signed_in(world, "member")
    html = client.get(reverse("jobs")).content.decode()
    assert "mine-t4" in html and "mine-a100" in html and "admins" not in html
    assert f'value="{mine.pk}"' in html  # own pending jobs can be selected for cancelling
    assert "waiting for the next scheduling cycle" in html  # the latest decision's sentence
    html = client.get(reverse("jobs") + "?scope=departments&gpu_model=T4").content.decode()
    assert "mine-t4" in html and "admins" in html and "mine-a100" not in html
    html = client.get(reverse("jobs") + "?name=A100").content.decode()
    assert "mine-a100" in html and "mine-t4" not in html
    assert f'value="{theirs.pk}"' not in html  # others' jobs are shown, not selectable


def test_jobs_of_other_departments_are_never_listed(world):
    world.submit("member", name="search-job")
    html = signed_in(world, "outsider").get(reverse("jobs") + "?scope=departments&department=ml-search").content.decode()
    assert "search-job" not in html


def test_the_jobs_table_is_an_htmx_partial_for_live_refresh(world):
    world.submit("member", name="live-job")
    response = signed_in(world, "member").get(reverse("jobs"), HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "live-job" in html and "<html" not in html and 'id="jobs-live"' in html


def test_bulk_cancel_cancels_only_my_pending_jobs(world):
    mine = world.submit("member", name="a")
    running = world.hold(world.submit("member", name="b"))
    admins = world.submit("dept_admin", name="c")
    response = signed_in(world, "member").post(reverse("jobs-cancel"), {"job": [mine.pk, running.pk, admins.pk]})
    assert response.status_code == 302
    statuses = dict(TrainingJob.objects.values_list("name", "status"))
    assert statuses == {"a": JobStatus.CANCELLED, "b": JobStatus.RUNNING, "c": JobStatus.PENDING}


# --- Submit ------------------------------------------------------------------------------------


def _form(world, **overrides) -> dict:
    data = {"department": "ml-search", "name": "bert", "image": "registry/bert:1", "command": "python train.py",
            "framework": world.frameworks["pytorch-2.1"].pk, "gpu_model": "T4", "gpus": "0.5", "cpu_milli": "4000",
            "memory_mib": "16384", "expected_duration_min": "90", "task_key": ""}
    data.update(overrides)
    return data


@pytest.mark.parametrize("overrides, field, text", [
    ({"gpus": "1.5"}, "gpus", "fractions are only allowed below 1 GPU"),
    ({"gpus": "-1"}, "gpus", "greater than or equal to 0"),
    ({"cpu_milli": "10000000"}, "cpu_milli", "more than any node has"),
    ({"gpu_model": "P40"}, "gpu_model", "Select a valid choice"),  # not certified for pytorch: not offered
    ({"name": ""}, "name", "This field is required"),
    ({"department": "ml-ads"}, "department", "Select a valid choice"),  # not a department of the user
    ({"workers": "0"}, "workers", "greater than or equal to 1"),
    ({"workers": "2"}, "gpus", "0.5 GPUs is a fraction: each of a gang's 2 workers asks for whole GPUs"),
    ({"workers": "2", "gpus": "4", "gpu_model": "A100"}, "workers",
     "2 workers ask 8 GPUs, 8000m CPU and 32768 MiB memory at once, more than ml-search's own or borrowed quota"),
    ({"topology": "ring"}, "topology", "Select a valid choice"),
])
def test_a_bad_submission_shows_the_error_beside_its_field_and_writes_nothing(world, overrides, field, text):
    client = signed_in(world, "member")
    before = world.snapshot()
    response = client.post(reverse("job-submit"), _form(world, **overrides))
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert any(text in e for e in errors[field]), errors
    html = response.content.decode()
    assert f'id="id_{field}_error"' in html and 'value="registry/bert:1"' in html  # what was typed is kept
    assert world.snapshot() == before


def test_a_valid_submission_goes_through_job_submit(world):
    response = signed_in(world, "member").post(reverse("job-submit"), _form(world))
    job = TrainingJob.objects.get(name="bert")
    assert response.status_code == 302 and response["Location"] == reverse("job", args=[job.pk])
    assert (job.gpus, job.gpu_model.name, job.expected_duration_s, job.task_key) == (Decimal("0.5"), "T4", 5400,
                                                                                      "ml-search/bert")
    assert Decision.objects.filter(subject=f"job:{job.pk}", reason="submitted").exists()


def test_a_gang_is_submitted_through_the_form(world):
    client = signed_in(world, "member")
    response = client.post(reverse("job-submit"), _form(world, workers="2", topology="spread", gpus="1"))
    job = TrainingJob.objects.get(name="bert")
    assert response.status_code == 302 and (job.workers, job.topology, job.gpus) == (2, "spread", Decimal(1))
    form = client.get(reverse("job-submit") + f"?from={job.pk}").context["form"]  # submit again: the same gang
    assert (form.initial["workers"], form.initial["topology"]) == (2, "spread")


def test_a_job_may_leave_its_model_open_and_opt_out_of_preemption(world):
    client = signed_in(world, "member")
    response = client.post(reverse("job-submit"), _form(world, gpu_model="", gpus="2", non_preemptible="on"))
    job = TrainingJob.objects.get(name="bert")
    assert response.status_code == 302 and (job.gpu_model, job.gpus, job.preemptible) == (None, Decimal(2), False)
    html = client.get(reverse("job", args=[job.pk])).content.decode()
    assert "any certified model" in html and "own quota only, never borrowed" in html
    form = client.get(reverse("job-submit") + f"?from={job.pk}").context["form"]
    assert form.initial["non_preemptible"] is True


def test_submit_again_prefills_the_form_with_the_same_task_key(world):
    source = world.submit("member", name="resnet", gpus="0.5")
    response = signed_in(world, "member").get(reverse("job-submit") + f"?from={source.pk}")
    form = response.context["form"]
    assert form.initial["task_key"] == source.task_key and form.initial["gpus"] == Decimal("0.5")
    assert f'value="{source.task_key}"' in response.content.decode()


def test_gpu_model_choices_follow_the_framework(world):
    client = signed_in(world, "member")
    caffe = client.get(reverse("job-gpu-models") + f"?framework={world.frameworks['caffe-1.0'].pk}").content.decode()
    pytorch = client.get(reverse("job-gpu-models") + f"?framework={world.frameworks['pytorch-2.1'].pk}").content.decode()
    assert "P40" in caffe and "T4" not in caffe
    assert "T4" in pytorch and "A100" in pytorch and "P40" not in pytorch


# --- Job detail --------------------------------------------------------------------------------


def test_job_detail_explains_why_it_waits(world):
    job = world.submit("member")
    for other in range(2):
        world.hold(world.submit("member", name=f"holder-{other}"))  # 2 of 2 own T4 GPUs held
    job.queue_position, job.pending_reason = 3, "quota-exhausted"
    job.score = {"base": 1000, "utilization": 0, "aging": 3, "total": 1003}
    job.save()
    Decision.objects.create(kind="pending", subject=f"job:{job.pk}", department=job.department,
                            reason="quota-exhausted", message="pending: own T4 quota 2/2 used, needs 1")
    html = signed_in(world, "member").get(reverse("job", args=[job.pk])).content.decode()
    assert "Pending: own T4 quota 2/2 used, needs 1" in html
    assert "2 jobs of higher score ahead" in html
    assert "own 2/2 used · borrowed 0/1 used" in html  # the T4 quota behind the sentence
    assert "on borrowed quota" in html and "1003" in html
    assert "Next aging step" in html


def test_a_cpu_only_job_is_described_in_cores_and_memory_each_once(world):
    job = world.submit("member", gpus="0", gpu_model="", cpu_milli=4000, memory_mib=8192)
    html = signed_in(world, "member").get(reverse("job", args=[job.pk])).content.decode()
    room = re.search(r"<dt>Most free on one node</dt>\s*<dd>(.*?)</dd>", html, re.S).group(1)
    # the fullest-free offline node is a100-0: 96 cores, 1 TiB; this job asks 4 cores and 8 GiB, no GPU
    assert room == "96 cores, 1 TiB on a100-0 (2 schedulable training nodes); this job asks 4 cores, 8 GiB"
    asked = re.search(r"<dt>Asked</dt><dd>(.*?)</dd>", html, re.S).group(1)
    assert asked == "4 cores · 8 GiB"  # no "0 GPU" on a job that asks none


def _gang(world, name: str = "ddp", workers: int = 2, gpus: str = "1", gpu_model: str = "T4", **fields):
    """A gang written through the service (world.submit asks for one worker)."""
    from core.models import Department, GPUModel
    from scheduler import submission

    return submission.job_submit(
        submitter=world.users["member"], department=Department.objects.get(name="ml-search"), name=name,
        image="registry/ddp:1", command="torchrun train.py", framework=world.frameworks["pytorch-2.1"],
        gpu_model=GPUModel.objects.get(name=gpu_model), gpus=Decimal(gpus), cpu_milli=4000, memory_mib=16384,
        workers=workers, **fields)


def test_my_jobs_shows_a_gang_as_workers_times_gpus(world):
    _gang(world, name="ddp-t4", workers=3)
    world.submit("member", name="single", gpus="1")
    html = signed_in(world, "member").get(reverse("jobs")).content.decode()
    gang_row = html.split(">ddp-t4</a>", 1)[1].split("</tr>", 1)[0]
    single_row = html.split(">single</a>", 1)[1].split("</tr>", 1)[0]
    assert ">3 × 1 T4<" in gang_row and ">3 × 4 cores<" in gang_row and ">3 × 16 GiB<" in gang_row
    assert ">1<" in single_row and "×" not in single_row  # one worker: as before


def test_a_running_gangs_page_shows_its_workers(world):
    from scheduler.models import JobRun

    job = _gang(world, workers=2, gpus="2", gpu_model="A100", topology="spread")
    world.hold(job, gpu_model="A100")
    TrainingJob.objects.filter(pk=job.pk).update(node=world.nodes["a100-0"])
    JobRun.objects.create(job=job, attempt=1, node=world.nodes["a100-0"], started_at=job.submitted_at, workers=[
        {"rank": 0, "node": "a100-0", "pod": f"job-{job.pk}-1-0", "gpu_shares": [[0, 1.0], [1, 1.0]],
         "state": "running"},
        {"rank": 1, "node": "a100-1", "pod": f"job-{job.pk}-1-1", "gpu_shares": [[5, 1.0], [7, 1.0]],
         "state": "running"}])
    html = signed_in(world, "member").get(reverse("job", args=[job.pk])).content.decode()
    rows = re.findall(r"<tr><td class=\"num\">(\d)</td><td>(.*?)</td><td>(.*?)</td><td>(.*?)</td></tr>",
                      html.split('id="worker-table"', 1)[1].split("</table>", 1)[0])
    assert rows == [("0", "a100-0", "2 · GPUs 0, 1", '<span class="badge running">running</span>'),
                    ("1", "a100-1", "2 · GPUs 5, 7", '<span class="badge running">running</span>')]
    assert "2 (spread: a node per worker); asked and allocated are per worker" in html
    runs = html.split('id="runs"', 1)[1].split("</table>", 1)[0]
    assert "<th>Nodes</th>" in runs and "<td>a100-0, a100-1</td>" in runs  # the run's every node
    assert "<dt>Node</dt>" not in html  # worker 0's node alone would mislead


def test_a_waiting_gang_says_what_it_needs_and_its_reservation(world):
    job = _gang(world, workers=4, gpus="1")
    TrainingJob.objects.filter(pk=job.pk).update(reservation={"nodes": ["t4-0", "t4-1"], "start_at": 1_790_000_000})
    Decision.objects.create(kind="pending", subject=f"job:{job.pk}", department=job.department, reason="reserved",
                            message="pending: needs 4 workers of 1 T4 (packed); room for 1 across the T4 nodes; "
                                    "reserved t4-0, t4-1 for job 1; expected start 14:13")
    html = signed_in(world, "member").get(reverse("job", args=[job.pk])).content.decode()
    assert "Pending: needs 4 workers of 1 T4 (packed); room for 1" in html  # the cycle's sentence
    needs = re.search(r"<dt>Needs at once</dt>\s*<dd>(.*?)</dd>", html, re.S).group(1)
    assert needs.startswith("4 workers × 1 T4 GPU = <strong>4 GPUs</strong> on one GPU model, each with 4 cores and "
                            "16 GiB; on the fewest nodes")
    reserved = re.search(r'<dd class="reservation">(.*?)</dd>', html, re.S).group(1)
    assert reserved.startswith('t4-0, t4-1 from <time datetime="2026-09-21T14:13:20+00:00" data-show="both">')
    assert "each of its 4 workers asks 1 GPU" in html


@pytest.mark.parametrize("shares, text", [
    ([(0, 1.0), (1, 1.0), (2, 1.0), (3, 1.0)], "4 · GPUs 0–3"),
    ([(4, 1.0), (6, 1.0)], "2 · GPUs 4, 6"),
    ([(2, 1.0)], "1 · GPU 2"),
    ([(3, 0.5)], "0.5 of GPU 3"),
    ([], "—"),
])
def test_a_workers_gpus_are_named_by_index(shares, text):
    from frontend.jobs.detail import gpu_text
    from scheduler.selectors import WorkerRow

    assert gpu_text(WorkerRow(0, "n", "p", tuple(shares), "running")) == text


def test_a_one_worker_jobs_page_has_no_gang_parts(world):
    html = signed_in(world, "member").get(reverse("job", args=[world.submit("member").pk])).content.decode()
    assert "Needs at once" not in html and "worker-table" not in html and "Reserved for it" not in html


def test_a_running_gangs_every_worker_fills_the_quota_bar(world):
    world.hold(_gang(world, workers=2, gpus="2", gpu_model="A100"), gpu_model="A100")
    html = signed_in(world, "member").get(reverse("department", args=["ml-search"])).content.decode()
    assert 'aria-label="A100: own 4 of 4 used, borrowed 0 of 2 used"' in html


def test_the_department_queue_counts_gpus(world):
    _gang(world, name="big", workers=2, gpus="2", gpu_model="A100")
    world.submit("member", name="small", gpus="1")
    world.hold(world.submit("member", name="running", gpus="2"))  # not waiting: not counted
    world.submit("member", name="cpu", gpus="0", gpu_model=None)
    client = signed_in(world, "member")
    html = client.get(reverse("department", args=["ml-search"])).content.decode()
    size = re.search(r'id="queue-size">(.*?)</span>', html, re.S).group(1)
    assert size == "3 pending jobs asking <strong>5 GPUs</strong> (4 A100 · 1 T4), in scheduling order"
    big_row = html.split("big</a>", 1)[1].split("</tr>", 1)[0]
    assert '<td class="num nowrap">2 × 2 A100</td>' in big_row
    listing = client.get(reverse("departments")).content.decode()
    row = listing.split(">ml-search</a>", 1)[1].split("</tr>", 1)[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', row) == ["2", "3", "5", "1"]  # members, pending, GPUs, running


@pytest.mark.parametrize("asked, text", [
    ({}, ("0 GPUs", "")),
    ({"T4": Decimal("1.000")}, ("1 T4 GPU", "")),
    ({"T4": Decimal("0.5")}, ("0.5 T4 GPUs", "")),
    ({"T4": Decimal(2), "A100": Decimal(32)}, ("34 GPUs", " (32 A100 · 2 T4)")),
])
def test_a_queue_is_told_in_gpus(asked, text):
    from frontend.departments.views import gpus_asked

    assert gpus_asked(asked) == text


def test_cancel_asks_first_then_cancels(world):
    job = world.submit("member")
    client = signed_in(world, "member")
    assert "Yes, cancel the job" in client.get(reverse("job-cancel", args=[job.pk])).content.decode()
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.PENDING
    client.post(reverse("job-cancel", args=[job.pk]))
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.CANCELLED


def test_a_member_cannot_cancel_a_colleagues_job(world):
    job = world.submit("dept_admin")
    signed_in(world, "member").post(reverse("job-cancel", args=[job.pk]))
    assert TrainingJob.objects.get(pk=job.pk).status == JobStatus.PENDING


# --- Department --------------------------------------------------------------------------------


def test_department_page_shows_quota_bars_queue_and_members(world):
    world.hold(world.submit("member", name="holder"))
    html = signed_in(world, "member").get(reverse("department", args=["ml-search"])).content.decode()
    assert 'aria-label="T4: own 1 of 2 used, borrowed 0 of 1 used"' in html
    assert "mia" in html and "adam" in html
    assert "Add a member" not in html  # members read, admins manage


def test_admin_adds_and_removes_a_member(world):
    client = signed_in(world, "dept_admin")
    client.post(reverse("department-member-add", args=["ml-search"]), {"username": "olga", "role": "member"})
    membership = Membership.objects.get(user__username="olga", department__name="ml-search")
    client.post(reverse("department-member", args=["ml-search", membership.pk]), {"remove": "1"})
    assert not Membership.objects.filter(pk=membership.pk).exists()


def test_the_last_admin_cannot_leave(world):
    admin = Membership.objects.get(user__username="adam", department__name="ml-search")
    response = signed_in(world, "dept_admin").post(reverse("department-member", args=["ml-search", admin.pk]),
                                                   {"role": "member"})
    assert response.status_code == 400 and "last admin" in response.content.decode()
    assert Membership.objects.get(pk=admin.pk).role == "admin"


def test_adding_an_unknown_user_is_a_field_error(world):
    response = signed_in(world, "dept_admin").post(reverse("department-member-add", args=["ml-search"]),
                                                   {"username": "nobody", "role": "member"})
    assert response.status_code == 400 and "no user named" in response.context["member_form"].errors["username"][0]


def test_a_member_cannot_manage_members(world):
    response = signed_in(world, "member").post(reverse("department-member-add", args=["ml-search"]),
                                               {"username": "olga", "role": "admin"})
    assert response.status_code == 403 and not Membership.objects.filter(user__username="olga",
                                                                         department__name="ml-search").exists()


# --- Inference services ------------------------------------------------------------------------


def _service_form(**overrides) -> dict:
    data = {"name": "ranker", "department": "ml-search", "gpu_model": "T4", "priority": "5", "autoscaling": "on",
            "replicas": "2", "min_replicas": "2", "max_replicas": "8", "gpus_per_replica": "1",
            "cpu_milli_per_replica": "4000", "memory_mib_per_replica": "16384",
            "t-gpu-metric": "gpu", "t-gpu-min_rate": "0.2", "t-gpu-expect_rate": "0.5", "t-gpu-max_rate": "0.8"}
    for metric in ("cpu", "memory", "gpu_memory"):
        data[f"t-{metric}-metric"] = metric
    data.update(overrides)
    return data


def test_admin_creates_a_service_with_thresholds(world):
    response = signed_in(world, "dept_admin").post(reverse("service-create"), _service_form())
    assert response.status_code == 302
    from colocation.models import InferenceService

    service = InferenceService.objects.get(name="ranker")
    assert [(t.metric, t.min_rate, t.expect_rate, t.max_rate) for t in service.thresholds.all()] == [
        ("gpu", 0.2, 0.5, 0.8)]


@pytest.mark.parametrize("overrides, beside, text", [
    ({"min_replicas": "9"}, "min_replicas", "min_replicas 9 is above max_replicas 8"),
    ({"t-gpu-min_rate": "0.9"}, "t-gpu-min_rate", "need min_rate &lt; expect_rate, got 0.9 ≥ 0.5"),
    ({"t-gpu-min_rate": "0"}, "t-gpu-min_rate", "min_rate must be above 0"),
    ({"t-cpu-min_rate": "0.5", "t-cpu-expect_rate": "0.7", "t-cpu-max_rate": "0.7"}, "t-cpu-expect_rate",
     "need expect_rate &lt; max_rate"),
    ({"busy_signal": "on"}, "busy_signal", "the busy signal needs a busy threshold"),
    ({"t-gpu-max_rate": ""}, None, "give min, expect and max"),
    ({"department": "ml-ads"}, "department", "Select a valid choice"),
    ({"s-0-weekdays": "mon-funday", "s-0-start": "08:00", "s-0-end": "20:00", "s-0-min_replicas": "3"},
     "s-0-weekdays", "funday"),
    ({"s-0-start": "08:00", "s-0-end": "20:00", "s-0-min_replicas": "9"}, "s-0-min_replicas", "above max_replicas 8"),
    ({"s-0-start": "08:00", "s-0-end": "08:00", "s-0-min_replicas": "2"}, "s-0-end", "the window is empty"),
    ({"s-0-start": "08:00"}, None, "give start, end and a minimum"),
    ({"peak_start": "09:00"}, "peak_end", "give both ends of the peak window"),
    ({"slo_min_gain": "0.1"}, "slo_min_gain", "sizing to the request SLO needs slo_ttft_s and slo_tpot_s too"),
    ({"slo_ttft_s": "0"}, "slo_ttft_s", "must be above 0, got 0"),
    ({"slo_ttft_s": "1", "slo_tpot_s": "0.05", "slo_min_gain": "1.5"}, "slo_min_gain", "must be in (0, 1], got 1.5"),
    ({"kv_cache_target": "1.5"}, "kv_cache_target", "must be in (0, 1], got 1.5"),
    ({"group_restart_policy": "Default"}, "group_restart_policy", "Select a valid choice"),  # LWS's deprecated name
])
def test_a_bad_service_is_refused_with_the_apis_rules(world, overrides, beside, text):
    client = signed_in(world, "dept_admin")
    before = world.snapshot()
    response = client.post(reverse("service-create"), _service_form(**overrides))
    html = response.content.decode()
    assert response.status_code == 400 and text in html
    if beside:  # the message sits in that field's own error list
        errors = html.split(f'id="id_{beside}_error"', 1)[1].split("</ul>", 1)[0]
        assert text in errors, errors
    assert 'value="ranker"' in html  # what was typed is kept
    for name, value in overrides.items():
        if value and name not in ("department", "busy_signal", "group_restart_policy"):
            assert f'value="{value}"' in html, name
    assert world.snapshot() == before


def test_the_autoscaling_policy_and_a_schedule_round_trip_through_the_form(world):
    from colocation.models import InferenceService

    client = signed_in(world, "dept_admin")
    form = _service_form(peak_start="09:00", peak_end="18:00", scale_to_zero_idle_min="30", **{
        "s-0-weekdays": "mon-fri", "s-0-start": "08:00", "s-0-end": "20:00", "s-0-min_replicas": "3"})
    assert client.post(reverse("service-create"), form).status_code == 302
    service = InferenceService.objects.get(name="ranker")
    assert (service.peak_start.hour, service.peak_end.hour, service.scale_to_zero_idle_min) == (9, 18, 30)
    assert [(s.weekdays, s.start.hour, s.end.hour, s.min_replicas) for s in service.schedules.all()] == [
        ("mon-fri", 8, 20, 3)]
    page = client.get(reverse("service-edit", args=["ranker"])).content.decode()
    assert 'value="mon-fri"' in page and 'value="09:00"' in page
    detail = client.get(reverse("service", args=["ranker"])).content.decode()
    assert "No scale-in during the peak window 09:00–18:00" in detail and "at least 3 replicas" in detail
    assert "service-created" in detail  # the scaling history


def test_the_policy_names_the_replica_floor_the_autoscaler_keeps(world):
    client = signed_in(world, "dept_admin")
    assert client.post(reverse("service-create"), _service_form(replicas="4", min_replicas="4")).status_code == 302
    detail = client.get(reverse("service", args=["ranker"])).content.decode()
    assert "Never scales to zero (at least 4 replicas)." in detail


def test_llm_serving_targets_and_the_request_slo_round_trip_through_the_form(world):
    from colocation.models import InferenceService

    client = signed_in(world, "dept_admin")
    form = _service_form(ttft_p99_target_s="0.5", slo_ttft_s="1", slo_tpot_s="0.05", slo_min_gain="0.1")
    assert client.post(reverse("service-create"), form).status_code == 302
    service = InferenceService.objects.get(name="ranker")
    assert (service.ttft_p99_target_s, service.slo_ttft_s, service.slo_tpot_s, service.slo_min_gain) == (
        0.5, 1.0, 0.05, 0.1)
    page = client.get(reverse("service-edit", args=["ranker"])).content.decode()
    assert 'name="slo_tpot_s" value="0.05"' in page and 'name="slo_min_gain" value="0.1"' in page
    detail = client.get(reverse("service", args=["ranker"])).content.decode()
    sentence = detail.split('id="slo-sizing">', 1)[1].split("</p>", 1)[0]
    assert sentence.startswith("Sized to the SLO: TTFT 1 s, TPOT 50 ms, min gain 10%"), sentence
    assert 'id="band-moved"' in detail  # the thresholds panel says the sizing moves its band
    edit = {**form, "slo_min_gain": ""}
    del edit["name"], edit["department"]  # fixed once made
    assert client.post(reverse("service-edit", args=["ranker"]), edit).status_code == 302
    detail = client.get(reverse("service", args=["ranker"])).content.decode()
    assert "Request SLO: TTFT 1 s, TPOT 50 ms" in detail and "not sized to it without a min gain" in detail
    assert 'id="band-moved"' not in detail
    assert re.search(r"changed: slo_min_gain\s*<", detail)  # the scaling history names what the admin changed, only it


def test_the_groups_panel_says_the_restart_policy_and_the_restarts_kept_in_place(world):
    from colocation.models import ServiceGroup

    service = world.service("ml-search", name="llm", group_size=2, gpu_model=world.gpu_models["T4"],
                            gpus_per_replica=2, group_restart_policy="None")
    ServiceGroup.objects.create(service=service, index=0, leader="llm-0", nodes=["t4-0", "t4-1"], pods_ready=1,
                                pod_restarts={"llm-0-1": 2})
    client = signed_in(world, "dept_admin")
    detail = client.get(reverse("service", args=["llm"])).content.decode()
    assert "restarts alone, its group kept" in detail and "+2 in place" in detail
    page = client.get(reverse("service-edit", args=["llm"])).content.decode()
    assert re.search(r'<option value="None" selected>', page), page


def test_the_service_page_shows_replicas_history_and_no_forecast_yet(world):
    import json

    from django.utils import timezone

    from core.decisions import decision_record

    service = world.service("ml-search", replicas=3, gpu_model=world.gpu_models["T4"])
    subject = f"service:{service.name}"
    for i, (current, target) in enumerate(((2, 4), (4, 3))):
        decision_record(kind=Decision.Kind.SCALING, subject=subject, reason=f"step-{i}", department=service.department,
                        message=f"{service.name} goes from {current} to {target}",
                        data={"current": current, "target": target})
    for i in range(16):  # more than one page of history
        decision_record(kind=Decision.Kind.ALERT, subject=subject, reason="short", department=service.department,
                        message=f"alert number {i}")
    Decision.objects.filter(subject=subject, reason="step-0").update(created_at=timezone.now() - timedelta(hours=1))
    client = signed_in(world, "member")
    response = client.get(reverse("service", args=[service.name]))
    page = response.content.decode()
    assert 'hx-get="' in page and 'id="scaling-live"' in page and 'hx-trigger="every 10s"' in page
    assert "Alert number 15" in page and "Alert number 0" not in page  # newest first, paginated
    assert "No forecast yet" in page
    chart = json.loads(page.split('<script id="chart-desired" type="application/json">', 1)[1].split("</script>")[0])
    desired = [v for _, v in chart["series"][0]["points"]]
    assert desired == [2, 4, 3, 3]  # from the decisions' current/target to the service's count now
    second = client.get(reverse("service", args=[service.name]), {"h-page": 2}).content.decode()
    assert "Alert number 0" in second and "2 → 4" in second and "4 → 3" in second


def test_the_service_page_says_the_slo_lowers_the_band_and_each_decision_shows_the_band_it_used(world):
    """An LLM service with a TPOT target: the thresholds panel says its band may be lowered minute by minute, and the
    scaling history shows each decision's band, the lowered one marked with the owner's (decisions as the policy
    makes them)."""
    from dataclasses import replace

    from colocation.policy.autoscaling import LoadMinute, Rates, ScalingPolicy, ServiceView, decide_service
    from colocation.policy.serving import ServingTargets
    from core.decisions import decision_record

    service = world.service("ml-search", name="llm", replicas=4, gpu_model=world.gpu_models["T4"],
                            tpot_p99_target_s=0.05)
    policy = ScalingPolicy(thresholds=(("gpu", Rates(0.2, 0.5, 0.8)),), serving=ServingTargets(tpot_p99_s=0.05))
    cliff = tuple(LoadMinute(6000.0 + 60 * i, 4, gpu=0.5, tpot_p99=0.015 / 0.5) for i in range(5))  # allows 70 %
    lowered = decide_service(ServiceView("llm", policy, 4, 4, cliff), 6300.0)
    lifted = decide_service(ServiceView("llm", replace(policy, serving=ServingTargets(tpot_p99_s=0.2)), 4, 4, cliff),
                            6300.0)
    for d in (lowered, lifted):
        decision_record(kind=Decision.Kind.SCALING, subject="service:llm", reason=d.reason.value, message=d.message,
                        department=service.department, data={**d.data, "current": d.current, "target": d.target})
    page = signed_in(world, "member").get(reverse("service", args=["llm"])).content.decode()
    assert 'id="band-lowered"' in page and 'id="band-moved"' not in page
    rows = page.split('id="scaling-history"', 1)[1].split("<tbody", 1)[1].split("</tbody>", 1)[0].split("</tr>")
    assert '<td class="num">20%–80%</td>' in rows[0]  # the newest: the owner's band, unmarked
    assert ('<td class="num">20%–70% <span class="small muted" title="owner\'s 20%–80%">lowered for the SLO</span>'
            in rows[1]), rows[1]
    assert "within 20%–70% (owner&#x27;s 20%–80%, lowered for the SLO)" in rows[1]
    assert "within 20%–80% (the owner&#x27;s: the SLO allows 92%)" in rows[0]


def test_a_group_services_chart_counts_the_pods_seen_in_groups(world):
    """Desired replicas of a group service are groups: the pods the profiles saw are drawn in groups beside them."""
    import json

    from django.utils import timezone

    from profiling.models import ServiceMinute

    service = world.service("ml-search", name="llm", replicas=3, group_size=2, gpu_model=world.gpu_models["A100"])
    now = timezone.now()
    ServiceMinute.objects.create(service=service, minute=now - timedelta(minutes=2), samples=6, replicas=6,
                                 emitted_at=now)
    page = signed_in(world, "member").get(reverse("service", args=[service.name])).content.decode()
    chart = json.loads(page.split('<script id="chart-desired" type="application/json">', 1)[1].split("</script>")[0])
    desired, seen = chart["series"]
    assert seen["label"] == "groups seen" and [v for _, v in seen["points"]] == [3.0]
    assert desired["points"][-1][1] == 3 and "pods seen (groups of 2)" in page
    assert desired["points"][0][0] == int(service.created_at.timestamp() * 1000) > chart["x_min"]  # not before it was


def test_the_autoscaling_dashboard_shows_each_services_last_decision_and_alert(world):
    from core.decisions import decision_record

    service = world.service("ml-search", gpu_model=world.gpu_models["T4"])
    other = world.service("ml-ads", name="ads-cpu")
    subject = f"service:{service.name}"
    decision_record(kind=Decision.Kind.SCALING, subject=subject, reason="scale-in", department=service.department,
                    message=f"{service.name} scales in to 2 replicas: gpu under minRate 20% for 5 minutes")
    decision_record(kind=Decision.Kind.ALERT, subject=subject, reason="short", department=service.department,
                    message=f"{service.name} has had only 1 of 3 replicas ready for 6 minutes")
    decision_record(kind=Decision.Kind.SCALING, subject=f"service:{other.name}", reason="hold",
                    department=other.department, message="ads-cpu holds at 2 replicas")
    operator = signed_in(world, "operator")
    page = operator.get("/ops/autoscaling/").content.decode()
    assert "gpu under minRate 20% for 5 minutes" in page and "only 1 of 3 replicas ready" in page
    row = page.split(f'>{service.name}</a>', 1)[1].split("</tr>", 1)[0]
    assert ">t4<" in row and ">1</span>" in row  # its group and one alert in the last hour
    assert "Ads-cpu holds" in page and "not built yet" not in page
    for query in ({"department": "ml-search"}, {"reason": "scale-in"}, {"group": "t4"}):
        filtered = operator.get("/ops/autoscaling/", query).content.decode()
        assert f">{service.name}</a>" in filtered and ">ads-cpu</a>" not in filtered, query
    assert "No service matches" in operator.get("/ops/autoscaling/", {"reason": "nothing"}).content.decode()


# --- CSRF, query counts ------------------------------------------------------------------------


def test_every_form_needs_its_csrf_token(world, pages):
    job = world.submit("member")
    service = world.service("ml-search", name="csrf-svc")
    admin = Membership.objects.get(user__username="adam")
    client = signed_in(world, "dept_admin", enforce_csrf_checks=True)
    posts = [reverse("job-submit"), reverse("jobs-cancel"), reverse("job-cancel", args=[job.pk]),
             reverse("department-switch"), reverse("department-member-add", args=["ml-search"]),
             reverse("department-member", args=["ml-search", admin.pk]), reverse("service-create"),
             reverse("department-weight", args=["ml-search"]),
             reverse("service-edit", args=[service.name]), reverse("logout")]
    for url in posts:
        assert client.post(url, {}).status_code == 403, url
    html = client.get(reverse("job-submit")).content.decode()
    assert 'name="csrfmiddlewaretoken"' in html


@pytest.mark.parametrize("page, most", [("jobs", 12), ("job", 22), ("gang", 22), ("department", 16),
                                        ("departments", 10), ("tree", 15), ("services", 10), ("service", 12), ("submit", 12)])
def test_queries_per_page_do_not_grow_with_rows(world, pages, django_assert_max_num_queries, page, most):
    """Forty more jobs, runs and decisions must not add queries (no N+1). (The tree: its figures, the admin's part of
    the tree and their rights and the forms' choices.)"""
    for n in range(40):
        job = world.hold(world.submit("member", name=f"bulk-{n}", gpus="0.1"))
        Decision.objects.create(kind="admission", subject=f"job:{job.pk}", department=job.department,
                                reason="admitted", message="admitted")
    client = signed_in(world, "dept_admin")
    with django_assert_max_num_queries(most):
        assert client.get(pages[page]).status_code == 200


def test_the_departments_page_counts_per_department_without_joining_jobs(world, django_assert_max_num_queries):
    """The operator's Departments page: each figure a subquery of its department's row. Joining members and jobs and
    grouping took 2 s for 200 departments in `bench console` (the pending GPUs summed once per joined row, and again
    for the paginator's count)."""
    from core.models import Department
    from scheduler import selectors

    sql = str(selectors.listed_departments().query).upper()
    assert " JOIN " not in sql and "GROUP BY" not in sql.split("FROM \"CORE_DEPARTMENT\"")[-1]
    Department.objects.bulk_create(Department(name=f"zz-{n:03d}") for n in range(60))
    for n in range(3):
        world.hold(world.submit("member", name=f"running-{n}"))
    world.submit("member", name="gang", gpus="2", gpu_model="A100")
    Membership.objects.create(user=world.users["operator"], department=world.departments["ml-search"])
    client = signed_in(world, "operator")
    with django_assert_max_num_queries(10):
        html = client.get(reverse("departments")).content.decode()
    row = re.search(r'<a href="/departments/ml-search/">ml-search</a>.*?</tr>', html, re.S).group(0)
    assert [int(float(x)) for x in re.findall(r'class="num">([\d.]+)<', row)] == [3, 1, 2, 3]  # members, pending, GPUs, running


# --- Right-sizing override ---------------------------------------------------------------------


def test_an_admin_keeps_a_jobs_request_and_it_is_a_decision(world):
    job = world.submit("member")
    signed_in(world, "dept_admin").post(reverse("job-keep-request", args=[job.pk]), {"keep": "1"})
    job.refresh_from_db()
    assert job.keep_request
    decision = Decision.objects.get(subject=f"job:{job.pk}", kind="rightsizing")
    assert decision.reason == "request-kept" and "adam" in decision.message
    html = signed_in(world, "member").get(reverse("job", args=[job.pk])).content.decode()
    assert "Right-sizing is off for this job" in html and "Keep the request as asked" not in html


def test_a_member_cannot_override_rightsizing(world):
    job = world.submit("member")
    response = signed_in(world, "member").post(reverse("job-keep-request", args=[job.pk]), {"keep": "1"})
    job.refresh_from_db()
    assert response.status_code == 403 and not job.keep_request


@pytest.mark.parametrize("role, status", [("member", 403), ("dept_admin", 200), ("operator", 200), ("outsider", 404)])
def test_the_api_override_follows_the_same_rule(world, role, status):
    job = world.submit("member")
    response = world.client(role).post(f"/api/jobs/{job.pk}/keep-request/", {"keep_request": True}, format="json")
    job.refresh_from_db()
    assert response.status_code == status and job.keep_request == (status == 200)


def test_the_api_override_rejects_a_bad_body(world):
    job = world.submit("member")
    response = world.client("operator").post(f"/api/jobs/{job.pk}/keep-request/", {"keep_request": "maybe"},
                                             format="json")
    assert response.status_code == 400 and "keep_request" in response.json()["extra"]["fields"]


def test_most_free_counts_every_worker_of_a_running_gang(world):
    from colocation.models import NodeState
    from colocation.selectors import most_free
    from scheduler.models import JobRun

    # t4-1 offline too: two T4 nodes of 2 GPUs; a gang of 2 x 1 T4 with a worker on each leaves 1 free on each
    world.nodes["t4-1"].state = NodeState.OFFLINE_NORMAL
    world.nodes["t4-1"].save(update_fields=["state"])
    job = _gang(world, workers=2, gpus="1", topology="spread")
    world.hold(job)
    TrainingJob.objects.filter(pk=job.pk).update(node=world.nodes["t4-0"])
    JobRun.objects.create(job=job, attempt=1, node=world.nodes["t4-0"], started_at=job.submitted_at, workers=[
        {"rank": r, "node": n, "pod": f"job-{job.pk}-1-{r}", "gpu_shares": [[0, 1.0]], "state": "running"}
        for r, n in enumerate(("t4-0", "t4-1"))])
    room = most_free(gpu_model="T4")
    assert room.nodes == 2 and room.gpus == 1  # not 2: worker 1 holds one of t4-1's GPUs too


def test_a_scaling_sentence_keeps_the_case_of_the_service_name_it_begins_with():
    from types import SimpleNamespace

    from frontend.services.tables import ScalingHistoryTable

    table, record = ScalingHistoryTable([]), SimpleNamespace(subject="service:g2-serving")
    assert table.render_message("g2-serving scales in to 32 replicas", record) == "g2-serving scales in to 32 replicas"
    assert table.render_message("alert number 3", record) == "Alert number 3"


@pytest.mark.parametrize("lowered", [False, True], ids=["owners-band", "lowered-for-the-slo"])
def test_the_gpu_band_column_reads_as_the_decisions_sentence(lowered):
    """The history's GPU band column phrases a recorded decision's band (its data) as its sentence does: 28.5 %
    reads 28 % in both (the float's rounding, not a half-up one), and a band the SLO lowered shows the owner's beside
    it in both (the owner's minRate kept: the SLO lowers maxRate and expectRate)."""
    from colocation.policy.autoscaling import LoadMinute, Rates, ScalingPolicy, ServiceView, decide_service
    from colocation.policy.serving import ServingTargets
    from experiments.builders.colocation import at
    from frontend.services.tables import ScalingHistoryTable

    now = at("14:00")
    policy = ScalingPolicy(thresholds=(("gpu", Rates(0.285, 0.6, 0.805)),),
                           serving=ServingTargets(tpot_p99_s=0.05) if lowered else None)
    # GPU 50 % on a 15 ms decode step: TPOT p99 15/(1-0.5) = 30 ms, under the 50 ms target up to 70 % use
    loads = tuple(LoadMinute(now - 60 * (5 - i), 4, gpu=0.5, qps=5.0, tpot_p99=0.03) for i in range(5))
    d = decide_service(ServiceView("llm", policy, 4, 4, loads), now)
    shown = str(ScalingHistoryTable([]).render_band(d.data))
    used, _, owner = shown.partition(" <span")
    assert f"within {used}" in d.message, (shown, d.message)
    if lowered:
        assert used == "28%–70%" and "title=\"owner's 28%–80%\">lowered for the SLO</span>" in owner
        assert "(owner's 28%–80%, lowered for the SLO)" in d.message
    else:
        assert shown == "28%–80%" and not owner
