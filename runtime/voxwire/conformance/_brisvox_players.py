"""The Brisvox session players: an ``AgentCore`` and an ``EngineCore`` fed a case's steps. Not
public: :mod:`voxwire.conformance.sessions` is.

Each plays its side's messages through its core's API and judges the peer's by its core
(docs/conformance.md, "Sessions"). The agent side's core lives one link: a link that opens
makes a new one, which reads on from the last seq and t_ms of the one before. What the engine
writes by itself (session.start on a connection, events.lost after a resumption, the answers to
refused messages) waits for the step that shows it.
"""

from __future__ import annotations

from typing import Any, Final

from msgspec import UNSET

from voxwire import brisvox
from voxwire.brisvox.agent_core import (
    AgentCore,
    AgentOutput,
    AgentState,
    EventReceived,
    StartReceived,
    ToolCallStarted,
)
from voxwire.brisvox.engine_core import (
    AgentAccepted,
    CloseAfter,
    CommandReceived,
    EngineCore,
    EngineOutput,
    LinkSettings,
    ToolFinished,
)
from voxwire.brisvox.messages import SessionEndReason
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.conformance._players import (
    BROKEN_CODE,
    DONE,
    SENT,
    STAND_IN,
    Judged,
    Routed,
    Step,
    detail,
    form,
    ignored,
    refused,
    sent,
    taken,
)
from voxwire.errors import ProtocolError
from voxwire.sansio import Close, SendText

__all__ = ["REPLAY", "AgentPlayer", "EnginePlayer"]

REPLAY: Final = LinkSettings(reconnect_attempts=2**31, reconnect_window=float("inf"))
"""A judging engine may always reconnect: whether it may resume is the agent's resume flag."""
_CALL_ENDED: Final = SessionEndReason.CALL_ENDED
"""The reason of an ``end_call`` step (the engine writes it only where a session.end step of the
case shows it: elsewhere the call ends with no link to write on)."""


# -- the agent ----------------------------------------------------------------------------------


class AgentPlayer(Routed):
    """A Brisvox ``AgentCore`` (one per link) playing the agent's steps and judging the
    server's."""

    side = "agent"

    def __init__(self, named: Step | None, opened: float | None) -> None:
        # The connection is the core: one before a case's first ``open`` makes way for it.
        self.core = AgentCore(0.0 if opened is None else opened)

    def _app(self, step: Step, t: float) -> Judged:
        if "wait" not in step:
            raise ValueError(f"the agent plays no {form(step)}")
        out = self.core.tick(t)
        return _judge_agent(out) if out else Judged(DONE)

    def _receive(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            return _judge_agent(self.core.receive_binary(step["binary"], t))
        return _judge_agent(self.core.receive_text(step["text"], t))

    def _send(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            return Judged(SENT)  # the engine judges it
        try:
            self._through_core(brisvox.decode(step["text"], "agent"), t)
        except (ProtocolError, ValueError, RuntimeError) as exc:
            return refused(exc, "brisvox")
        return Judged(SENT)

    def _link(self, event: str, t: float) -> Judged:
        core = self.core
        if event == "failed":
            raise ValueError("the agent opens no connection: none of its attempts fails")
        if event != "open":
            core.closed()
            return Judged(DONE)
        last = None if core.start is None else (core.last_seq, core.last_t_ms)
        self.core = AgentCore(t, last_read=last)
        return Judged(DONE)

    def _through_core(self, message: Any, t: float) -> None:
        """``message`` sent through the core's API for its type; raises what the core raises."""
        core = self.core
        if isinstance(message, brisvox.SessionAccept):
            core.accept(message, t)
        elif isinstance(message, brisvox.SessionReject):
            text = message.message if isinstance(message.message, str) else None
            core.reject(message.code, text, t)
        elif isinstance(message, brisvox.ToolResult):
            core.send_tool_result(message, t)
        elif message.id is not UNSET:
            core.send_command(message, t, timeout=float("inf"))
        elif core.state is not AgentState.OPEN:  # a command without id: only the link's state
            raise RuntimeError(f"commands need an open link, this one is {core.state.value}")


def _judge_agent(out: list[AgentOutput]) -> Judged:
    closes = [o for o in out if isinstance(o, Close)]
    refusals = [o.error for o in out if isinstance(o, BadMessage)]
    declined = [o.rejected for o in out if isinstance(o, HandshakeFailed) and o.rejected]
    failed = [o.reason for o in out if isinstance(o, HandshakeFailed)]
    if declined:  # a valid session.start the agent will not take: session.reject
        verdict = {
            "verdict": "rejected",
            "code": str(declined[0].code),
            "close": int(closes[0].code),
        }
        return Judged(verdict, why=failed[0], declined=True)
    if refusals:
        verdict = {"verdict": "error", "code": str(refusals[0].code)}
        if closes:
            verdict["close"] = int(closes[0].code)
        return Judged(verdict, refusals[0].code, detail(refusals[0]))
    if closes:
        return _closed(closes, failed)
    if any(isinstance(o, (StartReceived, EventReceived, ToolCallStarted)) for o in out):
        return Judged({"verdict": "accepted"})
    return ignored(out)


# -- the engine ---------------------------------------------------------------------------------


class EnginePlayer(Routed):
    """A Brisvox ``EngineCore`` playing the server's steps and judging the agent's.

    What the core writes by itself (session.start on a connection, events.lost after a
    resumption, the answers to refused messages) waits in ``pending`` until the step for it."""

    side = "server"

    def __init__(
        self, named: Step | None, opened: float | None, settings: LinkSettings | None = None
    ) -> None:
        start: Any = None if named is None else brisvox.decode(named["text"], "server")
        if named is not None and not isinstance(start, brisvox.SessionStart):
            raise ValueError("a Brisvox engine case's first message is the engine's session.start")
        now = 0.0 if opened is None else opened
        if start is None:  # a case that never connects names no call
            self.core = EngineCore(session_id=STAND_IN, agent=STAND_IN, now=now, settings=settings)
        else:
            self.core = EngineCore(
                session_id=start.session_id,
                agent=start.agent,
                now=now,
                capabilities=start.capabilities,
                call=None if start.call is UNSET else start.call,
                settings=settings,
                versions=tuple(start.versions),
            )
        self.pending: list[Any] = []
        self.commands: dict[str, CommandReceived] = {}
        """The agent's commands with an id, by id, for their results."""
        self.usage: brisvox.SessionUsage | None = None
        if opened is not None:
            self._wrote(self.core.connected(opened), opened)

    def _wrote(self, out: list[EngineOutput], t: float) -> list[EngineOutput]:
        frames = [o for o in out if isinstance(o, SendText)]
        frames += [f for o in out if isinstance(o, CloseAfter) for f in o.final]
        for frame in frames:
            self.pending.append(brisvox.decode(self.core.stamp(frame, t).data, "server"))
        for o in out:
            if isinstance(o, CommandReceived) and o.command.id is not UNSET:
                self.commands[o.command.id] = o
        return out

    def _link(self, event: str, t: float) -> Judged:
        core = self.core
        try:
            if event == "open":
                self._wrote(core.connected(t), t)
            elif event == "failed":
                self._wrote(core.connect_failed(t, "the connection failed"), t)
            else:
                self._wrote(core.link_lost(t, f"link {event}"), t)
        except RuntimeError as exc:  # no transition: the engine would not reconnect now
            return refused(RuntimeError(f"the engine would not reconnect: {exc}"), "brisvox")
        return Judged(DONE)

    def _app(self, step: Step, t: float) -> Judged:
        if step.get("call") == "end_call":
            return _after_engine(self._wrote(self.core.end_call(_CALL_ENDED, t, self.usage), t))
        if "wait" in step:
            return _after_engine(self._wrote(self.core.tick(t), t))
        raise ValueError(f"the engine plays no {form(step)}")

    def _receive(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            return _judge_engine(self._wrote(self.core.receive_binary(step["binary"], t), t))
        return _judge_engine(self._wrote(self.core.receive_text(step["text"], t), t))

    def _send(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            return refused(ValueError("the engine writes no binary frames"), "brisvox")
        try:
            message: Any = brisvox.decode(step["text"], "server")
            if isinstance(message, brisvox.UnknownMessage):  # a later version's: not this core's
                return Judged(SENT)
            if isinstance(message, brisvox.SessionUsage):  # end_call writes it with the end
                self.usage = message
                return Judged(SENT)
            found = taken(self.pending, message.type)
            if found is None:
                self._wrote(self._through_core(message, t), t)
                found = taken(self.pending, message.type)
        except (ProtocolError, ValueError) as exc:
            return refused(exc, "brisvox")
        if found is None and isinstance(message, brisvox.ToolCancel):
            return Judged(SENT)  # a cancel may cross its call's result: the call is done
        if found is None:
            why = f"the engine writes no {message.type} here (the link is {self.core.state.value})"
            return refused(ValueError(why), "brisvox")
        return sent(found.seq, message.seq)

    def _through_core(self, message: Any, t: float) -> list[EngineOutput]:
        """``message`` sent through the core's API for its type (what it does not write:
        ``[]``); raises ``ValueError`` with the core's reason for a tool call it refuses."""
        core = self.core
        if isinstance(message, brisvox.ToolCall):
            out = core.call_tool(
                message.name,
                message.arguments,
                call_id=message.call_id,
                epoch=message.epoch,
                now=t,
            )
            failed = [o.error for o in out if isinstance(o, ToolFinished)]
            if failed:
                raise ValueError(f"the engine calls no tool {message.name!r} now: {failed[0]}")
            return out
        if isinstance(message, brisvox.ToolCancel):
            return [
                o
                for o in core.cancel_tool(message.id, t, message.reason)
                if isinstance(o, SendText)
            ]
        if isinstance(message, brisvox.CommandResult):
            received = self.commands.pop(message.id, None)
            if received is None:
                raise ValueError(f"command.result {message.id!r} for no command of the agent's")
            error = message.error
            answer = None if error is UNSET or error is None else (error.code, error.message)
            return core.answer(received, error=answer)
        if isinstance(message, brisvox.SessionEnd):
            out = core.end_call(message.reason, t, self.usage)
            if self.usage is not None:  # its step came before, the core writes it now
                self._wrote(out, t)
                taken(self.pending, brisvox.SessionUsage.type)
                return []
            return out
        if isinstance(message, brisvox.EventsLost):
            return [core.events_lost(message.count)]
        return core.send_event(message, t)


def _after_engine(out: list[EngineOutput]) -> Judged:
    """What the engine did on a call or a timer: closed its link, or nothing on the wire."""
    shut = [
        o if isinstance(o, Close) else o.close for o in out if isinstance(o, Close | CloseAfter)
    ]
    if shut:
        return Judged({"verdict": "close", "close": int(shut[0].code)})
    return Judged(DONE)


def _judge_engine(out: list[EngineOutput]) -> Judged:
    closes = [o for o in out if isinstance(o, Close)]
    refusals = [o.error for o in out if isinstance(o, BadMessage)]
    failed = [o.reason for o in out if isinstance(o, HandshakeFailed)]
    if refusals:
        return Judged(
            {"verdict": "error", "code": str(refusals[0].code)},
            refusals[0].code,
            detail(refusals[0]),
        )
    if closes:
        return _closed(closes, failed)
    accepted = [o for o in out if isinstance(o, AgentAccepted)]
    if accepted or any(isinstance(o, CommandReceived) for o in out):
        problems = accepted[0].problems if accepted else ()
        if problems:  # a refused tool, an unknown event type: left out, the call goes on
            code, _, text = problems[0].partition(": ")
            return Judged({"verdict": "accepted"}, code, text)
        return Judged({"verdict": "accepted"})
    return ignored(out)


def _closed(closes: list[Close], failed: list[str]) -> Judged:
    """The core closed the link for a rule broken: why its handshake failed, or the close's
    reason."""
    why = failed[0] if failed else closes[0].reason
    return Judged({"verdict": "close", "close": int(closes[0].code)}, BROKEN_CODE["brisvox"], why)
