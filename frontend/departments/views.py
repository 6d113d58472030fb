"""Department pages: quota bars, jobs, queue, preemptions; admins manage members."""
from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core import selectors as core_selectors, services as core_services
from core.errors import ApplicationError
from core.models import Department
from frontend import scope
from frontend.departments.forms import MemberForm, RoleForm, WeightForm
from frontend.departments.tables import DepartmentTable
from frontend.forms import apply_errors
from frontend.lists import ObjectList
from frontend.templatetags.console import gpus
from scheduler import selectors
from scheduler.models import JobStatus
from scheduler.quotafigures import ModelFigures

DEPARTMENT_LIST = ObjectList(table=DepartmentTable, per_page=50, template="frontend/departments/list.html")


@login_required
def department_list(request):
    return DEPARTMENT_LIST.render(request, selectors.listed_departments(), breadcrumbs=[("Departments", None)])


@login_required
def department_detail(request, name: str, *, member_form: MemberForm | None = None,
                      role_errors: dict | None = None, status: int = 200):
    department = scope.visible(core_selectors.departments(), request, name=name)
    admin = core_selectors.can_administer(user=request.user, department=department)
    queue = selectors.with_latest_message(selectors.department_queue(department=department))
    counts = selectors.job_counts(department=department)
    asked = selectors.pending_gpus(department=department)
    context = {
        "department": department, "admin": admin, "quotas": [quota_bar(q) for q in selectors.quota_usage(department=department)],
        "counts": [(s.value, s.label, counts.get(s.value, 0)) for s in JobStatus],
        "queue": queue[:20], "queued": counts.get(JobStatus.PENDING, 0),
        "queued_gpus": gpus_asked(asked),
        "preemptions": selectors.recent_preemptions(department=department),
        "members": core_selectors.members(department=department),
        "member_form": member_form or MemberForm(), "role_errors": role_errors or {},
        "breadcrumbs": [("Departments", reverse("departments")), (department.name, None)],
    }
    return render(request, "frontend/departments/detail.html", context, status=status)


@login_required
@require_POST
def member_add(request, name: str):
    department = scope.visible(core_selectors.departments(), request, name=name)
    _require_admin(request, department)
    form = MemberForm(request.POST)
    if form.is_valid():
        try:
            core_services.membership_set(department=department, user=form.cleaned_data["user"],
                                    role=form.cleaned_data["role"], actor=request.user)
        except ApplicationError as error:
            apply_errors(form, error, aliases={"user": "username"})
        else:
            messages.success(request, f"{form.cleaned_data['username']} is now {form.cleaned_data['role']} of {department}.")
            return redirect("department", name=department.name)
    return department_detail(request, name, member_form=form, status=400)


@login_required
@require_POST
def member_change(request, name: str, pk: int):
    """Change a member's role (`role`), or remove them (`remove`)."""
    department = scope.visible(core_selectors.departments(), request, name=name)
    _require_admin(request, department)
    membership = scope.visible(core_selectors.members(department=department), request, pk=pk)
    try:
        if "remove" in request.POST:
            core_services.membership_remove(membership=membership, actor=request.user)
            messages.success(request, f"{membership.user} removed from {department}.")
        else:
            form = RoleForm(request.POST)
            if not form.is_valid():
                return department_detail(request, name, role_errors={pk: form.errors["role"]}, status=400)
            core_services.membership_set(department=department, user=membership.user, role=form.cleaned_data["role"],
                                    actor=request.user)
            messages.success(request, f"{membership.user} is now {form.cleaned_data['role']} of {department}.")
    except ApplicationError as error:
        return department_detail(request, name, role_errors={pk: [error.message]}, status=400)
    return redirect("department", name=department.name)


def _require_admin(request, department: Department) -> None:
    if not core_selectors.can_administer(user=request.user, department=department):
        raise PermissionDenied(f"only operators and admins of {department} manage its members")


def gpus_asked(asked: dict[str, Decimal]) -> tuple[str, str]:
    """What a queue asks for, in GPUs (each job workers x GPUs): ("5 GPUs", " (4 A100 · 1 T4)"), ("2 T4 GPUs", "")."""
    total = sum(asked.values(), Decimal(0))
    plural = "" if total == 1 else "s"
    if len(asked) == 1:
        return f"{gpus(total)} {next(iter(asked))} GPU{plural}", ""
    by_model = " · ".join(f"{gpus(n)} {model}" for model, n in sorted(asked.items()))
    return f"{gpus(total)} GPU{plural}", f" ({by_model})" if by_model else ""


def quota_bar(usage: selectors.QuotaUsage) -> dict:
    """Widths (in % of own + borrowed) of the four segments of a quota bar."""
    total = float(usage.own + usage.borrowed) or 1.0
    own_used = min(usage.own_used, usage.own)
    borrowed_used = min(usage.borrowed_used, usage.borrowed)

    def share(x) -> float:
        return round(float(x) / total * 100, 2)

    return {"usage": usage, "own_used": share(own_used), "own_free": share(usage.own - own_used),
            "borrowed_used": share(borrowed_used), "borrowed_free": share(usage.borrowed - borrowed_used)}


@login_required
def department_tree(request, *, weight_forms: dict[str, WeightForm] | None = None, status: int = 200):
    """The quota tree: per department and GPU model, own / used / lent / borrowed / fair share bars; the admins of a
    department change the weights of those below it here (htmx swaps the tree, so the fair shares move). The rows
    are written out here, not in the template: 240 departments x their bars took a second of template lookups and
    number formatting (`bench console`)."""
    figures = selectors.department_tree(user=request.user)
    managed = core_selectors.managed_departments(user=request.user)
    names = None if managed is None else set(core_selectors.departments().filter(pk__in=managed).values_list(
        "name", flat=True))
    forms = weight_forms or {}
    page, weight = (reverse(view, args=["-"]).split("/-/") for view in ("department", "department-weight"))
    rows = [{"node": node, "weight": _g(node.weight), "editable": names is None or node.name in names,
             "page": f"{page[0]}/{node.name}/{page[1]}", "url": f"{weight[0]}/{node.name}/{weight[1]}", "pad": str(node.depth + 1), "form": forms.get(node.name),
             "bars": [tree_bar(node.name, f, node.leaf) for f in node.models]} for node in figures.nodes]
    context = {"rows": rows, "models": [m.model for m in figures.nodes[0].models] if figures.nodes else [],
               "warnings": figures.warnings, "capacity": [f"{_g(n)} {m}" for m, n in figures.capacity.items()],
               "breadcrumbs": [("Departments", reverse("departments")), ("Quota tree", None)]}
    template = "frontend/departments/_tree.html" if request.htmx else "frontend/departments/tree.html"
    return render(request, template, context, status=status)


@login_required
@require_POST
def department_weight(request, name: str):
    """Set a department's weight: its parent's admins and operators (core_services.department_update decides)."""
    rows, managed = core_selectors.departments(), core_selectors.managed_departments(user=request.user)
    if managed is not None:  # 404 for what they may not see; 403 (the service) for what they see but do not manage
        rows = rows.restrict(request.user) | rows.filter(pk__in=managed)
    department = get_object_or_404(rows, name=name)
    form = WeightForm(request.POST)
    if form.is_valid():
        try:
            core_services.department_update(department=department, actor=request.user,
                                            weight=form.cleaned_data["weight"])
        except ApplicationError as error:
            apply_errors(form, error)
        else:
            if not request.htmx:
                messages.success(request, f"{department} now weighs {form.cleaned_data['weight']:f}.")
                return redirect("department-tree")
            return department_tree(request)
    return department_tree(request, weight_forms={name: form}, status=200 if request.htmx else 400)


def tree_bar(name: str, f: ModelFigures, leaf: bool) -> dict:
    """A tree bar: widths (in % of the node's largest figure) of used within own, borrowed past it, own left free
    (lent first) and waiting demand past all of it; where the fair share falls; the figures in words."""
    wanted = f.used + f.pending
    scale = max(f.subtree_own, wanted, f.fair_share) or 1.0
    within = min(f.used, f.subtree_own)
    lent = min(f.lent, f.subtree_own - within)

    def pct(x: float) -> str:
        return f"{x / scale * 100:.2f}"

    words = [f"{_g(f.used)}/{_g(f.subtree_own)} used"] + [f"lent {_g(f.lent)}"] * (f.lent > 0)
    words += [f"borrowed {_g(f.borrowed)}"] * (f.borrowed > 0) + [f"{_g(f.pending)} waiting"] * (f.pending > 0)
    limits = [] if f.lend_limit is None else [f"lends ≤ {_g(f.lend_limit)}"]
    limits += [] if f.borrow_limit is None or leaf else [f"borrows ≤ {_g(f.borrow_limit)}"]
    return {"used": pct(within), "borrowed": pct(f.used - within), "lent": pct(lent),
            "free": pct(f.subtree_own - within - lent), "waiting": pct(max(0.0, wanted - max(f.subtree_own, f.used))),
            "fair": pct(min(f.fair_share, scale)), "fair_share": _g(f.fair_share),
            "words": " · ".join(words), "limits": "".join(f" · {x}" for x in limits),
            "label": f"{name} {f.model}: own {_g(f.subtree_own)}, used {_g(f.used)}, waiting {_g(f.pending)}, lent "
                     f"{_g(f.lent)}, borrowed {_g(f.borrowed)}, fair share {_g(f.fair_share)}"}


def _g(x: float) -> str:
    """A figure to 2 decimals at most: 4.0 -> 4, 2.6667 -> 2.67."""
    return f"{round(x, 2):g}"
