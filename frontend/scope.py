"""Whose data a console page shows: the user's memberships and the department chosen in the switcher.

Every page reads through the models' `restrict(user)` querysets (the API's too), so the switcher only narrows
what a user may already see; an object outside it is a 404, never a 403 that confirms it exists."""
from django.http import Http404

from core import selectors as core_selectors
from core.models import Membership

SESSION_KEY = "console_department"


def memberships(request) -> list[Membership]:
    """The user's memberships (cached on the request: the frame and the page both need them)."""
    if not hasattr(request, "_console_memberships"):
        request._console_memberships = list(core_selectors.memberships(user=request.user))
    return request._console_memberships


def current_department(request) -> str:
    """The switcher's department ("" = all of the user's), if the user still belongs to it."""
    name = request.session.get(SESSION_KEY, "")
    if name and not request.user.is_staff and name not in {m.department.name for m in memberships(request)}:
        return ""
    return name


def first_department(request) -> str | None:
    """The department a new job or service defaults to: the user's first one."""
    mine = memberships(request)
    return mine[0].department.name if mine else None


def visible(queryset, request, **lookup):
    """One object of `queryset` the user may see, else 404."""
    obj = queryset.restrict(request.user).filter(**lookup).first()
    if obj is None:
        raise Http404("not found")
    return obj
