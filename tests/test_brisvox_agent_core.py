"""The agent side's sans-I/O core, message by message, without sockets."""

from __future__ import annotations

import json
import math

import pytest

from tests.peers.raw import frame, start, tool_call
from voxwire import brisvox
from voxwire.brisvox.agent_core import (
    AgentCore,
    AgentState,
    CommandAnswered,
    CommandTimedOut,
    EventReceived,
    ResumeRegistry,
    StartReceived,
    ToolCallCancelled,
    ToolCallStarted,
    _Step,
)
from voxwire.brisvox.machines import AgentInput
from voxwire.brisvox.outputs import (
    BadMessage,
    HandshakeFailed,
)
from voxwire.errors import SessionStateError
from voxwire.sansio import Close, Ignored, SendText


def _sent(out: list[object]) -> list[dict[str, object]]:
    return [json.loads(o.data) for o in out if isinstance(o, SendText)]


def _open_core(now: float = 0.0) -> AgentCore:
    core = AgentCore(now)
    [started] = core.receive_text(start(), now)
    assert isinstance(started, StartReceived)
    core.accept(brisvox.SessionAccept(version=1, tools=[]), now)
    return core


# -- agent core: the handshake ------------------------------------------------------------------


def test_a_start_is_offered_to_the_application_with_the_highest_common_version() -> None:
    core = AgentCore(0.0)
    [out] = core.receive_text(start(versions=[3, 1, 2]), 0.1)
    assert isinstance(out, StartReceived) and out.version == 1 and out.start.session_id == "42"
    assert core.state is AgentState.DECIDING
    [accept] = core.accept(brisvox.SessionAccept(version=1, tools=[]), 0.2)
    assert _sent([accept]) == [{"type": "session.accept", "version": 1, "tools": []}]
    assert core.state is AgentState.OPEN and core.next_deadline() is None


@pytest.mark.parametrize("versions", [[2, 3], []])
def test_no_common_version_is_rejected_unsupported_version(versions: list[int]) -> None:
    out = AgentCore(0.0).receive_text(start(versions=versions), 0.0)
    assert _sent(out) == [
        {
            "type": "session.reject",
            "code": "unsupported_version",
            "message": "this agent speaks versions [1]",
        }
    ]
    assert Close(1000) in out and isinstance(out[-1], HandshakeFailed)


@pytest.mark.parametrize(
    "first",
    [
        "not json",
        json.dumps({"type": "say", "text": "hi"}),
        frame("user.text", 1, epoch=1, text="hi"),
        start(protocol="other.protocol"),
        start(seq=None),
    ],
)
def test_any_other_first_message_closes_1002(first: str) -> None:
    core = AgentCore(0.0)
    out = core.receive_text(first, 0.0)
    assert out[0] == Close(1002, "expected session.start")
    assert isinstance(out[1], HandshakeFailed) and core.state is AgentState.CLOSED


def test_a_binary_first_frame_closes_1002() -> None:
    assert AgentCore(0.0).receive_binary(b"\x00", 0.0)[0] == Close(1002, "expected session.start")


def test_no_start_within_the_budget_closes_1008() -> None:
    core = AgentCore(10.0, handshake_timeout=1.5)
    assert core.next_deadline() == 11.5
    assert core.tick(11.4) == []
    out = core.tick(11.5)
    assert out[0] == Close(1008, "no session.start") and isinstance(out[1], HandshakeFailed)


def test_an_undecided_start_is_rejected_unavailable_at_the_budget() -> None:
    core = AgentCore(0.0, handshake_timeout=1.5)
    core.receive_text(start(), 0.5)
    out = core.tick(1.5)
    assert _sent(out)[0]["code"] == "unavailable"
    with pytest.raises(RuntimeError, match=r"no session\.start to answer"):
        core.accept(brisvox.SessionAccept(version=1, tools=[]), 1.6)


def test_an_accept_must_fit_the_negotiation() -> None:
    core = AgentCore(0.0)
    core.receive_text(start(resume={"attempt": 1, "previous_seq": 5, "down_ms": 10}), 0.0)
    with pytest.raises(ValueError, match="version is 2"):
        core.accept(brisvox.SessionAccept(version=2, tools=[]), 0.0)
    with pytest.raises(ValueError, match="resume: true"):
        core.accept(brisvox.SessionAccept(version=1, tools=[]), 0.0)
    with pytest.raises(brisvox.ProtocolError, match="greeting"):
        core.accept(brisvox.SessionAccept(version=1, tools=[], greeting="  ", resume=True), 0.0)
    assert core.state is AgentState.DECIDING


# -- agent core: after the handshake ------------------------------------------------------------


def test_events_reach_the_application_and_the_end_marks_the_call_over() -> None:
    core = _open_core()
    [event] = core.receive_text(frame("user.text", 2, epoch=1, text="hours?"), 1.0)
    assert isinstance(event, EventReceived) and event.message == brisvox.UserText(
        seq=2, t_ms=20, epoch=1, text="hours?"
    )
    [end] = core.receive_text(frame("session.end", 3, reason="hangup"), 1.0)
    assert isinstance(end, EventReceived) and core.ended and core.last_seq == 3


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (frame("bot.future_event", 2, x=1), Ignored),
        (start(seq=2), Ignored),
        (frame("user.text", 2, epoch=1), BadMessage),
        ("[1]", BadMessage),
    ],
)
def test_unknown_and_bad_server_messages_are_reported_not_dropped(data: str, kind: type) -> None:
    [out] = _open_core().receive_text(data, 1.0)
    assert isinstance(out, kind)


def test_a_command_waits_for_its_result_and_times_out_as_outcome_unknown() -> None:
    core = _open_core()
    with pytest.raises(ValueError, match="carries an id"):
        core.send_command(brisvox.Say(text="hi"), 0.0, 10.0)
    out = core.send_command(brisvox.Say(id="c1", text="hi"), 0.0, 10.0)
    assert _sent(out) == [{"type": "say", "id": "c1", "text": "hi"}]
    with pytest.raises(ValueError, match="already waiting"):
        core.send_command(brisvox.Say(id="c1", text="again"), 0.0, 10.0)
    core.send_command(brisvox.End(id="c2"), 0.0, 5.0)
    assert core.next_deadline() == 5.0
    [answered] = core.receive_text(frame("command.result", 2, id="c1", ok=True), 1.0)
    assert isinstance(answered, CommandAnswered) and answered.result.ok
    [timed_out] = core.tick(5.0)
    assert timed_out == CommandTimedOut("c2", "end", 5.0)
    [late] = core.receive_text(frame("command.result", 3, id="c2", ok=True), 6.0)
    assert isinstance(late, Ignored)


def test_a_bad_command_raises_before_anything_is_sent() -> None:
    core = _open_core()
    with pytest.raises(brisvox.ProtocolError, match="invalid_argument"):
        core.send_command(brisvox.Transfer(id="t1", destination="555-1234"), 0.0, 1.0)
    assert core.next_deadline() is None


def test_a_read_only_cancel_drops_its_result_a_side_effect_cancel_does_not() -> None:
    core = _open_core()
    [started] = core.receive_text(tool_call(2, 7, "lookup"), 0.0)
    assert isinstance(started, ToolCallStarted) and started.call.id == 7
    core.receive_text(tool_call(3, 8, "book", kind="side_effect"), 0.0)
    [cancel] = core.receive_text(frame("tool.cancel", 4, id=7, reason="interrupted"), 0.0)
    assert isinstance(cancel, ToolCallCancelled) and cancel.reason == "interrupted"
    [dropped] = core.send_tool_result(brisvox.ToolResult(id=7, result="late"), 0.0)
    assert isinstance(dropped, Ignored)
    [told] = core.receive_text(frame("tool.cancel", 5, id=8, reason="timeout"), 0.0)
    assert isinstance(told, ToolCallCancelled)
    out = core.send_tool_result(brisvox.ToolResult(id=8, result="booked"), 0.0)
    assert _sent(out) == [{"type": "tool.result", "id": 8, "result": "booked"}]
    [unknown] = core.receive_text(frame("tool.cancel", 6, id=99, reason="abandoned"), 0.0)
    assert isinstance(unknown, Ignored)


@pytest.mark.parametrize(
    ("result", "error"),
    [("x" * 70_000, "tool result is too large"), (math.nan, "tool result is not valid JSON")],
)
def test_a_result_that_cannot_travel_becomes_an_error_result(result: object, error: str) -> None:
    core = _open_core()
    core.receive_text(tool_call(2, 1, "lookup"), 0.0)
    out = core.answer_tool(1, 0.0, result=result)  # refused as the tool.result is built
    assert _sent(out) == [{"type": "tool.result", "id": 1, "error": error}]
    assert isinstance(out[-1], BadMessage)


def test_a_binary_frame_after_the_handshake_is_ignored() -> None:
    [out] = _open_core().receive_binary(b"\x01\x02", 0.0)
    assert isinstance(out, Ignored) and "binary" in out.what


# -- agent core: the server's envelope ----------------------------------------------------------


def _envelope_problems(out: list[object]) -> list[str]:
    return [o.error.detail for o in out if isinstance(o, BadMessage)]


@pytest.mark.parametrize(
    ("seq", "t_ms", "problems"),
    [
        (2, 20, []),
        (2, 0, []),  # the same millisecond as session.start
        (3, 30, ["seq 3 after 1: +1 a message on a link"]),
        (1, 20, ["seq 1 after 1: +1 a message on a link"]),
    ],
)
def test_each_server_message_follows_the_last_on_its_link(
    seq: int, t_ms: int, problems: list[str]
) -> None:
    """seq is one more, t_ms never goes back; a broken rule is reported, the event still read."""
    core = _open_core()
    text = json.dumps({"seq": seq, "t_ms": t_ms, "type": "user.text", "epoch": 1, "text": "hi"})
    out = core.receive_text(text, 1.0)
    assert _envelope_problems(out) == problems
    assert isinstance(out[-1], EventReceived) and (core.last_seq, core.last_t_ms) == (seq, t_ms)


def test_t_ms_going_back_is_one_problem_not_one_per_message_after_it() -> None:
    core = _open_core()
    assert not _envelope_problems(core.receive_text(frame("user.text", 2, epoch=1, text="a"), 1))
    back = json.dumps({"seq": 3, "t_ms": 5, "type": "user.text", "epoch": 1, "text": "b"})
    [problem] = _envelope_problems(core.receive_text(back, 1.0))
    assert problem == "t_ms 5 after 20: it never goes back"
    assert not _envelope_problems(core.receive_text(frame("user.text", 4, epoch=1, text="c"), 1))


def test_a_refused_server_message_still_takes_its_seq() -> None:
    """Regression (issue 13): a tool.call whose arguments is "x" (seq 2) is refused; the
    user.text at seq 3 after it breaks no rule."""
    core = _open_core()
    bad = json.loads(tool_call(2, 1, "book_table"))
    refused = core.receive_text(json.dumps({**bad, "arguments": "x"}), 1.0)
    assert [o.error.path for o in refused if isinstance(o, BadMessage)] == ["$.arguments"]
    assert core.last_seq == 2
    out = core.receive_text(frame("user.text", 3, epoch=1, text="hi"), 1.0)
    assert _envelope_problems(out) == [] and isinstance(out[-1], EventReceived)


def test_a_fresh_call_starts_at_seq_1_and_t_ms_0() -> None:
    out = AgentCore(0.0).receive_text(start(seq=2, t_ms=5), 0.0)
    assert _envelope_problems(out) == [
        "the call's session.start has seq 2, not 1",
        "the call's session.start has t_ms 5, not 0",
    ]
    assert isinstance(out[-1], StartReceived)


@pytest.mark.parametrize(
    ("seq", "t_ms", "previous_seq", "problems"),
    [
        (9, 800, 7, []),
        (9, 800, 8, []),  # previous_seq past what was read: messages lost in flight
        (9, 800, 6, ["resume.previous_seq 6 is below 7, already read"]),
        (7, 800, 7, ["seq 7 is not past resume.previous_seq 7"]),
        (9, 600, 7, ["t_ms 600 after 700: it never goes back"]),
    ],
)
def test_a_resumption_continues_from_what_the_previous_link_read(
    seq: int, t_ms: int, previous_seq: int, problems: list[str]
) -> None:
    core = AgentCore(0.0, last_read=(7, 700))
    resume = {"attempt": 1, "previous_seq": previous_seq, "down_ms": 100}
    out = core.receive_text(start(seq=seq, t_ms=t_ms, resume=resume), 0.0)
    assert _envelope_problems(out) == problems
    assert isinstance(out[-1], StartReceived) and core.last_seq == seq


def test_a_new_link_of_a_started_call_must_resume_it() -> None:
    out = AgentCore(0.0, last_read=(7, 700)).receive_text(start(), 0.0)
    assert _envelope_problems(out) == ["session.start again, without resume"]


def test_what_the_agent_drops_as_the_servers_fault_carries_its_code() -> None:
    deciding = AgentCore(0.0)
    deciding.receive_text(start(), 0.0)
    [early] = deciding.receive_text(frame("user.text", 2, epoch=1, text="hi"), 0.1)
    assert isinstance(early, Ignored) and early.code == "bad_message"
    [binary] = _open_core().receive_binary(b"\x01", 0.0)
    [unknown] = _open_core().receive_text(frame("bot.future_event", 2), 0.0)
    assert isinstance(binary, Ignored) and binary.code == "bad_message"
    assert isinstance(unknown, Ignored) and unknown.code is None  # forward compatibility


# -- the resume registry -----------------------------------------------------------------------------


def test_the_resume_registry_parks_for_the_window_then_forgets() -> None:
    registry = ResumeRegistry(15.0)
    registry.live("42")
    assert registry.may_resume("42", 0.0) and registry.next_deadline() is None
    registry.lost("42", 10.0)
    assert registry.parked("42") and registry.next_deadline() == 25.0
    assert registry.may_resume("42", 24.9) and not registry.may_resume("42", 25.0)
    assert registry.expired(24.0) == [] and registry.expired(25.0) == ["42"]
    assert "42" not in registry and not registry.may_resume("42", 0.0)


# -- the transition tables ----------------------------------------------------------------------


def test_an_input_the_state_does_not_take_is_refused() -> None:
    core = _open_core()
    with pytest.raises(
        SessionStateError, match=r"brisvox agent: 'accept' cannot happen in state 'open'"
    ):
        core._step(AgentInput.ACCEPT, _Step())
