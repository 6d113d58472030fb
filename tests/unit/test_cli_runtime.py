"""Exit codes scripts rely on, the API's errors read and printed beside the field names, and a client that
imports no Django."""
import subprocess
import sys

import httpx
import pytest

from tidal_cli.api import ApiError, _error
from tidal_cli.runtime import Exit, exit_code, field_errors, print_error


@pytest.mark.parametrize("status, code", [(None, Exit.SERVER), (500, Exit.SERVER), (503, Exit.SERVER),
                                          (429, Exit.SERVER), (400, Exit.BAD_INPUT), (409, Exit.BAD_INPUT),
                                          (415, Exit.BAD_INPUT), (404, Exit.NOT_FOUND), (401, Exit.AUTH),
                                          (403, Exit.AUTH)])
def test_exit_codes(status, code):
    assert exit_code(ApiError(status, "x")) == code


def test_the_apis_error_body_is_read():
    request = httpx.Request("POST", "http://tidal/api/jobs/")
    body = {"message": "Validation error", "extra": {"fields": {"gpus": ["Must be a number or a decimal string."]}}}
    error = _error(httpx.Response(400, json=body, request=request))
    assert (error.status, error.message, error.fields) == (400, "Validation error", body["extra"]["fields"])
    plain = _error(httpx.Response(502, text="<html>bad gateway</html>", request=request))
    assert plain.status == 502 and plain.message.startswith("HTTP 502") and plain.fields == {}


def test_nested_field_errors_are_flat():
    fields = {"gpus": ["bad", "worse"], "thresholds": [{}, {"min_rate": ["must be above 0"]}],
              "non_field_errors": ["x"]}
    assert list(field_errors(fields)) == [("gpus", "bad"), ("gpus", "worse"), ("thresholds[1].min_rate",
                                                                                 "must be above 0"),
                                          ("non_field_errors", "x")]


def test_field_errors_are_printed_beside_their_names_and_lines(capsys):
    print_error("Validation error", {"gpus": ["A fraction of one GPU, or whole GPUs."], "image": ["required"]},
                where={"gpus": "job.yaml:7"})
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: Validation error"
    assert err[1].split() == ["gpus", "A", "fraction", "of", "one", "GPU,", "or", "whole", "GPUs.", "(job.yaml:7)"]
    assert err[2].split() == ["image", "required"]


def test_the_client_imports_no_django():
    probe = ("import sys, tidal_cli.cli; "
             "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'rest_framework', 'tidal', 'core', "
             "'scheduler', 'colocation'}); print(bad); sys.exit(bool(bad))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
