"""The console in a real browser (Debian's Chromium through Playwright), as its users work with it."""
import json
import re
import time
import uuid

import pytest
from playwright.sync_api import expect

from cluster.clock import VirtualClock
from cluster.simulated import store
from cluster.simulated.engine import SimulatedCluster
from colocation.selectors import node_views
from core.models import Membership
from scheduler import lifecycle, live, submission
from scheduler.models import JobStatus, Quota, TrainingJob
from scheduler.policy.profile import get_profile

pytestmark = pytest.mark.django_db(transaction=True)


def schedule_once() -> None:
    """One real scheduling cycle on the world's nodes, as the live loop runs it."""
    cluster = SimulatedCluster(node_views(), VirtualClock(time.time()), store.labelled_runtime)
    live.scheduler_tick(backend=cluster, now=time.time(), profile=get_profile("tidal"))


def test_a_member_submits_finds_understands_and_cancels_a_job(world, console):
    # ml-search has no GPU quota at all: the job must wait, and the page must say why.
    Quota.objects.filter(department__name="ml-search", resource_kind="gpu").update(own=0, borrowed=0)
    page = console.page
    console.sign_in("mia")
    console.shot("my-jobs-empty")
    expect(page.get_by_text("No jobs here yet")).to_be_visible()

    console.follow("Submit a job")
    expect(page.get_by_label("Department")).to_have_value("ml-search")  # the user's department is preselected
    page.get_by_label("Name").fill("bert-large")
    page.get_by_label("Image").fill("registry.local/bert:2")
    page.get_by_label("Command").fill("python train.py --epochs 3")
    page.get_by_label("Framework").select_option(label="pytorch-2.1")
    expect(page.locator("#id_gpu_model option")).to_have_count(3)  # none, A100, T4: certified models only
    page.get_by_label("GPU model").select_option("T4")
    page.get_by_label("GPUs").fill("1.5")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_gpus_error")).to_contain_text("fractions are only allowed below 1 GPU")
    expect(page.get_by_label("Name")).to_have_value("bert-large")  # what was typed is kept
    console.shot("submit-field-error")
    assert not TrainingJob.objects.exists()

    page.get_by_label("GPUs").fill("1")
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("bert-large")
    job = TrainingJob.objects.get(name="bert-large")

    schedule_once()
    console.open("/jobs/")
    row = page.locator("#jobs tbody tr", has_text="bert-large")
    expect(row).to_contain_text("Pending")
    expect(row.locator("td.num").nth(3)).to_have_text("1")  # queue position
    console.shot("my-jobs")

    row.get_by_role("link", name="bert-large").click()
    expect(page.locator(".why")).to_contain_text("quota")
    expect(page.get_by_text("Queue position")).to_be_visible()
    expect(page.locator(".score")).to_contain_text("Total")
    expect(page.locator("#decisions ~ ol, .events").first).to_contain_text("submitted by mia")
    console.shot("job-detail-pending")

    page.get_by_role("link", name="Cancel…").click()
    console.shot("cancel-confirm")
    page.get_by_role("button", name="Yes, cancel the job").click()
    expect(page.locator("h1 .badge")).to_have_text("Cancelled")
    console.shot("job-cancelled")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_a_department_admin_sees_quota_bars_and_manages_members(world, console):
    world.hold(world.submit("member", name="holder"))
    page = console.page
    console.sign_in("adam")
    page.get_by_role("link", name="Departments", exact=True).click()
    console.shot("departments")
    page.get_by_role("link", name="ml-search", exact=True).click()
    expect(page.locator('.bar[aria-label^="T4: own 1 of 2 used"]')).to_be_visible()
    console.shot("department")

    page.get_by_label("User name").fill("olga")
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#members ~ div table, table").last).to_contain_text("olga")
    assert Membership.objects.filter(user__username="olga", department__name="ml-search").exists()

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("tr", has_text="olga").get_by_role("button", name="Remove").click()
    expect(page.locator(".messages")).to_contain_text("olga removed")
    assert not Membership.objects.filter(user__username="olga", department__name="ml-search").exists()

    admin = page.locator("tr", has_text="adam")
    admin.get_by_label("Role").select_option("member")
    admin.get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert")).to_contain_text("last admin")
    console.shot("department-last-admin")


def test_another_department_cannot_see_or_open_the_jobs(world, console):
    job = world.submit("member", name="search-secret")
    console.sign_in("olga")
    console.open("/jobs/?scope=departments")
    expect(console.page.locator("#jobs")).not_to_contain_text("search-secret")
    response = console.open(f"/jobs/{job.pk}/")
    assert response.status == 404
    assert console.open("/departments/ml-search/").status == 404
    console.shot("outsider-404")


def test_the_api_docs_render_offline(world, console):
    console.sign_in("mia")
    console.open("/api/docs/")
    expect(console.page.locator(".opblock").first).to_be_visible()
    assert console.page.locator(".opblock").count() > 40  # every operation of the API is listed
    expect(console.page.locator(".opblock-summary-path", has_text=re.compile(r"^/api/jobs/$")).first).to_be_visible()
    console.shot("api-docs")


def test_services_page_for_an_admin(world, console):
    from core.decisions import decision_record
    from core.models import Decision

    service = world.service("ml-search", name="ranker", replicas=3)
    for current, target in ((2, 4), (4, 3)):
        decision_record(kind=Decision.Kind.SCALING, subject="service:ranker", reason="scale-out" if target > current
                        else "scale-in", department=service.department, data={"current": current, "target": target},
                        message=f"ranker scales from {current} to {target} replicas")
    decision_record(kind=Decision.Kind.ALERT, subject="service:ranker", reason="short", department=service.department,
                    message="ranker has had only 2 of 3 replicas ready for 6 minutes")
    page = console.page
    console.sign_in("adam")
    page.get_by_role("link", name="Inference services").click()
    page.get_by_role("link", name="ranker").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("ranker")
    history = page.locator("#scaling-live")
    expect(history.get_by_role("row")).to_have_count(4)  # header + 3, newest first
    expect(history.get_by_role("row").nth(1)).to_contain_text("only 2 of 3 replicas ready")
    expect(history.get_by_role("row").nth(3)).to_contain_text("2 → 4")
    expect(page.locator('canvas[data-chart="chart-desired"]')).to_be_visible()
    expect(page.get_by_text("No forecast yet")).to_be_visible()
    console.shot("service")
    page.screenshot(path="/tmp/ui-service-detail.png", full_page=True)
    page.get_by_role("link", name="Edit").click()
    gpu = page.get_by_role("group", name="GPU utilization")
    gpu.get_by_label("min").fill("0.6")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_t-gpu-min_rate_error")).to_contain_text("need min_rate < expect_rate")
    expect(page.get_by_role("group", name="GPU utilization").get_by_label("min")).to_have_value("0.6")
    page.screenshot(path="/tmp/ui-service-threshold-error.png", full_page=True)
    page.get_by_role("group", name="GPU utilization").get_by_label("min").fill("0.2")
    page.get_by_label("Min replicas").fill("20")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_min_replicas_error")).to_contain_text("min_replicas 20 is above max_replicas")
    console.shot("service-edit-error")
    page.get_by_label("Min replicas").fill("2")
    schedule = page.get_by_role("group", name="Schedule 1")
    schedule.get_by_label("Days (cron)").fill("mon-funday")
    schedule.get_by_label("Start").fill("08:00")
    schedule.get_by_label("End").fill("20:00")
    schedule.get_by_label("At least").fill("3")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_s-0-weekdays_error")).to_contain_text("funday")
    console.shot("service-schedule-error")
    page.screenshot(path="/tmp/ui-service-schedule-error.png", full_page=True)
    page.get_by_role("group", name="Schedule 1").get_by_label("Days (cron)").fill("mon-fri")
    page.get_by_label("Min gain per replica (0–1)").fill("0.1")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_slo_min_gain_error")).to_contain_text("needs slo_ttft_s and slo_tpot_s too")
    page.get_by_label("Request SLO: TTFT (s)").fill("1")
    page.get_by_label("Request SLO: TPOT (s)").fill("0.05")
    page.get_by_label("Peak window from").fill("09:00")
    page.get_by_label("Peak window to").fill("18:00")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_text("No scale-in during the peak window 09:00–18:00")).to_be_visible()
    expect(page.get_by_text("at least 3 replicas")).to_be_visible()
    expect(page.locator("#slo-sizing")).to_contain_text("Sized to the SLO: TTFT 1 s, TPOT 50 ms, min gain 10%")
    console.shot("service-policy")
    page.screenshot(path="/tmp/ui-service-policy.png", full_page=True)


def test_a_member_submits_a_gang_and_sees_both_workers_once_admitted(world, console):
    """Issue 25: a 2-worker job through the form, `2 × …` in My jobs and the department's queue in GPUs, then both
    workers on its page after a real scheduling cycle places the gang."""
    from colocation.models import Node, NodeState

    Node.objects.filter(name="t4-1").update(state=NodeState.OFFLINE_NORMAL)  # lent to training: two T4 nodes
    page = console.page
    console.sign_in("mia")
    console.follow("Submit a job")
    page.get_by_label("Name").fill("ddp-bert")
    page.get_by_label("Image").fill("registry.local/bert:2")
    page.get_by_label("Command").fill("torchrun --nproc-per-node 1 train.py")
    page.get_by_label("Framework").select_option(label="pytorch-2.1")
    expect(page.locator("#id_gpu_model option")).to_have_count(3)  # none, A100, T4: htmx swapped caffe's P40 out
    page.get_by_label("GPU model").select_option("T4")
    page.get_by_label("Workers").fill("2")
    page.get_by_label("Topology").select_option("spread")
    page.get_by_label("GPUs").fill("0.5")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_gpus_error")).to_contain_text("each of a gang's 2 workers asks for whole GPUs")
    expect(page.get_by_label("Workers")).to_have_value("2")  # what was typed is kept
    assert not TrainingJob.objects.exists()
    page.get_by_label("GPUs").fill("1")
    console.shot("gang-submit-form")
    page.get_by_role("button", name="Submit job").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("ddp-bert")
    job = TrainingJob.objects.get(name="ddp-bert")
    assert (job.workers, job.topology) == (2, "spread")

    console.open("/jobs/")
    row = page.locator("#jobs tbody tr", has_text="ddp-bert")
    expect(row).to_contain_text("2 × 1 T4")
    console.shot("gang-my-jobs")
    console.open("/departments/ml-search/")
    expect(page.locator("#queue-size")).to_contain_text("1 pending job asking 2 T4 GPUs")
    console.shot("gang-department-queue")

    schedule_once()
    console.open(f"/jobs/{job.pk}/")
    workers = page.locator("#worker-table tbody tr")
    expect(workers).to_have_count(2)
    assert sorted(workers.locator("td:nth-child(2)").all_inner_texts()) == ["t4-0", "t4-1"]  # spread: a node each
    for rank in (0, 1):
        expect(workers.nth(rank).locator("td").first).to_have_text(str(rank))
        expect(workers.nth(rank)).to_contain_text("running")
    console.shot("gang-job-page")
    job.refresh_from_db()
    assert job.status in (JobStatus.ADMITTED, JobStatus.RUNNING)


def test_a_waiting_gang_shows_its_reservation_in_local_time(world, console):
    """The reservation a cycle recorded (nodes and expected start, epoch seconds) reads in the browser's time zone
    (Europe/Berlin here) with how long until it."""
    from datetime import datetime, timedelta, timezone
    from decimal import Decimal
    from zoneinfo import ZoneInfo

    from core.models import Decision, Department

    job = submission.job_submit(
        submitter=world.users["member"], department=Department.objects.get(name="ml-search"), name="ddp-wait",
        image="registry/ddp:1", command="torchrun train.py", framework=world.frameworks["pytorch-2.1"],
        gpu_model=world.gpu_models["T4"], gpus=Decimal(1), cpu_milli=4000, memory_mib=16384, workers=4)
    start = (datetime.now(timezone.utc) + timedelta(minutes=42)).replace(second=0, microsecond=0)
    TrainingJob.objects.filter(pk=job.pk).update(
        reservation={"nodes": ["t4-0", "t4-1"], "start_at": start.timestamp()}, queue_position=1,
        pending_reason="reserved")
    Decision.objects.create(kind="pending", subject=f"job:{job.pk}", department=job.department, reason="reserved",
                            message="pending: needs 4 workers of 1 T4 (packed); room for 2 across the T4 nodes; "
                                    f"reserved t4-0, t4-1 for job {job.pk}")
    page = console.page
    console.sign_in("mia")
    console.open(f"/jobs/{job.pk}/")
    expect(page.locator(".why")).to_contain_text("needs 4 workers of 1 T4")
    reservation = page.locator("dd.reservation")
    expect(reservation).to_contain_text("t4-0, t4-1 from")
    local = start.astimezone(ZoneInfo("Europe/Berlin"))
    expect(reservation.locator("time")).to_contain_text(local.strftime("%I:%M").lstrip("0"))
    expect(reservation.locator("time")).to_contain_text(re.compile(r"· in \d+ min$"))  # ahead, not "ago"
    expect(page.get_by_text("4 workers × 1 T4 GPU = 4 GPUs")).to_be_visible()
    console.shot("gang-waiting-reserved")


def test_notification_settings_save_and_a_bad_webhook_is_named_beside_its_field(world, console, settings):
    from django.utils import timezone

    from notifications.models import Preference
    from notifications.services import notifications_scan

    settings.TIDAL_NOTIFY_SETTLE_S = 0
    adam = world.users["dept_admin"]
    adam.email = "adam@cluster.test"
    adam.save(update_fields=["email"])
    job = world.submit(role="dept_admin", name="bert-base")
    lifecycle.job_finish(job=job, at=time.time(), status=JobStatus.FAILED, message="failed on t4-0 in run 1: OOMKilled")
    notifications_scan(now=timezone.now())  # failed is a default event: one e-mail, not sent yet
    page = console.page
    console.sign_in("adam")
    page.get_by_role("link", name="Notifications").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Notifications")
    expect(page.locator("table tbody tr", has_text="bert-base")).to_contain_text("Pending")
    mine = page.get_by_role("form", name="My jobs")
    expect(mine.get_by_label("preempted")).to_be_checked()  # the defaults
    expect(mine.get_by_label("admitted")).not_to_be_checked()

    expect(mine.get_by_label("My e-mail address")).to_have_value("adam@cluster.test")

    mine.get_by_label("finished").check()
    mine.get_by_label("Webhook URL").fill("ftp://hooks.example.test/T0/secret")
    mine.get_by_label("My e-mail address").fill("adam at cluster")
    mine.get_by_role("button", name="Save").click()
    expect(page.locator("#id_webhook_url_error")).to_have_text("must be an http:// or https:// URL with a host")
    expect(page.locator("#id_email_address_error")).to_contain_text("enter an e-mail address such as")
    expect(mine.get_by_label("finished")).to_be_checked()  # what was chosen is kept
    page.screenshot(path="/tmp/h3-settings-error.png", full_page=True)
    adam.refresh_from_db()
    assert not Preference.objects.exists() and adam.email == "adam@cluster.test"

    mine.get_by_label("Webhook URL").fill("https://hooks.example.test/T0/secret")
    mine.get_by_label("My e-mail address").fill("adam.search@cluster.test")
    mine.get_by_role("button", name="Save").click()
    expect(page.get_by_role("status")).to_contain_text("Notification settings saved.")
    expect(mine.get_by_label("Webhook URL")).to_have_value("https://hooks.example.test/T0/secret")
    expect(mine.get_by_label("My e-mail address")).to_have_value("adam.search@cluster.test")
    adam.refresh_from_db()
    assert adam.email == "adam.search@cluster.test"
    preference = Preference.objects.get(user=adam)
    assert preference.events == ["preempted", "taken_back", "finished", "failed"]
    assert preference.webhook_url == "https://hooks.example.test/T0/secret"
    expect(page.get_by_role("heading", name=re.compile("ml-search"))).to_be_visible()  # an admin's department section
    page.screenshot(path="/tmp/h3-settings.png", full_page=True)
    console.shot("notification-settings")


def test_the_job_page_shows_its_log_follows_it_and_keeps_the_archive_of_a_preempted_run(world, console, settings):
    """The log panel: the running pod's log read live, new lines followed without a reload (kept scrolled to the
    end), pause, download, and after a preemption the first run's archive with its SIGTERM lines."""
    import uuid

    from redis import Redis

    from scheduler.policy.decisions import Preempt, Reason

    settings.TIDAL_CLUSTER_BACKEND = "simulated"
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"test-e2e-logs-{uuid.uuid4().hex[:8]}"
    redis = Redis.from_url(settings.REDIS_URL)
    clock = VirtualClock(time.time() - 600)
    cluster = SimulatedCluster(node_views(), clock, store.labelled_runtime)
    job = world.submit(name="resnet-logs")
    live.scheduler_tick(backend=cluster, now=clock.now(), profile=get_profile("tidal"))
    pod = TrainingJob.objects.get(pk=job.pk).runs.get().pod
    clock.advance(300)
    store.save(redis, namespace, cluster)
    try:
        page = console.page
        console.sign_in("mia")
        console.open(f"/jobs/{job.pk}/")
        log = page.locator("pre.log")
        expect(log).to_contain_text("torchrun --nnodes=1")
        expect(log).to_contain_text(cluster.pod_logs(pod, tail=1).split(" ", 1)[1].strip())
        expect(page.locator("[data-log-status]")).to_contain_text("live from the cluster · following")

        clock.advance(90)  # the cluster writes on: the panel shows the new lines without a reload
        store.save(redis, namespace, cluster)
        newest = cluster.pod_logs(pod, tail=1).strip()
        expect(log).to_contain_text(newest.split(" ", 1)[1])
        assert log.evaluate("el => el.scrollTop + el.clientHeight >= el.scrollHeight - 4")  # at the end
        page.screenshot(path="/tmp/h2-logs.png", full_page=True)
        console.shot("job-log-following")

        page.get_by_role("button", name="Pause").click()
        expect(page.locator("[data-log-status]")).to_contain_text("paused")
        expect(page.get_by_role("link", name="Download")).to_have_attribute(
            "href", re.compile(rf"/api/jobs/{job.pk}/logs/\?run=1&worker=0&download=1$"))

        victim = Preempt(job_id=job.pk, job_name=job.name, node="t4-0", for_job_id=999, run_time_s=60, requeue=True,
                         reason=Reason.PREEMPTED_PRIORITY, message="preempted for job 999 (higher score)")
        live.preempt(victim, cluster, clock.now())
        store.save(redis, namespace, cluster)
        console.open(f"/jobs/{job.pk}/")
        expect(log).to_contain_text("Received SIGTERM (signal 15): preempted for job 999")
        expect(page.locator("[data-log-status]")).to_contain_text("from the archive")
        expect(page.locator("[data-log-run]")).to_contain_text("1 · preempted")
        page.screenshot(path="/tmp/h2-logs-archive.png", full_page=True)
        console.shot("job-log-archive")
    finally:
        for key in redis.scan_iter(f"{namespace}:*"):
            redis.delete(key)


def test_the_log_panel_reads_the_kubernetes_api_live_then_the_archive(world, console, settings, tmp_path):
    """The same panel on the Kubernetes backend (the real control plane; kwok serves the pod's log through the API
    server): the pod's log while it runs, its archive once it succeeded and the pod is gone."""
    from redis import Redis

    from cluster.backend import RUNTIME_LABEL
    from tests.integration.kubecluster import tidal_on_kwok

    job = world.submit(name="bert-on-k8s")
    job.annotations = {RUNTIME_LABEL: "3"}
    job.save()
    with tidal_on_kwok(settings, tmp_path, node_views(), prefix="test-e2e-k8s-logs") as (cluster, namespace):
        redis = Redis.from_url(settings.REDIS_URL)

        def tick() -> None:
            cluster.settle()
            live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal"))

        tick()
        page = console.page
        console.sign_in("mia")
        console.open(f"/jobs/{job.pk}/")
        expect(page.locator("pre.log")).to_contain_text("torchrun --nnodes=1")
        expect(page.locator("[data-log-status]")).to_contain_text("live from the cluster")
        console.shot("job-log-kubernetes-live")
        for _ in range(100):  # the run ends and its pod is cleaned up
            tick()
            if TrainingJob.objects.get(pk=job.pk).status == JobStatus.SUCCEEDED and not cluster.pods():
                break
            time.sleep(0.1)
        console.open(f"/jobs/{job.pk}/")
        expect(page.locator("pre.log")).to_contain_text("exiting with code 0")
        expect(page.locator("[data-log-status]")).to_contain_text("from the archive")
        console.shot("job-log-kubernetes-archive")


def test_sm_active_is_shown_beside_gpu_util_and_says_when_it_is_estimated(world, console):
    """The job profile charts SM active and says which minutes were on a shared GPU; the services list and a service's
    utilization chart show SM active beside GPU util."""
    from dataclasses import replace

    from profiling import services
    from tests.integration.profiles import job_minute, service_minute, start_run

    job = world.submit()
    run = start_run(job)
    services.job_minutes_record(records=[
        replace(job_minute(job.pk, 1, i, gpu=(0.40, 0.52)), sm_active_mean=0.27, sm_active_peak=0.31,
                estimated=1 if i == 2 else None) for i in range(3)])
    world.service("ml-search", name="ranker", replicas=2)
    services.service_minutes_record(records=[replace(service_minute("ranker", 0), sm_active_mean=0.044, estimated=1)])
    assert run.minutes.filter(estimated=True).count() == 1

    page = console.page
    console.sign_in("mia")
    console.open(f"/jobs/{job.pk}/")
    expect(page.locator('canvas[data-chart="chart-sm_active"]')).to_be_visible()
    expect(page.get_by_text("SM active", exact=True)).to_be_visible()
    expect(page.get_by_text("estimated for 1 of 3 minutes: the GPU was shared with other pods")).to_be_visible()
    console.shot("job-profile-sm-active")
    console.open("/services/")
    header = page.get_by_role("columnheader", name="SM active (last min)")
    expect(header).to_be_visible()
    row = page.get_by_role("row", name=re.compile("ranker"))
    expect(row).to_contain_text("55%")  # GPU util
    expect(row).to_contain_text("4% estimated")  # SM active, split from a shared GPU
    console.shot("services-sm-active")


def test_an_operator_creates_a_two_pod_group_service_and_sees_its_groups_on_their_nodes(world, console):
    """Issue 42: a service whose replica is 2 pods of 2 T4 through the form (a group no block can hold is refused
    beside its field), then its group with leader, worker and nodes after the group tick places it."""
    from colocation import groups
    from colocation.models import InferenceService, Node, NodeState

    Node.objects.filter(name="t4-0").update(state=NodeState.ONLINE_NORMAL)  # both T4 nodes serve
    page = console.page
    console.sign_in("otto")
    console.open("/services/new/")
    page.get_by_label("Name").fill("llm")
    page.get_by_label("Department").select_option("ml-search")
    page.get_by_label("GPU model").select_option("T4")
    page.get_by_label("GPUs per replica").fill("2")
    page.get_by_label("Replicas", exact=True).fill("1")
    page.get_by_label("Min replicas").fill("1")
    page.get_by_label("Pods per replica (group size)").fill("3")
    page.get_by_label("Start-up time (s)").fill("120")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#id_group_size_error")).to_contain_text("T4 nodes together can never hold a group of 3 pods")
    assert not InferenceService.objects.exists()
    console.shot("service-groups-form-error")
    page.get_by_label("Pods per replica (group size)").fill("2")
    page.get_by_role("button", name="Save").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("llm")
    expect(page.get_by_text("No group placed yet")).to_be_visible()

    service = InferenceService.objects.get(name="llm")
    clock = VirtualClock(time.time())
    cluster = SimulatedCluster(node_views(), clock)
    groups.reconcile(cluster, service, 1, "t4", time.time())
    console.open("/services/llm/")
    table = page.locator("section[aria-labelledby=groups-title] tbody tr")
    expect(table).to_have_count(1)
    expect(table.first).to_contain_text("starting")
    clock.advance(121)
    cluster.advance()
    groups.reconcile(cluster, service, 1, "t4", time.time() + 121)
    console.open("/services/llm/")
    row = page.locator("section[aria-labelledby=groups-title] tbody tr").first
    expect(row).to_contain_text("ready")
    cells = row.locator("td").all_inner_texts()
    assert cells[:4] == ["0", "llm-0", "llm-0-1", "t4-0, t4-1"], cells
    # 2 pods of 2 GPUs starting for the 120 s the tick charges at most: the GPU-seconds of a group not yet ready
    expect(page.get_by_text("GPU-seconds held by groups not fully ready: 480")).to_be_visible()
    console.shot("service-groups")


def histogram_p99(median_s: float) -> float:
    """Prometheus' histogram_quantile(0.99) over vLLM's TTFT buckets of lognormal latencies of `median_s`: linear
    within the bucket the 99th percentile falls in."""
    from cluster.simulated import llm

    bounds = [(0.0, 0.0)] + [(le, llm.share_within(le, median_s, llm.TTFT_SIGMA)) for le in llm.TTFT_BUCKETS_S]
    (lo, below), (hi, within) = next((a, b) for a, b in zip(bounds, bounds[1:]) if b[1] >= 0.99)
    return lo + (hi - lo) * (0.99 - below) / (within - below)


def test_an_llm_service_page_charts_its_ttft_p99_from_prometheus_against_its_dashed_target(world, console):
    """Issue 42: the service page charts the TTFT p99 that real Prometheus scraped from the service's engines (the
    cluster exporter's vLLM series) against the service's target as a dashed line; a service whose engines Prometheus
    has no latency of (none publish, or they take no requests) says so instead of a chart."""
    from prometheus_api_client import PrometheusConnect

    from cluster.simulated import llm
    from cluster.simulated.exporter import register_target, serve
    from cluster.simulated.metrics import INFERENCE_NAMESPACE, builtin_shapes
    from colocation.replicas import replica_template
    from colocation.serving_signals import SERVICE, queries
    from tests.integration.livecluster import EnginesAt
    from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL

    run = uuid.uuid4().hex[:6]  # names of this run alone: Prometheus keeps earlier runs' series
    names = {kind: f"llm-{kind}-{run}" for kind in ("busy", "idle", "silent")}
    services = {kind: world.service(name=name, gpu_model=world.gpu_models["T4"], gpus_per_replica="0.25", replicas=1,
                                    min_replicas=1, max_replicas=4, ttft_p99_target_s=0.5)
                for kind, name in names.items()}
    cluster = SimulatedCluster(node_views(), VirtualClock(time.time()))
    for kind in ("busy", "idle"):  # the silent service has no engines
        cluster.apply_replicaset(names[kind], replica_template(services[kind]), 1, startup_s=0)
    cluster.advance()
    assert sum(p.ready for p in cluster.pods()) == 2
    state = (cluster.pods(), cluster.nodes())
    utilization = 0.8  # a TTFT median of 0.05 s / (1 - 0.8) = 0.25 s: p99 0.84 s in vLLM's buckets, over 0.5 s
    load = EnginesAt({names["busy"]: (8.0, utilization), names["idle"]: (0.0, 0.0)})
    server, thread = serve(lambda: state, builtin_shapes(), 0, load=load)
    target = register_target(PROMETHEUS_SD_DIR, server.server_port, f"e2e-slo-{run}")
    try:
        prometheus = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True)
        deadline = time.monotonic() + 60
        ttft_p99 = queries("1m", INFERENCE_NAMESPACE)["ttft_p99"]
        while set(load.loads) - {s["metric"].get(SERVICE) for s in prometheus.custom_query(ttft_p99)}:
            assert time.monotonic() < deadline, "no TTFT p99 of the engines in Prometheus within 60 s"
            time.sleep(1)

        page = console.page
        console.sign_in("adam")
        console.open(f"/services/{names['busy']}/")
        chart = page.locator("figure", has=page.locator('canvas[data-chart="chart-ttft-p99"]'))
        expect(chart.locator("canvas")).to_be_visible()
        expect(chart.locator("figcaption")).to_contain_text("Time to first token, p99")
        expect(chart.locator("figcaption")).to_contain_text("target 0.5 s")
        spec = json.loads(page.locator("#chart-ttft-p99").text_content())
        ttft, line = spec["series"]
        measured = [(t, v) for t, v in ttft["points"] if v is not None]
        expected = histogram_p99(llm.engine_at(utilization).ttft_median_s)
        assert measured and all(abs(v - expected) < 1e-6 for _, v in measured), (expected, measured)
        # the newest point on the x axis: Chart.js leaves out a point past it
        assert spec["x_max"] - 30_000 < measured[-1][0] <= spec["x_max"]
        assert line["label"] == "target" and [v for _, v in line["points"]] == [0.5, 0.5] and line["dash"]
        assert page.locator('canvas[data-chart="chart-tpot-p99"]').count() == 0  # no target, no chart
        ticks = page.evaluate("""Chart.getChart(document.querySelector('canvas[data-chart="chart-ttft-p99"]'))
                                 .scales.x.ticks.map(t => t.value)""")
        steps = {b - a for a, b in zip(ticks, ticks[1:])}
        offset = page.evaluate("new Date().getTimezoneOffset()") * 60_000
        assert 3 <= len(ticks) <= 8 and len(steps) == 1, ticks  # every 30 minutes of the local clock, not 33:20
        (step,) = steps
        assert step % 60_000 == 0 and all((t - offset) % step == 0 for t in ticks), ticks
        chart.scroll_into_view_if_needed()
        console.shot("llm-service-ttft-p99")

        for kind in ("idle", "silent"):
            console.open(f"/services/{names[kind]}/")
            figure = page.locator("figure", has_text="Time to first token, p99")
            expect(figure).to_contain_text("target 0.5 s")
            expect(figure.locator("canvas")).to_have_count(0)
            expect(figure).to_contain_text("No value in Prometheus for this service in this range")
            console.shot(f"llm-service-ttft-p99-{kind}")
    finally:
        target.unlink(missing_ok=True)
        server.shutdown()
        thread.join(timeout=5)
