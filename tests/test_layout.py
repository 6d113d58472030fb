"""The layout's one hard rule: policies, cluster types and the clock import no framework.

The first test runs the project's import-linter contract; the second proves that contract would catch
a policy module importing Django, by running it over a throw-away tree that does exactly that."""
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def run_contract(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_contract_is_kept():
    result = run_contract(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_contract_breaks_when_a_policy_imports_django(tmp_path):
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    for package in config["root_packages"]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").touch()
    for contract in config["contracts"]:  # every project module a contract names exists, empty
        named = contract["source_modules"] + contract["forbidden_modules"]
        for module in (m for m in named if m.split(".")[0] in config["root_packages"] and "." in m):
            *packages, leaf = module.split(".")
            folder = tmp_path.joinpath(*packages)
            for depth in range(1, len(packages) + 1):
                tmp_path.joinpath(*packages[:depth]).mkdir(exist_ok=True)
                tmp_path.joinpath(*packages[:depth], "__init__.py").touch()
            (folder / f"{leaf}.py").touch()
    (tmp_path / "scheduler" / "policy.py").unlink()
    (tmp_path / "scheduler" / "policy").mkdir()
    (tmp_path / "scheduler" / "policy" / "__init__.py").touch()
    (tmp_path / "scheduler" / "policy" / "priority.py").write_text("import django\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")

    result = run_contract(tmp_path)
    assert result.returncode != 0
    assert "scheduler.policy.priority -> django" in result.stdout
