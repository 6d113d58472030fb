"""The CLI's config file: written mode 0600 (it holds a token), read back, overridden by TIDAL_URL/TIDAL_TOKEN."""
import stat

import pytest

from tidal_cli import config


@pytest.fixture
def path(tmp_path, monkeypatch):
    target = tmp_path / "home" / "tidal" / "config.json"
    monkeypatch.setenv("TIDAL_CONFIG", str(target))
    monkeypatch.delenv("TIDAL_URL", raising=False)
    monkeypatch.delenv("TIDAL_TOKEN", raising=False)
    return target


def test_saved_with_mode_0600_and_read_back(path):
    written = config.save(config.Config(url="http://tidal:8000", token="t0k", username="bob"))
    assert written == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert config.load() == config.Config(url="http://tidal:8000", token="t0k", username="bob")


def test_a_world_readable_leftover_is_not_kept(path):
    path.parent.mkdir(parents=True)
    leftover = path.with_name(path.name + ".tmp")
    leftover.write_text("{}")
    leftover.chmod(0o644)
    config.save(config.Config(token="t"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_environment_overrides_the_file(path, monkeypatch):
    config.save(config.Config(url="http://saved", token="saved", username="bob"))
    monkeypatch.setenv("TIDAL_URL", "http://env:9000/")
    monkeypatch.setenv("TIDAL_TOKEN", "env-token")
    assert config.load() == config.Config(url="http://env:9000", token="env-token", username=None)


def test_no_file_is_the_defaults(path):
    assert config.load() == config.Config(url=config.DEFAULT_URL, token=None)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_a_broken_file_is_named(path, text):
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(config.ConfigError, match=str(path)):
        config.load()
