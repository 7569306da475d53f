"""`voxwire validate` (voxwire.validate) on captures written here, message by message."""

from __future__ import annotations

import io
import json
from functools import cache
from typing import Any

import pytest

from codegen.loader import load
from codegen.resolver import resolve
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
    assert found[1].text == "user.text $.seq: seq 6 after 6: +1 a message on a link"


def test_a_refused_message_without_a_readable_seq_changes_nothing() -> None:
    capture = _capture(
        "brisvox",
        _call(("server", "{not json"), ("server", _brisvox_server("user.text", 6))),
    )
    assert [(f.line, f.code) for f in _check(capture) if isinstance(f, Violation)] == [
        (8, "bad_message")
    ]


def test_an_event_before_the_accept_is_what_the_engine_would_not_send() -> None:
    capture = _capture(
        "brisvox",
        [
            ("server", _brisvox_server("session.start", 1)),
            ("server", _brisvox_server("user.text", 2)),
            ("agent", _examples("brisvox")["session.accept"]),
            ("server", _brisvox_server("user.text", 3)),
        ],
    )
    found = _check(capture)
    assert found == [
        Violation(3, "bad_message", "the engine writes no user.text here (the link is handshaking)")
    ]


def test_a_tool_call_the_agent_did_not_offer_is_refused_in_the_engines_words() -> None:
    call = _brisvox_server("tool.call", 6, name="launch_rockets", arguments={})
    found = _check(_capture("brisvox", _call(("server", call))))
    assert [(f.line, f.code) for f in found] == [(8, "bad_message")]
    assert "launch_rockets" in found[0].text and "not offered" in found[0].text


def _resumed(header_version: int, link_events: bool) -> str:
    """A call whose agent declared resume, its link lost after seq 5 and taken up again."""
    accept = {**_examples("brisvox")["session.accept"], "resume": True}
    resume = {"attempt": 1, "previous_seq": 5, "down_ms": 100}
    start = {**_brisvox_server("session.start", 6), "t_ms": 600, "resume": resume}
    lines = _capture("brisvox", _call()).splitlines()
    lines[2] = json.dumps({"t": 0.02, "from": "agent", "text": json.dumps(accept)})
    header = json.loads(lines[0])
    lines[0] = json.dumps({**header, "version": header_version})
    if link_events:
        lines += [json.dumps({"t": 1.0, "link": "lost"}), json.dumps({"t": 1.5, "link": "open"})]
    lines += [
        json.dumps({"t": 1.5, "from": "server", "text": json.dumps(start)}),
        json.dumps({"t": 1.51, "from": "agent", "text": json.dumps(accept)}),
        json.dumps(
            {
                "t": 1.52,
                "from": "server",
                "text": json.dumps(_brisvox_server("events.lost", 7, t_ms=610, count=0)),
            }
        ),
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("version", "link_events"), [(1, False), (2, False), (2, True)], ids=["v1", "v2", "v2-links"]
)
def test_a_resumption_is_clean_with_its_link_events_recorded_or_not(
    version: int, link_events: bool
) -> None:
    assert _check(_resumed(version, link_events)) == []


def test_a_link_event_in_a_version_1_capture_is_a_capture_error() -> None:
    lines = _resumed(1, False).splitlines()
    lines.insert(3, json.dumps({"t": 0.03, "link": "lost"}))
    found = _check("\n".join(lines) + "\n")
    assert found[0] == Violation(4, "capture", "link events need capture version 2")


def test_an_ovp_client_event_before_session_start_is_one_violation() -> None:
    start = _examples("ovp")["session.start"]
    agent_input = {**_examples("ovp")["agent.input"], "seq": 0, "session_id": start["session_id"]}
    header = {"capture": "voxwire", "version": 2, "protocol": "ovp", "recorded_by": "client"}
    lines = [
        json.dumps(header),
        json.dumps({"t": 0.0, "from": "client", "text": json.dumps(agent_input)}),
        json.dumps({"t": 0.1, "from": "server", "text": json.dumps(start)}),
    ]
    found = _check("\n".join(lines) + "\n")
    assert [(f.line, f.code) for f in found] == [(2, "OVP_EVENT_SCHEMA_INVALID")], found


def _ovp_crossing(recorded_by: str) -> str:
    """session.start, the client's agent.input, session.end, and the client's next agent.input
    after it in the capture."""
    start = _examples("ovp")["session.start"]
    end = {**_examples("ovp")["session.end"], "seq": 1, "session_id": start["session_id"]}
    agent_input = {**_examples("ovp")["agent.input"], "session_id": start["session_id"]}
    header = {"capture": "voxwire", "version": 2, "protocol": "ovp", "recorded_by": recorded_by}
    steps = [
        ("server", start),
        ("client", {**agent_input, "seq": 0}),
        ("server", end),
        ("client", {**agent_input, "seq": 1}),
    ]
    lines = [json.dumps(header)] + [
        json.dumps({"t": 0.1 * i, "from": sender, "text": json.dumps(message)})
        for i, (sender, message) in enumerate(steps)
    ]
    return "\n".join(lines) + "\n"


def test_a_peer_message_that_crossed_the_recorders_in_flight_breaks_no_rule() -> None:
    """Recorded by the gateway, the client's agent.input after session.end was sent before the
    client read the end: its core, as it stood then, sends it. Recorded by the client itself,
    it was sent after the end: a violation, in the client core's words."""
    assert _check(_ovp_crossing("server")) == []
    assert _check(_ovp_crossing("client")) == [
        Violation(5, "OVP_EVENT_SCHEMA_INVALID", "no live session: the session is over")
    ]


def test_a_server_message_of_an_unknown_type_is_legal() -> None:
    """Forward compatibility: the agent ignores it, the engine's player lets it pass (was
    AttributeError: 'UnknownMessage' object has no attribute 'seq', in the engine core)."""
    unknown = {"type": "future.event", "seq": 6, "t_ms": 60, "anything": [1, {"a": None}]}
    capture = _capture(
        "brisvox", _call(("server", unknown), ("server", _brisvox_server("user.text", 7)))
    )
    assert _check(capture) == []
    unknown["seq"] = 7  # its envelope still holds: seq +1
    found = _check(_capture("brisvox", _call(("server", unknown))))
    assert [(f.line, f.code, f.text) for f in found if isinstance(f, Violation)] == [
        (8, "bad_message", "future.event $.seq: seq 7 after 5: +1 a message on a link")
    ]
