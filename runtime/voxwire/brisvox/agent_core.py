"""The sans-I/O core of the Brisvox agent side: :class:`AgentCore`, one per connection.

A core owns the protocol's rules and nothing else: no socket, task, clock or logging. Every input
is a method call that carries ``now`` (seconds on the adapter's clock) and returns what happened,
in order: actions for the adapter (:class:`~voxwire.sansio.SendText`,
:class:`~voxwire.sansio.Close`) and events (the dataclasses below).

```text
core = AgentCore(now)                        # one per connection
out = core.receive_text(data, now)           # [StartReceived(start, version)]
out = core.accept(accept, now)               # [SendText(session.accept)]
```

The link's life is the spec's table :data:`~voxwire.brisvox.machines.AGENT_MACHINE`: for each
``AgentState`` the ``AgentInput`` it takes, the state that follows and the ``AgentAction`` run on
the way, through :func:`voxwire.machine.step`; an input a state does not list is refused there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from voxwire._decode_errors import UnknownMessage, field_of_refused
from voxwire._rules import JSON_SAFE_INTEGER
from voxwire.brisvox.codec import decoder, encode
from voxwire.brisvox.constants import SDK_HANDSHAKE_TIMEOUT_MS, SUPPORTED_VERSIONS, CloseCode
from voxwire.brisvox.errors import ErrorCode, ProtocolError
from voxwire.brisvox.machines import AGENT_MACHINE, AgentAction, AgentInput, AgentState
from voxwire.brisvox.messages import (
    EVENT_TYPES,
    Command,
    CommandResult,
    ErrorEvent,
    Event,
    EventsLost,
    ServerMessage,
    SessionAccept,
    SessionEnd,
    SessionReject,
    SessionStart,
    SessionUsage,
    ToolCall,
    ToolCancel,
    ToolCancelReason,
    ToolKind,
    ToolResult,
)
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed, refusal_text
from voxwire.machine import step
from voxwire.sansio import Close, Ignored, SendText

__all__ = [
    "AgentCore",
    "AgentOutput",
    "AgentState",
    "CommandAnswered",
    "CommandTimedOut",
    "Delivered",
    "EventReceived",
    "ResumeRegistry",
    "StartReceived",
    "ToolCallCancelled",
    "ToolCallStarted",
]

_DECODE_SERVER: Final = decoder("server")
"""Decodes what the server sends (built once)."""


@dataclass(frozen=True, slots=True)
class StartReceived:
    """A valid ``session.start`` with a common version: answer with ``accept`` or ``reject``."""

    start: SessionStart
    version: int


Delivered: TypeAlias = Event | ErrorEvent | EventsLost | SessionUsage | SessionEnd
"""The server messages an agent's application sees (the rest the core handles itself)."""


class EventReceived(msgspec.Struct, frozen=True):
    """A server message the application sees (events, ``error``, ``events.lost``, the end).

    A frozen ``msgspec.Struct`` (not a dataclass as the other outputs): one is built for every
    event, in a fifth of a dataclass's time."""

    message: Delivered


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The server asks for a tool call: run it and answer with ``send_tool_result``."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallCancelled:
    """The server stopped waiting. A read_only call must stop (its result would be dropped); a
    side_effect call is told and still finishes."""

    call: ToolCall
    reason: ToolCancelReason
    message: ToolCancel | None = field(default=None, compare=False)
    """The server's tool.cancel."""


@dataclass(frozen=True, slots=True)
class CommandAnswered:
    """The ``command.result`` of a command this side sent."""

    result: CommandResult


@dataclass(frozen=True, slots=True)
class CommandTimedOut:
    """No ``command.result`` in time: the outcome is unknown (never retried by the core)."""

    command_id: str
    command_type: str
    timeout: float


AgentOutput: TypeAlias = (
    SendText
    | Close
    | StartReceived
    | HandshakeFailed
    | EventReceived
    | ToolCallStarted
    | ToolCallCancelled
    | CommandAnswered
    | CommandTimedOut
    | Ignored
    | BadMessage
)
"""What :class:`AgentCore` returns."""


@dataclass(frozen=True, slots=True)
class _Step:
    """What a transition's actions need: the answer to write, the reason of a failure."""

    answer: bytes = b""
    reason: str = ""
    rejected: SessionReject | None = None


class AgentCore:
    """The agent side of one connection (one link of a call).

    Args:
        now: When the connection opened; the handshake budget counts from it.
        versions: The protocol versions this agent speaks.
        handshake_timeout: Seconds to get ``session.start`` and answer it.
        last_read: The ``(seq, t_ms)`` of the last server message read on the call's previous
            link, for a connection that takes a call up again: its ``session.start`` must then
            carry ``resume`` and continue from there.

    The server's envelope is checked on every message (seq one more than the last one's on the
    link, t_ms never back, the first ``session.start`` at seq 1 and t_ms 0, a resumption past
    ``resume.previous_seq``): a broken rule is reported as :class:`BadMessage` and the message
    is still read, as the SDK reads it.
    """

    def __init__(
        self,
        now: float,
        *,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
        handshake_timeout: float = SDK_HANDSHAKE_TIMEOUT_MS / 1000,
        last_read: tuple[int, int] | None = None,
    ) -> None:
        if not versions:
            raise ValueError("an agent speaks at least one protocol version")
        self.state = AgentState.AWAITING_START
        self.start: SessionStart | None = None
        """The ``session.start`` of this link, once received."""
        self.version = 0
        """The version picked (the highest common one), once known."""
        self.ended = False
        """Whether the server's ``session.end`` arrived (the call is over, never parked)."""
        self.last_seq = 0
        """The ``seq`` of the last server message read on this link."""
        self.last_t_ms = 0
        """The ``t_ms`` of the last server message read on this link."""
        self._last_read = last_read
        self._versions = versions
        self._deadline: float | None = now + handshake_timeout
        self._running: dict[int, ToolCall] = {}
        self._pending: dict[str, tuple[float, str, float]] = {}

    # inputs ---------------------------------------------------------------------------------------

    def receive_text(self, data: bytes | str, now: float) -> list[AgentOutput]:
        """A text message arrived."""
        state = self.state  # read once, the open link's case first: a message per event
        if state is AgentState.OPEN or state is AgentState.DECIDING:
            try:
                message = _DECODE_SERVER(data)
            except ProtocolError as exc:
                return self._refused(exc, data)
            if isinstance(message, UnknownMessage):
                envelope = message.data
                broken = self._envelope(message.type, envelope.get("seq"), envelope.get("t_ms"))
                return [*broken, Ignored(f"unknown server message type {message.type!r}")]
            seq, t_ms = message.seq, message.t_ms
            if seq == self.last_seq + 1 and t_ms >= self.last_t_ms:  # the common case
                self.last_seq, self.last_t_ms = seq, t_ms
                broken = []
            else:
                broken = self._envelope(message.type, seq, t_ms)
            if state is AgentState.DECIDING:
                early = f"{message.type} before the handshake was answered"
                return [*broken, Ignored(early, ErrorCode.BAD_MESSAGE)]
            return [*broken, *self._dispatch(message)] if broken else self._dispatch(message)
        if state is AgentState.AWAITING_START:
            return self._first(data)
        return [Ignored("a message after the link was closed")]

    def receive_binary(self, data: bytes, now: float) -> list[AgentOutput]:
        """A binary frame arrived: not part of the protocol, ignored (logged); as the first
        message it fails the handshake."""
        if self.state is AgentState.AWAITING_START:
            return self._step(
                AgentInput.BAD_START, _Step(reason="expected session.start, got a binary frame")
            )
        return [
            Ignored(
                f"a binary frame of {len(data)} bytes (not part of the protocol)",
                ErrorCode.BAD_MESSAGE,
            )
        ]

    def accept(self, accept: SessionAccept, now: float) -> list[AgentOutput]:
        """Answer the ``session.start`` with ``accept`` (its version must be the one picked).

        Raises ProtocolError when ``accept`` breaks a rule (nothing is sent then).
        """
        start = self._deciding()
        if accept.version != self.version:
            raise ValueError(f"the accept's version is {accept.version}, picked {self.version}")
        if start.resume not in (UNSET, None) and not accept.resume:
            raise ValueError("the accept of a resumption must carry resume: true")
        return self._step(AgentInput.ACCEPT, _Step(answer=encode(accept)))

    def reject(self, code: str, message: str | None, now: float) -> list[AgentOutput]:
        """Answer the ``session.start`` with ``session.reject`` and close.

        Raises ProtocolError when the reject breaks a rule (nothing is sent then).
        """
        self._deciding()
        return self._step(AgentInput.REJECT, self._rejection(code, message))

    def send_command(self, command: Command, now: float, timeout: float) -> list[AgentOutput]:
        """Send ``command`` (it must carry an id) and wait ``timeout`` seconds for its result."""
        if self.state is not AgentState.OPEN:
            raise RuntimeError(f"commands need an open link, this one is {self.state.value}")
        if command.id is UNSET:
            raise ValueError(f"a {command.type} sent by the core carries an id")
        if command.id in self._pending:
            raise ValueError(f"command id {command.id!r} is already waiting for its result")
        data = encode(command)
        self._pending[command.id] = (now + timeout, command.type, timeout)
        return [SendText(data)]

    def forget_command(self, command_id: str) -> None:
        """Stop waiting for a command's result (its sender gave up or the write failed)."""
        self._pending.pop(command_id, None)

    def send_tool_result(self, result: ToolResult, now: float) -> list[AgentOutput]:
        """Answer a tool call with a ``tool.result`` built already (see ``answer_tool``)."""
        return self.answer_tool(result.id, now, result=result.result, error=result.error)

    def answer_tool(
        self, call_id: int, now: float, *, result: Any = UNSET, error: str | UnsetType = UNSET
    ) -> list[AgentOutput]:
        """Answer a tool call with its result or its error. A result the server stopped
        waiting for is dropped; one over the message limit or not JSON (refused as the
        ``tool.result`` is built, or as it is encoded) becomes an error result, never a dropped
        link or a lost answer."""
        call = self._running.pop(call_id, None)
        if call is None or self.state is not AgentState.OPEN:
            return [Ignored(f"tool.result {call_id} for a call no longer waiting")]
        try:
            return [SendText(encode(ToolResult(id=call_id, result=result, error=error)))]
        except ProtocolError as exc:
            text = (
                "tool result is too large"
                if exc.code is ErrorCode.TOO_LARGE
                else "tool result is not valid JSON"
            )
            return [SendText(encode(ToolResult(id=call_id, error=text))), BadMessage(exc, False)]

    def closed(self) -> list[AgentOutput]:
        """The connection is gone; pending commands are the adapter's to fail."""
        return self._step(AgentInput.CLOSED, _Step())

    def tick(self, now: float) -> list[AgentOutput]:
        """Fire the deadlines that passed: the handshake budget, command timeouts."""
        out: list[AgentOutput] = []
        if self._deadline is not None and now >= self._deadline:
            if self.state is AgentState.AWAITING_START:
                out += self._step(AgentInput.NO_START, _Step(reason="no session.start"))
            elif self.state is AgentState.DECIDING:
                rejection = self._rejection(ErrorCode.UNAVAILABLE, "handshake budget exceeded")
                out += self._step(AgentInput.UNDECIDED, rejection)
        for command_id, (deadline, kind, timeout) in list(self._pending.items()):
            if now >= deadline:
                del self._pending[command_id]
                out.append(CommandTimedOut(command_id, kind, timeout))
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must run next, or None."""
        deadlines = [d for d, _, _ in self._pending.values()]
        if self._deadline is not None:
            deadlines.append(self._deadline)
        return min(deadlines, default=None)

    # the transition table -------------------------------------------------------------------------

    def _step(self, event: AgentInput, effect: _Step) -> list[AgentOutput]:
        transition = step(AGENT_MACHINE, self.state, event)
        self.state = transition.target
        out: list[AgentOutput] = []
        for action in transition.actions:
            out += _ACTIONS[action](self, effect)
        return out

    def _offer(self, step: _Step) -> list[AgentOutput]:
        assert self.start is not None
        return [StartReceived(self.start, self.version)]

    def _disarm(self, step: _Step) -> list[AgentOutput]:
        self._deadline = None
        return []

    def _send_answer(self, step: _Step) -> list[AgentOutput]:
        return [SendText(step.answer)]

    def _fail(self, step: _Step) -> list[AgentOutput]:
        return [HandshakeFailed(step.reason, rejected=step.rejected)]

    def _forget(self, step: _Step) -> list[AgentOutput]:
        self._running.clear()
        self._pending.clear()
        return []

    # internals ------------------------------------------------------------------------------------

    def _first(self, data: bytes | str) -> list[AgentOutput]:
        try:
            start = _DECODE_SERVER(data)
        except ProtocolError as exc:
            return self._step(
                AgentInput.BAD_START, _Step(reason=f"expected session.start: {refusal_text(exc)}")
            )
        if not isinstance(start, SessionStart):
            return self._step(
                AgentInput.BAD_START, _Step(reason=f"expected session.start, got {start.type}")
            )
        self.start = start
        broken = self._start_envelope(start)
        self.last_seq, self.last_t_ms = start.seq, start.t_ms
        common = set(start.versions) & set(self._versions)
        if not common:
            rejection = self._rejection(
                ErrorCode.UNSUPPORTED_VERSION, f"this agent speaks versions {list(self._versions)}"
            )
            return [*broken, *self._step(AgentInput.NO_COMMON_VERSION, rejection)]
        self.version = max(common)
        return [*broken, *self._step(AgentInput.START, _Step())]

    def _start_envelope(self, start: SessionStart) -> list[AgentOutput]:
        """The envelope rules of a ``session.start``: a fresh call's is seq 1 at t_ms 0; a
        resumption's seq is past ``resume.previous_seq``, which is not below what the previous
        link read, and its t_ms does not go back."""
        resume, last = start.resume, self._last_read
        problems: list[tuple[str, str]] = []
        if resume is UNSET or resume is None:
            if last is not None:
                problems.append(("$.resume", "session.start again, without resume"))
            if start.seq != 1:
                problems.append(("$.seq", f"the call's session.start has seq {start.seq}, not 1"))
            if start.t_ms != 0:
                problems.append(
                    ("$.t_ms", f"the call's session.start has t_ms {start.t_ms}, not 0")
                )
        else:
            previous = resume.previous_seq
            if last is not None and previous < last[0]:
                problems.append(
                    (
                        "$.resume.previous_seq",
                        f"resume.previous_seq {previous} is below {last[0]}, already read",
                    )
                )
            if start.seq <= previous:
                problems.append(
                    ("$.seq", f"seq {start.seq} is not past resume.previous_seq {previous}")
                )
            if last is not None and start.t_ms < last[1]:
                problems.append(
                    ("$.t_ms", f"t_ms {start.t_ms} after {last[1]}: it never goes back")
                )
        return [_envelope_error(start.type, path, text) for path, text in problems]

    def _envelope(self, kind: str, seq: Any, t_ms: Any) -> list[AgentOutput]:
        """Check a server message's envelope against the last one read on this link, and take
        it as the last: seq one more (seq order is write order, and a link loses nothing),
        t_ms never back. A broken rule is reported; the message is still read."""
        out: list[AgentOutput] = []
        if type(seq) is int:
            if seq != self.last_seq + 1:
                text = f"seq {seq} after {self.last_seq}: +1 a message on a link"
                out.append(_envelope_error(kind, "$.seq", text))
            self.last_seq = seq
        if type(t_ms) is int:
            if t_ms < self.last_t_ms:
                text = f"t_ms {t_ms} after {self.last_t_ms}: it never goes back"
                out.append(_envelope_error(kind, "$.t_ms", text))
            self.last_t_ms = t_ms
        return out

    def _deciding(self) -> SessionStart:
        if self.state is not AgentState.DECIDING or self.start is None:
            raise RuntimeError(f"no session.start to answer: the link is {self.state.value}")
        return self.start

    @staticmethod
    def _rejection(code: str, message: str | None) -> _Step:
        reject = SessionReject(code=code, message=message or UNSET)
        return _Step(answer=encode(reject), reason=f"rejected: {code}", rejected=reject)

    def _refused(self, error: ProtocolError, data: bytes | str) -> list[AgentOutput]:
        """A server message that breaks the protocol. A tool.call whose id is valid is answered
        with an error result at once (the server would wait out its timeout otherwise); the
        rest is reported, since the agent has no error message to send. A refused message
        still took its seq and t_ms: the next one follows it."""
        seq, t_ms = field_of_refused(data, "seq"), field_of_refused(data, "t_ms")
        if type(seq) is int:
            self.last_seq = seq
        if type(t_ms) is int:
            self.last_t_ms = t_ms
        if error.message_type == ToolCall.type:
            request_id = field_of_refused(data, "id")
            if type(request_id) is int and 0 <= request_id <= JSON_SAFE_INTEGER:
                if request_id in self._running:
                    return [BadMessage(error, answered=False)]
                reply = ToolResult(id=request_id, error=refusal_text(error))
                return [SendText(encode(reply)), BadMessage(error, answered=True)]
        return [BadMessage(error, answered=False)]

    def _dispatch(self, message: ServerMessage) -> list[AgentOutput]:
        if message.type in EVENT_TYPES:  # the common case first
            return [EventReceived(message)]  # type: ignore[arg-type]  # an Event, by its type
        if isinstance(message, ToolCall):
            if message.id in self._running:
                return [Ignored(f"tool.call {message.id} repeats a running call's id")]
            self._running[message.id] = message
            return [ToolCallStarted(message)]
        if isinstance(message, ToolCancel):
            call = self._running.get(message.id)
            if call is None:
                return [Ignored(f"tool.cancel {message.id} for no running call")]
            if call.kind is ToolKind.READ_ONLY:
                del self._running[message.id]
            return [ToolCallCancelled(call, message.reason, message)]
        if isinstance(message, CommandResult):
            if self._pending.pop(message.id, None) is None:
                return [Ignored(f"command.result {message.id!r} for no waiting command")]
            return [CommandAnswered(message)]
        if isinstance(message, SessionStart):
            return [Ignored("a second session.start", ErrorCode.BAD_MESSAGE)]
        if isinstance(message, SessionEnd):
            self.ended = True
        return [EventReceived(message)]


def _envelope_error(kind: str, path: str, text: str) -> BadMessage:
    error = ProtocolError(ErrorCode.BAD_MESSAGE, text, path=path, message_type=kind)
    return BadMessage(error, answered=False)


def _close(code: int, reason: str) -> Callable[[AgentCore, _Step], list[AgentOutput]]:
    def close(core: AgentCore, step: _Step) -> list[AgentOutput]:
        return [Close(code, reason)]

    return close


_ACTIONS: Final[Mapping[AgentAction, Callable[[AgentCore, _Step], list[AgentOutput]]]] = {
    AgentAction.OFFER: AgentCore._offer,
    AgentAction.DISARM: AgentCore._disarm,
    AgentAction.SEND_ANSWER: AgentCore._send_answer,
    AgentAction.CLOSE_NORMAL: _close(CloseCode.NORMAL, ""),
    AgentAction.CLOSE_PROTOCOL: _close(CloseCode.PROTOCOL_ERROR, "expected session.start"),
    AgentAction.CLOSE_POLICY: _close(CloseCode.POLICY, "no session.start"),
    AgentAction.FAIL: AgentCore._fail,
    AgentAction.FORGET: AgentCore._forget,
}


class ResumeRegistry:
    """The agent's calls that may be taken up again (``session.start`` with ``resume``).

    A call is live while a link carries it, parked for ``window`` seconds after a loss, and
    forgotten at its end or when the window runs out.
    """

    def __init__(self, window: float) -> None:
        if window <= 0:
            raise ValueError(f"the resume window must be positive, not {window}")
        self.window = window
        self._calls: dict[str, float | None] = {}

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._calls

    def live(self, session_id: str) -> None:
        """A link carries the call (it was accepted or resumed)."""
        self._calls[session_id] = None

    def lost(self, session_id: str, now: float) -> None:
        """The call's link was lost: park it until ``now + window``."""
        if session_id in self._calls:
            self._calls[session_id] = now + self.window

    def may_resume(self, session_id: str, now: float) -> bool:
        """Whether a resumption may take the call up: known, and parked within its window or
        still live (a half-open link it takes over). Call :meth:`live` once it did."""
        if session_id not in self._calls:
            return False
        deadline = self._calls[session_id]
        return deadline is None or now < deadline

    def parked(self, session_id: str) -> bool:
        """Whether the call waits for a resumption."""
        return self._calls.get(session_id) is not None

    def forget(self, session_id: str) -> None:
        """The call is over."""
        self._calls.pop(session_id, None)

    def expired(self, now: float) -> list[str]:
        """The parked calls whose window ran out; they are forgotten."""
        gone = [sid for sid, d in self._calls.items() if d is not None and now >= d]
        for sid in gone:
            del self._calls[sid]
        return gone

    def next_deadline(self) -> float | None:
        """When the next parked call expires, or None."""
        parked = [d for d in self._calls.values() if d is not None]
        return min(parked) if parked else None
