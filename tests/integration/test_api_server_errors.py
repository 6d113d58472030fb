"""A server error with production settings (DEBUG off) is the API's `{message, extra}` body under /api/ and a plain
page elsewhere — the traceback goes to the log, never to the client. With DEBUG on (the demo) it stays Django's
debug page."""
import json
import logging

import pytest
from django.db.models import ProtectedError
from django.test import RequestFactory, override_settings

from core.api.errors import exception_handler, server_error
from scheduler import selectors

SECRET = "stack detail the client must not see"


@pytest.fixture
def broken_usage(monkeypatch):
    """GET /api/departments/{id}/usage/ fails with an exception no handler knows, as a bug would."""
    def fail(**_kwargs):
        raise RuntimeError(SECRET)

    monkeypatch.setattr(selectors, "quota_usage", fail)


@override_settings(DEBUG=False)
def test_an_unhandled_error_in_an_api_view_is_a_json_500_without_the_traceback(world, broken_usage, caplog):
    client = world.client("operator")
    client.raise_request_exception = False  # answer as the server would, not re-raise into the test
    department = world.departments["ml-search"]
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get(f"/api/departments/{department.pk}/usage/")
    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"message", "extra"} and body["extra"] == {}
    assert SECRET not in response.content.decode() and "Traceback" not in response.content.decode()
    logged = [r for r in caplog.records if r.exc_info and r.exc_info[1] is not None]
    assert logged and str(logged[0].exc_info[1]) == SECRET  # the traceback is in the log, once
    assert len([r for r in caplog.records if r.getMessage().startswith("Internal Server Error")]) == 1


@override_settings(DEBUG=True)
def test_with_debug_on_the_error_reaches_djangos_debug_handling(world, broken_usage):
    department = world.departments["ml-search"]
    with pytest.raises(RuntimeError, match=SECRET):  # the test client re-raises what the debug page would show
        world.client("operator").get(f"/api/departments/{department.pk}/usage/")


@override_settings(DEBUG=False)
@pytest.mark.parametrize("path, is_api", [("/api/departments/", True), ("/jobs/", False)])
def test_the_500_handler_answers_json_under_api_and_a_plain_page_elsewhere(path, is_api):
    """tidal/urls.py's handler500, which answers every unhandled error once DEBUG is off."""
    response = server_error(RequestFactory().get(path))
    assert response.status_code == 500
    if is_api:
        assert set(json.loads(response.content)) == {"message", "extra"}
    else:
        assert response["Content-Type"].startswith("text/html") and b"Traceback" not in response.content


def test_an_object_in_use_whose_related_row_was_just_deleted_is_still_a_409(world):
    """The fuzzer's two workers: DELETE /api/gpu-models/{id}/ is refused for a quota whose department another request
    deleted in between; naming that quota (its department's name) must not turn the 409 into a 500."""
    from scheduler.models import Quota

    quota = Quota.objects.filter(gpu_model=world.gpu_models["T4"]).first()
    quota.department_id = 0  # no such department any more
    response = exception_handler(ProtectedError("in use", {quota}), {})
    assert response.status_code == 409
    assert response.data["message"] == f"still in use by: quota {quota.pk}"
