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
link's (:mod:`voxwire.link`). The link's bounds and the reconnect policy are
:mod:`voxwire.brisvox.engine_settings`, the remote tool calls the core waits for
:mod:`voxwire.brisvox.engine_tools`; both modules' names are importable from here too.

The call's life with its agent is the spec's table
:data:`~voxwire.brisvox.machines.ENGINE_MACHINE`: for each ``EngineState`` the ``EngineInput`` it
takes, the state that follows and the ``EngineAction`` run on the way, through
:func:`voxwire.machine.step`; an input a state does not list is refused there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import msgspec
from msgspec import UNSET

from voxwire.brisvox._engine_wire import (
    DECODE_AGENT,
    WIDEST,
    EventCount,
    LostReport,
    SendEvent,
    control,
    error_event,
    queue_form,
    read_answer,
    refused,
    reported,
)
from voxwire.brisvox.constants import PROTOCOL_NAME, SUPPORTED_VERSIONS, CloseCode
from voxwire.brisvox.engine_settings import Backoff, LinkSettings, backoff_factor
from voxwire.brisvox.engine_tools import (
    ToolCallQueued,
    ToolCalls,
    ToolFinished,
    ToolOutcome,
    ToolOverdue,
    idempotency_key,
)
from voxwire.brisvox.errors import ErrorCode, ProtocolError
from voxwire.brisvox.machines import ENGINE_MACHINE, EngineAction, EngineInput, EngineState
from voxwire.brisvox.messages import (
    CallIdentity,
    Capabilities,
    Command,
    CommandError,
    CommandResult,
    End,
    ErrorEvent,
    Event,
    EventsLost,
    ResumeInfo,
    SessionAccept,
    SessionEnd,
    SessionReject,
    SessionStart,
    SessionUsage,
    ToolCancelReason,
    ToolResult,
)
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
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
        self.outage_lost = 0
        """Events that came while no link was up (reported in the next link's events.lost)."""
        self.outage_lost_total = 0
        """The same, over the call's life."""
        self._on_link = EventCount()
        self._subscription: frozenset[str] | None = None
        self._tools = ToolCalls(session_id, self.settings)
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
        return self._tools.waiting

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
        elif type(frame) is LostReport:
            self._on_link.reported += frame.count
        self._seq += 1
        self._last_written_seq = self._seq
        if self._origin is None:  # t_ms counts from the call's first write: 0 in session.start
            self._origin = now
        t_ms = max(0, int((now - self._origin) * 1000))
        return SendText(frame.data.replace(WIDEST, b',"seq":%d,"t_ms":%d' % (self._seq, t_ms), 1))

    @staticmethod
    def events_lost(count: int) -> SendText:
        """The ``events.lost`` the link writes where ``count`` events were dropped."""
        return LostReport(queue_form(EventsLost(seq=0, t_ms=0, count=count)), count)

    def receive_binary(self, data: bytes, now: float) -> list[EngineOutput]:
        """A binary frame arrived: answered with an error event, the link stays."""
        error = ProtocolError(ErrorCode.BAD_MESSAGE, "binary frames are not part of the protocol")
        if self.state is EngineState.HANDSHAKING:
            return self._handshake_failed(now, f"bad first message: {error}")
        return [*reported(error)]

    def receive_text(self, data: bytes | str, now: float) -> list[EngineOutput]:
        """A text message arrived from the agent."""
        if self.state is EngineState.HANDSHAKING:
            return self._handshake(data, now)
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            self.ignored += 1
            return [Ignored(f"a message while the link is {self.state.value}")]
        try:
            message = DECODE_AGENT(data)
        except ProtocolError as exc:
            return [*refused(exc, data)]
        if isinstance(message, ToolResult):
            return self._tool_result(message)
        if isinstance(message, SessionAccept | SessionReject):
            error = ProtocolError(
                ErrorCode.NOT_READY,
                "a handshake message after the handshake",
                message_type=message.type,
            )
            return [*reported(error)]
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
            frame = control(
                CommandResult(
                    seq=0,
                    t_ms=0,
                    id=command.id,
                    ok=error is None,
                    error=CommandError(code=error[0], message=error[1]) if error else UNSET,
                )
            )
        elif error is not None:
            frame = control(error_event(f"{error[0]}: {command.type}: {error[1]}"))
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
        data = queue_form(event)
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
            *((control(usage),) if usage is not None else ()),
            control(SessionEnd(seq=0, t_ms=0, reason=reason)),
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
        if self.state is not EngineState.OPEN:
            link_down = "the agent link is down"
            return [self._tools.finished_now(call_id, ToolOutcome.TOOL_FAILED, link_down)]
        return [*self._tools.call(name, arguments, call_id=call_id, epoch=epoch, now=now)]

    def cancel_tool(
        self, request_id: int, now: float, reason: ToolCancelReason = ToolCancelReason.INTERRUPTED
    ) -> list[EngineOutput]:
        """Stop waiting for a read_only call (a barge-in); for a side_effect call the cancel is
        advice and the link keeps waiting for its late result."""
        return [*self._tools.cancel(request_id, reason)]

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
        return [*self._tools.due(now)]

    def next_deadline(self) -> float | None:
        """When :meth:`tick` must run next, or None."""
        if self.state is EngineState.HANDSHAKING:
            return self._deadline
        if self.state not in (EngineState.OPEN, EngineState.ENDING):
            return None
        return self._tools.next_deadline()

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
        self._on_link = EventCount()
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
        return [*self._tools.fail_all(step.why)]

    # -- internals ------------------------------------------------------------------------------

    def _start_message(self, resume: ResumeInfo | msgspec.UnsetType) -> bytes:
        return queue_form(
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
            message, problems = read_answer(data)
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
            self._tools.declare(message.tools)
        events = message.events
        self._subscription = None if events is UNSET else frozenset(events)
        out = self._step(EngineInput.ACCEPTED, _Step(now))
        out += [control(error_event(problem)) for problem in problems]
        if resumed:  # before the first event: what the outage cost (counted: not the link's)
            out.append(control(EventsLost(seq=0, t_ms=0, count=self.outage_lost)))
            self.outage_lost = 0
        out.append(AgentAccepted(message, resumed, tuple(problems)))
        return out

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

    def _tool_result(self, result: ToolResult) -> list[EngineOutput]:
        finished = self._tools.result(result)
        if finished is None:
            self.ignored += 1
            return [Ignored(f"tool.result {result.id}: no call waits for it (late or unknown)")]
        return [finished]


_ACTIONS: Final[Mapping[EngineAction, Callable[[EngineCore, _Step], list[EngineOutput]]]] = {
    EngineAction.START_HANDSHAKE: EngineCore._start_handshake,
    EngineAction.DISARM: EngineCore._disarm,
    EngineAction.END_LINK: EngineCore._end_link,
    EngineAction.CLOSE: EngineCore._close,
    EngineAction.FAIL_TOOLS: EngineCore._fail_tools,
}
