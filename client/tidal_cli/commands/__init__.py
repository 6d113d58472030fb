"""The commands, by area; each module lists its commands in COMMANDS (name -> function)."""
from collections.abc import Callable
from typing import TypeVar

import typer

from tidal_cli.output import Format

F = TypeVar("F", bound=Callable)
OUTPUT = typer.Option(Format.table, "--output", "-o", help="table (for people), json or yaml (the API's objects).")


def example(*lines: str) -> Callable[[F], F]:
    """Attach usage examples, shown at the end of the command's --help."""

    def attach(function: F) -> F:
        function.example = "**Examples**\n\n" + "\n\n".join(f"`{line}`" for line in lines)  # type: ignore[attr-defined]
        return function

    return attach
