"""The operators' dashboards: cluster overview, nodes and lending, quotas, autoscaling, decisions, what-if.
Operators only, except the quotas and decisions pages, which department admins see for their own departments
(read-only); anyone else signed in gets 403. Reads through the apps' selectors, writes through their services."""
from collections import defaultdict
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from functools import wraps
from urllib.parse import quote

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html_join
from django.views.decorators.http import require_POST
from redis import Redis

from colocation import selectors as colocation_selectors, services as colocation_services
from colocation.models import NODE_STATE_CHOICES, NodeTransition
from colocation.policy import Direction
from core import selectors as core_selectors, telemetry
from core.errors import ApplicationError
from core.filtersets import DecisionFilterSet
from core.models import Decision, Membership
from experiments import whatif
from experiments.fragmentation.experiment import DEFAULT_POLICIES as PLACEMENT_POLICIES
from experiments.fragmentation.scorers import SCORERS
from experiments.replay import DEFAULT_POLICIES
from frontend import scope
from frontend.dashboards import charts, prometheus
from frontend.dashboards.forms import ColocationForm, FragmentationForm, QuotaForm, ReplayForm
from frontend.dashboards.tables import DecisionTable
from frontend.departments.views import quota_bar
from frontend.forms import apply_errors
from frontend.lists import ObjectList
from frontend.metrics import WAIT_BUCKETS
from scheduler import selectors, services

TABS = (("Overview", "ops"), ("Nodes and lending", "ops-nodes"), ("Quotas", "ops-quotas"),
        ("Autoscaling", "ops-autoscaling"), ("Decisions", "ops-decisions"), ("What-if", "ops-replays"))
ACTIONS = {  # verb in the URL: (label, what it does)
    "lend": ("Lend to training", "the controller drains its inference replicas and opens it to training jobs"),
    "take-back": ("Take back for inference", "its training jobs are evicted and requeued onto the fixed pool"),
    "pin": ("Pin", "the lending automation leaves it where it is"),
    "unpin": ("Unpin", "the lending automation may move it again"),
}


ADMIN_TABS = ("ops-quotas", "ops-decisions")  # department admins see their departments' slice of these


def operator_required(view):
    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise PermissionDenied("the operations dashboards are for platform operators")
        return view(request, *args, **kwargs)
    return wrapper


def admin_or_operator(view):
    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not (request.user.is_staff or administered(request)):
            raise PermissionDenied("for platform operators and department admins")
        return view(request, *args, **kwargs)
    return wrapper


def administered(request) -> list[str]:
    """The departments the user administers."""
    return [m.department.name for m in scope.memberships(request) if m.role == Membership.Role.ADMIN]


def _range(request) -> str:
    name = request.GET.get("range", prometheus.DEFAULT_RANGE)
    return name if name in prometheus.RANGES else prometheus.DEFAULT_RANGE


def _page(request, template: str, url_name: str, status: int = 200, **context):
    return render(request, template, {**_frame(request, url_name), **context}, status=status)


def _frame(request, url_name: str) -> dict:
    """What every dashboard's frame shows: the tabs for the user's role, the title, breadcrumbs and time ranges."""
    title = next(label for label, name in TABS if name == url_name)
    tabs = TABS if request.user.is_staff else [t for t in TABS if t[1] in ADMIN_TABS]
    crumbs = [("Operations", reverse("ops") if request.user.is_staff else None), (title, None)] \
        if url_name != "ops" else [("Operations", None)]
    return {"tabs": tabs, "tab": url_name, "title": title, "ranges": list(prometheus.RANGES), "range": _range(request),
            "breadcrumbs": crumbs}


# --- overview --------------------------------------------------------------------------------------


@operator_required
def overview(request):
    specs, error = [], ""
    selector = f'service="{telemetry.web_target(settings.TIDAL_REDIS_NAMESPACE)}"'
    try:
        specs = [charts.spec(chart, selector=selector, range_name=_range(request)) for chart in charts.OVERVIEW]
    except prometheus.PrometheusDown as down:
        error = str(down)
    redis = Redis.from_url(settings.REDIS_URL)
    at, groups = telemetry.groups(redis, settings.TIDAL_REDIS_NAMESPACE)
    return _page(request, "frontend/dashboards/overview.html", "ops", ranged=True, charts=specs, error=error,
                 waits=_wait_histogram(), loops=_loop_ticks(telemetry.ticks(redis, settings.TIDAL_REDIS_NAMESPACE)),
                 groups=[_group_now(name, f) for name, f in sorted(groups.items())],
                 observed_at=datetime.fromtimestamp(at, dt_timezone.utc) if at else None)


def _wait_histogram() -> list[dict]:
    """How long every job waited for its first run, in the buckets of tidal_queue_wait_seconds."""
    cumulative, _total, count = selectors.first_wait_histogram(WAIT_BUCKETS)
    bounds = [*WAIT_BUCKETS, None]
    counts = [c - p for c, p in zip([*cumulative, count], [0, *cumulative])]
    most = max(counts, default=0) or 1
    return [{"up_to": b, "jobs": n, "pct": round(100 * n / most)} for b, n in zip(bounds, counts)] if count else []


LOOPS = ("scheduler", "lending", "autoscaler")


def _loop_ticks(ticks: dict[tuple[str, str], int]) -> list[dict]:
    """Per control loop: its ticks so far, how many acted, and the others by outcome (most first)."""
    rows = []
    seen = {loop for loop, _ in ticks}
    for loop in [name for name in LOOPS if name in seen] + sorted(seen - set(LOOPS)):
        outcomes = {outcome: n for (name, outcome), n in ticks.items() if name == loop}
        total, acted = sum(outcomes.values()), outcomes.pop(telemetry.ACTED, 0)
        rows.append({"loop": loop, "ticks": total, "acted": acted, "pct": round(100 * acted / total, 1),
                     "skipped": sorted(outcomes.items(), key=lambda item: (-item[1], item[0]))})
    return rows


def _group_now(name: str, f: dict[str, float]) -> dict:
    gpu = f["gpu_capacity"] > 0
    capacity, allocated = (f["gpu_capacity"], f["gpu_allocated"]) if gpu else (f["cpu_capacity"], f["cpu_allocated"])
    idle, fragmented = capacity - allocated, f.get("gpu_fragmented") if gpu else None
    return {"name": name, "unit": "GPUs" if gpu else "CPU cores", "capacity": round(capacity, 2),
            "allocated": round(allocated, 2), "pct": round(100 * allocated / capacity) if capacity else 0,
            "idle": round(idle, 2), "fragmented": None if fragmented is None else round(fragmented, 2),
            "frag_pct": round(100 * fragmented / idle) if fragmented is not None and idle > 1e-9 else None}


# --- nodes and lending -----------------------------------------------------------------------------


@operator_required
def nodes(request):
    span_s, _ = prometheus.RANGES[_range(request)]
    now = timezone.now()
    since = now - timedelta(seconds=span_s)
    grid: dict[str, list[dict]] = defaultdict(list)
    open_by_node = colocation_selectors.open_transitions()
    selected = _selected_node(request)
    for node in colocation_selectors.node_cells():
        grid[node["resource_group__name"]].append(node)
    here = f"?range={_range(request)}&node="
    cells = {group: _cells(members, open_by_node, here, selected) for group, members in grid.items()}
    transitions = colocation_selectors.transitions_since(since)
    return _page(request, "frontend/dashboards/nodes.html", "ops-nodes", ranged=True, grid=cells,
                 states=NODE_STATE_CHOICES, open=[t for t in transitions if t.status == "open"],
                 timeline=_timeline(transitions, since, now), selected=selected, actions=ACTIONS)


def _cells(nodes: list[dict], moving: dict[int, NodeTransition], here: str, selected: dict | None) -> str:
    """A group's node cells, coloured by state (built here, not in a template loop: 1,500 nodes stay fast)."""
    chosen = selected["node"].name if selected else None
    rows = []
    for n in nodes:
        t = moving.get(n["id"])
        css = " ".join(filter(None, (n["state"], n["pinned"] and "pinned", n["pool"] == "fixed" and "fixed",
                                     t and "moving", n["name"] == chosen and "selected")))
        title = f"{n['name']}: {n['state']}, {n['pool']} pool" + (", pinned" if n["pinned"] else "") + (
            f", {t.direction} at step {t.step}" if t else "")
        rows.append((here + quote(n["name"]), css, title, n["name"]))
    return format_html_join("", '<a href="{}" class="node-cell {}" title="{}"><span class="visually-hidden">{}</span></a>',
                            rows)


def _selected_node(request) -> dict | None:
    name = request.GET.get("node")
    node = colocation_selectors.node(name=name) if name else None
    if node is None:
        return None
    verbs = ["unpin" if node.pinned else "pin"]
    if not node.pinned and not colocation_selectors.is_moving(node=node):
        verbs.insert(0, "take-back" if node.state.startswith("offline") else "lend")
    return {"node": node, "verbs": verbs, "decisions": colocation_selectors.node_decisions(node=node)}


def _timeline(transitions: list[NodeTransition], since, now) -> list[dict]:
    """Each transition as a bar over the range: left and width in % of the range; open ones run to now."""
    span = (now - since).total_seconds()
    bars = []
    for t in sorted(transitions, key=lambda t: t.started_at):
        start, end = max(t.started_at, since), t.finished_at or now
        bars.append({"t": t, "left": round(100 * (start - since).total_seconds() / span, 2),
                     "width": max(0.4, round(100 * (end - start).total_seconds() / span, 2)),
                     "seconds": (end - t.started_at).total_seconds()})
    return bars


@operator_required
@require_POST
def node_action(request, name: str, verb: str):
    node = colocation_selectors.node(name=name)
    if node is None:
        raise Http404("no such node")
    if verb not in ACTIONS:
        raise PermissionDenied(f"unknown action {verb!r}")
    try:
        if verb in ("pin", "unpin"):
            colocation_services.node_pin(node=node, pinned=verb == "pin", actor=request.user)
        else:
            direction = Direction.LEND if verb == "lend" else Direction.TAKE_BACK
            colocation_services.transition_request(node=node, direction=direction, actor=request.user,
                                                   reason=f"operator-{verb}",
                                                   message=f"{verb} of {node} requested by {request.user}")
    except ApplicationError as error:
        messages.error(request, f"{node}: {error.message}")
    else:
        messages.success(request, f"{ACTIONS[verb][0]}: {node} — {ACTIONS[verb][1]}.")
    return redirect(f"{reverse('ops-nodes')}?node={node.name}")


# --- quotas ----------------------------------------------------------------------------------------


@admin_or_operator
def quotas(request):
    """Every department's quotas and usage (an admin's: their departments'), 25 departments a page; operators
    change own/borrowed in place (quota_set's rules: never below what is in use). A refused change comes back
    with its errors, status 400."""
    failed, status = None, 200
    if request.method == "POST":
        if not request.user.is_staff:
            raise PermissionDenied("only platform operators change quotas")
        quota = get_object_or_404(selectors.quotas(), pk=request.POST.get("quota"))
        form = QuotaForm(request.POST, prefix=f"q{quota.pk}")
        if form.is_valid():
            try:
                services.quota_set(department=quota.department, resource_kind=quota.resource_kind,
                                   gpu_model=quota.gpu_model, actor=request.user,
                                   **{"lend_limit": quota.lend_limit, **form.cleaned_data})
            except ApplicationError as error:
                apply_errors(form, error)
            else:
                messages.success(request, f"{quota.department} {quota.resource} quota saved.")
                return redirect(f"{request.get_full_path()}#q{quota.pk}")
        failed, status = (quota.pk, form), 400
    name = request.GET.get("department", "").strip()
    names = core_selectors.department_names(user=request.user, role=Membership.Role.ADMIN, containing=name)
    page = Paginator(names, 25).get_page(request.GET.get("page"))
    usages = selectors.quota_usages(departments=core_selectors.departments_named(list(page)))
    ids = selectors.quota_ids(departments=list(page))
    rows = [_quota_row(dept, u, ids[(dept, u.resource)], failed) for dept, usage in sorted(usages.items()) for u in usage]
    return _page(request, "frontend/dashboards/quotas.html", "ops-quotas", status=status, rows=rows, page=page,
                 department=name, borrowing=_borrowing(rows), can_edit=request.user.is_staff)


def _quota_row(department: str, usage: selectors.QuotaUsage, pk: int, failed) -> dict:
    """One quota's row: its bar, and its inputs (what was typed and the errors, when this row was refused)."""
    form = failed[1] if failed and failed[0] == pk else None
    values = ({k: form.data.get(f"q{pk}-{k}", "") for k in ("own", "borrowed")} if form else
              {"own": usage.own.normalize(), "borrowed": usage.borrowed.normalize()})
    return {"department": department, "usage": usage, "pk": pk, "bar": quota_bar(usage), "values": values,
            "errors": {("form" if k == "__all__" else k): " ".join(v) for k, v in form.errors.items()} if form else {}}


def _borrowing(rows: list[dict]) -> list[dict]:
    """Per resource: who runs on borrowed quota, and whose own quota sits idle (what borrowers run on)."""
    by_resource: dict[str, dict] = {}
    for r in rows:
        u = r["usage"]
        entry = by_resource.setdefault(u.resource, {"resource": u.resource, "borrowers": [], "idle": []})
        if u.borrowed_used > 0:
            entry["borrowers"].append((r["department"], u.borrowed_used))
        if u.own > u.own_used:
            entry["idle"].append((r["department"], u.own - u.own_used))
    for entry in by_resource.values():
        entry["idle"] = sorted(entry["idle"], key=lambda d: -d[1])[:5]
    return [e for _, e in sorted(by_resource.items()) if e["borrowers"]]


# --- autoscaling and decisions ---------------------------------------------------------------------


ALERT_WINDOW = timedelta(hours=1)


@operator_required
def autoscaling(request):
    """Every service with its group, replicas, last autoscaling decision and recent alerts; recent alerts and
    scaling decisions; filtered by resource group, department and the last decision's reason."""
    chosen = {k: request.GET.get(k, "").strip() for k in ("group", "department", "reason")}
    services_ = colocation_selectors.autoscaling_overview(**chosen, alerts_since=timezone.now() - ALERT_WINDOW)
    names = [s.name for s in services_]
    alerts = colocation_selectors.services_decisions(names=names, kind=Decision.Kind.ALERT, limit=20)
    scaling = colocation_selectors.services_decisions(names=names, kind=Decision.Kind.SCALING, reason=chosen["reason"],
                                                      limit=50)
    return _page(request, "frontend/dashboards/autoscaling.html", "ops-autoscaling", services=services_,
                 alerts=alerts, decisions=scaling, chosen=chosen, groups=colocation_selectors.resource_group_names(),
                 departments=core_selectors.department_names(user=request.user),
                 reasons=colocation_selectors.scaling_reasons())


DECISION_LIST = ObjectList(table=DecisionTable, filterset=DecisionFilterSet, per_page=50,
                           filter_fields=("q", "kind", "subject", "department"),
                           template="frontend/dashboards/decisions.html", role=Membership.Role.ADMIN)


@admin_or_operator
def decisions(request):
    """Every decision (an admin's: their departments' and cluster-wide ones), searchable."""
    return DECISION_LIST.render(request, core_selectors.decision_log(), **_frame(request, "ops-decisions"))


# --- what-if replay --------------------------------------------------------------------------------


@operator_required
def replays(request):
    """Start a trace replay, a co-location simulation or the FGD experiment (a Celery task each); the runs so far,
    newest first."""
    posted = request.POST.get("what") if request.method == "POST" else None
    replay_form = ReplayForm(request.POST if posted == "replay" else None, request.FILES if posted == "replay" else None,
                             traces=whatif.pod_lists(), policies=sorted(whatif.REPLAY_POLICIES),
                             initial={"policies": list(DEFAULT_POLICIES), "trace": "gpuspec10"}, prefix="replay")
    sim_form = ColocationForm(request.POST if posted == "colocation" else None, prefix="sim")
    frag_form = FragmentationForm(request.POST if posted == "fragmentation" else None, traces=whatif.pod_lists(),
                                  policies=list(SCORERS), initial={"policies": list(PLACEMENT_POLICIES),
                                                                   "trace": "default"}, prefix="frag")
    form, start = {"replay": (replay_form, whatif.replay_request),
                   "colocation": (sim_form, whatif.colocation_request),
                   "fragmentation": (frag_form, whatif.fragmentation_request)}.get(posted, (None, None))
    if form is not None and form.is_valid():
        try:
            run = start(actor=request.user, **form.cleaned_data)
        except ApplicationError as error:
            apply_errors(form, error)
        else:
            return redirect("ops-replay", pk=run.pk)
    runs = selectors.replay_runs()[:30]
    return _page(request, "frontend/dashboards/replays.html", "ops-replays", status=400 if form else 200,
                 replay_form=replay_form, sim_form=sim_form, frag_form=frag_form, runs=runs)


@operator_required
def replay_detail(request, pk: int):
    run = get_object_or_404(selectors.replay_runs(), pk=pk)
    return _page(request, "frontend/dashboards/replay.html", "ops-replays", run=run, plots=whatif.report_files(run),
                 breadcrumbs=[("Operations", reverse("ops")), ("What-if", reverse("ops-replays")),
                              (f"{run.get_kind_display()} {run.pk}", None)])


@operator_required
def replay_plot(request, pk: int, name: str):
    run = get_object_or_404(selectors.replay_runs(), pk=pk)
    if name not in whatif.report_files(run):  # only the report's own plots, by bare name
        raise Http404("no such plot")
    return FileResponse(open(f"{run.report_dir}/{name}", "rb"), content_type="image/png")
