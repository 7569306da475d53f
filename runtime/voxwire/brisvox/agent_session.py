"""One call seen from the agent: :class:`AgentSession`, the call's life across its links.

:class:`~voxwire.brisvox.agent.AgentServer` listens, checks each connection and answers its
``session.start``; the call's session then owns everything else: the link's reader, the
application's inbox and handlers (:mod:`voxwire.session`), the commands waiting for their
results, the running tools (:mod:`voxwire.brisvox.agent_tools`) and, when a link is lost, the
wind-down. The server hands it each link (:meth:`AgentSession.serve`,
:meth:`AgentSession.take_over`) and hears of its end through the :class:`CallHost` it gave it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, assert_never, get_args

import msgspec
from msgspec import UNSET
from websockets.exceptions import ConnectionClosed

from voxwire.brisvox._agent_transport import AgentLink
from voxwire.brisvox.agent_core import (
    AgentOutput,
    CommandAnswered,
    CommandTimedOut,
    Delivered,
    EventReceived,
    StartReceived,
    ToolCallCancelled,
    ToolCallStarted,
)
from voxwire.brisvox.agent_tools import Tool, Tools
from voxwire.brisvox.codec import encode
from voxwire.brisvox.constants import (
    END_COMMAND_EXTRA_MS,
    TRANSFER_COMMAND_EXTRA_MS,
    CloseCode,
)
from voxwire.brisvox.errors import ErrorCode
from voxwire.brisvox.messages import (
    AgentMessage,
    Command,
    CommandResult,
    End,
    SessionAccept,
    SessionEnd,
    SessionStart,
    Transfer,
)
from voxwire.brisvox.outputs import BadMessage, CommandFailed, EventsDropped, HandshakeFailed
from voxwire.brisvox.roles import AgentReceives, AgentSends
from voxwire.capture import Recorder
from voxwire.clock import Clock
from voxwire.errors import SessionClosed
from voxwire.observe.metrics import Metrics
from voxwire.observe.snapshot import Snapshot
from voxwire.observe.stats import SessionStats, wire_size
from voxwire.sansio import Close, Ignored, LinkDown, SendText
from voxwire.session import DeadlineTimer, Handler, Handlers, Inbox, SessionCounts

__all__ = [
    "AgentLink",
    "AgentSession",
    "CallHost",
    "CallState",
    "CommandTimeout",
    "LinkDown",
    "Resumed",
    "SessionEvent",
]

log = logging.getLogger("voxwire.brisvox.agent")


@dataclass(frozen=True, slots=True)
class Resumed:
    """The call's lost link was taken up again (not on the wire; the server's ``events.lost``
    follows). ``seen_seq`` is the last seq this side read on the lost link."""

    attempt: int
    previous_seq: int
    seen_seq: int
    down_ms: int
    seq: int


SessionEvent: TypeAlias = Delivered | EventsDropped | Resumed | LinkDown
"""What iterating an :class:`AgentSession` yields; the last one is a SessionEnd, or a LinkDown
when the call ends without one (its link went down and was not resumed in time, or the server
shut down)."""


class CallState(msgspec.Struct, frozen=True, kw_only=True):
    """A call as data that can move to another agent process: what it needs to take the call
    up again when the engine's resumption lands there (the engine keeps the rest)."""

    start: SessionStart
    """The call's first ``session.start``."""
    version: int
    accept: SessionAccept
    """The ``session.accept`` sent for the call (its event subscription goes on)."""
    commands: int
    """Commands sent so far: the next one's id is ``c{commands + 1}`` (ids never repeat)."""
    resumes: int
    seen_seq: int


class CommandTimeout(CommandFailed, TimeoutError):
    """No ``command.result`` in time: the command may or may not have been applied
    (``outcome_unknown``). It is never retried; repeat a transfer only with the same id."""

    def __init__(self, command_id: str, timeout: float) -> None:
        super().__init__(
            ErrorCode.OUTCOME_UNKNOWN,
            f"no result for command {command_id!r} within {timeout:g} s; "
            "it may or may not have been applied",
        )
        self.command_id = command_id


@dataclass(frozen=True, slots=True)
class CallHost:
    """What a call needs of the server that holds it (the server builds one for each call)."""

    clock: Clock
    command_timeout: float
    """Seconds a command waits for its result, by default."""
    side_effect_grace: float
    """Seconds a side_effect tool may run on once its link was lost."""
    event_queue: int
    """Events held for the application before new ones are dropped."""
    tools: Mapping[str, Tool]
    tasks: set[asyncio.Task[Any]]
    """Where the call's tasks are tracked (the server gathers them when it closes)."""
    park: Callable[[AgentSession], bool]
    """The call's link was lost: park the call for a resumption (True), or not (False)."""
    forget: Callable[[AgentSession], None]
    """The call is over: the server lets it go."""
    metrics: Metrics | None = None
    """The server's metrics: the call's statistics are read there while it lives."""
    changed: Callable[[AgentSession], None] | None = None
    """The call's resume state changed (with a store: voxwire.cluster)."""


class AgentSession(AgentSends[Coroutine[Any, Any, CommandResult]], AgentReceives, SessionCounts):
    """One call seen from the agent: its ``session.start``, its events, its commands.

    Commands go out through the typed sends (``await session.send_say(text="Hello.")``, one per
    command; the id is the session's, ``c1``, ``c2``...), or :meth:`command` with a message
    object (a chosen ``id``, a ``timeout``): one path. Iterate the session (``async for event
    in session``) for the events in the server's order; the last one is the server's
    ``SessionEnd`` or a :class:`LinkDown`. Commands wait for their ``command.result``: ok
    returns it, a refusal raises ``CommandFailed``, no answer in time raises
    ``CommandTimeout``, a closed or parked link :class:`~voxwire.errors.SessionClosed`.

    A handler registered with the typed ``on()`` (``session.on("user.text", handle)``) runs as
    :mod:`voxwire.session` says for every role: in the reader, in arrival order (an ``async``
    one as a task); what it handles is not iterated, but ``session.end`` reaches both; a
    handler that raises is logged with the session and the message type, counted in
    :attr:`handler_errors`, and the call goes on.
    """

    def __init__(
        self,
        host: CallHost,
        start: SessionStart,
        version: int,
        accept: SessionAccept,
        link: AgentLink,
    ) -> None:
        self.start = start
        """The call's first ``session.start``."""
        self.version = version
        """The protocol version picked."""
        self.accept = accept
        """The ``session.accept`` sent for the call."""
        self.resumes = 0
        """How many times the call's link was taken up again."""
        self._host = host
        self._inbox: Inbox[SessionEvent] = Inbox(host.event_queue, gap=EventsDropped)
        self._handlers = Handlers(start.session_id, log, tasks=host.tasks)
        self._tools = Tools(host.tools, host.clock, host.side_effect_grace, host.tasks)
        self._next_id = 0
        self._pending: dict[str, asyncio.Future[CommandResult]] = {}
        self._ended = False
        self._seen_seq = start.seq
        self._recorder = link.recorder
        self._capture = link.capture
        self._moved: str | None = None  # handed over to another process: why
        self._link: AgentLink | None = None
        self._stats = SessionStats.of("brisvox", own="agent")
        if host.metrics is not None:
            host.metrics.opened(
                self,
                self._stats,
                lambda: self.handler_errors,
                session_id=start.session_id,
                clock=host.clock,
            )
        self._handshake(start, accept)
        self._attach(link)

    @property
    def id(self) -> str:
        """The call's session id."""
        return self.start.session_id

    @property
    def closed(self) -> bool:
        """Whether no link carries the call now (parked or over)."""
        return self._link is None

    @property
    def parked(self) -> bool:
        """Whether the call waits for the server to resume it."""
        return self._link is None and not self._ended

    @property
    def ended(self) -> bool:
        """Whether the call is over (its last event is queued)."""
        return self._ended

    @property
    def recorder(self) -> Recorder | None:
        """Where the call's messages are recorded, across its links (``record``), or None."""
        return self._recorder

    @property
    def stats(self) -> Snapshot:
        """The call's statistics so far, across its links (docs/observability.md): what the
        agent sent as it queued it, what it read once its core accepted it."""
        return self._stats.snapshot()

    # -- events ---------------------------------------------------------------------------------

    async def next_event(self) -> SessionEvent | None:
        """The next event, or None once the call's last event was taken."""
        return await self._inbox.get()

    def __aiter__(self) -> Inbox[SessionEvent]:
        return self._inbox

    # -- commands -------------------------------------------------------------------------------

    def _send(
        self, kind: type[AgentMessage], fields: dict[str, Any]
    ) -> Coroutine[Any, Any, CommandResult]:
        """The typed sends' one path: a command of ``fields``, sent by :meth:`command`."""
        message = kind(**fields)
        if not isinstance(message, _COMMANDS):
            raise TypeError(f"the agent sends {kind.type} itself, not through _send")
        return self.command(message)

    def _on(self, message_type: str, handler: Handler) -> None:
        self._handlers.add(message_type, handler)

    async def command(self, command: Command, *, timeout: float | None = None) -> CommandResult:
        """Send ``command`` and wait for its result. An id ``c1``, ``c2``... is added when it has
        none (give one to repeat a transfer after a timeout); ``timeout`` is the command
        timeout by default (longer for ``end`` and ``transfer``). Raises
        ``brisvox.ProtocolError`` (nothing sent) when it breaks a rule."""
        link = self._link
        if link is None:
            state = "parked" if self.parked else "closed"
            raise SessionClosed(f"session {self.id}: the link is {state}")
        if command.id is UNSET:
            self._next_id += 1
            command = msgspec.structs.replace(command, id=f"c{self._next_id}")
            if self._host.changed is not None:
                self._host.changed(self)
        assert isinstance(command.id, str)
        if timeout is None:
            timeout = self._host.command_timeout
            if isinstance(command, End | Transfer):
                timeout += (
                    END_COMMAND_EXTRA_MS if isinstance(command, End) else TRANSFER_COMMAND_EXTRA_MS
                ) / 1000
        actions = link.core.send_command(command, self._host.clock.now(), timeout)
        future: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        self._pending[command.id] = future
        assert link.timer is not None
        link.timer.update()
        try:
            await link.perform(actions)
            result = await future
        finally:
            self._pending.pop(command.id, None)
            link.core.forget_command(command.id)
        if not result.ok:
            error = result.error
            if error is None or error is UNSET:
                raise CommandFailed(ErrorCode.BAD_MESSAGE, "failed")
            raise CommandFailed(error.code, error.message)
        return result

    # -- the call's life (driven by the server) -------------------------------------------------

    async def serve(self, link: AgentLink) -> None:
        """Read ``link`` (the call's current one) until it closes, then wind it down: the call
        is parked for a resumption, or over."""
        # The loop runs once per message: what it reads on every pass is bound here.
        core, out, clock, recorder = link.core, link.out, self._host.clock, self._recorder
        inbox, stats = self._inbox, self._stats
        try:
            async for raw in link.ws:
                now = clock.now()
                out.heard(now)
                if recorder is not None:
                    recorder.record("server", raw)
                if isinstance(raw, str):
                    outputs = core.receive_text(raw, now)
                else:
                    outputs = core.receive_binary(raw, now)
                _count_read(stats, outputs, now, wire_size(raw))
                self._apply(link, outputs)
                if 2 * len(inbox) >= inbox.maxsize:
                    # Half the application's queue waits: websockets hands over buffered
                    # messages without yielding, so let the application take some before the
                    # queue overflows (one loop turn, never a wait on it).
                    await asyncio.sleep(0)
        except ConnectionClosed:
            pass
        finally:
            if link.timer is not None:
                link.timer.cancel()
            down = link.out.down  # the writer took it down (drain timeout, silence, a fault)
            self._link_down(link, down.reason if down else "the link closed")
            if self._ended:
                self._close_capture()

    def take_over(
        self, link: AgentLink, start: SessionStart, version: int, accept: SessionAccept
    ) -> None:
        """A resumption was accepted on ``link`` with ``accept``: the call goes on there (a
        half-open link it still had is closed), and the application hears :class:`Resumed`."""
        old = self._link
        if old is not None:  # a half-open link: the resumption takes the call over
            self._wind_down(old, "superseded by a resumed link")
            old.out.close(CloseCode.NORMAL, "superseded by a resumed link")
        assert not isinstance(start.resume, msgspec.UnsetType) and start.resume is not None
        resume = start.resume
        self._stats.on_link("open", self._host.clock.now())
        self._handshake(start, accept)
        self._attach(link)
        self.version = version
        self.resumes += 1
        log.info(
            "session %s: resumed (attempt %d, down %d ms)", self.id, resume.attempt, resume.down_ms
        )
        self._inbox.put(
            Resumed(
                attempt=resume.attempt,
                previous_seq=resume.previous_seq,
                seen_seq=self._seen_seq,
                down_ms=resume.down_ms,
                seq=start.seq,
            )
        )
        if start.type in self._handlers.types:  # the resumption's session.start
            self._handlers.dispatch(start.type, start)

    def leave(self, reason: str) -> None:
        """The agent leaves the call: its link closes with 1000 (the call goes on without the
        agent), or a parked call ends; the application hears :class:`LinkDown`."""
        link = self._link
        if link is None:
            self.give_up(reason)
        else:
            link.out.close(CloseCode.NORMAL, reason)

    def state(self) -> CallState:
        """The call's resume state, for another process to take it over."""
        return CallState(
            start=self.start,
            version=self.version,
            accept=self.accept,
            commands=self._next_id,
            resumes=self.resumes,
            seen_seq=self._link.core.last_seq if self._link is not None else self._seen_seq,
        )

    @classmethod
    def taken_over(
        cls,
        host: CallHost,
        state: CallState,
        link: AgentLink,
        start: SessionStart,
        version: int,
        accept: SessionAccept,
    ) -> AgentSession:
        """The call of ``state``, held by another process until now, taken up on ``link``
        (whose resumption ``start`` was answered with ``accept``): the application hears
        :class:`Resumed`."""
        session = cls(host, state.start, state.version, state.accept, link)
        session._next_id = state.commands
        session.resumes = state.resumes
        session._seen_seq = state.seen_seq
        session._link = None  # the call resumes on the link, as a parked call does
        session.take_over(link, start, version, accept)
        return session

    def hand_over(self, code: int, reason: str) -> None:
        """The call moved to another process (its state is in the store): the link closes with
        ``code`` (the engine reconnects, and lands elsewhere), and once it is closed the
        application hears :class:`LinkDown`. The events the engine wrote before it read the
        close are still delivered here: none is lost between the two processes."""
        self._moved = reason
        link = self._link
        if link is None:
            self._end(LinkDown(reason))
        else:
            link.out.close(code, reason)

    def give_up(self, reason: str) -> None:
        """The call ends without its link (the resume window passed, the server closes)."""
        self._end(LinkDown(reason))

    # -- the core's outputs ---------------------------------------------------------------------

    def _apply(self, link: AgentLink, outputs: list[AgentOutput]) -> None:
        handlers = self._handlers
        for out in outputs:
            match out:
                case EventReceived(message=message):
                    message_type = message.type
                    handled = message_type in handlers.types and handlers.dispatch(
                        message_type, message
                    )
                    if type(message) is SessionEnd:
                        self._end(message)
                    elif not handled and not self._inbox.put(message):
                        log.debug("session %s: event queue full, %s dropped", self.id, message_type)
                case ToolCallStarted(call=call):
                    handlers.dispatch(call.type, call)
                    self._tools.start(self, link, call)
                case ToolCallCancelled(message=cancel):
                    if cancel is not None:
                        handlers.dispatch(cancel.type, cancel)
                    self._tools.cancel(out)
                case CommandAnswered(result=result):
                    handlers.dispatch(result.type, result)
                    future = self._pending.get(result.id)
                    if future is not None and not future.done():
                        future.set_result(result)
                case CommandTimedOut(command_id=command_id, timeout=timeout):
                    future = self._pending.get(command_id)
                    if future is not None and not future.done():
                        future.set_exception(CommandTimeout(command_id, timeout))
                case SendText():  # an answer the core makes itself
                    link.queue(out)
                case Ignored(what=what):
                    log.debug("session %s: ignored %s", self.id, what)
                case BadMessage(error=error):
                    log.warning("session %s: %s", self.id, error)
                case StartReceived() | HandshakeFailed() | Close():
                    raise AssertionError(f"{out!r} once the link is open")
                case _:
                    assert_never(out)

    # -- links ----------------------------------------------------------------------------------

    def _attach(self, link: AgentLink) -> None:
        self._link = link
        link.stats = self._stats
        link.timer = DeadlineTimer(
            self._host.clock,
            link.core.next_deadline,
            lambda now: self._apply(link, link.core.tick(now)),
        )

    def _handshake(self, start: SessionStart, accept: SessionAccept) -> None:
        """Count the link's handshake, which the server answered before the call's session
        took the link (the sizes are those of the messages as voxwire writes them)."""
        now = self._host.clock.now()
        self._stats.on_message("server", start, now, size=len(encode(start)))
        self._stats.on_message("agent", accept, now, size=len(encode(accept)))

    def _wind_down(self, link: AgentLink, reason: str) -> None:
        """A link is gone: commands fail, running tools hear ``link_closed``."""
        link.stats = None
        if self._link is link:
            self._link = None
            self._seen_seq = link.core.last_seq
        link.core.closed()  # nothing to write on a link that is gone: it forgets its waits
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(SessionClosed(f"session {self.id}: {reason}"))
        self._tools.link_closed()

    def _link_down(self, link: AgentLink, reason: str) -> None:
        if self._link is not link:
            return  # a resumption took the call over
        self._wind_down(link, reason)
        if self._ended:
            return
        if self._moved is not None:
            self._end(LinkDown(self._moved))
        elif self._host.park(self):
            self._stats.on_link("lost", self._host.clock.now())
            if self._recorder is not None:
                self._recorder.link("lost")
        else:
            self._end(LinkDown(reason))

    def _end(self, event: SessionEnd | LinkDown) -> None:
        if self._ended:
            return
        self._host.forget(self)
        if self._host.metrics is not None:
            self._host.metrics.closed(self)
        self._ended = True
        self._inbox.close(event)
        if self._link is None:  # else the link's reader closes it when the link is gone
            self._close_capture()

    def _close_capture(self) -> None:
        if self._capture is not None:
            self._capture.close()
            self._capture = None


def _count_read(stats: SessionStats, outputs: list[AgentOutput], now: float, size: int) -> None:
    """Count what the core read of one message: the message it accepted, or nothing read."""
    for out in outputs:
        field = _READ.get(type(out))
        if field is not None and (message := getattr(out, field)) is not None:
            stats.on_message("server", message, now, size=size)
            return
    stats.on_unreadable("server", now, size=size)


_READ: Final[dict[type, str]] = {
    EventReceived: "message",
    CommandAnswered: "result",
    ToolCallStarted: "call",
    ToolCallCancelled: "message",
}
"""The outputs that carry the server's message they were read from, and its field."""
_COMMANDS: Final = get_args(Command)
"""What the typed sends may send through ``AgentSession._send``."""
