"""Department pages: quota bars, jobs, queue, preemptions; admins manage members. The quota tree: its figures, and
the admins above a department manage its place, weight, fence and quotas."""
from dataclasses import dataclass
from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core import selectors as core_selectors, services as core_services
from core.errors import ApplicationError
from core.models import Department, GPUModel
from frontend import scope
from frontend.departments.forms import (ROOT, ChildForm, MemberForm, MoveForm, RoleForm, TreeQuotaForm,
                                       WeightForm)
from frontend.departments.tables import DepartmentTable
from frontend.forms import apply_errors
from frontend.lists import ObjectList
from frontend.templatetags.console import gpus
from scheduler import selectors, services as quota_services
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


@dataclass(frozen=True)
class TreeRights:
    """What a user may change in the quota tree, by name: the departments they manage (weights, places, quotas) and
    the parents they may put one under, as choices (operators: the root too)."""

    managed: list[str]
    parents: list[tuple[str, str]]

    @classmethod
    def of(cls, user) -> "TreeRights":
        managed, placeable = core_selectors.tree_rights(user=user)
        if managed is not None and not placeable:
            return cls([], [])
        names = dict(core_selectors.departments().values_list("pk", "name"))
        if managed is None:
            every = sorted(names.values())
            return cls(every, [(ROOT, "(the root)")] + [(n, n) for n in every])
        return cls(sorted(names[pk] for pk in managed), [(n, n) for n in sorted(names[pk] for pk in placeable)])

    def form(self, key: str, resources: list[str], data=None) -> forms.Form:
        """The page's form `key` ("child", "move" or "quota"), bound to `data` if given."""
        if key == "child":
            return ChildForm(data, parents=self.parents)
        if key == "move":
            return MoveForm(data, managed=self.managed, parents=self.parents)
        return TreeQuotaForm(data, managed=self.managed, resources=resources)

    def forms(self, resources: list[str], bound: dict[str, forms.Form] | None = None) -> dict[str, forms.Form]:
        """The page's three forms, unbound unless given (a refused one comes back with its errors)."""
        bound = bound or {}
        return {key: bound[key] if key in bound else self.form(key, resources) for key in ("child", "move", "quota")}


@login_required
def department_tree(request, *, weight_forms: dict[str, WeightForm] | None = None,
                    tree_forms: dict[str, forms.Form] | None = None, rights: TreeRights | None = None,
                    status: int = 200, partial: str = "frontend/departments/_tree.html", done: str = ""):
    """The quota tree: per department and GPU model, own / used / lent / borrowed / fair share bars; the admins of a
    department change the weights of those below it here (htmx swaps the tree, so the fair shares move), add
    departments, move them and set their quotas (htmx swaps the forms and the tree). The rows are written out here,
    not in the template: 240 departments x their bars took a second of template lookups and number formatting
    (`bench console`)."""
    figures = selectors.department_tree(user=request.user)
    rights = rights or TreeRights.of(request.user)
    editable = set(rights.managed)
    weight_by_name = weight_forms or {}
    page, weight = (reverse(view, args=["-"]).split("/-/") for view in ("department", "department-weight"))
    rows = [{"node": node, "weight": _g(node.weight), "editable": node.name in editable,
             "page": f"{page[0]}/{node.name}/{page[1]}", "url": f"{weight[0]}/{node.name}/{weight[1]}",
             "pad": str(node.depth + 1), "form": weight_by_name.get(node.name),
             "bars": [tree_bar(node.name, f, node.leaf) for f in node.models]} for node in figures.nodes]
    models = [m.model for m in figures.nodes[0].models] if figures.nodes else []
    context = {"rows": rows, "models": models,
               "warnings": figures.warnings, "capacity": [f"{_g(n)} {m}" for m, n in figures.capacity.items()],
               "tree_forms": rights.forms(_resource_keys(), tree_forms) if rights.parents else None, "done": done,
               "breadcrumbs": [("Departments", reverse("departments")), ("Quota tree", None)]}
    template = partial if request.htmx else "frontend/departments/tree.html"
    return render(request, template, context, status=status)


@login_required
@require_POST
def department_weight(request, name: str):
    """Set a department's weight and fence: its parent's admins and operators (core_services.department_update
    decides)."""
    rows, managed = core_selectors.departments(), core_selectors.managed_departments(user=request.user)
    if managed is not None:  # 404 for what they may not see; 403 (the service) for what they see but do not manage
        rows = rows.restrict(request.user) | rows.filter(pk__in=managed)
    department = get_object_or_404(rows, name=name)
    form = WeightForm(request.POST)
    if form.is_valid():
        try:
            core_services.department_update(department=department, actor=request.user,
                                            weight=form.cleaned_data["weight"], fence=form.cleaned_data["fence"])
        except ApplicationError as error:
            apply_errors(form, error)
        else:
            if not request.htmx:
                fenced = " and is fenced" if form.cleaned_data["fence"] else ""
                messages.success(request, f"{department} now weighs {form.cleaned_data['weight']:f}{fenced}.")
                return redirect("department-tree")
            return department_tree(request)
    return department_tree(request, weight_forms={name: form}, status=200 if request.htmx else 400)


MANAGE = "frontend/departments/_manage.html"  # the forms and the tree, swapped whole after a change


def _tree_change(request, key: str, change) -> HttpResponse:
    """Validate the page's form `key`, apply `change(cleaned_data)` (a service call), and answer with the forms and
    the tree (htmx) or a redirect; a refusal comes back beside its fields, nothing written. Choices are what the
    user may change, so a name outside their subtree is a field error."""
    rights = TreeRights.of(request.user)
    if not rights.parents:
        raise PermissionDenied("only operators and department admins change the quota tree")
    form = rights.form(key, _resource_keys(), request.POST)
    if form.is_valid():
        try:
            done = change(form.cleaned_data)
        except ApplicationError as error:
            apply_errors(form, error, aliases={"gpu_model": "resource", "resource_kind": "resource"})
        else:
            if not request.htmx:
                messages.success(request, done)
                return redirect("department-tree")
            return department_tree(request, rights=TreeRights.of(request.user), partial=MANAGE, done=done)
    return department_tree(request, tree_forms={key: form}, rights=rights, partial=MANAGE,
                           status=200 if request.htmx else 400)


def _resource_keys() -> list[str]:
    return list(core_selectors.gpu_model_names()) + ["cpu", "memory"]


def _department(name: str) -> Department | None:
    return None if name == ROOT else Department.objects.get(name=name)


@login_required
@require_POST
def department_child(request):
    """Add a department under one the user may place departments under (core_services.department_create decides)."""
    def change(data) -> str:
        core_services.department_create(name=data["name"], parent=_department(data["parent"]), actor=request.user)
        return f"{data['name']} added under {data['parent'] or 'the root'}."
    return _tree_change(request, "child", change)


@login_required
@require_POST
def department_move(request):
    """Move a department the user manages (core_services.department_update decides: no cycle, within their
    subtree, never under a department that runs jobs)."""
    def change(data) -> str:
        core_services.department_update(department=Department.objects.get(name=data["department"]),
                                        parent=_department(data["parent"]), actor=request.user)
        return f"{data['department']} moved under {data['parent'] or 'the root'}."
    return _tree_change(request, "move", change)


@login_required
@require_POST
def department_quota(request):
    """Set a managed department's quota of one resource key (scheduler's quota_set decides: never negative, a lend
    limit within own, never below what is in use)."""
    def change(data) -> str:
        resource = data["resource"]
        gpu = resource not in ("cpu", "memory")
        quota_services.quota_set(department=Department.objects.get(name=data["department"]),
                                 resource_kind="gpu" if gpu else resource,
                                 gpu_model=GPUModel.objects.get(name=resource) if gpu else None, own=data["own"],
                                 borrowed=data["borrowed"], lend_limit=data["lend_limit"], actor=request.user)
        return f"{data['department']} {resource} quota set."
    return _tree_change(request, "quota", change)


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
