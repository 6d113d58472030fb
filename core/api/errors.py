"""One exception handler for the whole API: every error body is `{"message": ..., "extra": {...}}`; a server error
too once DEBUG is off, through Django's handler500 (server_error below: a traceback is for the log, never for the
client)."""
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import ProtectedError
from django.http import Http404, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ApplicationError


def exception_handler(exc, context):
    if isinstance(exc, ApplicationError):
        return Response({"message": exc.message, "extra": exc.extra}, status=exc.status)
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(as_serializer_error(exc))
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    elif isinstance(exc, ProtectedError):
        names = ", ".join(sorted({_name(obj) for obj in exc.protected_objects})[:5])
        return Response({"message": f"still in use by: {names}", "extra": {}}, status=409)

    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # not an API error: Django logs it and answers with handler500
    if isinstance(exc, exceptions.ValidationError):
        if _only_unique(exc.get_codes()):  # a name or combination already taken: a conflict, not bad input
            response.status_code = 409
        response.data = {"message": "Validation error", "extra": {"fields": _as_dict(response.data)}}
    else:
        response.data = {"message": response.data.get("detail", str(exc)), "extra": {}}
    return response


def _name(obj) -> str:
    try:
        return str(obj)
    except ObjectDoesNotExist:  # its name reads a row that a concurrent request has just deleted
        return f"{obj._meta.verbose_name} {obj.pk}"


SERVER_ERROR = {"message": "Server error: the request failed on our side and was logged", "extra": {}}


def _only_unique(codes) -> bool:
    """Every error code of a ValidationError is a uniqueness one (UniqueValidator, UniqueTogetherValidator)."""
    if isinstance(codes, dict):
        return bool(codes) and all(_only_unique(c) for c in codes.values())
    if isinstance(codes, list):
        return bool(codes) and all(_only_unique(c) for c in codes)
    return codes == "unique"


def _as_dict(detail) -> dict:
    return detail if isinstance(detail, dict) else {"non_field_errors": detail}


def page_not_found(request, exception):
    """Django's 404 handler: the API's error body under /api/, the ordinary page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"message": "Not found.", "extra": {}}, status=404)
    return defaults.page_not_found(request, exception)


def server_error(request):
    """Django's 500 handler (DEBUG off; Django has logged the traceback): the API's error body under /api/, the
    plain page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(SERVER_ERROR, status=500)
    return defaults.server_error(request)
