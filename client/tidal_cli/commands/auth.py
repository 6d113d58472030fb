"""`tidal login`: exchange a user name and password for an API token, kept in the config file (mode 0600)."""
from __future__ import annotations

import sys

import typer
from rich.text import Text

from tidal_cli import config
from tidal_cli.api import ApiError, Client
from tidal_cli.commands import OUTPUT, example
from tidal_cli.output import Format, console, emit
from tidal_cli.runtime import Exit, Failure, connect, field_errors


@example("tidal login http://127.0.0.1:8000", "echo \"$PASSWORD\" | tidal login https://tidal.example.com "
         "--username bob --password-stdin")
def login(
    url: str = typer.Argument(None, help="Tidal's address; default: the saved one, else http://127.0.0.1:8000."),
    username: str = typer.Option(None, "--username", "-u", help="Asked for when not given."),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from standard input."),
) -> None:
    """Log in: get an API token for your user and save it (with the URL) for the other commands."""
    saved = config.load()
    url = (url or saved.url).rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    username = username or typer.prompt("Username")
    password = sys.stdin.readline().rstrip("\r\n") if password_stdin else typer.prompt("Password", hide_input=True)
    client = Client(url)
    try:
        token = client.token(username, password)
    except ApiError as error:
        if error.status == 400:  # the token endpoint's answer to wrong credentials
            raise Failure(f"login refused by {url}: {error.message} {_flat(error.fields)}".strip(), Exit.AUTH) from None
        raise
    finally:
        client.close()
    path = config.save(config.Config(url=url, token=token, username=username))
    console().print(f"Logged in to {url} as {username} (token saved in {path}).", markup=False)


def _flat(fields: dict) -> str:
    return "; ".join(problem for _, problem in field_errors(fields))


@example("tidal whoami", "tidal whoami -o json")
def whoami(output: Format = OUTPUT) -> None:
    """Show who you are logged in as, at which address, and your departments."""
    client = connect()
    try:
        me = client.me()
    finally:
        client.close()
    departments = ", ".join(f"{m['department']} ({m['role']})" for m in me["memberships"]) or "none"
    role = " (operator)" if me["is_operator"] else ""
    emit(me, output, lambda: [Text(f"{me['username']}{role} at {client.url}; departments: {departments}")])


COMMANDS = {"login": login, "whoami": whoami}
