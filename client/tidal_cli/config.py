"""Where the CLI finds its server and token: TIDAL_URL / TIDAL_TOKEN, else the config file written by `tidal login`
(`$TIDAL_CONFIG`, default ~/.config/tidal/config.json; mode 0600, since it holds a token)."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


class ConfigError(Exception):
    """The config file exists but cannot be read as ours."""


@dataclass(frozen=True)
class Config:
    url: str = DEFAULT_URL
    token: str | None = None
    username: str | None = None


def config_path() -> Path:
    explicit = os.environ.get("TIDAL_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "tidal" / "config.json"


def load(path: Path | None = None) -> Config:
    """The saved config with the environment's overrides applied."""
    saved = _read(path or config_path())
    url = os.environ.get("TIDAL_URL") or saved.url
    token = os.environ.get("TIDAL_TOKEN") or saved.token
    return Config(url=url.rstrip("/"), token=token, username=saved.username if token == saved.token else None)


def save(config: Config, path: Path | None = None) -> Path:
    """Write the file with mode 0600 from its creation (never readable by others, even for an instant)."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(asdict(config), handle, indent=2)
    os.chmod(tmp, 0o600)  # an existing .tmp keeps its old mode through O_CREAT
    os.replace(tmp, path)
    return path


def _read(path: Path) -> Config:
    if not path.exists():
        return Config()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable JSON config ({exc}); run `tidal login` again") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object; run `tidal login` again")
    return Config(url=str(data.get("url") or DEFAULT_URL), token=data.get("token") or None,
                  username=data.get("username") or None)
