"""The sans-I/O core of the Brisvox engine side: :class:`EngineCore`, one per call.

Sans-I/O as the agent side's core (:mod:`voxwire.brisvox.agent_core`): each input is a call with
``now``, and its outputs are what to write (:class:`~voxwire.sansio.SendText` for control
messages, never dropped; :class:`SendEvent` for events, which the link may drop and count;
:class:`CloseAfter` for the call's end) and what happened (the dataclasses below).

```text
core = EngineCore(session_id="42", agent="luigi", now=now)   # one per call
out = core.connected(now)                    # [SendText(session.start)]
out = core.receive_text(data, now)           # [AgentAccepted(accept, resumed=False)]
frame = core.stamp(frame, now)               # the link numbers each message as it writes it
```

Every message is checked and encoded when it is made, in the caller's call (a bad one raises
``ProtocolError`` there and nothing is sent), with the widest envelope; :meth:`EngineCore.stamp`
writes the real ``seq`` and ``t_ms`` in its place as the link's writer takes the message, so
seq order is write order and what is written is bytes already checked (the spec's decision
seq-stamped-after-the-check). The outbound queue, the keepalive and the drain timeout are the
link's (:mod:`voxwire.link`).

The call's life with its agent is the spec's table
:data:`~voxwire.brisvox.machines.ENGINE_MACHINE`: for each ``EngineState`` the ``EngineInput`` it
takes, the state that follows and the ``EngineAction`` run on the way, through
:func:`voxwire.machine.step`; an input a state does not list is refused there.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeAlias

import msgspec
from msgspec import UNSET

from voxwire._decode_errors import field_of_refused, without_item
from voxwire._rules import JSON_SAFE_INTEGER
from voxwire.brisvox.codec import decoder, encode
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
    RESERVED_TOOL_NAMES,
    SIDE_EFFECT_WAIT_MS,
    SILENCE_TIMEOUT_MS,
    SUPPORTED_VERSIONS,
    WRITE_TIMEOUT_MS,
    CloseCode,
)
from voxwire.brisvox.errors import ErrorCode, ProtocolError
from voxwire.brisvox.machines import ENGINE_MACHINE, EngineAction, EngineInput, EngineState
from voxwire.brisvox.messages import (
    COMMAND_TYPES,
    CallIdentity,
    Capabilities,
    Command,
    CommandError,
    CommandResult,
    End,
    ErrorEvent,
    ErrorStage,
    Event,
    EventsLost,
    ResumeInfo,
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
)
from voxwire.brisvox.outputs import (
    BadMessage,
    HandshakeFailed,
    refusal_text,
)
from voxwire.machine import step
from voxwire.sansio import Close, Ignored, LinkDown, SendText

__all__ = [
    "AgentAccepted",
    "Backoff",
    "CloseAfter",
    "CommandReceived",
    "EngineCore",
    "EngineOutput",
    "EngineState",
    "LinkDown",
    "LinkSettings",
    "SendEvent",
    "ToolCallQueued",
    "ToolFinished",
    "ToolOutcome",
    "ToolOverdue",
    "backoff_factor",
    "idempotency_key",
]

_DECODE_AGENT: Final = decoder("agent")
"""Decodes what the agent sends (built once)."""


def _seconds(ms: int) -> float:
    return ms / 1000


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


class ToolOutcome(StrEnum):
    """How a remote tool call ended, as the engine gives it to the LLM."""

    RESULT = "result"
    TOOL_FAILED = "tool_failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    UNKNOWN_TOOL = "unknown_tool"
    OUTCOME_UNKNOWN = ErrorCode.OUTCOME_UNKNOWN.value


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
    message: ToolResult | None = field(default=None, compare=False)
    """The agent's tool.result, when it came from the agent."""


class SendEvent(SendText, frozen=True):
    """Write one event (already encoded): the link may drop it when its event queue is full,
    and reports the gap as ``events.lost``. Control messages are plain ``SendText``."""


@dataclass(frozen=True, slots=True)
class CloseAfter:
    """The call's end: write ``final`` after everything queued, then close the link."""

    final: tuple[SendText, ...]
    close: Close


EngineOutput: TypeAlias = (
    SendText
    | SendEvent
    | CloseAfter
    | Close
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


class _LostReport(SendText, frozen=True):
    """An ``events.lost`` for ``count`` events the link dropped (counted as it is written)."""

    count: int = 0


@dataclass(slots=True)
class _EventCount:
    """What became of the events handed to one link."""

    handed: int = 0
    written: int = 0
    reported: int = 0
    """Dropped by the link's queue and reported in an events.lost written on it."""

    @property
    def unaccounted(self) -> int:
        """Handed but neither written nor reported: queued when the link went down."""
        return max(0, self.handed - self.written - self.reported)


@dataclass(frozen=True, slots=True)
class _Step:
    """What a transition's actions need."""

    now: float
    start: bytes = b""
    """The session.start to write."""
    final: tuple[SendText, ...] = ()
    """The call's last messages (session.usage, session.end)."""
    reason: str = ""
    """Why the link closes."""
    why: str = "the agent link was lost"
    """Why waiting tool calls end."""


_WIDEST: Final = b',"seq":%d,"t_ms":%d' % (JSON_SAFE_INTEGER, JSON_SAFE_INTEGER)
_ITEM_PATH: Final = re.compile(r"\$\.(tools|events|context)\[(\d+)\]")


def _queue_form(message: ServerMessage) -> bytes:
    """``message`` checked and encoded with the widest envelope, which :meth:`EngineCore.stamp`
    replaces by the real one (never longer). Raises ProtocolError."""
    if message.seq != JSON_SAFE_INTEGER or message.t_ms != JSON_SAFE_INTEGER:  # not built so
        message = msgspec.structs.replace(message, seq=JSON_SAFE_INTEGER, t_ms=JSON_SAFE_INTEGER)
    return encode(message)


def _control(message: ServerMessage) -> SendText:
    return SendText(_queue_form(message))


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

    Raises ProtocolError when the ``session.start`` these make breaks a rule.
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
        self.outage_lost = 0
        """Events that came while no link was up (reported in the next link's events.lost)."""
        self.outage_lost_total = 0
        """The same, over the call's life."""
        self._on_link = _EventCount()
        self._subscription: frozenset[str] | None = None
        self._tools: dict[int, _Waiting] = {}
        self._declared: dict[str, ToolDeclaration] = {}
        self._deadline: float | None = None
        self._opened_at = now
        self._ending = False
        self._start_message(UNSET)  # checks session_id, agent and call now

    # -- properties -----------------------------------------------------------------------------

    @property
    def resumable(self) -> bool:
        """Whether the agent declared resume and reconnecting is on."""
        return bool(self.accept and self.accept.resume) and self.settings.reconnect_attempts > 0

    @property
    def waiting_tools(self) -> int:
        """Tool calls waiting for a result."""
        return len(self._tools)

    # -- the link -------------------------------------------------------------------------------

    def connected(self, now: float) -> list[EngineOutput]:
        """A connection opened: queue ``session.start`` (with ``resume`` on a reconnection)."""
        resume: ResumeInfo | msgspec.UnsetType = UNSET
        if self.state is EngineState.DOWN:
            resume = ResumeInfo(
                attempt=max(1, self.backoff.outage_attempts),
                previous_seq=max(1, self._last_written_seq),
                down_ms=self.backoff.down_ms(now),
            )
        return self._step(EngineInput.CONNECTED, _Step(now, start=self._start_message(resume)))

    def connect_failed(self, now: float, reason: str) -> list[EngineOutput]:
        """Opening the connection failed (refused, timed out): the attempt is over."""
        if self.state is EngineState.IDLE:
            return [
                *self._step(EngineInput.GIVE_UP, _Step(now)),
                HandshakeFailed(f"connect failed: {reason}"),
            ]
        if self.state is not EngineState.DOWN:
            raise RuntimeError(f"connect_failed() while the link is {self.state.value}")
        delay = self._next_attempt(now)
        out = self._retry_or_give_up(delay, now)
        out.append(HandshakeFailed(f"reconnect failed: {reason}", final=delay is None))
        if delay is not None:
            out.append(LinkDown(f"reconnect failed: {reason}", delay))
        return out

    def link_lost(self, now: float, reason: str) -> list[EngineOutput]:
        """The socket closed, a write failed or timed out."""
        if self.state is EngineState.HANDSHAKING:
            return self._handshake_failed(now, f"connection lost in the handshake: {reason}")
        if self.state in (EngineState.OPEN, EngineState.ENDING):
            return self._lose(now, reason)
        return []

    def stamp(self, frame: SendText, now: float) -> SendText:
        """``frame`` with its seq and t_ms, as the link's writer takes it (write order)."""
        if type(frame) is SendEvent:
            self._on_link.written += 1
        elif type(frame) is _LostReport:
            self._on_link.reported += frame.count
        self._seq += 1
        self._last_written_seq = self._seq
        if self._origin is None:  # t_ms counts from the call's first write: 0 in session.start
            self._origin = now
        t_ms = max(0, int((now - self._origin) * 1000))
        return SendText(frame.data.replace(_WIDEST, b',"seq":%d,"t_ms":%d' % (self._seq, t_ms), 1))

    @staticmethod
    def events_lost(count: int) -> SendText:
        """The ``events.lost`` the link writes where ``count`` events were dropped."""
        return _LostReport(_queue_form(EventsLost(seq=0, t_ms=0, count=count)), count)

    def receive_binary(self, data: bytes, now: float) -> list[EngineOutput]:
        """A binary frame arrived: answered with an error event, the link stays."""
        error = ProtocolError(ErrorCode.BAD_MESSAGE, "binary frames are not part of the protocol")
        if self.state is EngineState.HANDSHAKING:
            return self._handshake_failed(now, f"bad first message: {error}")
        return [self._report(error), BadMessage(error, answered=True)]

    def receive_text(self, data: bytes | str, now: float) -> list[EngineOutput]:
        """A text message arrived from the agent."""
        if self.state is EngineState.HANDSHAKING:
            return self._handshake(data, now)
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            self.ignored += 1
            return [Ignored(f"a message while the link is {self.state.value}")]
        try:
            message = _DECODE_AGENT(data)
        except ProtocolError as exc:
            return self._refuse(exc, data)
        if isinstance(message, ToolResult):
            return self._tool_result(message)
        if isinstance(message, SessionAccept | SessionReject):
            error = ProtocolError(
                ErrorCode.NOT_READY,
                "a handshake message after the handshake",
                message_type=message.type,
            )
            return [self._report(error), BadMessage(error, answered=True)]
        if isinstance(message, End):
            self._ending = True
        return [CommandReceived(message, self.link)]

    def answer(
        self, received: CommandReceived, *, error: tuple[str, str] | None = None
    ) -> list[EngineOutput]:
        """Answer a command: ok, or failed with ``(code, message)``. A command without id gets
        no result, and its failure becomes an error event; an answer for a lost link is dropped.

        Raises ProtocolError (nothing queued) when the answer breaks a rule.
        """
        command = received.command
        if command.id is not UNSET:
            frame = _control(
                CommandResult(
                    seq=0,
                    t_ms=0,
                    id=command.id,
                    ok=error is None,
                    error=CommandError(code=error[0], message=error[1]) if error else UNSET,
                )
            )
        elif error is not None:
            frame = _control(self._error_event(f"{error[0]}: {command.type}: {error[1]}"))
        else:
            return []
        if received.link != self.link or self.state not in (EngineState.OPEN, EngineState.ENDING):
            self.ignored += 1
            return [Ignored(f"the answer to {command.type} on a lost link")]
        return [frame]

    def send_event(self, event: Event | ErrorEvent, now: float) -> list[EngineOutput]:
        """Send an event (its seq and t_ms are written when it is; pass 0).

        An event the agent did not subscribe to is skipped; one that comes while the link is
        down is counted and reported in the next link's ``events.lost``; an ``error`` is a
        control message, never dropped. Raises ProtocolError (nothing sent) when the event
        breaks a rule.
        """
        data = _queue_form(event)
        if isinstance(event, ErrorEvent):
            if self.state in (EngineState.OPEN, EngineState.ENDING):
                return [SendText(data)]
            return []
        if self._subscription is not None and event.type not in self._subscription:
            return []
        if self.state is EngineState.OPEN:
            self._on_link.handed += 1
            return [SendEvent(data)]
        if self.state in (EngineState.DOWN, EngineState.HANDSHAKING):
            self.outage_lost += 1
            self.outage_lost_total += 1
        return []

    def end_call(
        self, reason: str, now: float, usage: SessionUsage | None = None
    ) -> list[EngineOutput]:
        """The call ends: ``session.usage`` (if given) and ``session.end`` are written after what
        is queued, then the link closes (:class:`CloseAfter`, bounded by the close timeout).

        Raises ProtocolError (nothing changes) when ``usage`` or ``reason`` breaks a rule.
        """
        final = (
            *((_control(usage),) if usage is not None else ()),
            _control(SessionEnd(seq=0, t_ms=0, reason=reason)),
        )
        self._ending = True
        step = _Step(now, final=final, why="the call ended", reason=reason)
        return self._step(EngineInput.END_CALL, step)

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
        """Ask the agent to run a remote tool it declared.

        Raises ProtocolError (nothing queued, no id used) when the call breaks a rule.
        """
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
        frame = _control(call)
        self._next_tool_id += 1
        self._tools[request_id] = _Waiting(call, now + declaration.timeout_ms / 1000)
        return [frame, ToolCallQueued(request_id, call_id)]

    def cancel_tool(
        self, request_id: int, now: float, reason: ToolCancelReason = ToolCancelReason.INTERRUPTED
    ) -> list[EngineOutput]:
        """Stop waiting for a read_only call (a barge-in); for a side_effect call the cancel is
        advice and the link keeps waiting for its late result."""
        waiting = self._tools.get(request_id)
        if waiting is None:
            return [Ignored(f"cancel of tool call {request_id}, which is not waiting")]
        cancel = self._cancel(request_id, reason)
        if waiting.call.kind is ToolKind.SIDE_EFFECT:
            return [cancel]
        del self._tools[request_id]
        outcome = (
            ToolOutcome.INTERRUPTED
            if reason is ToolCancelReason.INTERRUPTED
            else ToolOutcome.TIMEOUT
        )
        return [cancel, ToolFinished(request_id, waiting.call.call_id, outcome)]

    # -- time -----------------------------------------------------------------------------------

    def tick(self, now: float) -> list[EngineOutput]:
        """Fire what is due: the handshake deadline, tool deadlines (keepalive is the link's)."""
        out: list[EngineOutput] = []
        if self.state is EngineState.HANDSHAKING:
            if self._deadline is not None and now >= self._deadline:
                return self._handshake_failed(now, "no answer within the handshake timeout")
            return out
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            return out
        for request_id, waiting in list(self._tools.items()):
            if now < waiting.deadline:
                continue
            call = waiting.call
            if call.kind is ToolKind.READ_ONLY:
                del self._tools[request_id]
                out.append(self._cancel(request_id, ToolCancelReason.ABANDONED))
                out.append(ToolFinished(request_id, call.call_id, ToolOutcome.TIMEOUT))
            elif not waiting.overdue:
                waiting.overdue = True
                waiting.deadline += self.settings.side_effect_wait
                out.append(ToolOverdue(request_id, call.call_id))
            else:
                del self._tools[request_id]
                out.append(self._cancel(request_id, ToolCancelReason.TIMEOUT))
                out.append(ToolFinished(request_id, call.call_id, ToolOutcome.OUTCOME_UNKNOWN))
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must run next, or None."""
        if self.state is EngineState.HANDSHAKING:
            return self._deadline
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            return None
        return min((w.deadline for w in self._tools.values()), default=None)

    # -- the transition table -------------------------------------------------------------------

    def _step(self, event: EngineInput, effect: _Step) -> list[EngineOutput]:
        transition = step(ENGINE_MACHINE, self.state, event)
        self.state = transition.target
        out: list[EngineOutput] = []
        for action in transition.actions:
            out += _ACTIONS[action](self, effect)
        return out

    def _start_handshake(self, step: _Step) -> list[EngineOutput]:
        self.link += 1
        self._on_link = _EventCount()
        self._deadline = step.now + self.settings.handshake_timeout
        self._opened_at = step.now
        return [SendText(step.start)]

    def _disarm(self, step: _Step) -> list[EngineOutput]:
        self._deadline = None
        return []

    def _end_link(self, step: _Step) -> list[EngineOutput]:
        return [CloseAfter(step.final, Close(CloseCode.NORMAL, step.reason))]

    def _close(self, step: _Step) -> list[EngineOutput]:
        return [Close(CloseCode.NORMAL, "call ended")]

    def _fail_tools(self, step: _Step) -> list[EngineOutput]:
        out: list[EngineOutput] = []
        for request_id, waiting in self._tools.items():
            call = waiting.call
            outcome = (
                ToolOutcome.OUTCOME_UNKNOWN
                if call.kind is ToolKind.SIDE_EFFECT
                else ToolOutcome.TOOL_FAILED
            )
            out.append(ToolFinished(request_id, call.call_id, outcome, error=step.why))
        self._tools.clear()
        return out

    # -- internals ------------------------------------------------------------------------------

    def _start_message(self, resume: ResumeInfo | msgspec.UnsetType) -> bytes:
        return _queue_form(
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

    def _handshake(self, data: bytes | str, now: float) -> list[EngineOutput]:
        try:
            message, problems = self._decode_accept(data)
        except ProtocolError as exc:
            return self._handshake_failed(now, f"bad first message: {exc}", final=True)
        if isinstance(message, SessionReject):
            detail = f": {message.message}" if isinstance(message.message, str) else ""
            return self._handshake_failed(
                now, f"rejected: {message.code}{detail}", final=True, rejected=message
            )
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
        out = self._step(EngineInput.ACCEPTED, _Step(now))
        out += [_control(self._error_event(problem)) for problem in problems]
        if resumed:  # before the first event: what the outage cost, 0 included
            out.append(self.events_lost(self.outage_lost))
            self.outage_lost = 0
        out.append(AgentAccepted(message, resumed, tuple(problems)))
        return out

    def _decode_accept(
        self, data: bytes | str
    ) -> tuple[SessionAccept | SessionReject | Command | ToolResult, list[str]]:
        """Decode the first message; an accept's refused tools, unknown event types and empty
        context messages are left out and reported (the call goes on)."""
        problems: list[str] = []
        while True:
            try:
                message = _DECODE_AGENT(data)
            except ProtocolError as exc:
                found = _ITEM_PATH.match(exc.path or "")
                if exc.message_type != SessionAccept.type or found is None:
                    raise
                rest = without_item(data, found.group(1), int(found.group(2)))
                if rest is None:
                    raise
                problems.append(refusal_text(exc))
                data = rest
                continue
            if isinstance(message, SessionAccept):
                reserved = [t for t in message.tools if t.name in RESERVED_TOOL_NAMES]
                for tool in reserved:
                    problems.append(f"invalid_argument: tool name {tool.name!r} is reserved")
                if reserved:
                    message = msgspec.structs.replace(
                        message,
                        tools=[t for t in message.tools if t.name not in RESERVED_TOOL_NAMES],
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
        out: list[EngineOutput] = [
            Close(CloseCode.NORMAL if rejected else CloseCode.PROTOCOL_ERROR, "handshake failed")
        ]
        if self.accept is None or final or self._ending:
            out += self._step(EngineInput.GIVE_UP, _Step(now))
            out.append(HandshakeFailed(reason, rejected))
            return out
        delay = self._next_attempt(now)
        out += self._retry_or_give_up(delay, now)
        out.append(HandshakeFailed(reason, rejected, final=delay is None))
        if delay is not None:
            out.append(LinkDown(reason, delay))
        return out

    def _next_attempt(self, now: float) -> float | None:
        return self.backoff.next_delay(now) if not self._ending else None

    def _retry_or_give_up(self, delay: float | None, now: float) -> list[EngineOutput]:
        return self._step(EngineInput.GIVE_UP if delay is None else EngineInput.RETRY, _Step(now))

    def _lose(self, now: float, reason: str) -> list[EngineOutput]:
        # Events the lost link took but neither wrote nor reported dropped: the outage's too.
        unaccounted = self._on_link.unaccounted
        self.outage_lost += unaccounted
        self.outage_lost_total += unaccounted
        if self.state is EngineState.ENDING or self._ending or not self.resumable:
            return [*self._step(EngineInput.GIVE_UP, _Step(now)), LinkDown(reason, None)]
        self.backoff.lost(now, now - self._opened_at)
        delay = self._next_attempt(now)
        return [*self._retry_or_give_up(delay, now), LinkDown(reason, delay)]

    def _done_now(self, call_id: str, outcome: ToolOutcome, why: str) -> ToolFinished:
        request_id = self._next_tool_id  # never used again: ids never repeat within a call
        self._next_tool_id += 1
        return ToolFinished(request_id, call_id, outcome, error=why)

    @staticmethod
    def _cancel(request_id: int, reason: ToolCancelReason) -> SendText:
        return _control(ToolCancel(seq=0, t_ms=0, id=request_id, reason=reason))

    def _tool_result(self, result: ToolResult) -> list[EngineOutput]:
        waiting = self._tools.pop(result.id, None)
        if waiting is None:
            self.ignored += 1
            return [Ignored(f"tool.result {result.id}: no call waits for it (late or unknown)")]
        call_id, late = waiting.call.call_id, waiting.overdue
        if isinstance(result.error, str):
            return [
                ToolFinished(
                    result.id,
                    call_id,
                    ToolOutcome.TOOL_FAILED,
                    error=result.error,
                    late=late,
                    message=result,
                )
            ]
        return [
            ToolFinished(
                result.id, call_id, ToolOutcome.RESULT, result.result, late=late, message=result
            )
        ]

    def _refuse(self, exc: ProtocolError, data: bytes | str) -> list[EngineOutput]:
        """Answer a message that broke the protocol: too large closes the link; a command with a
        valid id gets a failed command.result; anything else an error event (the spec's
        decision refused-command-bad-id)."""
        if exc.code is ErrorCode.TOO_LARGE and exc.message_type is None:
            return [Close(CloseCode.TOO_LARGE, "message too large"), BadMessage(exc, answered=True)]
        if exc.message_type in COMMAND_TYPES:
            command_id = field_of_refused(data, "id")
            try:  # the id must pass the id rule to be echoed
                result = CommandResult(
                    seq=0,
                    t_ms=0,
                    id=command_id,
                    ok=False,
                    error=CommandError(code=exc.code, message=refusal_text(exc)),
                )
                return [_control(result), BadMessage(exc, answered=True)]
            except ProtocolError:
                pass
        return [self._report(exc), BadMessage(exc, answered=True)]

    def _report(self, error: ProtocolError) -> SendText:
        return _control(self._error_event(refusal_text(error)))

    @staticmethod
    def _error_event(message: str) -> ErrorEvent:
        return ErrorEvent(seq=0, t_ms=0, stage=ErrorStage.AGENT_LINK, message=message, fatal=False)


_ACTIONS: Final[Mapping[EngineAction, Callable[[EngineCore, _Step], list[EngineOutput]]]] = {
    EngineAction.START_HANDSHAKE: EngineCore._start_handshake,
    EngineAction.DISARM: EngineCore._disarm,
    EngineAction.END_LINK: EngineCore._end_link,
    EngineAction.CLOSE: EngineCore._close,
    EngineAction.FAIL_TOOLS: EngineCore._fail_tools,
}
