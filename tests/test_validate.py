"""`voxwire validate` (voxwire.validate) on captures written here, message by message."""

from __future__ import annotations

import io
import json
from functools import cache
from typing import Any

from codegen.ir import resolve
from codegen.loader import load
from tests.conftest import ROOT
from voxwire.validate import Finding, Tally, Violation, check_capture


@cache
def _examples(protocol: str) -> dict[str, dict[str, Any]]:
    spec = resolve(load(ROOT / "spec" / f"{protocol}.yaml"))
    return {m.type: m.examples[0].json for m in spec.messages}


def _brisvox_server(kind: str, seq: int, **fields: Any) -> dict[str, Any]:
    message = {**_examples("brisvox")[kind], "seq": seq, "t_ms": seq * 10, **fields}
    if kind == "session.start":
        message.pop("resume", None)
        message["t_ms"] = 0
    return message


def _capture(protocol: str, messages: list[tuple[str, dict[str, Any] | str]]) -> str:
    header = {"capture": "voxwire", "version": 1, "protocol": protocol, "recorded_by": "agent"}
    lines = [json.dumps(header)]
    for i, (sender, message) in enumerate(messages):
        text = message if isinstance(message, str) else json.dumps(message)
        lines.append(json.dumps({"t": 0.01 * (i + 1), "from": sender, "text": text}))
    return "\n".join(lines) + "\n"


def _check(capture: str) -> list[Finding]:
    tally = Tally()
    _, findings = check_capture(io.StringIO(capture), tally)
    return list(findings)


def _call(*extra: tuple[str, dict[str, Any] | str]) -> list[tuple[str, dict[str, Any] | str]]:
    """A Brisvox call: the handshake, then user.text at seq 2 to 5, then ``extra``."""
    return [
        ("server", _brisvox_server("session.start", 1)),
        ("agent", _examples("brisvox")["session.accept"]),
        *[("server", _brisvox_server("user.text", seq)) for seq in range(2, 6)],
        *extra,
    ]


def test_a_well_formed_call_has_no_finding() -> None:
    assert _check(_capture("brisvox", _call(("server", _brisvox_server("user.text", 6))))) == []


def test_a_refused_message_is_one_violation_not_two() -> None:
    """Regression: a tool.call whose arguments is "x" (seq 6) was followed by a second,
    spurious violation, ``bad_message: seq 7 after 5``: the refused message's seq was not
    counted."""
    capture = _capture(
        "brisvox",
        _call(
            ("server", _brisvox_server("tool.call", 6, arguments="x")),
            ("server", _brisvox_server("user.text", 7)),
        ),
    )
    found = _check(capture)
    assert [(f.line, f.code) for f in found if isinstance(f, Violation)] == [(8, "bad_message")]
    assert "arguments" in found[0].text


def test_the_seq_after_a_refused_message_is_still_checked() -> None:
    capture = _capture(
        "brisvox",
        _call(
            ("server", _brisvox_server("tool.call", 6, arguments="x")),
            ("server", _brisvox_server("user.text", 6)),  # seq 6 again: not +1
        ),
    )
    found = [f for f in _check(capture) if isinstance(f, Violation)]
    assert [(f.line, f.code) for f in found] == [(8, "bad_message"), (9, "bad_message")]
    assert found[1].text == "seq 6 after 6: +1 a message on a link"


def test_a_refused_message_without_a_readable_seq_changes_nothing() -> None:
    capture = _capture(
        "brisvox",
        _call(("server", "{not json"), ("server", _brisvox_server("user.text", 6))),
    )
    assert [(f.line, f.code) for f in _check(capture) if isinstance(f, Violation)] == [
        (8, "bad_message")
    ]
