"""The `tidal` command line against a live server, for the integration tests: in this process (its `main()`, with
its own argv, environment, working directory and standard streams: a tenth of a subprocess's start-up) or, where
the installed entry point itself is under test, as .venv/bin/tidal in a subprocess."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from tidal_cli.cli import main

TIDAL = str(Path(sys.executable).with_name("tidal"))


@dataclass(frozen=True)
class Result:
    """What a run printed and its exit code, named as subprocess.CompletedProcess names them."""

    returncode: int
    stdout: str
    stderr: str


class Tidal:
    """Runs `tidal` with a config file of its own, the server's URL and no token in the environment."""

    def __init__(self, url: str, home: Path) -> None:
        self.url, self.home = url, home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TIDAL_")}
        self.env.update(TIDAL_CONFIG=str(home / "tidal" / "config.json"), NO_COLOR="1")

    def __call__(self, *args: str, input: str | None = None) -> Result:
        out, err = io.StringIO(), io.StringIO()
        with (mock.patch.dict(os.environ, self.env, clear=True), mock.patch.object(sys, "argv", ["tidal", *args]),
              mock.patch.object(sys, "stdin", io.StringIO(input or "")), contextlib.chdir(self.home),
              contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)):
            try:
                main()
                code = 0
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        return Result(code, out.getvalue(), err.getvalue())

    def subprocess(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        """The installed entry point, in a process of its own."""
        return subprocess.run([TIDAL, *args], env=self.env, input=input, capture_output=True, text=True, timeout=120,
                              cwd=self.home)

    def json(self, *args: str):
        result = self(*args, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def login(self, username: str = "mia", password: str = "pw") -> Result:
        return self("login", self.url, "--username", username, "--password-stdin", input=f"{password}\n")
