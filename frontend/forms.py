"""What every console form shares: service errors beside their fields, and safe redirects back."""
from django import forms
from django.utils.http import url_has_allowed_host_and_scheme

from core.errors import ApplicationError


def apply_errors(form: forms.Form, error: ApplicationError, aliases: dict[str, str] | None = None) -> None:
    """Put a service's field errors beside the form's fields (`aliases`: service field -> form field); the rest,
    or the message when no field is named, above the form."""
    fields = (error.extra or {}).get("fields") or {}
    for field, problems in fields.items():
        name = (aliases or {}).get(field, field)
        for problem in problems:
            form.add_error(name if name in form.fields else None, problem)
    if not fields:
        form.add_error(None, error.message)


def safe_next(request, default: str) -> str:
    """The form's `next` if it points back into this site, else `default`."""
    target = request.POST.get("next", "")
    ok = url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure())
    return target if target and ok else default
