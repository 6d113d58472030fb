"""The layout's hard rules, as import-linter contracts (pyproject.toml): policies, cluster types, the fit rule and
the clock import no framework; apps depend in one direction (tooling, the console, the demo, the experiments, then
the domain apps one per layer, core, the cluster layer); no app imports another app's loop.

The first test runs the project's contracts; the others prove each kind would catch a violation, by running them
over a throw-away tree of empty modules (every module a contract names) into which one bad import is written.

The tests' own layout (DESIGN.md) is checked last: four suites by folder — unit/ (pure policy, no database),
integration/ (Django, DRF, real services), system/ (the whole stack: the running demo, faults that stop services,
Flink), e2e/ (browser) — whose folder gives the markers `make test-fast` leaves out."""
import ast
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import pytest_collection_modifyitems as mark_suites

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
TESTS = ROOT / "tests"
SUITES = ("unit", "integration", "system", "e2e")


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


def test_every_test_module_is_in_one_of_the_four_suites():
    elsewhere = [str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py")
                 if path.relative_to(TESTS).parts[0] not in SUITES and path != Path(__file__)]
    assert not elsewhere


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, and every name it imports from one (`a.b` for `from a import b`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update({node.module} | {f"{node.module}.{alias.name}" for alias in node.names})
    return found


def test_only_system_tests_use_the_whole_stack_helpers():
    """tests/system/'s helpers (private services a test stops, the profile job on the Flink mini-cluster, the
    invariants after a fault) make a test a whole-stack test, which `make test-fast` must not run."""
    users = {str(path.relative_to(TESTS)): sorted(m for m in _imports(path) if m.startswith("tests.system"))
             for path in TESTS.rglob("*.py") if not path.is_relative_to(TESTS / "system")}
    assert not {path: modules for path, modules in users.items() if modules}


def test_tests_on_the_flink_mini_cluster_are_marked_flink():
    on_flink = [path for path in (TESTS / "system").glob("test_*.py") if "tests.system.flinkjob" in _imports(path)]
    assert on_flink
    assert not [path.name for path in on_flink if "pytest.mark.flink" not in path.read_text()]


@dataclass
class _Item:
    path: Path
    markers: list[str] = field(default_factory=list)

    def add_marker(self, marker: str) -> None:
        self.markers.append(marker)


def test_system_and_browser_tests_are_marked_by_their_folder():
    items = {suite: _Item(TESTS / suite / "test_x.py") for suite in SUITES}
    mark_suites(list(items.values()))
    assert {suite: item.markers for suite, item in items.items()} == {
        "unit": [], "integration": [], "system": ["system"], "e2e": ["browser"]}
