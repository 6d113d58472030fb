"""The operators' dashboards in a real browser, on live data: the live server's /metrics scraped by the real
Prometheus, the lending controller moving a node the operator lent."""
import json
import re
import time
import uuid

import pytest
from playwright.sync_api import expect
from prometheus_api_client import PrometheusConnect
from redis import Redis

from cluster.simulated.exporter import register_target
from colocation.controller import run_lending_tick
from colocation.models import NodeTransition
from colocation.selectors import lending_profile
from core.telemetry import web_target
from scheduler import live
from scheduler.policy.profile import get_profile
from tests.integration.services import PROMETHEUS_SD_DIR, PROMETHEUS_URL

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scraped(world, live_server, settings):
    """This test's Tidal (own Redis namespace) with its live server registered as a Prometheus target."""
    settings.TIDAL_REDIS_NAMESPACE = namespace = f"e2e-{uuid.uuid4().hex[:8]}"
    redis = Redis.from_url(settings.REDIS_URL)
    world.submit(gpus="1")
    live.run_live_tick(redis=redis, namespace=namespace, profile=get_profile("tidal"))
    run_lending_tick(redis=redis, namespace=namespace, profile=lending_profile())
    target = register_target(PROMETHEUS_SD_DIR, int(live_server.url.rsplit(":", 1)[1]), web_target(namespace))
    prom = PrometheusConnect(url=PROMETHEUS_URL, disable_ssl=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not prom.custom_query(f'tidal_nodes{{service="{web_target(namespace)}"}}'):
        time.sleep(0.5)
    yield redis, namespace
    target.unlink(missing_ok=True)
    for key in redis.scan_iter(f"{namespace}:*"):
        redis.delete(key)


def test_operator_reads_the_overview_from_prometheus(scraped, console):
    console.sign_in("otto")
    console.page.get_by_role("link", name="Operations").click()
    page = console.page
    expect(page.get_by_role("heading", level=1)).to_contain_text("Operations")
    expect(page.locator(".bar-row", has_text="t4")).to_contain_text("1 / 4 GPUs")  # allocated now, from the tick
    nodes = page.locator("canvas[data-chart=chart-nodes]")
    expect(nodes).to_be_visible()
    spec = json.loads(page.locator("#chart-nodes").text_content())
    assert {s["label"] for s in spec["series"]} == {"offline-normal", "online-normal"}
    assert page.locator("[role=alert]").count() == 0
    console.shot("ops-overview")
    page.get_by_role("link", name="last day").click()
    expect(page).to_have_url(re.compile(r"range=day$"))
    console.shot("ops-overview-day")


def test_operator_lends_a_node_and_watches_its_transition_complete(scraped, console):
    redis, namespace = scraped
    console.sign_in("otto")
    console.open("/ops/nodes/")
    page = console.page
    console.shot("ops-nodes")
    page.get_by_role("link", name="t4-1", exact=True).click()
    expect(page.get_by_role("heading", name="t4-1")).to_be_visible()
    page.get_by_text("Lend to training…").click()
    page.get_by_role("button", name="Confirm: lend to training").click()
    expect(page.locator(".messages")).to_contain_text("Lend to training: t4-1")
    expect(page.locator(".tl-row", has_text="t4-1")).to_contain_text("In progress")
    console.shot("ops-nodes-lending")
    for _ in range(10):  # the controller moves it a step per tick
        run_lending_tick(redis=redis, namespace=namespace, profile=lending_profile())
        if not NodeTransition.objects.filter(status="open").exists():
            break
    assert NodeTransition.objects.get(node__name="t4-1").status == "done"
    console.open("/ops/nodes/?node=t4-1")
    expect(page.locator(".tl-row", has_text="t4-1")).to_contain_text("Done")
    expect(page.get_by_role("heading", name="t4-1")).to_contain_text("offline-normal")
    expect(page.locator(".events")).to_contain_text("requested by otto")
    console.shot("ops-nodes-lent")


def test_operator_edits_a_quota_and_a_member_is_kept_out(world, console):
    world.hold(world.submit(gpus="2"))
    console.sign_in("otto")
    console.open("/ops/quotas/?department=ml-search")
    page = console.page
    own = page.get_by_label("Own T4 quota of ml-search")
    own.fill("1")
    own.locator("xpath=ancestor::form").get_by_role("button", name="Save").click()
    expect(page.get_by_role("alert").first).to_contain_text("below the 2")
    expect(page.get_by_label("Own T4 quota of ml-search")).to_have_value("1")
    console.shot("ops-quotas-error")
    page.get_by_label("Own T4 quota of ml-search").fill("6")
    page.get_by_label("Own T4 quota of ml-search").locator("xpath=ancestor::form").get_by_role(
        "button", name="Save").click()
    expect(page.locator(".messages")).to_contain_text("ml-search T4 quota saved")
    console.open("/ops/decisions/?q=quota")
    expect(page.locator("table tbody")).to_contain_text("set to own 6")
    console.shot("ops-decisions")
    page.context.clear_cookies()
    console.sign_in("mia")
    expect(page.get_by_role("link", name="Operations")).to_have_count(0)
    assert console.open("/ops/").status == 403


def test_operator_replays_a_small_trace_and_reads_the_report(world, console, settings, tmp_path):
    """The replay task runs in-process (eager) when the form is sent, as a Celery worker would run it."""
    from tidal.celery import app

    lines = (settings.TRACES_DIR / "alibaba-gpu-2023" / "openb_pod_list_default.csv").read_text().splitlines(True)
    trace = tmp_path / "first-120-pods.csv"
    trace.write_text("".join(lines[:121]))
    settings.RUN_DIR = tmp_path
    app.conf.task_always_eager = True
    try:
        console.sign_in("otto")
        console.open("/ops/replays/")
        page = console.page
        form = page.get_by_role("region", name="Replay a trace")
        form.get_by_label("Trace:").select_option("")  # upload instead
        form.get_by_label("…or upload a pod list").set_input_files(str(trace))
        form.get_by_label("quota-borrowing").uncheck()
        form.get_by_label("tidal-fair").check()
        form.get_by_label("Load factor").fill("2")
        form.get_by_label("Quota tree").select_option("helios")
        expect(form.get_by_text("Quota trees, fair shares and reclaims")).to_be_visible()  # where the tree is told
        console.shot("ops-replay-form")
        form.get_by_role("button", name="Start replay").click()
        expect(page.get_by_role("heading", level=2).first).to_contain_text("first-120-pods.csv")
        expect(page.locator("dl.facts")).to_contain_text("helios (divisions of virtual clusters)")
        expect(page.get_by_role("region", name="Figures")).to_contain_text("tidal-fair")
        expect(page.locator("section[aria-labelledby=plots] img").first).to_be_visible()
        assert page.locator("section[aria-labelledby=plots] img").first.evaluate("i => i.naturalWidth") > 100
        console.shot("ops-replay-report")
    finally:
        app.conf.task_always_eager = False


def test_operator_compares_placements_on_a_trace(world, console, settings, tmp_path):
    """The FGD experiment from the what-if page: two placement policies on a trace, the table and the plots."""
    from tidal.celery import app

    settings.RUN_DIR = tmp_path
    app.conf.task_always_eager = True
    try:
        console.sign_in("otto")
        console.open("/ops/replays/")
        form = console.page.get_by_role("region", name="Compare placements (FGD experiment)")
        form.get_by_label("Trace:").select_option("multigpu20")
        for policy in ("random", "clustering", "packing", "fgd", "tidal"):
            form.get_by_label(policy, exact=True).uncheck()
        # the experiment runs eagerly inside the request (20 runs, 10-15 s here): the click waits for its answer
        form.get_by_role("button", name="Start experiment").click(timeout=90_000)
        page = console.page
        figures = page.get_by_role("region", name="Unallocated GPUs at 100 % arrived")
        expect(figures).to_contain_text("bestfit")
        expect(figures).to_contain_text("dotprod")
        expect(page.locator("section[aria-labelledby=plots] img").first).to_be_visible()
        console.shot("ops-fgd-report")
    finally:
        app.conf.task_always_eager = False


def test_operator_walks_every_dashboard_tab(world, console):
    """Each dashboard opens from the tabs, by keyboard-reachable links, with no error and nothing from elsewhere."""
    world.service("ml-search", gpu_model=world.gpu_models["T4"])
    world.service("ml-ads", name="ads-cpu")
    console.sign_in("otto")
    console.open("/ops/")
    page = console.page
    for tab, landmark in (("Nodes and lending", "Nodes"), ("Quotas", "Quotas and usage"),
                          ("Autoscaling", "Inference services"), ("Decisions", None), ("What-if", "Replay a trace")):
        page.get_by_role("navigation", name="Dashboards").get_by_role("link", name=tab).click()
        expect(page.get_by_role("link", name=tab)).to_have_attribute("aria-current", "page")
        if landmark:
            expect(page.get_by_role("heading", name=landmark).first).to_be_visible()
        console.shot(f"ops-{tab.lower().replace(' ', '-')}")
    expect(page.get_by_text("ml-search-ranker")).to_have_count(0)  # services live on the autoscaling tab
    page.get_by_role("link", name="Autoscaling").click()
    expect(page.get_by_role("link", name="ml-search-ranker")).to_be_visible()
    expect(page.get_by_role("heading", name="Alerts")).to_be_visible()
    expect(page.get_by_text("No alert.")).to_be_visible()
    page.get_by_label("Resource group", exact=True).select_option("t4")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_role("link", name="ml-search-ranker")).to_be_visible()
    expect(page.get_by_role("link", name="ads-cpu")).to_have_count(0)
    page.screenshot(path="/tmp/ui-ops-autoscaling.png", full_page=True)


def test_operator_chooses_forecast_driven_lending_for_a_colocation_simulation(world, console):
    """The co-location what-if offers threshold-only or forecast-driven lending; a bad field is refused beside it
    and the choice is kept."""
    console.sign_in("otto")
    console.open("/ops/replays/")
    page = console.page
    form = page.get_by_role("region", name="Simulate co-location")
    expect(form.get_by_label("Thresholds only")).to_be_checked()
    form.get_by_label("Forecast-driven").check()
    form.get_by_label("Days").fill("9")
    console.shot("ops-colocation-form")
    form.get_by_role("button", name="Start simulation").click()
    form = page.get_by_role("region", name="Simulate co-location")
    expect(form.locator(".field.invalid")).to_contain_text("Days")
    expect(form.get_by_label("Forecast-driven")).to_be_checked()
    console.shot("ops-colocation-form-refused")
