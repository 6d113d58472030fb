"""The `tidal` command line (.venv/bin/tidal) run in a subprocess against a live server, for the integration tests."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TIDAL = str(Path(sys.executable).with_name("tidal"))


class Tidal:
    """Runs `tidal` with a config file of its own, the server's URL and no token in the environment."""

    def __init__(self, url: str, home: Path) -> None:
        self.url, self.home = url, home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TIDAL_")}
        self.env.update(TIDAL_CONFIG=str(home / "tidal" / "config.json"), NO_COLOR="1")

    def __call__(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([TIDAL, *args], env=self.env, input=input, capture_output=True, text=True, timeout=120,
                              cwd=self.home)

    def json(self, *args: str):
        result = self(*args, "-o", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def login(self, username: str = "mia", password: str = "pw") -> subprocess.CompletedProcess:
        return self("login", self.url, "--username", username, "--password-stdin", input=f"{password}\n")
