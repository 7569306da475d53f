"""The engine side's sans-I/O core, message by message, without sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from voxwire import brisvox
from voxwire.brisvox.engine_core import (
    AgentAccepted,
    Backoff,
    CloseAfter,
    CommandReceived,
    EngineCore,
    EngineState,
    LinkDown,
    LinkSettings,
    SendEvent,
    ToolCallQueued,
    ToolFinished,
    ToolOutcome,
    ToolOverdue,
    backoff_factor,
)
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.link import Outbound, Overflow
from voxwire.sansio import Close, Ignored, SendText

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


class Wired:
    """An EngineCore whose outputs go to the link's sans-I/O queue, as EngineLink puts them
    (control first, events bounded and counted, stamped in write order)."""

    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self.outbound = self.fresh_link()

    def fresh_link(self) -> Outbound:
        self.outbound = Outbound(
            event_bound=self.core.settings.event_queue,
            overflow=Overflow.DROP,
            report_lost=self.core.events_lost,
            stamp=self.core.stamp,
        )
        return self.outbound

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.core, name)
        if not callable(attr):
            return attr

        def routed(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            for item in out if isinstance(out, list) else ():
                if isinstance(item, SendEvent):
                    self.outbound.event(item)
                elif isinstance(item, SendText):
                    self.outbound.control(item)
                elif isinstance(item, CloseAfter):
                    self.outbound.close(item.close.code, item.close.reason, item.final)
            return out

        return routed


def _written(core: Wired, now: float) -> list[dict[str, object]]:
    return [json.loads(f.data) for f in core.outbound.take(now).frames]


def _frames(out: list[Any]) -> list[Any]:
    """The core's outputs without what it writes."""
    return [o for o in out if not isinstance(o, SendText | SendEvent | CloseAfter)]


def _new(now: float = 0.0, **kwargs: Any) -> Wired:
    return Wired(EngineCore(session_id="42", agent="luigi", now=now, **kwargs))


def _engine(now: float = 0.0, **accept: object) -> Wired:
    core = _new(now)
    core.connected(now)
    _written(core, now)
    [accepted] = _frames(core.receive_text(_accept(**accept), now))
    assert isinstance(accepted, AgentAccepted)
    return core


def test_the_engine_writes_session_start_and_opens_on_accept() -> None:
    core = _new(5.0)
    assert _written(core, 5.0) == []
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
    assert core.state is EngineState.OPEN and core.next_deadline() is None


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
    core = _new()
    core.connected(0.0)
    out = core.receive_text(answer, 0.1)
    assert isinstance(out[0], Close)
    assert isinstance(out[1], HandshakeFailed) and reason in out[1].reason and out[1].final
    assert core.state is EngineState.GONE


def test_no_answer_within_the_handshake_timeout_fails_the_handshake() -> None:
    core = _new()
    core.connected(0.0)
    assert core.tick(1.9) == []
    out = core.tick(2.0)
    assert isinstance(out[1], HandshakeFailed) and "handshake timeout" in out[1].reason


def test_soft_handshake_problems_are_reported_as_error_events_and_the_call_goes_on() -> None:
    bad_tool = {**LOOKUP, "name": "bad name!"}
    reserved = {**LOOKUP, "name": "confirm_pending"}
    core = _new()
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
    [accepted] = _frames(core.receive_text(accept, 0.0))
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
    core = _new(settings=LinkSettings(event_queue=2))
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
    [queued] = _frames(core.call_tool("lookup", {"q": 1}, call_id="l1", epoch=3, now=0.0))
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
    [again] = _frames(core.call_tool("lookup", {}, call_id="l2", epoch=3, now=0.0))
    assert isinstance(again, ToolCallQueued) and again.request_id == 3


def test_a_read_only_call_is_cancelled_at_its_timeout_or_on_a_barge_in() -> None:
    core = _engine()
    core.call_tool("lookup", {}, call_id="l1", epoch=1, now=0.0)
    core.call_tool("lookup", {}, call_id="l2", epoch=1, now=0.0)
    _written(core, 0.0)
    [interrupted] = _frames(core.cancel_tool(2, 0.5))
    assert interrupted == ToolFinished(2, "l2", ToolOutcome.INTERRUPTED)
    [timed_out] = _frames(core.tick(1.0))
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
    assert _frames(core.tick(62.0)) == [ToolFinished(2, "b2", ToolOutcome.OUTCOME_UNKNOWN)]
    assert [(m["type"], m["reason"]) for m in _written(core, 62.0)] == [("tool.cancel", "timeout")]


def test_at_most_32_tool_calls_wait() -> None:
    core = _engine()
    for n in range(32):
        core.call_tool("lookup", {}, call_id=f"l{n}", epoch=1, now=0.0)
    [refused] = core.call_tool("lookup", {}, call_id="l32", epoch=1, now=0.0)
    assert isinstance(refused, ToolFinished) and refused.outcome is ToolOutcome.TOOL_FAILED


def test_commands_are_handed_over_and_answered() -> None:
    core = _engine()
    [received] = _frames(
        core.receive_text(json.dumps({"type": "say", "id": "c1", "text": "Hi"}), 1.0)
    )
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
    [out] = _frames(core.receive_text(data, 1.0))
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


def test_a_lost_link_of_a_resumable_agent_reconnects_with_resume() -> None:
    core = _engine(resume=True)
    core.call_tool("book", {}, call_id="b1", epoch=1, now=1.0)
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="a"), 1.0)
    _written(core, 1.0)  # seq 2 and 3
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="queued"), 1.0)
    [received] = _frames(
        core.receive_text(json.dumps({"type": "say", "id": "c1", "text": "Hi"}), 1.0)
    )
    core.outbound.fail()  # the link went down: what it held is gone
    out = core.link_lost(2.0, "closed")
    assert out[0] == ToolFinished(1, "b1", ToolOutcome.OUTCOME_UNKNOWN, error=out[0].error)  # type: ignore[union-attr]
    assert isinstance(out[-1], LinkDown) and out[-1].reconnect_in == pytest.approx(
        0.1 * backoff_factor("42")
    )
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="missed"), 2.05)
    core.fresh_link()
    core.connected(2.2)
    [start_] = _written(core, 2.2)
    assert start_["seq"] == 4 and start_["t_ms"] == 2200
    assert start_["resume"] == {"attempt": 1, "previous_seq": 3, "down_ms": 200}
    resumed = json.dumps({"type": "session.accept", "version": 1, "tools": [], "resume": True})
    [accepted] = _frames(core.receive_text(resumed, 2.3))
    assert isinstance(accepted, AgentAccepted) and accepted.resumed
    assert [t.name for t in core.accept.tools] == ["lookup", "book"]  # type: ignore[union-attr]
    core.answer(received)  # for the lost link: dropped, never delivered late
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=2, text="b"), 2.4)
    written = _written(core, 2.4)
    assert [(m["type"], m.get("count", m.get("text"))) for m in written] == [
        ("events.lost", 2),  # the one queued when the link went down, the one sent while down
        ("bot.text", "b"),
    ]
    [queued] = _frames(core.call_tool("book", {}, call_id="b2", epoch=2, now=2.5))
    assert isinstance(queued, ToolCallQueued) and queued.request_id == 2


def test_a_resumption_answered_without_resume_or_with_a_reject_is_final() -> None:
    core = _engine(resume=True)
    core.link_lost(1.0, "closed")
    core.connected(1.1)
    _written(core, 1.1)
    out = core.receive_text(_accept(), 1.2)
    assert isinstance(out[1], HandshakeFailed) and "resume: true" in out[1].reason
    assert core.state is EngineState.GONE


def test_an_end_command_stops_reconnecting() -> None:
    core = _engine(resume=True)
    core.receive_text(json.dumps({"type": "end", "id": "e1"}), 1.0)
    assert core.link_lost(1.5, "closed")[-1] == LinkDown("closed", None)


def test_ending_the_call_writes_usage_and_end_last() -> None:
    core = _engine()
    core.send_event(brisvox.BotText(seq=0, t_ms=0, epoch=1, text="a"), 1.0)
    usage = brisvox.SessionUsage(seq=0, t_ms=0, duration_ms=1000, turns=1, interrupted_turns=0)
    core.end_call("hangup", 1.0, usage)
    batch = core.outbound.take(1.0)
    assert [json.loads(f.data)["type"] for f in batch.frames] == [
        "bot.text",
        "session.usage",
        "session.end",
    ]
    assert batch.close == Close(1000, "hangup")


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
