"""The sans-I/O cores of the Brisvox link, message by message, without sockets."""

from __future__ import annotations

import json
import math
from typing import get_args

import pytest

from tests.peers.raw import frame, start, tool_call
from voxwire import brisvox
from voxwire.brisvox.core import (
    AgentCore,
    AgentState,
    BadMessage,
    Command,
    CommandAnswered,
    CommandTimedOut,
    Event,
    EventBuffer,
    EventReceived,
    EventsDropped,
    HandshakeFailed,
    Ignored,
    ResumeRegistry,
    StartReceived,
    ToolCallCancelled,
    ToolCallStarted,
)
from voxwire.sansio import Close, SendText


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
    out = core.send_tool_result(brisvox.ToolResult(id=1, result=result), 0.0)
    assert _sent(out) == [{"type": "tool.result", "id": 1, "error": error}]
    assert isinstance(out[-1], BadMessage)


def test_a_binary_frame_after_the_handshake_is_ignored() -> None:
    [out] = _open_core().receive_binary(b"\x01\x02", 0.0)
    assert isinstance(out, Ignored) and "binary" in out.what


# -- the event buffer and the resume registry ---------------------------------------------------


def test_the_event_buffer_drops_the_newest_and_reports_where_the_gap_is() -> None:
    buffer: EventBuffer[str] = EventBuffer(2)
    assert [buffer.push(x) for x in "abcd"] == [True, True, False, False]
    assert buffer.pop() == "a"
    assert buffer.push("e")
    buffer.finish("end")
    assert not buffer.push("after the end")
    assert [buffer.pop() for _ in range(5)] == ["b", EventsDropped(2), "e", "end", None]
    assert buffer.lost_total == 2 and buffer.finished


def test_the_event_buffer_counts_an_outage_and_a_clear() -> None:
    buffer: EventBuffer[str] = EventBuffer(4)
    buffer.push("a")
    assert buffer.clear() == 1
    buffer.drop(3)
    assert buffer.take_lost() == 4 and buffer.pop() is None
    with pytest.raises(ValueError, match="at least 1"):
        EventBuffer(0)


def test_the_resume_registry_parks_for_the_window_then_forgets() -> None:
    registry = ResumeRegistry(15.0)
    registry.live("42")
    assert registry.may_resume("42", 0.0) and registry.next_deadline() is None
    registry.lost("42", 10.0)
    assert registry.parked("42") and registry.next_deadline() == 25.0
    assert registry.may_resume("42", 24.9) and not registry.may_resume("42", 25.0)
    assert registry.expired(24.0) == [] and registry.expired(25.0) == ["42"]
    assert "42" not in registry and not registry.may_resume("42", 0.0)


# -- engine core ----------------------------------------------------------------------------------

from voxwire.brisvox.core import (  # noqa: E402
    AgentAccepted,
    Backoff,
    CommandReceived,
    EngineCore,
    EngineState,
    LinkDown,
    LinkSettings,
    SendPing,
    ToolCallQueued,
    ToolFinished,
    ToolOutcome,
    ToolOverdue,
    backoff_factor,
)

LOOKUP = {
    "name": "lookup",
    "description": "Looks up.",
    "parameters": {"type": "object"},
    "kind": "read_only",
    "timeout_ms": 1000,
}
BOOK = {**LOOKUP, "name": "book", "kind": "side_effect", "timeout_ms": 2000}


def _accept(**extra: object) -> str:
    return json.dumps({"type": "session.accept", "version": 1, "tools": [LOOKUP, BOOK], **extra})


def _written(core: EngineCore, now: float) -> list[dict[str, object]]:
    out = []
    while (data := core.next_write(now)) is not None:
        out.append(json.loads(data))
    return out


def _engine(now: float = 0.0, **accept: object) -> EngineCore:
    core = EngineCore(session_id="42", agent="luigi", now=now)
    core.connected(now)
    _written(core, now)
    [accepted] = core.receive_text(_accept(**accept), now)
    assert isinstance(accepted, AgentAccepted)
    return core


def test_the_engine_writes_session_start_and_opens_on_accept() -> None:
    core = EngineCore(session_id="42", agent="luigi", now=5.0)
    assert core.next_write(5.0) is None
    core.connected(5.0)
    assert _written(core, 5.2) == [
        {
            "seq": 1,
            "t_ms": 0,
            "type": "session.start",
            "protocol": "brisvox.agent",
            "versions": [1],
            "session_id": "42",
            "agent": "luigi",
            "capabilities": {"transfer": False, "tools": True},
        }
    ]
    assert core.next_deadline() == 7.0
    [accepted] = core.receive_text(_accept(), 5.5)
    assert isinstance(accepted, AgentAccepted) and not accepted.resumed
    assert core.state is EngineState.OPEN and core.next_deadline() == 15.5  # the first ping


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (json.dumps({"type": "session.reject", "code": "busy"}), "rejected: busy"),
        (json.dumps({"type": "say", "text": "hi"}), "bad first message: say"),
        (json.dumps({"type": "session.accept", "version": 2, "tools": []}), "was not offered"),
        ("{", "bad first message"),
    ],
)
def test_a_failed_handshake_leaves_the_call_without_agent(answer: str, reason: str) -> None:
    core = EngineCore(session_id="42", agent="luigi", now=0.0)
    core.connected(0.0)
    out = core.receive_text(answer, 0.1)
    assert isinstance(out[0], Close)
    assert isinstance(out[1], HandshakeFailed) and reason in out[1].reason and out[1].final
    assert core.state is EngineState.GONE


def test_no_answer_within_the_handshake_timeout_fails_the_handshake() -> None:
    core = EngineCore(session_id="42", agent="luigi", now=0.0)
    core.connected(0.0)
    assert core.tick(1.9) == []
    out = core.tick(2.0)
    assert isinstance(out[1], HandshakeFailed) and "handshake timeout" in out[1].reason


def test_soft_handshake_problems_are_reported_as_error_events_and_the_call_goes_on() -> None:
    bad_tool = {**LOOKUP, "name": "bad name!"}
    reserved = {**LOOKUP, "name": "confirm_pending"}
    core = EngineCore(session_id="42", agent="luigi", now=0.0)
    core.connected(0.0)
    _written(core, 0.0)
    accept = json.dumps(
        {
            "type": "session.accept",
            "version": 1,
            "tools": [bad_tool, LOOKUP, reserved],
            "events": ["user.text", "user.telepathy"],
            "context": [{"role": "user", "text": "  "}, {"role": "system", "text": "VIP"}],
        }
    )
    [accepted] = core.receive_text(accept, 0.0)
    assert isinstance(accepted, AgentAccepted)
    assert [t.name for t in accepted.accept.tools] == ["lookup"]
    assert accepted.accept.events == ["user.text"] and len(accepted.accept.context) == 1
    errors = _written(core, 0.1)
    assert [e["type"] for e in errors] == ["error"] * 4
    assert all(e["stage"] == "agent_link" and e["fatal"] is False for e in errors)
    assert [str(e["message"]).split(":")[0] for e in errors] == ["invalid_argument"] * 4


def test_control_messages_go_before_events_and_seq_is_write_order() -> None:
    core = _engine()
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="a"), 1.0)
    core.call_tool("lookup", {}, call_id="l1", epoch=1, now=1.0)
    written = _written(core, 1.25)
    assert [(m["type"], m["seq"], m["t_ms"]) for m in written] == [
        ("tool.call", 2, 1250),
        ("bot.text", 3, 1250),
    ]
    assert written[0]["idempotency_key"] == written[0]["idempotency_key"]


def test_a_full_event_queue_drops_the_newest_and_reports_events_lost() -> None:
    core = EngineCore(session_id="42", agent="luigi", now=0.0, settings=LinkSettings(event_queue=2))
    core.connected(0.0)
    _written(core, 0.0)
    core.receive_text(_accept(), 0.0)
    for n in range(5):
        core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text=str(n)), 0.0)
    written = _written(core, 0.0)
    assert [(m["type"], m.get("text", m.get("count"))) for m in written] == [
        ("bot.text", "0"),
        ("bot.text", "1"),
        ("events.lost", 3),
    ]


def test_events_outside_the_subscription_are_not_sent() -> None:
    core = _engine(events=["user.text"])
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="a"), 0.0)
    core.send_event(brisvox.UserText(seq=0, t_ms=0, epoch=1, text="b"), 0.0)
    assert [m["type"] for m in _written(core, 0.0)] == ["user.text"]


def test_tool_calls_get_ids_that_never_repeat_and_their_results() -> None:
    core = _engine()
    [queued] = core.call_tool("lookup", {"q": 1}, call_id="l1", epoch=3, now=0.0)
    assert isinstance(queued, ToolCallQueued) and queued.request_id == 1
    [call] = _written(core, 0.0)
    assert call["kind"] == "read_only" and call["timeout_ms"] == 1000 and call["epoch"] == 3
    assert len(str(call["idempotency_key"])) == 16
    [done] = core.receive_text(json.dumps({"type": "tool.result", "id": 1, "result": [1]}), 0.5)
    assert done == ToolFinished(1, "l1", ToolOutcome.RESULT, [1])
    [late] = core.receive_text(json.dumps({"type": "tool.result", "id": 1, "result": 2}), 0.6)
    assert isinstance(late, Ignored)
    [unknown] = core.call_tool("nope", {}, call_id="n1", epoch=3, now=0.0)
    assert isinstance(unknown, ToolFinished) and unknown.outcome is ToolOutcome.UNKNOWN_TOOL
    [again] = core.call_tool("lookup", {}, call_id="l2", epoch=3, now=0.0)
    assert isinstance(again, ToolCallQueued) and again.request_id == 3


def test_a_read_only_call_is_cancelled_at_its_timeout_or_on_a_barge_in() -> None:
    core = _engine()
    core.call_tool("lookup", {}, call_id="l1", epoch=1, now=0.0)
    core.call_tool("lookup", {}, call_id="l2", epoch=1, now=0.0)
    _written(core, 0.0)
    [interrupted] = core.cancel_tool(2, 0.5)
    assert interrupted == ToolFinished(2, "l2", ToolOutcome.INTERRUPTED)
    [timed_out] = core.tick(1.0)
    assert timed_out == ToolFinished(1, "l1", ToolOutcome.TIMEOUT)
    assert [(m["id"], m["reason"]) for m in _written(core, 1.0)] == [
        (2, "interrupted"),
        (1, "abandoned"),
    ]


def test_a_side_effect_call_is_waited_for_then_recorded_as_outcome_unknown() -> None:
    core = _engine()
    core.call_tool("book", {}, call_id="b1", epoch=1, now=0.0)
    core.call_tool("book", {}, call_id="b2", epoch=1, now=0.0)
    _written(core, 0.0)
    assert core.tick(2.0) == [ToolOverdue(1, "b1"), ToolOverdue(2, "b2")]
    [late] = core.receive_text(json.dumps({"type": "tool.result", "id": 1, "result": "ok"}), 30.0)
    assert late == ToolFinished(1, "b1", ToolOutcome.RESULT, "ok", late=True)
    core.pong(55.0)
    assert core.tick(62.0) == [SendPing(), ToolFinished(2, "b2", ToolOutcome.OUTCOME_UNKNOWN)]
    assert [(m["type"], m["reason"]) for m in _written(core, 62.0)] == [("tool.cancel", "timeout")]


def test_at_most_32_tool_calls_wait() -> None:
    core = _engine()
    for n in range(32):
        core.call_tool("lookup", {}, call_id=f"l{n}", epoch=1, now=0.0)
    [refused] = core.call_tool("lookup", {}, call_id="l32", epoch=1, now=0.0)
    assert isinstance(refused, ToolFinished) and refused.outcome is ToolOutcome.TOOL_FAILED


def test_commands_are_handed_over_and_answered() -> None:
    core = _engine()
    [received] = core.receive_text(json.dumps({"type": "say", "id": "c1", "text": "Hi"}), 1.0)
    assert isinstance(received, CommandReceived) and received.command.text == "Hi"
    core.answer(received)
    [silent] = core.receive_text(json.dumps({"type": "say", "text": "no id"}), 1.0)
    assert isinstance(silent, CommandReceived)
    core.answer(silent, error=("queue_full", "8 lines wait"))
    written = _written(core, 1.0)
    assert written[0] == {"seq": 2, "t_ms": 1000, "type": "command.result", "id": "c1", "ok": True}
    assert (
        written[1]["type"] == "error" and written[1]["message"] == "queue_full: say: 8 lines wait"
    )


@pytest.mark.parametrize(
    ("data", "answer"),
    [
        (
            json.dumps({"type": "say", "id": "c9", "text": " "}),
            ("command.result", "invalid_argument"),
        ),
        (json.dumps({"type": "dance", "id": "c9"}), ("error", "unknown_type")),
        (json.dumps({"type": "tool.call", "id": 1}), ("error", "unknown_type")),
        (_accept(), ("error", "not_ready")),
        ("nope", ("error", "bad_message")),
    ],
)
def test_a_bad_agent_message_is_answered(data: str, answer: tuple[str, str]) -> None:
    core = _engine()
    [out] = core.receive_text(data, 1.0)
    assert isinstance(out, BadMessage) and out.answered
    [written] = _written(core, 1.0)
    assert written["type"] == answer[0]
    detail = written.get("message") or written["error"]["code"]  # type: ignore[index]
    assert str(detail).startswith(answer[1])


def test_a_binary_frame_is_answered_with_an_error_and_the_link_stays() -> None:
    core = _engine()
    core.receive_binary(b"\x00", 1.0)
    [error] = _written(core, 1.0)
    assert error["message"] == "bad_message: binary frames are not part of the protocol"
    assert core.state is EngineState.OPEN


def test_pings_every_10_s_and_30_s_of_silence_take_the_link_down() -> None:
    core = _engine()
    assert core.tick(10.0) == [SendPing()]
    core.pong(10.1)
    assert core.tick(20.0) == [SendPing()]
    assert core.tick(30.0) == [SendPing()]
    out = core.tick(40.1)
    assert out[0] == Close(1001, "silence")
    assert out[-1] == LinkDown("nothing heard for 30 s", None) and core.state is EngineState.GONE


def test_a_lost_link_of_a_resumable_agent_reconnects_with_resume() -> None:
    core = _engine(resume=True)
    core.call_tool("book", {}, call_id="b1", epoch=1, now=1.0)
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="a"), 1.0)
    _written(core, 1.0)  # seq 2 and 3
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="queued"), 1.0)
    [received] = core.receive_text(json.dumps({"type": "say", "id": "c1", "text": "Hi"}), 1.0)
    out = core.connection_lost(2.0, "closed")
    assert out[0] == ToolFinished(1, "b1", ToolOutcome.OUTCOME_UNKNOWN, error=out[0].error)  # type: ignore[union-attr]
    assert isinstance(out[-1], LinkDown) and out[-1].reconnect_in == pytest.approx(
        0.1 * backoff_factor("42")
    )
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="missed"), 2.05)
    core.connected(2.2)
    [start_] = _written(core, 2.2)
    assert start_["seq"] == 4 and start_["t_ms"] == 2200
    assert start_["resume"] == {"attempt": 1, "previous_seq": 3, "down_ms": 200}
    resumed = json.dumps({"type": "session.accept", "version": 1, "tools": [], "resume": True})
    [accepted] = core.receive_text(resumed, 2.3)
    assert isinstance(accepted, AgentAccepted) and accepted.resumed
    assert [t.name for t in core.accept.tools] == ["lookup", "book"]  # type: ignore[union-attr]
    core.answer(received)  # for the lost link: dropped, never delivered late
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=2, text="b"), 2.4)
    written = _written(core, 2.4)
    assert [(m["type"], m.get("count", m.get("text"))) for m in written] == [
        ("events.lost", 2),
        ("bot.text", "b"),
    ]
    [queued] = core.call_tool("book", {}, call_id="b2", epoch=2, now=2.5)
    assert isinstance(queued, ToolCallQueued) and queued.request_id == 2


def test_a_resumption_answered_without_resume_or_with_a_reject_is_final() -> None:
    core = _engine(resume=True)
    core.connection_lost(1.0, "closed")
    core.connected(1.1)
    _written(core, 1.1)
    out = core.receive_text(_accept(), 1.2)
    assert isinstance(out[1], HandshakeFailed) and "resume: true" in out[1].reason
    assert core.state is EngineState.GONE


def test_an_end_command_stops_reconnecting() -> None:
    core = _engine(resume=True)
    core.receive_text(json.dumps({"type": "end", "id": "e1"}), 1.0)
    assert core.connection_lost(1.5, "closed")[-1] == LinkDown("closed", None)


def test_ending_the_call_writes_usage_and_end_last() -> None:
    core = _engine()
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="a"), 1.0)
    usage = brisvox.SessionUsage(seq=0, t_ms=0, duration_ms=1000, turns=1, interrupted_turns=0)
    core.end_call("hangup", 1.0, usage)
    assert [m["type"] for m in _written(core, 1.0)] == ["bot.text", "session.usage", "session.end"]
    assert core.finished


def test_the_backoff_doubles_within_the_attempts_and_the_window() -> None:
    backoff = Backoff(1.0, attempts=5, window=15.0)
    backoff.lost(0.0, lived=1.0)
    assert [backoff.next_delay(0.0) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.6, None]
    backoff.lost(100.0, lived=1.0)  # a short-lived link: the same series, nothing left
    assert backoff.next_delay(100.0) is None
    backoff.lost(200.0, lived=5.0)  # a link that lived 5 s starts a fresh series
    assert backoff.next_delay(200.0) == 0.1 and backoff.outage_attempts == 1
    late = Backoff(0.5, attempts=5, window=15.0)
    late.lost(0.0, lived=0.0)
    assert late.next_delay(14.96) is None  # no attempt more than 15 s after the loss
    assert 0.5 <= backoff_factor("a") <= 1.0 and backoff_factor("a") != backoff_factor("b")
    with pytest.raises(ValueError, match="factor"):
        Backoff(0.4, attempts=5, window=15.0)


# -- the core's message groups follow the spec ---------------------------------------------------


def test_the_event_and_command_unions_are_the_spec_groups() -> None:
    """``core.Event`` is written by hand; the spec's EventType enum is what it must mirror."""
    assert {cls.type for cls in get_args(Event)} == {e.value for e in brisvox.EventType}
    # And the commands: exactly the messages carrying the spec's `command` field set.
    commands = {cls for cls in get_args(brisvox.AgentMessage) if issubclass(cls, brisvox.Command)}
    assert set(get_args(Command)) == commands
