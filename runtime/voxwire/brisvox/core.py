"""Sans-I/O state machines of the Brisvox link: :class:`AgentCore` and :class:`EngineCore`.

A core owns the protocol's rules and nothing else: no socket, task, clock or logging. Every input
is a method call that carries ``now`` (seconds on the adapter's clock) and returns what happened,
in order: actions for the adapter (:class:`~voxwire.sansio.SendText`,
:class:`~voxwire.sansio.Close`, :class:`SendPing`) and events (the dataclasses below).
``tick(now)`` fires the deadlines that passed; ``next_deadline()`` says when to call it next.

```text
core = AgentCore(now)                        # one per connection (agent side)
out = core.receive_text(data, now)           # [StartReceived(start, version)]
out = core.accept(accept, now)               # [SendText(session.accept)]

core = EngineCore(session_id="42", agent="luigi", now=now)   # one per call (engine side)
core.connected(now)                          # session.start is queued
data = core.next_write(now)                  # the next stamped message to write, or None
out = core.receive_text(data, now)           # [AgentAccepted(accept, resumed=False)]
```

The engine side queues what it writes (control messages before events, events bounded with an
``events.lost`` count on overflow) and stamps ``seq``/``t_ms`` when the adapter takes a message
off with :meth:`EngineCore.next_write`, so seq order is write order.
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Any, Final, Generic, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET

from voxwire._codec import UnknownMessage
from voxwire.brisvox.codec import decode, encode
from voxwire.brisvox.constants import (
    CLOSE_TIMEOUT_MS,
    CONNECT_TIMEOUT_MS,
    ENGINE_EVENT_QUEUE,
    HANDSHAKE_TIMEOUT_MS,
    MAX_WAITING_TOOL_CALLS,
    PING_INTERVAL_MS,
    PROTOCOL_NAME,
    RECONNECT_ATTEMPTS,
    RECONNECT_BACKOFF_FACTOR,
    RECONNECT_BACKOFF_INITIAL_MS,
    RECONNECT_BACKOFF_MAX_MS,
    RECONNECT_SERIES_RESET_MS,
    RECONNECT_WINDOW_MS,
    SDK_HANDSHAKE_TIMEOUT_MS,
    SIDE_EFFECT_WAIT_MS,
    SILENCE_TIMEOUT_MS,
    SUPPORTED_VERSIONS,
    WRITE_TIMEOUT_MS,
)
from voxwire.brisvox.errors import ErrorCode, ProtocolError
from voxwire.brisvox.messages import (
    BotLlmStarted,
    BotLlmStopped,
    BotText,
    BotTtsStopped,
    BotTtsText,
    CallIdentity,
    Capabilities,
    CommandError,
    CommandResult,
    ContextUpdate,
    End,
    ErrorEvent,
    ErrorStage,
    EventsLost,
    ResumeInfo,
    Say,
    ServerMessage,
    SessionAccept,
    SessionEnd,
    SessionReject,
    SessionStart,
    SessionUsage,
    ToolCall,
    ToolCancel,
    ToolCancelReason,
    ToolDeclaration,
    ToolKind,
    ToolResult,
    ToolsSet,
    Transfer,
    TurnBotEnded,
    TurnBotStarted,
    TurnInterrupted,
    TurnMetrics,
    TurnUserEnded,
    TurnUserStarted,
    UserText,
    UserTranscript,
)
from voxwire.sansio import Close, SendText

__all__ = [
    "AgentAccepted",
    "AgentCore",
    "AgentOutput",
    "AgentState",
    "Backoff",
    "BadMessage",
    "Command",
    "CommandAnswered",
    "CommandReceived",
    "CommandTimedOut",
    "Delivered",
    "EngineCore",
    "EngineOutput",
    "EngineState",
    "Event",
    "EventBuffer",
    "EventReceived",
    "EventsDropped",
    "HandshakeFailed",
    "Ignored",
    "LinkDown",
    "LinkSettings",
    "ResumeRegistry",
    "SendPing",
    "StartReceived",
    "ToolCallCancelled",
    "ToolCallQueued",
    "ToolCallStarted",
    "ToolFinished",
    "ToolOutcome",
    "ToolOverdue",
    "backoff_factor",
    "idempotency_key",
]

Command: TypeAlias = Say | End | Transfer | ContextUpdate | ToolsSet
"""Every command an agent may send after the handshake."""

Event: TypeAlias = (
    TurnUserStarted
    | TurnUserEnded
    | TurnBotStarted
    | TurnBotEnded
    | TurnInterrupted
    | TurnMetrics
    | UserTranscript
    | UserText
    | BotLlmStarted
    | BotText
    | BotLlmStopped
    | BotTtsText
    | BotTtsStopped
)
"""The 13 subscribable call events (``session.accept.events``)."""

_CLOSE_NORMAL: Final = 1000
_CLOSE_GOING_AWAY: Final = 1001
_CLOSE_PROTOCOL: Final = 1002
_CLOSE_POLICY: Final = 1008
_CLOSE_TOO_BIG: Final = 1009


def _seconds(ms: int) -> float:
    return ms / 1000


# -- actions and events shared by both sides ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendPing:
    """Send a WebSocket ping (the engine side's keepalive); report the pong with ``pong()``."""


@dataclass(frozen=True, slots=True)
class HandshakeFailed:
    """The handshake did not succeed; the link is (being) closed.

    ``final`` is false on the engine side when another reconnection attempt follows.
    """

    reason: str
    rejected: SessionReject | None = None
    final: bool = True


@dataclass(frozen=True, slots=True)
class Ignored:
    """Something the protocol says to ignore (logged at DEBUG and counted, never silent)."""

    what: str


@dataclass(frozen=True, slots=True)
class BadMessage:
    """The peer sent something that breaks the protocol; ``answered`` says if the core replied."""

    error: ProtocolError
    answered: bool


# -- the bounded event buffer -------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EventsDropped:
    """``count`` events were dropped by a full buffer; delivered where the gap is."""

    count: int


class EventBuffer(Generic[T]):
    """A bounded FIFO that drops the newest item when full and reports the gap, never a stall.

    The count of dropped items comes out of :meth:`pop` as :class:`EventsDropped`, once the items
    queued before the first drop are out (where the gap is). A final item (the call's end) is
    never dropped and comes out last; nothing is accepted after it.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an event buffer holds at least 1 item, not {capacity}")
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._pushed = 0
        self._popped = 0
        self._lost = 0
        self._gap_after = 0
        self._final: T | None = None
        self._final_done = False
        self.lost_total = 0
        """Items dropped over the buffer's life."""

    @property
    def finished(self) -> bool:
        """Whether the final item was pushed."""
        return self._final is not None

    def push(self, item: T) -> bool:
        """Queue ``item``; return False when it was dropped (full, counted) or after the end."""
        if self._final is not None:
            return False
        if len(self._items) >= self.capacity:
            if self._lost == 0:
                self._gap_after = self._pushed
            self._lost += 1
            self.lost_total += 1
            return False
        self._items.append(item)
        self._pushed += 1
        return True

    def drop(self, count: int) -> None:
        """Count ``count`` items that never reached the buffer (an outage) as dropped here."""
        if count > 0:
            if self._lost == 0:
                self._gap_after = self._pushed
            self._lost += count
            self.lost_total += count

    def finish(self, item: T) -> None:
        """Queue the final item (once): delivered after everything queued before it."""
        if self._final is None:
            self._final = item

    def clear(self) -> int:
        """Drop what is queued (not the final item); return how many, counted as dropped too."""
        dropped = len(self._items)
        self._items.clear()
        self._popped = self._pushed
        self._gap_after = self._pushed
        self._lost += dropped
        self.lost_total += dropped
        return dropped

    def take_lost(self) -> int:
        """Forget the unreported dropped count and return it (it is reported elsewhere)."""
        lost, self._lost = self._lost, 0
        return lost

    def pop(self) -> T | EventsDropped | None:
        """The next item, an :class:`EventsDropped` where a gap is, or None when empty."""
        if self._lost and self._popped >= self._gap_after:
            lost, self._lost = self._lost, 0
            return EventsDropped(lost)
        if self._items:
            self._popped += 1
            return self._items.popleft()
        if self._final is not None and not self._final_done:
            self._final_done = True
            return self._final
        return None

    def peek_is_event(self) -> bool:
        """Whether :meth:`pop` would return a queued (non-final) item or a gap report."""
        return bool(self._items) or bool(self._lost and self._popped >= self._gap_after)


# -- agent side ---------------------------------------------------------------------------------


class AgentState(Enum):
    """Where an :class:`AgentCore`'s link is."""

    AWAITING_START = "awaiting session.start"
    DECIDING = "deciding"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class StartReceived:
    """A valid ``session.start`` with a common version: answer with ``accept`` or ``reject``."""

    start: SessionStart
    version: int


Delivered: TypeAlias = Event | ErrorEvent | EventsLost | SessionUsage | SessionEnd
"""The server messages an agent's application sees (the rest the core handles itself)."""


@dataclass(frozen=True, slots=True)
class EventReceived:
    """A server message the application sees (events, ``error``, ``events.lost``, the end)."""

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


class AgentCore:
    """The agent side of one connection (one link of a call).

    Args:
        now: When the connection opened; the handshake budget counts from it.
        versions: The protocol versions this agent speaks.
        handshake_timeout: Seconds to get ``session.start`` and answer it.
    """

    def __init__(
        self,
        now: float,
        *,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
        handshake_timeout: float = _seconds(SDK_HANDSHAKE_TIMEOUT_MS),
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
        self._versions = versions
        self._deadline: float | None = now + handshake_timeout
        self._running: dict[int, ToolCall] = {}
        self._pending: dict[str, tuple[float, str, float]] = {}

    # inputs ---------------------------------------------------------------------------------------

    def receive_text(self, data: bytes | str, now: float) -> list[AgentOutput]:
        """A text message arrived."""
        if self.state is AgentState.AWAITING_START:
            return self._first(data)
        if self.state is AgentState.CLOSED:
            return [Ignored("a message after the link was closed")]
        try:
            message = decode(data, "server")
        except ProtocolError as exc:
            return [BadMessage(exc, answered=False)]
        if isinstance(message, UnknownMessage):
            return [Ignored(f"unknown server message type {message.type!r}")]
        self.last_seq = message.seq
        if self.state is AgentState.DECIDING:
            return [Ignored(f"{message.type} before the handshake was answered")]
        return self._dispatch(message)

    def receive_binary(self, data: bytes, now: float) -> list[AgentOutput]:
        """A binary frame arrived: not part of the protocol, ignored (logged); as the first
        message it fails the handshake."""
        if self.state is AgentState.AWAITING_START:
            return self._bad_start("expected session.start, got a binary frame")
        return [Ignored(f"a binary frame of {len(data)} bytes (not part of the protocol)")]

    def accept(self, accept: SessionAccept, now: float) -> list[AgentOutput]:
        """Answer the ``session.start`` with ``accept`` (its version must be the one picked).

        Raises ProtocolError when ``accept`` breaks a rule (nothing is sent then).
        """
        start = self._deciding()
        if accept.version != self.version:
            raise ValueError(f"the accept's version is {accept.version}, picked {self.version}")
        if start.resume not in (UNSET, None) and not accept.resume:
            raise ValueError("the accept of a resumption must carry resume: true")
        data = encode(accept)
        self.state = AgentState.OPEN
        self._deadline = None
        return [SendText(data)]

    def reject(self, code: str, message: str | None, now: float) -> list[AgentOutput]:
        """Answer the ``session.start`` with ``session.reject`` and close."""
        self._deciding()
        return self._reject(code, message)

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
        """Answer a tool call. A result the server stopped waiting for is dropped; one over the
        message limit or not JSON becomes an error result, never a dropped link."""
        call = self._running.pop(result.id, None)
        if call is None or self.state is not AgentState.OPEN:
            return [Ignored(f"tool.result {result.id} for a call no longer waiting")]
        try:
            return [SendText(encode(result))]
        except ProtocolError as exc:
            text = (
                "tool result is too large"
                if exc.code is ErrorCode.TOO_LARGE
                else "tool result is not valid JSON"
            )
            return [SendText(encode(ToolResult(id=result.id, error=text))), BadMessage(exc, False)]

    def closed(self) -> list[AgentOutput]:
        """The connection is gone; pending commands are the adapter's to fail."""
        self.state = AgentState.CLOSED
        self._deadline = None
        self._running.clear()
        self._pending.clear()
        return []

    def tick(self, now: float) -> list[AgentOutput]:
        """Fire the deadlines that passed: the handshake budget, command timeouts."""
        out: list[AgentOutput] = []
        if self._deadline is not None and now >= self._deadline:
            if self.state is AgentState.AWAITING_START:
                self.state = AgentState.CLOSED
                out.append(Close(_CLOSE_POLICY, "no session.start"))
                out.append(HandshakeFailed("no session.start"))
            elif self.state is AgentState.DECIDING:
                out += self._reject(ErrorCode.UNAVAILABLE, "handshake budget exceeded")
            self._deadline = None
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

    # internals ------------------------------------------------------------------------------------

    def _first(self, data: bytes | str) -> list[AgentOutput]:
        try:
            start = decode(data, "server")
        except ProtocolError as exc:
            return self._bad_start(f"expected session.start: {exc}")
        if not isinstance(start, SessionStart):
            return self._bad_start(f"expected session.start, got {start.type}")
        self.start = start
        self.last_seq = start.seq
        common = set(start.versions) & set(self._versions)
        if not common:
            self.state = AgentState.DECIDING
            return self._reject(
                ErrorCode.UNSUPPORTED_VERSION, f"this agent speaks versions {list(self._versions)}"
            )
        self.version = max(common)
        self.state = AgentState.DECIDING
        return [StartReceived(start, self.version)]

    def _bad_start(self, reason: str) -> list[AgentOutput]:
        self.state = AgentState.CLOSED
        self._deadline = None
        return [Close(_CLOSE_PROTOCOL, "expected session.start"), HandshakeFailed(reason)]

    def _deciding(self) -> SessionStart:
        if self.state is not AgentState.DECIDING or self.start is None:
            raise RuntimeError(f"no session.start to answer: the link is {self.state.value}")
        return self.start

    def _reject(self, code: str, message: str | None) -> list[AgentOutput]:
        reject = SessionReject(code=code, message=message or UNSET)
        self.state = AgentState.CLOSED
        self._deadline = None
        return [
            SendText(encode(reject)),
            Close(_CLOSE_NORMAL),
            HandshakeFailed(f"rejected: {code}", rejected=reject),
        ]

    def _dispatch(self, message: ServerMessage) -> list[AgentOutput]:
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
            return [ToolCallCancelled(call, message.reason)]
        if isinstance(message, CommandResult):
            if self._pending.pop(message.id, None) is None:
                return [Ignored(f"command.result {message.id!r} for no waiting command")]
            return [CommandAnswered(message)]
        if isinstance(message, SessionStart):
            return [Ignored("a second session.start")]
        if isinstance(message, SessionEnd):
            self.ended = True
        return [EventReceived(message)]


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


# -- engine side --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinkSettings:
    """The engine side's bounds, in seconds (the document's defaults)."""

    connect_timeout: float = _seconds(CONNECT_TIMEOUT_MS)
    handshake_timeout: float = _seconds(HANDSHAKE_TIMEOUT_MS)
    ping_interval: float = _seconds(PING_INTERVAL_MS)
    silence_timeout: float = _seconds(SILENCE_TIMEOUT_MS)
    write_timeout: float = _seconds(WRITE_TIMEOUT_MS)
    close_timeout: float = _seconds(CLOSE_TIMEOUT_MS)
    side_effect_wait: float = _seconds(SIDE_EFFECT_WAIT_MS)
    event_queue: int = ENGINE_EVENT_QUEUE
    """Events waiting to be written; past it the newest are dropped and counted."""
    max_waiting_tools: int = MAX_WAITING_TOOL_CALLS
    reconnect_attempts: int = RECONNECT_ATTEMPTS
    reconnect_window: float = _seconds(RECONNECT_WINDOW_MS)

    def __post_init__(self) -> None:
        for name in (
            "connect_timeout",
            "handshake_timeout",
            "ping_interval",
            "silence_timeout",
            "write_timeout",
            "close_timeout",
            "side_effect_wait",
            "reconnect_window",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"LinkSettings.{name} must be positive, not {getattr(self, name)}")
        if self.event_queue < 1 or self.max_waiting_tools < 1 or self.reconnect_attempts < 0:
            raise ValueError(
                "LinkSettings: event_queue and max_waiting_tools must be at least 1, "
                "reconnect_attempts at least 0"
            )


class Backoff:
    """When to reopen a lost link: doubling from 100 ms to 2 s times a stable factor, at most
    ``attempts`` attempts in one series, none more than ``window`` seconds after the loss, and a
    fresh series after a link that lived 5 s."""

    def __init__(self, factor: float, attempts: int, window: float) -> None:
        low, high = RECONNECT_BACKOFF_FACTOR
        if not low <= factor <= high:
            raise ValueError(f"the backoff factor must be in [{low}, {high}], not {factor}")
        self.factor = factor
        self.attempts = attempts
        self.window = window
        self.series = 0
        """Attempts made in the current series."""
        self.outage_attempts = 0
        """Attempts made since the current loss (``resume.attempt`` of the last one)."""
        self._lost_at = 0.0

    def lost(self, now: float, lived: float) -> None:
        """A link was lost at ``now`` after ``lived`` seconds up."""
        if lived >= _seconds(RECONNECT_SERIES_RESET_MS):
            self.series = 0
        self.outage_attempts = 0
        self._lost_at = now

    def next_delay(self, now: float) -> float | None:
        """Seconds to wait before the next attempt, or None when reconnecting is over."""
        if self.series >= self.attempts:
            return None
        delay = min(
            _seconds(RECONNECT_BACKOFF_INITIAL_MS) * (1 << self.series),
            _seconds(RECONNECT_BACKOFF_MAX_MS),
        )
        delay *= self.factor
        if now + delay > self._lost_at + self.window:
            return None
        self.series += 1
        self.outage_attempts += 1
        return delay

    def down_ms(self, now: float) -> int:
        """Milliseconds since the loss."""
        return max(0, int((now - self._lost_at) * 1000))


def backoff_factor(session_id: str) -> float:
    """A factor in [0.5, 1] stable for a call and spread across calls."""
    low, high = RECONNECT_BACKOFF_FACTOR
    digest = hashlib.sha256(session_id.encode()).digest()
    return low + (high - low) * int.from_bytes(digest[:8], "big") / 2**64


def idempotency_key(session_id: str, call_id: str) -> str:
    """16 hex digits, stable for one tool call of one phone call."""
    return hashlib.sha256(f"{session_id}\0{call_id}".encode()).hexdigest()[:16]


class EngineState(Enum):
    """Where an :class:`EngineCore`'s call stands with its agent."""

    IDLE = "not connected"
    HANDSHAKING = "handshaking"
    OPEN = "open"
    DOWN = "down, reconnecting"
    ENDING = "ending"
    GONE = "without agent"


class ToolOutcome(StrEnum):
    """How a remote tool call ended, as the engine gives it to the LLM."""

    RESULT = "result"
    TOOL_FAILED = "tool_failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    UNKNOWN_TOOL = "unknown_tool"
    OUTCOME_UNKNOWN = "outcome_unknown"


@dataclass(frozen=True, slots=True)
class AgentAccepted:
    """The handshake succeeded: the link is up (``resumed`` for a resumption)."""

    accept: SessionAccept
    resumed: bool
    problems: tuple[str, ...] = ()
    """Handshake problems that did not stop the call (reported to the agent as error events)."""


@dataclass(frozen=True, slots=True)
class CommandReceived:
    """The agent sent a command; answer it with :meth:`EngineCore.answer`."""

    command: Command
    link: int
    """The link it came on: an answer for a lost link is dropped, never delivered late."""


@dataclass(frozen=True, slots=True)
class ToolCallQueued:
    """A tool call is waiting for its result."""

    request_id: int
    call_id: str


@dataclass(frozen=True, slots=True)
class ToolOverdue:
    """A side_effect call passed its timeout_ms: the LLM gets a timeout, the link keeps waiting."""

    request_id: int
    call_id: str


@dataclass(frozen=True, slots=True)
class ToolFinished:
    """A tool call ended (``late`` for a side_effect result after its timeout_ms)."""

    request_id: int
    call_id: str
    outcome: ToolOutcome
    result: Any = None
    error: str | None = None
    late: bool = False


@dataclass(frozen=True, slots=True)
class LinkDown:
    """The link went down; ``reconnect_in`` seconds until the next attempt, or None (final)."""

    reason: str
    reconnect_in: float | None


EngineOutput: TypeAlias = (
    Close
    | SendPing
    | AgentAccepted
    | HandshakeFailed
    | CommandReceived
    | ToolCallQueued
    | ToolOverdue
    | ToolFinished
    | LinkDown
    | Ignored
    | BadMessage
)
"""What :class:`EngineCore` returns."""


@dataclass(slots=True)
class _Waiting:
    call: ToolCall
    deadline: float
    overdue: bool = False


class _IdPeek(msgspec.Struct):
    id: Any = None


_ID_PEEK: Final = msgspec.json.Decoder(_IdPeek)
_RAW: Final = msgspec.json.Decoder(dict[str, Any])
_ITEM_PATH: Final = re.compile(r"\$\.(tools|events|context)\[(\d+)\]")
_COMMAND_TYPES: Final = frozenset({"say", "end", "transfer", "context.update", "tools.set"})
_RESERVED_TOOLS: Final = frozenset({"confirm_pending"})


class EngineCore:
    """The engine side of one call with its agent, across reconnections.

    Args:
        session_id: The call's id (the key of a resumption).
        agent: The agent definition's name.
        now: When the call starts.
        capabilities: What the call can do (default: tools, no transfer).
        call: The caller identity to send, when the definition opted in.
        settings: The link's bounds.
        versions: The versions to offer.
    """

    def __init__(
        self,
        *,
        session_id: str,
        agent: str,
        now: float,
        capabilities: Capabilities | None = None,
        call: CallIdentity | None = None,
        settings: LinkSettings | None = None,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.capabilities = capabilities or Capabilities(transfer=False, tools=True)
        self.call = call
        self.settings = settings or LinkSettings()
        self.versions = versions
        self.state = EngineState.IDLE
        self.accept: SessionAccept | None = None
        """The first accept (its tools stay registered across resumptions)."""
        self.link = 0
        """The number of the current link (1 for the first connection)."""
        self.ignored = 0
        """Messages ignored as the protocol says (late results and the like)."""
        self.backoff = Backoff(
            backoff_factor(session_id),
            self.settings.reconnect_attempts,
            self.settings.reconnect_window,
        )
        self._origin: float | None = None
        self._seq = 0
        self._last_written_seq = 0
        self._next_tool_id = 1
        self._control: deque[ServerMessage] = deque()
        self._events: EventBuffer[ServerMessage] = EventBuffer(self.settings.event_queue)
        self._final: list[ServerMessage] = []
        self._subscription: frozenset[str] | None = None
        self._tools: dict[int, _Waiting] = {}
        self._declared: dict[str, ToolDeclaration] = {}
        self._deadline: float | None = None
        self._last_heard = now
        self._next_ping: float | None = None
        self._opened_at = now
        self._ending = False
        self._resume_lost: int | None = None

    # -- properties -----------------------------------------------------------------------------

    @property
    def resumable(self) -> bool:
        """Whether the agent declared resume and reconnecting is on."""
        return bool(self.accept and self.accept.resume) and self.settings.reconnect_attempts > 0

    @property
    def waiting_tools(self) -> int:
        """Tool calls waiting for a result."""
        return len(self._tools)

    @property
    def has_output(self) -> bool:
        """Whether :meth:`next_write` has something to write now."""
        if self.state is EngineState.HANDSHAKING:
            return bool(self._control) and self._control[0].type == "session.start"
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            return False
        return bool(self._control) or self._events.peek_is_event() or bool(self._final)

    @property
    def finished(self) -> bool:
        """Whether the call's end was written (the adapter closes the link now)."""
        return self.state is EngineState.ENDING and not self.has_output

    # -- the link -------------------------------------------------------------------------------

    def connected(self, now: float) -> list[EngineOutput]:
        """A connection opened: queue ``session.start`` (with ``resume`` on a reconnection)."""
        if self.state not in (EngineState.IDLE, EngineState.DOWN):
            raise RuntimeError(f"connected() while the link is {self.state.value}")
        resume: ResumeInfo | msgspec.UnsetType = UNSET
        if self.state is EngineState.DOWN:
            resume = ResumeInfo(
                attempt=max(1, self.backoff.outage_attempts),
                previous_seq=max(1, self._last_written_seq),
                down_ms=self.backoff.down_ms(now),
            )
        self.link += 1
        self.state = EngineState.HANDSHAKING
        self._deadline = now + self.settings.handshake_timeout
        self._last_heard = now
        self._opened_at = now
        self._next_ping = None
        self._control.clear()
        self._control.append(
            SessionStart(
                seq=0,
                t_ms=0,
                protocol=PROTOCOL_NAME,
                versions=list(self.versions),
                session_id=self.session_id,
                agent=self.agent,
                capabilities=self.capabilities,
                resume=resume,
                call=self.call if self.call is not None else UNSET,
            )
        )
        return []

    def connect_failed(self, now: float, reason: str) -> list[EngineOutput]:
        """Opening the connection failed (refused, timed out): the attempt is over."""
        if self.state is EngineState.IDLE:
            self.state = EngineState.GONE
            return [HandshakeFailed(f"connect failed: {reason}")]
        if self.state is not EngineState.DOWN:
            raise RuntimeError(f"connect_failed() while the link is {self.state.value}")
        delay = self._next_attempt(now)
        out: list[EngineOutput] = [
            HandshakeFailed(f"reconnect failed: {reason}", final=delay is None)
        ]
        if delay is not None:
            out.append(LinkDown(f"reconnect failed: {reason}", delay))
        return out

    def connection_lost(self, now: float, reason: str) -> list[EngineOutput]:
        """The socket closed or a write timed out."""
        if self.state is EngineState.HANDSHAKING:
            return self._handshake_failed(now, f"connection lost in the handshake: {reason}")
        if self.state in (EngineState.OPEN, EngineState.ENDING):
            return self._lose(now, reason)
        return []

    def next_write(self, now: float) -> bytes | None:
        """The next message to write, stamped with its seq and t_ms, or None."""
        if not self.has_output:
            return None
        message: ServerMessage
        if self._control:
            message = self._control.popleft()
        elif self._events.peek_is_event():
            if self._resume_lost is not None:
                message = EventsLost(seq=0, t_ms=0, count=self._resume_lost)
                self._resume_lost = None
            else:
                item = self._events.pop()
                if isinstance(item, EventsDropped):
                    message = EventsLost(seq=0, t_ms=0, count=item.count)
                else:
                    assert item is not None
                    message = item
        else:
            message = self._final.pop(0)
        self._seq += 1
        self._last_written_seq = self._seq
        if self._origin is None:  # t_ms counts from the call's first write: 0 in session.start
            self._origin = now
        stamped = msgspec.structs.replace(
            message, seq=self._seq, t_ms=max(0, int((now - self._origin) * 1000))
        )
        return encode(stamped)

    def pong(self, now: float) -> list[EngineOutput]:
        """A pong arrived (the link is alive)."""
        self._last_heard = now
        return []

    def receive_binary(self, data: bytes, now: float) -> list[EngineOutput]:
        """A binary frame arrived: answered with an error event, the link stays."""
        self._last_heard = now
        error = ProtocolError(ErrorCode.BAD_MESSAGE, "binary frames are not part of the protocol")
        if self.state is EngineState.HANDSHAKING:
            return self._handshake_failed(now, f"bad first message: {error}")
        self._report(error)
        return [BadMessage(error, answered=True)]

    def receive_text(self, data: bytes | str, now: float) -> list[EngineOutput]:
        """A text message arrived from the agent."""
        self._last_heard = now
        if self.state is EngineState.HANDSHAKING:
            return self._handshake(data, now)
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            self.ignored += 1
            return [Ignored(f"a message while the link is {self.state.value}")]
        try:
            message = decode(data, "agent")
        except ProtocolError as exc:
            return self._refuse(exc, data, now)
        if isinstance(message, ToolResult):
            return self._tool_result(message)
        if isinstance(message, SessionAccept | SessionReject):
            error = ProtocolError(
                ErrorCode.NOT_READY,
                "a handshake message after the handshake",
                message_type=message.type,
            )
            self._report(error)
            return [BadMessage(error, answered=True)]
        if isinstance(message, End):
            self._ending = True
        return [CommandReceived(message, self.link)]

    def answer(
        self, received: CommandReceived, *, error: tuple[str, str] | None = None
    ) -> list[EngineOutput]:
        """Answer a command: ok, or failed with ``(code, message)``. A command without id gets
        no result, and its failure becomes an error event; an answer for a lost link is dropped."""
        if received.link != self.link or self.state not in (EngineState.OPEN, EngineState.ENDING):
            self.ignored += 1
            return [Ignored(f"the answer to {received.command.type} on a lost link")]
        command = received.command
        if command.id is not UNSET:
            self._control.append(
                CommandResult(
                    seq=0,
                    t_ms=0,
                    id=command.id,
                    ok=error is None,
                    error=CommandError(code=error[0], message=error[1]) if error else UNSET,
                )
            )
        elif error is not None:
            self._control.append(self._error_event(f"{error[0]}: {command.type}: {error[1]}"))
        return []

    def send_event(self, event: Event | ErrorEvent, now: float) -> list[EngineOutput]:
        """Queue an event (its seq and t_ms are stamped when written; pass 0).

        An event the agent did not subscribe to is skipped; one that does not fit the queue, or
        comes while the link is down, is counted and reported as ``events.lost``.
        """
        if isinstance(event, ErrorEvent):
            if self.state in (EngineState.OPEN, EngineState.ENDING):
                self._control.append(event)
            return []
        if self._subscription is not None and event.type not in self._subscription:
            return []
        if self.state is EngineState.OPEN:
            self._events.push(event)
        elif self.state in (EngineState.DOWN, EngineState.HANDSHAKING):
            self._events.drop(1)
        return []

    def end_call(
        self, reason: str, now: float, usage: SessionUsage | None = None
    ) -> list[EngineOutput]:
        """The call ends: ``session.usage`` (if given) and ``session.end`` are written after what
        is queued; then the adapter closes the link (bounded by the close timeout)."""
        self._ending = True
        if self.state is EngineState.OPEN:
            if usage is not None:
                self._final.append(usage)
            self._final.append(SessionEnd(seq=0, t_ms=0, reason=reason))
            self.state = EngineState.ENDING
            return []
        if self.state in (EngineState.ENDING, EngineState.GONE):
            return []
        was = self.state
        self.state = EngineState.GONE
        self._deadline = None
        self._control.clear()
        out = self._fail_tools("the call ended")
        if was is EngineState.HANDSHAKING:
            out.insert(0, Close(_CLOSE_NORMAL, "call ended"))
        return out

    # -- tools ----------------------------------------------------------------------------------

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        call_id: str,
        epoch: int,
        now: float,
    ) -> list[EngineOutput]:
        """Ask the agent to run a remote tool it declared."""
        declaration = self._declared.get(name)
        if self.state is not EngineState.OPEN:
            return [self._done_now(call_id, ToolOutcome.TOOL_FAILED, "the agent link is down")]
        if declaration is None:
            return [self._done_now(call_id, ToolOutcome.UNKNOWN_TOOL, f"{name!r} is not offered")]
        if len(self._tools) >= self.settings.max_waiting_tools:
            return [
                self._done_now(
                    call_id,
                    ToolOutcome.TOOL_FAILED,
                    f"{self.settings.max_waiting_tools} tool calls are already waiting",
                )
            ]
        request_id = self._next_tool_id
        self._next_tool_id += 1
        call = ToolCall(
            seq=0,
            t_ms=0,
            id=request_id,
            call_id=call_id,
            name=name,
            arguments=arguments,
            kind=declaration.kind,
            epoch=epoch,
            idempotency_key=idempotency_key(self.session_id, call_id),
            timeout_ms=declaration.timeout_ms,
        )
        self._tools[request_id] = _Waiting(call, now + declaration.timeout_ms / 1000)
        self._control.append(call)
        return [ToolCallQueued(request_id, call_id)]

    def cancel_tool(
        self, request_id: int, now: float, reason: ToolCancelReason = ToolCancelReason.INTERRUPTED
    ) -> list[EngineOutput]:
        """Stop waiting for a read_only call (a barge-in); for a side_effect call the cancel is
        advice and the link keeps waiting for its late result."""
        waiting = self._tools.get(request_id)
        if waiting is None:
            return [Ignored(f"cancel of tool call {request_id}, which is not waiting")]
        self._control.append(ToolCancel(seq=0, t_ms=0, id=request_id, reason=reason))
        if waiting.call.kind is ToolKind.SIDE_EFFECT:
            return []
        del self._tools[request_id]
        outcome = (
            ToolOutcome.INTERRUPTED
            if reason is ToolCancelReason.INTERRUPTED
            else ToolOutcome.TIMEOUT
        )
        return [ToolFinished(request_id, waiting.call.call_id, outcome)]

    # -- time -----------------------------------------------------------------------------------

    def tick(self, now: float) -> list[EngineOutput]:
        """Fire what is due: the handshake deadline, pings, silence, tool deadlines."""
        out: list[EngineOutput] = []
        if self.state is EngineState.HANDSHAKING:
            if self._deadline is not None and now >= self._deadline:
                return self._handshake_failed(now, "no answer within the handshake timeout")
            return out
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            return out
        if now - self._last_heard >= self.settings.silence_timeout:
            reason = f"nothing heard for {self.settings.silence_timeout:g} s"
            return [Close(_CLOSE_GOING_AWAY, "silence"), *self._lose(now, reason)]
        if self._next_ping is not None and now >= self._next_ping:
            out.append(SendPing())
            self._next_ping = now + self.settings.ping_interval
        for request_id, waiting in list(self._tools.items()):
            if now < waiting.deadline:
                continue
            call = waiting.call
            if call.kind is ToolKind.READ_ONLY:
                del self._tools[request_id]
                self._control.append(
                    ToolCancel(seq=0, t_ms=0, id=request_id, reason=ToolCancelReason.ABANDONED)
                )
                out.append(ToolFinished(request_id, call.call_id, ToolOutcome.TIMEOUT))
            elif not waiting.overdue:
                waiting.overdue = True
                waiting.deadline += self.settings.side_effect_wait
                out.append(ToolOverdue(request_id, call.call_id))
            else:
                del self._tools[request_id]
                self._control.append(
                    ToolCancel(seq=0, t_ms=0, id=request_id, reason=ToolCancelReason.TIMEOUT)
                )
                out.append(ToolFinished(request_id, call.call_id, ToolOutcome.OUTCOME_UNKNOWN))
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must run next, or None."""
        if self.state is EngineState.HANDSHAKING:
            return self._deadline
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            return None
        deadlines = [self._last_heard + self.settings.silence_timeout]
        if self._next_ping is not None:
            deadlines.append(self._next_ping)
        deadlines.extend(w.deadline for w in self._tools.values())
        return min(deadlines)

    # -- internals ------------------------------------------------------------------------------

    def _handshake(self, data: bytes | str, now: float) -> list[EngineOutput]:
        try:
            message, problems = self._decode_accept(data)
        except ProtocolError as exc:
            return self._handshake_failed(now, f"bad first message: {exc}", final=True)
        if isinstance(message, SessionReject):
            detail = f": {message.message}" if isinstance(message.message, str) else ""
            out = self._handshake_failed(
                now, f"rejected: {message.code}{detail}", final=True, rejected=message
            )
            return out
        if not isinstance(message, SessionAccept):
            return self._handshake_failed(now, f"bad first message: {message.type}", final=True)
        if message.version not in self.versions:
            return self._handshake_failed(
                now, f"version {message.version} was not offered", final=True
            )
        resumed = self.accept is not None
        if resumed and not message.resume:
            return self._handshake_failed(
                now, "the accept of a resumption lacks resume: true", final=True
            )
        if not resumed:
            self.accept = message
            self._declared = {t.name: t for t in message.tools}
        events = message.events
        self._subscription = None if events is UNSET else frozenset(events)
        self.state = EngineState.OPEN
        self._deadline = None
        self._next_ping = now + self.settings.ping_interval
        for problem in problems:
            self._control.append(self._error_event(problem))
        if resumed:
            self._resume_lost = self._events.take_lost()
        return [AgentAccepted(message, resumed, tuple(problems))]

    def _decode_accept(
        self, data: bytes | str
    ) -> tuple[SessionAccept | SessionReject | Command | ToolResult, list[str]]:
        """Decode the first message; an accept's refused tools, unknown event types and empty
        context messages are left out and reported (the call goes on)."""
        problems: list[str] = []
        while True:
            try:
                message = decode(data, "agent")
            except ProtocolError as exc:
                found = _ITEM_PATH.match(exc.path or "")
                if exc.message_type != "session.accept" or found is None:
                    raise
                raw = _RAW.decode(data)
                items = raw.get(found.group(1))
                index = int(found.group(2))
                if not isinstance(items, list) or index >= len(items):
                    raise
                del items[index]
                problems.append(str(exc))
                data = msgspec.json.encode(raw)
                continue
            if isinstance(message, SessionAccept):
                reserved = [t for t in message.tools if t.name in _RESERVED_TOOLS]
                for tool in reserved:
                    problems.append(f"invalid_argument: tool name {tool.name!r} is reserved")
                if reserved:
                    message = msgspec.structs.replace(
                        message, tools=[t for t in message.tools if t.name not in _RESERVED_TOOLS]
                    )
            return message, problems

    def _handshake_failed(
        self,
        now: float,
        reason: str,
        *,
        final: bool = False,
        rejected: SessionReject | None = None,
    ) -> list[EngineOutput]:
        """The handshake failed; a resumption may try again unless ``final``."""
        self._control.clear()
        self._deadline = None
        close = Close(_CLOSE_NORMAL if rejected else _CLOSE_PROTOCOL, "handshake failed")
        if self.accept is None or final or self._ending:
            self.state = EngineState.GONE
            return [close, HandshakeFailed(reason, rejected)]
        self.state = EngineState.DOWN
        delay = self._next_attempt(now)
        out: list[EngineOutput] = [close, HandshakeFailed(reason, rejected, final=delay is None)]
        if delay is not None:
            out.append(LinkDown(reason, delay))
        return out

    def _next_attempt(self, now: float) -> float | None:
        delay = self.backoff.next_delay(now) if not self._ending else None
        if delay is None:
            self.state = EngineState.GONE
        return delay

    def _lose(self, now: float, reason: str) -> list[EngineOutput]:
        out = self._fail_tools("the agent link was lost")
        self._control.clear()
        self._final.clear()
        self._events.clear()
        self._next_ping = None
        self._deadline = None
        if self.state is EngineState.ENDING or self._ending or not self.resumable:
            self.state = EngineState.GONE
            out.append(LinkDown(reason, None))
            return out
        self.state = EngineState.DOWN
        self.backoff.lost(now, now - self._opened_at)
        out.append(LinkDown(reason, self._next_attempt(now)))
        return out

    def _fail_tools(self, why: str) -> list[EngineOutput]:
        out: list[EngineOutput] = []
        for request_id, waiting in self._tools.items():
            call = waiting.call
            outcome = (
                ToolOutcome.OUTCOME_UNKNOWN
                if call.kind is ToolKind.SIDE_EFFECT
                else ToolOutcome.TOOL_FAILED
            )
            out.append(ToolFinished(request_id, call.call_id, outcome, error=why))
        self._tools.clear()
        return out

    def _done_now(self, call_id: str, outcome: ToolOutcome, why: str) -> ToolFinished:
        request_id = self._next_tool_id  # never used again: ids never repeat within a call
        self._next_tool_id += 1
        return ToolFinished(request_id, call_id, outcome, error=why)

    def _tool_result(self, result: ToolResult) -> list[EngineOutput]:
        waiting = self._tools.pop(result.id, None)
        if waiting is None:
            self.ignored += 1
            return [Ignored(f"tool.result {result.id}: no call waits for it (late or unknown)")]
        call_id, late = waiting.call.call_id, waiting.overdue
        if isinstance(result.error, str):
            return [
                ToolFinished(
                    result.id, call_id, ToolOutcome.TOOL_FAILED, error=result.error, late=late
                )
            ]
        return [ToolFinished(result.id, call_id, ToolOutcome.RESULT, result.result, late=late)]

    def _refuse(self, exc: ProtocolError, data: bytes | str, now: float) -> list[EngineOutput]:
        """Answer a message that broke the protocol: too large closes the link; a command with an
        id gets a failed command.result; anything else an error event."""
        if exc.code is ErrorCode.TOO_LARGE and exc.message_type is None:
            return [Close(_CLOSE_TOO_BIG, "message too large"), BadMessage(exc, answered=True)]
        command_id: str | None = None
        if exc.message_type in _COMMAND_TYPES:
            try:
                peeked = _ID_PEEK.decode(data).id
            except (msgspec.DecodeError, msgspec.ValidationError):
                peeked = None
            if isinstance(peeked, str) and peeked:
                command_id = peeked
        if command_id is not None:
            self._control.append(
                CommandResult(
                    seq=0,
                    t_ms=0,
                    id=command_id,
                    ok=False,
                    error=CommandError(code=exc.code, message=str(exc)),
                )
            )
        else:
            self._report(exc)
        return [BadMessage(exc, answered=True)]

    def _report(self, error: ProtocolError) -> None:
        self._control.append(self._error_event(str(error)))

    def _error_event(self, message: str) -> ErrorEvent:
        return ErrorEvent(seq=0, t_ms=0, stage=ErrorStage.AGENT_LINK, message=message, fatal=False)
