"""The layout's hard rules, as import-linter contracts (pyproject.toml): policies, cluster types, the fit rule and
the clock import no framework; apps depend in one direction (tooling, the console, the demo, the experiments, then
the domain apps one per layer, core, the cluster layer); no app imports another app's loop.

The first test runs the project's contracts; the others prove each kind would catch a violation, by running them
over a throw-away tree of empty modules (every module a contract names) into which one bad import is written."""
import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def run_contract(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_contract_is_kept():
    result = run_contract(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def _module(tree: Path, module: str, source: str = "") -> None:
    """`module` as a file of `tree`, with its packages; a package module it already is stays one."""
    *packages, leaf = module.split(".")
    for depth in range(1, len(packages) + 1):
        tree.joinpath(*packages[:depth]).mkdir(exist_ok=True)
        tree.joinpath(*packages[:depth], "__init__.py").touch()
    package = tree.joinpath(*packages, leaf)
    path = package / "__init__.py" if package.is_dir() else tree.joinpath(*packages, f"{leaf}.py")
    path.write_text(source)


@pytest.fixture
def empty_tree(tmp_path) -> Path:
    """Every root package and every project module a contract names, empty, with the project's contracts."""
    for package in CONFIG["root_packages"]:
        _module(tmp_path, f"{package}.__init__")
    for contract in CONFIG["contracts"]:
        named = contract.get("source_modules", []) + contract.get("forbidden_modules", []) + contract.get("layers", [])
        for module in (m for m in named if m.split(".")[0] in CONFIG["root_packages"] and "." in m):
            _module(tmp_path, module)
    # The ignored imports name modules this tree does not have; they must not count as stale here.
    config = (ROOT / "pyproject.toml").read_text()
    config = config.replace("ignore_imports = [", 'unmatched_ignore_imports_alerting = "none"\nignore_imports = [')
    (tmp_path / "pyproject.toml").write_text(config)
    return tmp_path


@pytest.mark.parametrize(("module", "source", "caught"), [
    ("scheduler.policy.priority", "import django\n", "scheduler.policy.priority -> django"),
    ("colocation.models", "import frontend.views\n", "colocation.models -> frontend.views"),
    ("frontend.views", "import benchmarks.scheduler\n", "frontend.views -> benchmarks.scheduler"),
    ("scheduler.services", "import experiments.replay\n", "scheduler.services -> experiments.replay"),
    ("scheduler.models", "import colocation.services\n", "scheduler.models -> colocation.services"),
    ("streaming.topics", "import scheduler.models\n", "streaming.topics -> scheduler.models"),
    ("profiling.models", "import notifications.models\n", "profiling.models -> notifications.models"),
    ("core.models", "import scheduler.models\n", "core.models -> scheduler.models"),
    ("cluster.backend", "import core.errors\n", "cluster.backend -> core.errors"),
    ("colocation.models", "import scheduler.live\n", "colocation.models -> scheduler.live"),
    ("scheduler.services", "import colocation.controller\n", "scheduler.services -> colocation.controller"),
])
def test_each_contract_breaks_on_a_bad_import(empty_tree, module, source, caught):
    (empty_tree / "scheduler" / "policy.py").unlink(missing_ok=True)  # a package here, as in the project
    _module(empty_tree, "scheduler.policy.__init__")
    _module(empty_tree, "frontend.views")
    _module(empty_tree, "benchmarks.scheduler")
    _module(empty_tree, "experiments.replay")
    for name in ("colocation.models", "colocation.services", "core.models", "core.errors", "scheduler.models",
                 "scheduler.services", "cluster.backend", "streaming.topics", "profiling.models",
                 "notifications.models"):
        _module(empty_tree, name)
    _module(empty_tree, module, source)
    result = run_contract(empty_tree)
    assert result.returncode != 0
    assert caught in result.stdout, result.stdout


def test_unit_tests_import_no_benchmark():
    """What tests and benchmarks share (builders) lives in experiments/builders/; a benchmark is tested through its
    command, with the integration tests."""
    found = []
    for path in sorted((ROOT / "tests" / "unit").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "benchmarks"]
    assert not found
