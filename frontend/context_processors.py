"""What every console page's frame shows: the navigation for the user's role and their departments."""
from dataclasses import dataclass

from django.urls import reverse

from core import selectors as core_selectors
from frontend import scope

NAV = (  # (label, url name, who sees it)
    ("My jobs", "jobs", "member"),
    ("Submit a job", "job-submit", "member"),
    ("Departments", "departments", "member"),
    ("Quota tree", "department-tree", "member"),
    ("Inference services", "services", "member"),
    ("Operations", "ops", "operator"),
    ("Quotas and decisions", "ops-quotas", "admin"),  # a department admin's slice of the dashboards
)


@dataclass(frozen=True)
class NavItem:
    label: str
    url: str
    active: bool


def console(request) -> dict:
    user = request.user
    if not user.is_authenticated:
        return {}
    memberships = scope.memberships(request)
    admin = any(m.role == "admin" for m in memberships)
    shown = {"member", "operator"} if user.is_staff else {"member", "admin"} if admin else {"member"}
    urls = [(label, reverse(name)) for label, name, who in NAV if who in shown]
    items = [NavItem(label, url, _active(request.path, url, [u for _, u in urls])) for label, url in urls]
    if user.is_staff:
        items.append(NavItem("Admin", reverse("admin:index"), False))
    role = "operator" if user.is_staff else "department admin" if admin else "member"
    return {"console": {
        "nav": items, "role_label": role, "department": scope.current_department(request),
        "departments": _switchable(user, memberships),
    }}


def _switchable(user, memberships) -> list[dict]:
    """The switcher's choices: the user's departments (operators: every department)."""
    if user.is_staff:
        roles = {m.department.name: m.role for m in memberships}
        return [{"name": name, "role": roles.get(name, "")} for name in core_selectors.department_names(user=user)]
    return [{"name": m.department.name, "role": m.role} for m in memberships]


def _active(path: str, url: str, urls: list[str]) -> bool:
    """The deepest nav entry the path is under ("/jobs/new/" is Submit, not My jobs)."""
    others = [u for u in urls if u != url]
    return path.startswith(url) and not any(o.startswith(url) and len(o) > len(url) and path.startswith(o) for o in others)
