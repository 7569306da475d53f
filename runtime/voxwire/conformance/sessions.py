"""voxwire's answer to a session case: the steps played through the side's sans-I/O core.

The side under test's own messages are sent through its core's API (the core stamps them; the
verdict is ``sent``, or ``refused`` when the core would not send such a message now), the peer's
are received by the core, link events are told to it, and what the core returns becomes the
step's verdict (docs/conformance.md, "Sessions").

The same players judge a capture in ``voxwire validate`` (:mod:`voxwire.validate`), one player
per side, each fed every step: so a capture is judged by the cores' own rules and words. A
step is a capture line as a dict: ``{"t", "from", "text"}``, ``{"t", "from", "binary"}``
(bytes) or ``{"t", "link"}``; each player answers a :class:`Judged`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import msgspec
from msgspec import UNSET

from voxwire import brisvox, ovp
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
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.capture import MAX_SECONDS
from voxwire.errors import ProtocolError
from voxwire.ovp._session import AudioIn, Sent, SessionOver, SessionStateError
from voxwire.ovp.client_core import ClientCore, ClientOutput, Rejected, ServerEvent
from voxwire.ovp.gateway_core import (
    STREAM_WINDOW,
    ClientEvent,
    GatewayCore,
    GatewayOutput,
    Resumed,
    ToLink,
)
from voxwire.sansio import Close, Ignored, SendText

__all__ = ["BROKEN_CODE", "PLAYERS", "Judged", "Player", "Step", "Verdict", "play"]

Verdict = dict[str, Any]
"""A step's verdict as JSON (docs/conformance.md, "Sessions")."""
Step = dict[str, Any]
"""A case's step, or a capture line: ``{"t", "from", "text"}``, ``{"t", "from", "binary"}``
(bytes) or ``{"t", "link"}``."""
_ENVELOPE: Final = ("type", "seq", "ts", "session_id")
BROKEN_CODE: Final = {
    "brisvox": brisvox.ErrorCode.BAD_MESSAGE,
    "ovp": ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID,
}
"""The code of a broken rule the core names no code for (a close, a refused send)."""
_LATEST_EPOCH: Final = datetime(9999, 12, 31, tzinfo=UTC).timestamp() - MAX_SECONDS
"""The latest epoch a player gives a core: its clock then runs for a whole capture without
passing what a ``ts`` can carry (year 9999). A core's own ts is never compared with the
capture's, so a later one, which a session.start of 9999-12-31 implies, changes no verdict."""
_DONE: Final[Verdict] = {"verdict": "done"}
_SENT: Final[Verdict] = {"verdict": "sent"}


@dataclass(frozen=True, slots=True)
class Judged:
    """A step's verdict, and the rule it broke in the core's own words, if any."""

    verdict: Verdict
    code: str | None = None
    """The protocol's error code of the broken rule (a verdict ``error`` or ``close``, a
    ``refused`` send, a message the core drops as the sender's fault), else ``None``."""
    why: str = ""
    """What the core said: the refusal, the close's reason, what it dropped."""
    declined: bool = False
    """A valid session the side declined (Brisvox ``session.reject``): no rule broken."""


class Player(Protocol):
    """One side's core, fed every step of a session, its own messages and the peer's."""

    def step(self, step: Step) -> Judged: ...


def play(protocol: str, side: str, steps: Sequence[Step]) -> list[Verdict]:
    """The verdict of every step; raises ``ValueError`` for a side voxwire does not play or
    a case it cannot start (a Brisvox engine case starts with its session.start, an OVP one
    has a message from the gateway)."""
    make = _CASE_PLAYERS.get((protocol, side))
    if make is None:
        raise ValueError(f"voxwire plays no {protocol} side {side!r} in session cases")
    starts_with = "server" if protocol == "ovp" else None  # the gateway's message names the session
    first = next((s for s in steps if starts_with in (None, s.get("from"))), None)
    if first is None:
        raise ValueError(f"a {protocol} {side} case has no step to start from")
    player = make(first)
    return [player.step(step).verdict for step in steps]


def _session_of(first: Step) -> tuple[str, float]:
    """The session id of an OVP message, and the epoch its ``ts`` implies."""
    message: Any = ovp.decode(first["text"], first["from"])
    if isinstance(message, ovp.UnknownMessage):
        raise ValueError(f"the first message is of an unknown type {message.type!r}")
    ts = datetime.fromisoformat(str(message.ts).replace("Z", "+00:00")).timestamp()
    return str(message.session_id), min(ts - float(first["t"]), _LATEST_EPOCH)


def _fields(message: Any) -> dict[str, Any]:
    """A decoded message's own fields, unset ones left out (the envelope is the core's)."""
    return {
        name: value
        for name in message.__struct_fields__
        if name not in _ENVELOPE and (value := getattr(message, name)) is not UNSET
    }


def _detail(error: ProtocolError) -> str:
    return str(error).removeprefix(f"{error.code}: ")


def _refused(error: ProtocolError | Exception, protocol: str) -> Judged:
    """A message the sender's core would not send: its encoder or its state refuses it."""
    if isinstance(error, ProtocolError):
        return Judged({"verdict": "refused"}, error.code, _detail(error))
    return Judged({"verdict": "refused"}, BROKEN_CODE[protocol], str(error))


def _sent(seq: int, captured: int) -> Judged:
    return Judged(_SENT if seq == captured else {"verdict": "sent", "seq": seq})


def _ignored(out: Sequence[object]) -> Judged:
    """Dropped without an answer; the code of the first drop the core blames the sender for."""
    blamed = next((o for o in out if isinstance(o, Ignored) and o.code is not None), None)
    if blamed is None:
        return Judged({"verdict": "ignored"})
    return Judged({"verdict": "ignored"}, blamed.code, blamed.what)


def _taken(pending: list[Any], kind: str) -> Any:
    """The first message of type ``kind`` the core wrote and no step has shown yet, taken."""
    found = next((m for m in pending if m.type == kind), None)
    if found is not None:
        pending.remove(found)
    return found


# -- OVP gateway --------------------------------------------------------------------------------


class _Gateway:
    """An OVP ``GatewayCore`` playing the server's steps and judging the client's."""

    def __init__(self, first: Step) -> None:
        session_id, epoch = _session_of(first)
        self.core = GatewayCore(session_id, epoch=epoch)
        self.pending: list[Any] = []
        """What the core wrote to a link that no step has shown yet (answers, replays)."""
        self.link, out = self.core.open_link(first["t"])
        self._written(out, first["t"])

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if step["from"] == "server":
            return self._send(step, t)
        if "binary" in step:
            out = self.core.receive_binary(self.link, step["binary"], t)
        else:
            out = self.core.receive_text(self.link, step["text"], t)
        self._written(out, t)
        return _judge(out, self.link)

    def _link(self, event: str, t: float) -> Judged:
        if event == "open":
            self.link, out = self.core.open_link(t)
            self._written(out, t)
            return Judged(_DONE) if not out else _judge(out, self.link)
        self._written(self.core.link_lost(self.link, t, answered_close=event == "closed"), t)
        return Judged(_DONE)

    def _send(self, step: Step, t: float) -> Judged:
        core = self.core
        try:
            if "binary" in step:
                frame = ovp.decode_frame(
                    step["binary"], expected_direction=ovp.FrameDirection.SERVER_TO_CLIENT
                )
                self._written(core.send_audio(frame.pcm, t, flags=frame.flags), t)
                return Judged(_SENT)
            message: Any = ovp.decode(step["text"], "server")
            if isinstance(message, ovp.UnknownMessage):  # a later version's: not this core's
                return Judged(_SENT)
            sent = _taken(self.pending, message.type)
            if sent is None:
                self._written(self._emit(message, t), t)
                sent = _taken(self.pending, message.type)
        except (ProtocolError, SessionStateError, TypeError) as exc:
            return _refused(exc, "ovp")
        if sent is None:
            return _refused(SessionStateError(f"the gateway writes no {message.type} now"), "ovp")
        return _sent(sent.seq, message.seq)

    def _emit(self, message: Any, t: float) -> list[GatewayOutput]:
        """``message`` sent through the core's API for its type."""
        core = self.core
        if isinstance(message, ovp.SessionStart):
            return core.start(message.call, message.agent, t)
        if isinstance(message, ovp.SessionEnd):
            code = message.error_code if isinstance(message.error_code, str) else None
            return core.end(message.reason, t, error_code=code)
        if isinstance(message, ovp.ErrorEvent):
            details = None if message.details is UNSET else message.details
            return core.fail(
                message.code, message.message, t, recoverable=message.recoverable, details=details
            )
        return core.send(type(message), _fields(message), t)

    def _written(self, out: list[GatewayOutput], t: float) -> None:
        """Every text handed to a link is written at once (no back-pressure here): kept in
        ``pending`` until a step shows it."""
        texts = [
            o.action.data for o in out if isinstance(o, ToLink) and isinstance(o.action, SendText)
        ]
        self.pending += [ovp.decode(data, "server") for data in texts]
        if any(
            o.link == self.link
            for o in out
            if isinstance(o, ToLink) and isinstance(o.action, SendText)
        ):
            # its queue drained at once: the whole window is free again
            self._written(self.core.drained(self.link, STREAM_WINDOW, t), t)


def _judge(out: list[GatewayOutput], link: int) -> Judged:
    closes = [o.action for o in out if isinstance(o, ToLink) and isinstance(o.action, Close)]
    errors = [
        o.message for o in out if isinstance(o, Sent) and isinstance(o.message, ovp.ErrorEvent)
    ]
    if errors:
        verdict: Verdict = {"verdict": "error", "code": str(errors[0].code)}
        if closes:
            verdict["close"] = int(closes[0].code)
        return Judged(verdict, str(errors[0].code), errors[0].message)
    if any(isinstance(o, Resumed) for o in out):
        texts = [
            o.action.data
            for o in out
            if isinstance(o, ToLink) and o.link == link and isinstance(o.action, SendText)
        ]
        return Judged({"verdict": "replay", "seqs": [_PEEK.decode(data).seq for data in texts]})
    if closes:
        return Judged(
            {"verdict": "close", "close": int(closes[0].code)}, BROKEN_CODE["ovp"], closes[0].reason
        )
    if any(isinstance(o, ClientEvent | AudioIn) for o in out):
        return Judged({"verdict": "accepted"})
    return _ignored(out)  # dropped without an answer


class _SeqPeek(msgspec.Struct):
    seq: int


_PEEK: Final = msgspec.json.Decoder(_SeqPeek)


# -- OVP client ---------------------------------------------------------------------------------


class _Client:
    """An OVP ``ClientCore`` playing the client's steps and judging the gateway's."""

    def __init__(self, first: Step) -> None:
        session_id, epoch = _session_of(first)
        self.core = ClientCore(session_id, epoch=epoch)
        self.core.connected(first["t"])
        self.pending: list[Any] = []
        """Messages the core sent on its own (session.resume on a reconnect), not yet stepped."""

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if step["from"] == "server":
            if "binary" in step:
                return _judge_client(self.core.receive_binary(step["binary"], t))
            return _judge_client(self.core.receive_text(step["text"], t))
        try:
            return self._send(step, t)
        except (ProtocolError, SessionStateError, TypeError) as exc:
            return _refused(exc, "ovp")

    def _link(self, event: str, t: float) -> Judged:
        if event != "open":
            self.core.link_lost(t)
            return Judged(_DONE)
        try:
            self.pending += [o.message for o in self.core.connected(t) if isinstance(o, Sent)]
        except SessionStateError as exc:
            return _refused(exc, "ovp")
        return Judged(_DONE)

    def _send(self, step: Step, t: float) -> Judged:
        if "binary" in step:
            frame = ovp.decode_frame(
                step["binary"], expected_direction=ovp.FrameDirection.CLIENT_TO_SERVER
            )
            self.core.send_audio(frame.pcm, t, flags=frame.flags, rtp_timestamp=frame.rtp_timestamp)
            return Judged(_SENT)
        message: Any = ovp.decode(step["text"], "client")
        if isinstance(message, ovp.SessionResume):
            sent = _taken(self.pending, message.type)
            if sent is None:
                raise SessionStateError("session.resume without a reconnect")
            # What the client says it processed decides what the gateway replays: events the
            # capture shows as sent may have been lost in flight.
            self.core.last_server_seq = message.last_server_seq
            if _fields(sent) != _fields(message):
                return Judged({"verdict": "sent", "fields": msgspec.to_builtins(_fields(sent))})
        else:
            out = self.core.send(type(message), _fields(message), t)
            sent = next((o.message for o in out if isinstance(o, Sent)), None)
            if sent is None:
                raise SessionStateError(f"the client's seq is exhausted: no {message.type}")
        return _sent(sent.seq, message.seq)


def _judge_client(out: list[ClientOutput]) -> Judged:
    closes = [o for o in out if isinstance(o, Close)]
    refused = [(str(o.error.code), _detail(o.error)) for o in out if isinstance(o, Rejected)]
    refused += [
        (str(o.code), o.detail) for o in out if isinstance(o, SessionOver) and o.code and closes
    ]
    if refused:
        verdict: Verdict = {"verdict": "error", "code": refused[0][0]}
        if closes:
            verdict["close"] = int(closes[0].code)
        return Judged(verdict, *refused[0])
    if any(isinstance(o, ServerEvent | AudioIn) for o in out):
        return Judged({"verdict": "accepted"})
    return _ignored(out)


# -- Brisvox agent ------------------------------------------------------------------------------


class _Agent:
    """A Brisvox ``AgentCore`` (one per link) playing the agent's steps and judging the
    server's."""

    def __init__(self, first: Step) -> None:
        self.core = AgentCore(first["t"])

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if step["from"] == "server":
            if "binary" in step:
                return _judge_agent(self.core.receive_binary(step["binary"], t))
            return _judge_agent(self.core.receive_text(step["text"], t))
        if "binary" in step:
            return Judged(_SENT)  # the engine judges it
        try:
            self._send(brisvox.decode(step["text"], "agent"), t)
        except (ProtocolError, ValueError, RuntimeError) as exc:
            return _refused(exc, "brisvox")
        return Judged(_SENT)

    def _link(self, event: str, t: float) -> Judged:
        core = self.core
        if event != "open":
            core.closed()
            return Judged(_DONE)
        last = None if core.start is None else (core.last_seq, core.last_t_ms)
        self.core = AgentCore(t, last_read=last)
        return Judged(_DONE)

    def _send(self, message: Any, t: float) -> None:
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
    refused = [o.error for o in out if isinstance(o, BadMessage)]
    declined = [o.rejected for o in out if isinstance(o, HandshakeFailed) and o.rejected]
    failed = [o.reason for o in out if isinstance(o, HandshakeFailed)]
    if declined:  # a valid session.start the agent will not take: session.reject
        verdict = {
            "verdict": "rejected",
            "code": str(declined[0].code),
            "close": int(closes[0].code),
        }
        return Judged(verdict, why=failed[0], declined=True)
    if refused:
        verdict = {"verdict": "error", "code": str(refused[0].code)}
        if closes:
            verdict["close"] = int(closes[0].code)
        return Judged(verdict, refused[0].code, _detail(refused[0]))
    if closes:
        why = failed[0] if failed else closes[0].reason
        return Judged(
            {"verdict": "close", "close": int(closes[0].code)}, BROKEN_CODE["brisvox"], why
        )
    if any(isinstance(o, (StartReceived, EventReceived, ToolCallStarted)) for o in out):
        return Judged({"verdict": "accepted"})
    return _ignored(out)


# -- Brisvox engine -----------------------------------------------------------------------------

_REPLAY: Final = LinkSettings(reconnect_attempts=2**31, reconnect_window=float("inf"))
"""A judging engine may always reconnect: whether it may resume is the agent's resume flag."""


class _Engine:
    """A Brisvox ``EngineCore`` playing the server's steps and judging the agent's.

    What the core writes by itself (session.start on a connection, events.lost after a
    resumption, the answers to refused messages) waits in ``pending`` until the step for it."""

    def __init__(self, first: Step, settings: LinkSettings | None = None) -> None:
        start: Any = brisvox.decode(first["text"], "server")
        if not isinstance(start, brisvox.SessionStart):
            raise ValueError("a Brisvox engine case starts with the engine's session.start")
        self.core = EngineCore(
            session_id=start.session_id,
            agent=start.agent,
            now=first["t"],
            capabilities=start.capabilities,
            call=None if start.call is UNSET else start.call,
            settings=settings,
            versions=tuple(start.versions),
        )
        self.pending: list[Any] = []
        self.commands: dict[str, CommandReceived] = {}
        """The agent's commands with an id, by id, for their results."""
        self.usage: brisvox.SessionUsage | None = None
        self._wrote(self.core.connected(first["t"]), first["t"])

    def _wrote(self, out: list[EngineOutput], t: float) -> list[EngineOutput]:
        frames = [o for o in out if isinstance(o, SendText)]
        frames += [f for o in out if isinstance(o, CloseAfter) for f in o.final]
        for frame in frames:
            self.pending.append(brisvox.decode(self.core.stamp(frame, t).data, "server"))
        for o in out:
            if isinstance(o, CommandReceived) and o.command.id is not UNSET:
                self.commands[o.command.id] = o
        return out

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            try:
                if step["link"] == "open":
                    self._wrote(self.core.connected(t), t)
                else:
                    self._wrote(self.core.link_lost(t, f"link {step['link']}"), t)
            except RuntimeError as exc:  # no transition: the engine would not reconnect now
                return _refused(RuntimeError(f"the engine would not reconnect: {exc}"), "brisvox")
            return Judged(_DONE)
        if step["from"] == "agent":
            if "binary" in step:
                return _judge_engine(self._wrote(self.core.receive_binary(step["binary"], t), t))
            return _judge_engine(self._wrote(self.core.receive_text(step["text"], t), t))
        if "binary" in step:
            return _refused(ValueError("the engine writes no binary frames"), "brisvox")
        try:
            message: Any = brisvox.decode(step["text"], "server")
            if isinstance(message, brisvox.UnknownMessage):  # a later version's: not this core's
                return Judged(_SENT)
            if isinstance(message, brisvox.SessionUsage):  # end_call writes it with the end
                self.usage = message
                return Judged(_SENT)
            sent = _taken(self.pending, message.type)
            if sent is None:
                self._wrote(self._send(message, t), t)
                sent = _taken(self.pending, message.type)
        except (ProtocolError, ValueError) as exc:
            return _refused(exc, "brisvox")
        if sent is None and isinstance(message, brisvox.ToolCancel):
            return Judged(_SENT)  # a cancel may cross its call's result: the call is done
        if sent is None:
            why = f"the engine writes no {message.type} here (the link is {self.core.state.value})"
            return _refused(ValueError(why), "brisvox")
        return _sent(sent.seq, message.seq)

    def _send(self, message: Any, t: float) -> list[EngineOutput]:
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
            refused = [o.error for o in out if isinstance(o, ToolFinished)]
            if refused:
                raise ValueError(f"the engine calls no tool {message.name!r} now: {refused[0]}")
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
                _taken(self.pending, brisvox.SessionUsage.type)
                return []
            return out
        if isinstance(message, brisvox.EventsLost):
            return [core.events_lost(message.count)]
        return core.send_event(message, t)


def _judge_engine(out: list[EngineOutput]) -> Judged:
    closes = [o for o in out if isinstance(o, Close)]
    refused = [o.error for o in out if isinstance(o, BadMessage)]
    failed = [o.reason for o in out if isinstance(o, HandshakeFailed)]
    if refused:
        return Judged(
            {"verdict": "error", "code": str(refused[0].code)}, refused[0].code, _detail(refused[0])
        )
    if closes:
        why = failed[0] if failed else closes[0].reason
        return Judged(
            {"verdict": "close", "close": int(closes[0].code)}, BROKEN_CODE["brisvox"], why
        )
    accepted = [o for o in out if isinstance(o, AgentAccepted)]
    if accepted or any(isinstance(o, CommandReceived) for o in out):
        problems = accepted[0].problems if accepted else ()
        if problems:  # a refused tool, an unknown event type: left out, the call goes on
            code, _, text = problems[0].partition(": ")
            return Judged({"verdict": "accepted"}, code, text)
        return Judged({"verdict": "accepted"})
    return _ignored(out)


PLAYERS: Final[dict[tuple[str, str], Callable[[Step], Player]]] = {
    ("ovp", "gateway"): _Gateway,
    ("ovp", "client"): _Client,
    ("brisvox", "agent"): _Agent,
    ("brisvox", "engine"): lambda first: _Engine(first, _REPLAY),
}
"""A player for each (protocol, side), made from the first step it can start from (it raises
``ValueError`` or ``ProtocolError`` for a step it cannot start from), as ``voxwire validate``
drives it."""

_CASE_PLAYERS: Final[dict[tuple[str, str], Callable[[Step], Player]]] = {
    **PLAYERS,
    ("brisvox", "engine"): _Engine,  # the document's reconnect bounds
}
