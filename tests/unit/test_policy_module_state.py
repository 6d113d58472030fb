"""No policy package keeps state in its modules: a cache lives in an object its caller owns (CycleCache), so policies
stay functions of their inputs and no test has to reset anything. This walks every module of every `*/policy/`
package and fails on a module global that could be written to: a dict, list, set, bytearray or deque (and their
subclasses: defaultdict, OrderedDict, Counter), a functools cache (lru_cache, cache), or an instance whose attributes
are such containers. Constants are tuples, frozensets, MappingProxyType or frozen dataclasses."""

from __future__ import annotations

import collections
import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICY_PACKAGES = sorted(".".join(p.relative_to(ROOT).parts) for p in ROOT.glob("*/policy")
                         if (p / "__init__.py").exists())
MUTABLE = (dict, list, set, bytearray, collections.deque)


def _modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    return [root] + [importlib.import_module(m.name) for m in pkgutil.walk_packages(root.__path__, f"{package}.")]


def _mutable(value: object) -> bool:
    if isinstance(value, MUTABLE) or hasattr(value, "cache_clear"):  # functools.lru_cache / cache wrappers
        return True
    if isinstance(value, type) or callable(value) or isinstance(value, ModuleType):
        return False
    state = getattr(value, "__dict__", None)  # an object that carries containers (a registry, a memo object)
    return bool(state) and any(isinstance(v, MUTABLE) for v in state.values())


def module_state(module: ModuleType) -> list[str]:
    """`module.name` of each writable global defined in `module` (dunders left aside)."""
    found = []
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        if getattr(value, "__module__", module.__name__) != module.__name__ and hasattr(value, "cache_clear"):
            continue  # a cached function imported from elsewhere is flagged where it is defined
        if _mutable(value):
            found.append(f"{module.__name__}.{name}")
    return found


def test_the_policy_packages_are_found():
    assert {"scheduler.policy", "colocation.policy", "profiling.policy"} <= set(POLICY_PACKAGES)


@pytest.mark.parametrize("package", POLICY_PACKAGES)
def test_no_policy_module_keeps_mutable_state(package):
    found = [name for module in _modules(package) for name in module_state(module)]
    assert not found, f"module-level mutable state (pass a cache object owned by the caller instead): {found}"


def test_the_finder_flags_caches_and_containers():
    from functools import lru_cache

    fake = ModuleType("fake")

    @lru_cache(maxsize=4)
    def cached(x: int) -> int:
        return x

    class Memo:
        def __init__(self) -> None:
            self.last: dict = {}

    cached.__module__ = "fake"
    fake.__dict__.update(MEMO={}, SEEN=set(), LAST=collections.OrderedDict(), cached=cached, memo=Memo(),
                         OK=(1, 2), NAMES=frozenset({"a"}))
    assert sorted(module_state(fake)) == ["fake.LAST", "fake.MEMO", "fake.SEEN", "fake.cached", "fake.memo"]
