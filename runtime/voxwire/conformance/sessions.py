"""voxwire's answer to a session case: the steps played through the side's sans-I/O core.

The side under test's own messages are sent through its core's API (the core stamps them; the
verdict is ``sent``, or ``refused`` when the core would not send such a message now), the peer's
are received by the core, link events are told to it, the application's calls are made and time
is let pass (a ``wait`` fires what is due), and what the core returns becomes the step's verdict
(docs/conformance.md, "Sessions").

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
from voxwire.brisvox.messages import SessionEndReason
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.capture import MAX_SECONDS
from voxwire.errors import ProtocolError
from voxwire.ovp._session import AudioIn, Sent, SessionOver, SessionStateError
from voxwire.ovp.client_core import ClientCore, ClientOutput, Dropped, Rejected, ServerEvent
from voxwire.ovp.gateway_core import (
    ClientEvent,
    GatewayCore,
    GatewayOutput,
    Resumed,
    ToLink,
)
from voxwire.sansio import Close, Ignored, SendText

__all__ = ["BROKEN_CODE", "LINK_STEPS", "PLAYERS", "Judged", "Player", "Step", "Verdict", "play"]

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
LINK_STEPS: Final = ("lost", "closed", "open", "failed")
"""A case's link events: a capture's (:data:`voxwire.capture.LINK_EVENTS`), and ``failed``, a
connection attempt that never opened (the sides that connect out: the client, the engine)."""
_STAND_IN: Final = "session"
"""The session id of a case that names none (no message: nothing is stamped or compared)."""


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
    a case it cannot start (a Brisvox engine case's first message from the engine is its
    session.start).

    A case whose first step is a message begins on the side's first connection, open at that
    step's time; any other first step comes before it (a ``link: open`` step opens it). The
    first message from the server names the session (else the first message, else none)."""
    make = _CASE_PLAYERS.get((protocol, side))
    if make is None:
        raise ValueError(f"voxwire plays no {protocol} side {side!r} in session cases")
    if not steps:
        raise ValueError(f"a {protocol} {side} case has no steps")
    messages = [s for s in steps if "from" in s]
    named = next((s for s in messages if s["from"] == "server"), None)
    if named is None and messages:
        named = messages[0]
    player = make(named, steps[0]["t"] if "from" in steps[0] else None)
    return [player.step(step).verdict for step in steps]


def _session_of(first: Step | None) -> tuple[str, float]:
    """The session id of an OVP message, and the epoch its ``ts`` implies."""
    if first is None:
        return _STAND_IN, 0.0
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

    def __init__(self, named: Step | None, opened: float | None) -> None:
        session_id, epoch = _session_of(named)
        self.core = GatewayCore(session_id, epoch=epoch)
        self.pending: list[Any] = []
        """What the core wrote to a link that no step has shown yet (answers, replays)."""
        self.link = -1
        if opened is not None:
            self.link, out = self.core.open_link(opened)
            self._written(out, opened)

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if "from" not in step:
            if "wait" not in step:
                raise ValueError(f"the gateway plays no {_form(step)}")
            out = self.core.tick(t)
            self._written(out, t)
            if not any(isinstance(o, ToLink) for o in out):
                return Judged(_DONE)
            return _judge(out, self.link)
        if step["from"] == "server":
            return self._send(step, t)
        if "binary" in step:
            out = self.core.receive_binary(self.link, step["binary"], t)
        else:
            out = self.core.receive_text(self.link, step["text"], t)
        # A replay longer than the stream window goes on as the link drains: all of it counts.
        return _judge(out + self._written(out, t), self.link)

    def _link(self, event: str, t: float) -> Judged:
        if event == "failed":
            raise ValueError("the gateway opens no connection: none of its attempts fails")
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
                out = self._emit(message, t)
                self._written(out, t)
                sent = _taken(self.pending, message.type)
                if sent is None:  # no link to write it to: kept for the resume
                    kept = (o.message for o in out if isinstance(o, Sent))
                    sent = next((m for m in kept if m.type == message.type), None)
        except (ProtocolError, SessionStateError, TypeError, ValueError) as exc:
            # ValueError: an error whose code only the gateway's own rules raise
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

    def _written(self, out: list[GatewayOutput], t: float) -> list[GatewayOutput]:
        """Every text handed to a link is written at once (no back-pressure here): kept in
        ``pending`` until a step shows it. Returns what the core streamed as the link drained."""
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
            streamed = self.core.drained(self.link, ovp.STREAM_WINDOW_EVENTS, t)
            return streamed + self._written(streamed, t)
        return []


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

    def __init__(self, named: Step | None, opened: float | None) -> None:
        session_id, epoch = _session_of(named)
        self.core = ClientCore(session_id, epoch=epoch)
        if opened is not None:
            self.core.connected(opened)
        self.pending: list[Any] = []
        """Messages the core sent on its own (session.resume on a reconnect), not yet stepped."""
        self.resume_by: float | None = None
        """When the adapter gives up reconnecting a dropped link (the core's ``Dropped``)."""

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if "from" not in step:
            return self._app(step, t)
        if step["from"] == "server":
            if "binary" in step:
                return _judge_client(self.core.receive_binary(step["binary"], t))
            return _judge_client(self.core.receive_text(step["text"], t))
        try:
            return self._send(step, t)
        except (ProtocolError, SessionStateError, TypeError) as exc:
            return _refused(exc, "ovp")

    def _link(self, event: str, t: float) -> Judged:
        if event == "failed":  # the adapter tries again until its resume_by
            return Judged(_DONE)
        if event != "open" or self.core.linked:
            # A new link while this one is up: the client saw it drop first (a half-open link,
            # whose drop a capture the gateway recorded does not show).
            out = self.core.link_lost(t)
            self.resume_by = next((o.resume_by for o in out if isinstance(o, Dropped)), None)
            if event != "open":
                return Judged(_DONE)
        try:
            self.pending += [o.message for o in self.core.connected(t) if isinstance(o, Sent)]
        except SessionStateError as exc:
            return _refused(exc, "ovp")
        self.resume_by = None
        return Judged(_DONE)

    def _app(self, step: Step, t: float) -> Judged:
        """A call of the application, time passing, the client's seq skipping ahead."""
        core, linked = self.core, self.core.linked
        if step.get("call") == "hang_up":
            return _after_client(core.close(), linked)
        if "wait" in step:  # the adapter's one timer: no reconnect resumed the session in time
            due = self.resume_by is not None and t >= self.resume_by
            return _after_client(core.give_up("no reconnect in time") if due else [], linked)
        if "next_seq" in step:
            core.skip_seq(step["next_seq"])
            return Judged(_DONE)
        raise ValueError(f"the client plays no {_form(step)}")

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
            if sent is None:  # its seq would pass the bound: the client closes instead
                shut = next(o for o in out if isinstance(o, Close))
                verdict = {"verdict": "close", "close": int(shut.code)}
                return Judged(verdict, BROKEN_CODE["ovp"], shut.reason)
        return _sent(sent.seq, message.seq)


def _after_client(out: list[ClientOutput], linked: bool) -> Judged:
    """What the client did on a call or a timer: closed its link (when one was up), or ended
    the session with a code it reports."""
    shut = next((o for o in out if isinstance(o, Close)), None) if linked else None
    over = next((o for o in out if isinstance(o, SessionOver) and o.code), None)
    if over is not None:
        verdict: Verdict = {"verdict": "error", "code": str(over.code)}
        if shut is not None:
            verdict["close"] = int(shut.code)
        return Judged(verdict, str(over.code), over.detail)
    if shut is not None:
        return Judged({"verdict": "close", "close": int(shut.code)})
    return Judged(_DONE)


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

    def __init__(self, named: Step | None, opened: float | None) -> None:
        # The connection is the core: one before a case's first ``open`` makes way for it.
        self.core = AgentCore(0.0 if opened is None else opened)

    def step(self, step: Step) -> Judged:
        t = step["t"]
        if "link" in step:
            return self._link(step["link"], t)
        if "from" not in step:
            if "wait" not in step:
                raise ValueError(f"the agent plays no {_form(step)}")
            out = self.core.tick(t)
            return _judge_agent(out) if out else Judged(_DONE)
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
        if event == "failed":
            raise ValueError("the agent opens no connection: none of its attempts fails")
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

    def __init__(
        self, named: Step | None, opened: float | None, settings: LinkSettings | None = None
    ) -> None:
        start: Any = None if named is None else brisvox.decode(named["text"], "server")
        if named is not None and not isinstance(start, brisvox.SessionStart):
            raise ValueError("a Brisvox engine case's first message is the engine's session.start")
        now = 0.0 if opened is None else opened
        if start is None:  # a case that never connects names no call
            self.core = EngineCore(
                session_id=_STAND_IN, agent=_STAND_IN, now=now, settings=settings
            )
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

    def step(self, step: Step) -> Judged:
        t = step["t"]
        core = self.core
        if "link" in step:
            try:
                if step["link"] == "open":
                    self._wrote(core.connected(t), t)
                elif step["link"] == "failed":
                    self._wrote(core.connect_failed(t, "the connection failed"), t)
                else:
                    self._wrote(core.link_lost(t, f"link {step['link']}"), t)
            except RuntimeError as exc:  # no transition: the engine would not reconnect now
                return _refused(RuntimeError(f"the engine would not reconnect: {exc}"), "brisvox")
            return Judged(_DONE)
        if step.get("call") == "end_call":
            return _after_engine(self._wrote(core.end_call(_CALL_ENDED, t, self.usage), t))
        if "wait" in step:
            return _after_engine(self._wrote(core.tick(t), t))
        if "from" not in step:
            raise ValueError(f"the engine plays no {_form(step)}")
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


_CALL_ENDED: Final = SessionEndReason.CALL_ENDED
"""The reason of an ``end_call`` step (the engine writes it only where a session.end step of the
case shows it: elsewhere the call ends with no link to write on)."""


def _after_engine(out: list[EngineOutput]) -> Judged:
    """What the engine did on a call or a timer: closed its link, or nothing on the wire."""
    shut = [
        o if isinstance(o, Close) else o.close for o in out if isinstance(o, Close | CloseAfter)
    ]
    if shut:
        return Judged({"verdict": "close", "close": int(shut[0].code)})
    return Judged(_DONE)


def _form(step: Step) -> str:
    """A step's form, for a side that does not play it."""
    kind = next((k for k in ("call", "wait", "next_seq") if k in step), None)
    return f"step {step!r:.80}" if kind is None else f"{kind} {step[kind]!r}"


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
    ("ovp", "gateway"): lambda first: _Gateway(first, first["t"]),
    ("ovp", "client"): lambda first: _Client(first, first["t"]),
    ("brisvox", "agent"): lambda first: _Agent(first, first["t"]),
    ("brisvox", "engine"): lambda first: _Engine(first, first["t"], _REPLAY),
}
"""A player for each (protocol, side), made from the first step it can start from, on a
connection open at its time (it raises ``ValueError`` or ``ProtocolError`` for a step it cannot
start from), as ``voxwire validate`` drives it."""

_CASE_PLAYERS: Final[dict[tuple[str, str], Callable[[Step | None, float | None], Player]]] = {
    ("ovp", "gateway"): _Gateway,
    ("ovp", "client"): _Client,
    ("brisvox", "agent"): _Agent,
    ("brisvox", "engine"): _Engine,  # the document's reconnect bounds
}
"""A player made from the message that names the session (``None``: none does) and the time
its first connection opened (``None``: the case opens it)."""
