"""What every command shares: the exit codes scripts rely on, the API client from the config, error printing."""
from __future__ import annotations

from collections.abc import Iterator
from enum import IntEnum
from typing import Any

from rich.text import Text

from tidal_cli import config
from tidal_cli.api import ApiError, Client
from tidal_cli.output import console


class Exit(IntEnum):
    OK = 0
    SERVER = 1  # the server failed (5xx), could not be reached, or asked to slow down (429)
    BAD_INPUT = 2  # bad input (a flag, a job file, a field the API refused) or a request the state refused (409)
    NOT_FOUND = 3  # no such job, department or service (or not one you may see)
    AUTH = 4  # not logged in, the token is not valid, or not allowed


EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 server or connection error (5xx, unreachable, 429); 2 bad input or a request the API "
    "refused (400, 409); 3 not found (404); 4 not logged in or forbidden (401, 403)."
)


class Failure(Exception):
    """A command's own error: a message and its exit code."""

    def __init__(self, message: str, code: Exit) -> None:
        super().__init__(message)
        self.code = code


def exit_code(error: ApiError) -> Exit:
    if error.status is None or error.status >= 500 or error.status == 429:
        return Exit.SERVER
    if error.status in (401, 403):
        return Exit.AUTH
    if error.status == 404:
        return Exit.NOT_FOUND
    return Exit.BAD_INPUT


def connect(*, need_token: bool = True) -> Client:
    settings = config.load()
    if need_token and not settings.token:
        raise Failure(f"not logged in to {settings.url}: run `tidal login` (or set TIDAL_TOKEN)", Exit.AUTH)
    return Client(settings.url, settings.token)


def field_errors(fields: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """The API's `extra.fields`, flat: ("thresholds[0].min_rate", "must be above 0")."""
    if isinstance(fields, dict):
        for name, value in fields.items():
            yield from field_errors(value, f"{prefix}.{name}" if prefix else str(name))
    elif isinstance(fields, list):
        if all(isinstance(item, str) for item in fields):
            for item in fields:
                yield prefix, item
        else:
            for index, item in enumerate(fields):
                if item:
                    yield from field_errors(item, f"{prefix}[{index}]")
    else:
        yield prefix, str(fields)


def print_error(message: str, fields: dict | None = None, where: dict[str, str] | None = None) -> None:
    """"error: message", then each field error beside its field name (and its job file line)."""
    err = console(stderr=True)
    err.print(Text.assemble(("error: ", "bold red"), message))
    rows = list(field_errors(fields or {}))
    width = max((len(name) for name, _ in rows), default=0)
    for name, problem in rows:
        top = name.split(".")[0].split("[")[0]
        at = f"  ({where[top]})" if where and where.get(top) else ""
        err.print(f"  {name.ljust(width)}  {problem}{at}", markup=False)
