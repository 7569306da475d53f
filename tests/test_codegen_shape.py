"""The generator, the fuzzer and the benchmarks stay readable in one sitting: no module over
``MAX_LINES`` lines, no function over ``MAX_COMPLEXITY`` (measured by tests/shape.py, which the
runtime's guard shares)."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.shape import MAX_COMPLEXITY, MAX_LINES, complexity, oversized

KEPT = ("codegen", "fuzz", "benchmarks")
"""The folders this guard keeps (every ``.py`` under them)."""


def test_no_codegen_fuzz_or_benchmarks_module_is_oversized() -> None:
    paths = [path for folder in KEPT for path in (ROOT / folder).rglob("*.py")]
    assert len(paths) > 40  # the folders were found
    assert oversized(paths, ROOT) == []


def _function(source: str) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(): return 1", 1),
        ("def f(x):\n if x: pass\n elif x > 1: pass\n else: pass", 3),
        ("def f(x): return 1 if x else 2", 2),
        ("def f(x):\n for i in x: pass\n else: pass\n while x: pass", 4),
        (
            "def f():\n try: pass\n except ValueError: pass\n except OSError: pass\n finally: pass",
            3,
        ),
        ("def f(x):\n match x:\n  case 1: pass\n  case _: pass", 3),
        ("def f(x): assert x", 2),
        ("def f(a, b, c): return a and b and c or a", 4),
        ("def f(x): return [i for i in x if i if i > 1]", 4),
        ("def f(x): return {k: v for k in x for v in x}", 3),
        ("def f(x):\n def g(): return x if x else 0\n return g", 2),
        ("def f(x): return lambda: x or 1", 2),
        ("def f(x):\n with x: pass", 1),
    ],
)
def test_complexity_counts_each_decision_once(source: str, expected: int) -> None:
    assert complexity(_function(source)) == expected


def _module(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_module_of_the_bound_passes_and_one_line_more_does_not(tmp_path: Path) -> None:
    at = _module(tmp_path, "at.py", "x = 1\n" * MAX_LINES)
    over = _module(tmp_path, "over.py", "x = 1\n" * (MAX_LINES + 1))
    assert oversized([at], tmp_path) == []
    assert oversized([over], tmp_path) == [f"over.py: {MAX_LINES + 1} lines, at most {MAX_LINES}"]


def test_a_function_of_the_bound_passes_and_one_branch_more_does_not(tmp_path: Path) -> None:
    def function(branches: int) -> str:
        return "class C:\n    def f(self, x):\n" + "        if x:\n            pass\n" * branches

    at = _module(tmp_path, "at.py", function(MAX_COMPLEXITY - 1))
    over = _module(tmp_path, "over.py", function(MAX_COMPLEXITY))
    assert oversized([at], tmp_path) == []
    assert oversized([over], tmp_path) == [
        f"over.py:2: f has complexity {MAX_COMPLEXITY + 1}, at most {MAX_COMPLEXITY}"
    ]


def test_a_nested_function_is_measured_with_the_one_it_is_written_in(tmp_path: Path) -> None:
    inner = "        if x:\n            pass\n" * MAX_COMPLEXITY
    path = _module(tmp_path, "nested.py", f"def f(x):\n    def g():\n{inner}    return g\n")
    assert oversized([path], tmp_path) == [
        f"nested.py:1: f has complexity {MAX_COMPLEXITY + 1}, at most {MAX_COMPLEXITY}"
    ]
