"""How big a module and how branchy a function may be, measured the one way the shape guards share.

A module a newcomer reads in one sitting has at most :data:`MAX_LINES` lines; a function has a
cyclomatic complexity of at most :data:`MAX_COMPLEXITY`. The guards (``tests/test_*_shape.py``)
measure with :func:`oversized`, over the folders they keep.

Complexity is McCabe's, counted on the syntax tree as radon counts it: 1, plus 1 for each
``if``/``elif``, conditional expression, ``for`` or ``while`` loop (and its ``else``), ``except``
clause, ``case``, ``assert``, each ``and``/``or`` beyond a boolean operation's first operand, and
each ``for`` and ``if`` of a comprehension. A function nested in another, or a lambda, counts
toward the function it is written in: a reader reads it there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

__all__ = ["MAX_COMPLEXITY", "MAX_LINES", "complexity", "oversized"]

MAX_LINES = 600
"""The most lines a module may have."""
MAX_COMPLEXITY = 25
"""The highest cyclomatic complexity a function may have."""

_BRANCHES = (
    ast.If,
    ast.IfExp,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ExceptHandler,
    ast.match_case,
    ast.Assert,
)


def complexity(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The cyclomatic complexity of ``function``, the functions written inside it included."""
    count = 1
    for node in ast.walk(function):
        if isinstance(node, _BRANCHES):
            count += 1
            if isinstance(node, ast.For | ast.AsyncFor | ast.While) and node.orelse:
                count += 1
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
    return count


def _outermost_functions(tree: ast.AST) -> Iterable[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions and methods of a module, not those written inside another function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node
        else:
            yield from _outermost_functions(node)


def oversized(paths: Iterable[Path], root: Path) -> list[str]:
    """Every module of ``paths`` over :data:`MAX_LINES` and every function over
    :data:`MAX_COMPLEXITY`, one line each, named relative to ``root``."""
    found = []
    for path in sorted(paths):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(root).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_LINES:
            found.append(f"{name}: {lines} lines, at most {MAX_LINES}")
        for function in _outermost_functions(ast.parse(text)):
            score = complexity(function)
            if score > MAX_COMPLEXITY:
                found.append(
                    f"{name}:{function.lineno}: {function.name} has complexity {score}, "
                    f"at most {MAX_COMPLEXITY}"
                )
    return found
