"""The runtime keeps its shape (docs/architecture.md, "The session layer"): every adapter handles
its core's outputs with a ``match`` that ends in ``assert_never``, never with an ``isinstance``
test of an output class; every hand-written module stays within ``MAX_LINES`` lines and every
function within ``MAX_COMPLEXITY``, as tests/shape.py measures them for every guard; and a word
of the shared vocabulary names one class, wherever it is imported from.

A hot path may test one output with ``type(out) is C`` first, as long as it falls back to the
exhaustive ``match`` (``GatewaySession.send_audio``, ``EngineLink.send_event``).
"""

from __future__ import annotations

import ast
from typing import Any, get_args

import pytest

from tests.conftest import ROOT
from tests.public import public_modules
from tests.shape import MAX_COMPLEXITY, MAX_LINES, oversized
from voxwire.brisvox.agent_core import AgentOutput
from voxwire.brisvox.engine_core import EngineOutput
from voxwire.ovp.client_core import ClientOutput
from voxwire.ovp.gateway_core import GatewayOutput
from voxwire.sansio import Action

RUNTIME = ROOT / "runtime" / "voxwire"
ADAPTERS = [
    RUNTIME / "brisvox" / "agent.py",
    RUNTIME / "brisvox" / "agent_session.py",
    RUNTIME / "brisvox" / "agent_tools.py",
    RUNTIME / "brisvox" / "engine.py",
    RUNTIME / "ovp" / "client.py",
    RUNTIME / "ovp" / "gateway.py",
    RUNTIME / "ovp" / "gateway_session.py",
    RUNTIME / "ovp" / "_transport.py",
]
"""The asyncio adapters of the four roles and the link helper they share."""

OUTPUTS = frozenset(
    cls.__name__
    for union in (AgentOutput, EngineOutput, ClientOutput, GatewayOutput, Action)
    for cls in get_args(union)
)
"""The class names of every core's outputs."""


def _names(node: ast.expr) -> set[str]:
    """The class names an ``isinstance`` second argument or a class pattern names."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.BinOp):  # A | B
        return _names(node.left) | _names(node.right)
    if isinstance(node, ast.Tuple):
        return {name for element in node.elts for name in _names(element)}
    return set()


def _pattern_classes(pattern: ast.pattern) -> set[str]:
    if isinstance(pattern, ast.MatchClass):
        return _names(pattern.cls)
    if isinstance(pattern, ast.MatchOr):
        return {name for p in pattern.patterns for name in _pattern_classes(p)}
    if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        return _pattern_classes(pattern.pattern)
    return set()


def _ends_in_assert_never(match: ast.Match) -> bool:
    last = match.cases[-1]
    catch_all = isinstance(last.pattern, ast.MatchAs) and last.pattern.pattern is None
    calls = [
        node
        for statement in last.body
        for node in ast.walk(statement)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "assert_never"
    ]
    return catch_all and bool(calls) and last.guard is None


def dispatch_problems(source: str, where: str) -> list[str]:
    """Every non-exhaustive dispatch over core outputs in ``source``: an ``isinstance`` test of
    an output class, or a ``match`` over outputs whose last case is not ``assert_never``."""
    problems = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and (named := _names(node.args[1]) & OUTPUTS)
        ):
            problems.append(f"{where}:{node.lineno}: isinstance of {', '.join(sorted(named))}")
        if isinstance(node, ast.Match):
            named = {n for case in node.cases for n in _pattern_classes(case.pattern)}
            if named & OUTPUTS and not _ends_in_assert_never(node):
                problems.append(f"{where}:{node.lineno}: a match without case _: assert_never")
    return problems


def _matches_over_outputs(source: str) -> int:
    return sum(
        1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Match)
        and {n for case in node.cases for n in _pattern_classes(case.pattern)} & OUTPUTS
    )


def test_every_adapter_dispatches_core_outputs_exhaustively() -> None:
    problems = [
        problem
        for path in ADAPTERS
        for problem in dispatch_problems(path.read_text(encoding="utf-8"), path.name)
    ]
    assert problems == []
    found = {
        path.name: _matches_over_outputs(path.read_text(encoding="utf-8")) for path in ADAPTERS
    }
    # Each adapter with a core of its own dispatches its outputs with at least one match.
    for name in ("agent_session.py", "engine.py", "client.py", "gateway_session.py"):
        assert found[name] >= 1, name


def test_the_dispatch_guard_finds_an_isinstance_chain_and_a_match_that_can_fall_through() -> None:
    chain = """
for out in outputs:
    if isinstance(out, SendText):
        write(out)
    elif isinstance(out, Ignored | BadMessage):
        pass
"""
    open_ended = """
match out:
    case SendText():
        write(out)
    case _:
        pass
"""
    exhaustive = """
match out:
    case SendText():
        write(out)
    case other:
        assert_never(other)
"""
    assert dispatch_problems(chain, "x.py") == [
        "x.py:3: isinstance of SendText",
        "x.py:5: isinstance of BadMessage, Ignored",
    ]
    assert dispatch_problems(open_ended, "x.py") == ["x.py:2: a match without case _: assert_never"]
    assert dispatch_problems(exhaustive, "x.py") == []
    assert dispatch_problems("isinstance(raw, str)", "x.py") == []  # not an output


def test_every_runtime_module_and_function_stays_within_the_shared_bounds() -> None:
    paths = list(RUNTIME.rglob("*.py"))
    assert len(paths) > 80  # the runtime was found
    assert oversized(paths, RUNTIME) == [], (
        f"split these along their seams (modules of at most {MAX_LINES} lines, "
        f"functions of complexity at most {MAX_COMPLEXITY})"
    )


@pytest.mark.parametrize(
    "name", ["LinkDown", "DownCause", "Keepalive", "HandshakeError", "Inbox", "SessionClosed"]
)
def test_a_word_of_the_shared_vocabulary_names_one_class(name: str) -> None:
    found: dict[int, Any] = {
        id(thing): thing
        for module in public_modules()
        if isinstance(thing := getattr(module, name, None), type)
    }
    assert len(found) == 1, [f"{c.__module__}.{c.__qualname__}" for c in found.values()]
