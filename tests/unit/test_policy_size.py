"""The scheduler's policy stays readable in pieces (issue 40): the cycle only orchestrates, and no function is long."""

from __future__ import annotations

import ast
from pathlib import Path

POLICY = Path(__file__).resolve().parents[2] / "scheduler" / "policy"
MAX_FUNCTION_LINES = 60


def test_the_cycle_only_orchestrates():
    assert len((POLICY / "cycle.py").read_text().splitlines()) < 300


def test_no_policy_function_is_longer_than_60_lines():
    long = [f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(POLICY.glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long
