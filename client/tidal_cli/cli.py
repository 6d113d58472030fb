"""The `tidal` command: a Typer app over the commands/ modules; main() turns every error into a message on stderr
and a documented exit code (runtime.Exit)."""
from __future__ import annotations

import sys

import typer

from tidal_cli import __version__
from tidal_cli.api import ApiError
from tidal_cli.commands import auth, cluster, jobs
from tidal_cli.config import ConfigError
from tidal_cli.jobfile import JobFileError
from tidal_cli.quantities import QuantityError
from tidal_cli.runtime import EXIT_CODES_HELP, Exit, Failure, exit_code, print_error

app = typer.Typer(
    name="tidal",
    help="tidal: submit, watch and debug training jobs on a Tidal GPU cluster, over its REST API.\n\n"
         "Start with `tidal login URL`; TIDAL_URL and TIDAL_TOKEN override the saved config "
         "(~/.config/tidal/config.json, or $TIDAL_CONFIG).",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tidal {__version__}")
        raise typer.Exit()


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print the version and exit.")) -> None:
    pass


for module in (auth, jobs, cluster):
    for name, function in module.COMMANDS.items():
        app.command(name, epilog=getattr(function, "example", None))(function)


def main() -> None:
    try:
        app(prog_name="tidal")
    except ApiError as error:
        print_error(error.message, error.fields)
        sys.exit(exit_code(error))
    except Failure as failure:
        print_error(str(failure))
        sys.exit(failure.code)
    except (JobFileError, QuantityError, ConfigError) as error:
        print_error(str(error))
        sys.exit(Exit.BAD_INPUT)
    except KeyboardInterrupt:
        sys.exit(130)
