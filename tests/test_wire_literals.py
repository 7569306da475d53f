"""No wire literal in the hand-written runtime: type strings, error codes and close codes come from
the generated modules (``SessionStart.type``, ``ErrorCode.BAD_MESSAGE``, ``CloseCode.NORMAL``,
``COMMAND_TYPES``), never written again by hand.

Allowed: docstrings, the first argument of ``on()`` (the typed API takes the type string; its
overloads check it), a dict key or item name that is also a field name of the spec (the
field ``error`` of ``command.result`` is not the message type ``error``), and a dict value under
any key but ``type``, ``code`` or ``error_code`` (a verdict ``"error"``). The number 1000 is a
close code only where a close takes it (a call named ``close``/``Close`` or ``code=``); elsewhere
it is the milliseconds of a second.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from codegen.pipeline import load_protocols
from tests.conftest import ROOT

RUNTIME = ROOT / "runtime" / "voxwire"
_WIRE_KEYS = frozenset({"type", "code", "error_code"})
"""The JSON keys under which a type string or an error code travels."""


@dataclass(frozen=True)
class WireFacts:
    types: frozenset[str]
    codes: frozenset[str]
    close_codes: frozenset[int]
    field_names: frozenset[str]


def _facts() -> WireFacts:
    protocols = load_protocols(ROOT)
    fields = {f.wire_name for p in protocols for m in p.messages for f in m.fields}
    fields |= {f.wire_name for p in protocols for s in p.structs for f in s.fields}
    return WireFacts(
        types=frozenset(m.type for p in protocols for m in p.messages),
        codes=frozenset(e.code for p in protocols for e in p.errors),
        close_codes=frozenset(c.code for p in protocols for c in p.close_codes),
        field_names=frozenset(fields),
    )


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def wire_literals(source: str, facts: WireFacts) -> list[tuple[int, str]]:
    """(line, what) of every wire literal in ``source``."""
    tree = ast.parse(source)
    allowed: set[int] = set()
    close_args: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            allowed.add(id(node.value))  # a docstring
        elif isinstance(node, ast.Call):
            name = _call_name(node)
            if name == "on" and node.args:
                allowed.add(id(node.args[0]))
            if "close" in name.lower():
                close_args |= {id(a) for a in (*node.args, *(k.value for k in node.keywords))}
            if name in ("get", "pop") and node.args:
                allowed |= _field_keys([node.args[0]], facts)
        elif isinstance(node, ast.keyword) and node.arg == "code":
            close_args.add(id(node.value))
        elif isinstance(node, ast.Dict):
            allowed |= _field_keys([k for k in node.keys if k is not None], facts)
            allowed |= {  # a value is a wire literal only under a key that carries one
                id(value)
                for key, value in zip(node.keys, node.values, strict=True)
                if not (isinstance(key, ast.Constant) and key.value in _WIRE_KEYS)
            }
        elif isinstance(node, ast.Subscript):
            allowed |= _field_keys([node.slice], facts)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            allowed |= _field_keys(node.elts, facts)
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            allowed |= _field_keys([node.left], facts)  # a key of a JSON object
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in allowed:
            continue
        value = node.value
        if isinstance(value, str) and value in facts.types:
            found.append((node.lineno, f"message type {value!r}"))
        elif isinstance(value, str) and value in facts.codes:
            found.append((node.lineno, f"error code {value!r}"))
        elif (
            isinstance(value, int)
            and not isinstance(value, bool)
            and value in facts.close_codes
            and (value != 1000 or id(node) in close_args)
        ):
            found.append((node.lineno, f"close code {value}"))
    return sorted(found)


def _field_keys(nodes: list[ast.expr], facts: WireFacts) -> set[int]:
    """The string constants among ``nodes`` that name a field (a JSON key, not a type)."""
    return {
        id(n)
        for n in nodes
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in facts.field_names
    }


def test_the_scanner_finds_each_kind_and_spares_what_is_allowed() -> None:
    facts = _facts()
    source = '''
def f(ws, client, result, message):
    """Sends a session.start."""
    ws.close(1000, "bye")
    Close(code=1008)
    seconds = ms / 1000
    if message.type == "session.start":
        raise ValueError("bad_message")
    client.on("transcript.final", print)
    return result.get("error"), {"error": None, "verdict": "error"}, "error" in result, {"code": "rejected"}
'''
    assert wire_literals(source, facts) == [
        (4, "close code 1000"),
        (5, "close code 1008"),
        (7, "message type 'session.start'"),
        (8, "error code 'bad_message'"),
        (10, "error code 'rejected'"),
    ]


def test_no_wire_literal_in_the_runtime() -> None:
    facts = _facts()
    found = []
    for path in sorted(RUNTIME.rglob("*.py")):
        for line, what in wire_literals(path.read_text(encoding="utf-8"), facts):
            found.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert not found, "wire literals written by hand:\n" + "\n".join(found)


def test_the_runtime_is_scanned() -> None:
    assert len(list(Path(RUNTIME).rglob("*.py"))) > 20
