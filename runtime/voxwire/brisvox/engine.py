"""The engine side of the Brisvox link over websockets: :class:`EngineLink`.

The engine connects out to the agent, one link per call, under the document's rules: the
plaintext host rule (:func:`voxwire.hosts.check_url`), the private CA bundle, the bearer token,
2 s to connect and 2 s to handshake, a ping every 10 s and the link down after 30 s of silence,
2 s per drain of the outbound queue, 1 s to close, and reconnecting with backoff for an agent
that declared resume. Each connection's writes go through one :class:`voxwire.link.Link`:
control messages first and never dropped, events bounded and counted (``events.lost``) when
the agent falls behind, one writer, and the link taken down visibly when anything fails.
Where each call's agent is comes from the configuration, :mod:`voxwire.brisvox.engine_config`
(every name of it importable from here too).

```text
config = load_config()                               # BRISVOX_AGENT_* and [agent_link]
target = config.target(route="billing")              # a route name, never a URL
link = EngineLink(target, session_id="42", agent="luigi", ssl=config.ssl, settings=config.settings)
if await link.start():                               # False: the call runs without the agent
    link.send_user_text(epoch=1, text="hours?")      # one typed send per event
    async for notice in link:                        # the agent's commands, link changes
        ...
await link.end("hangup")
```
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, assert_never, get_args

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from voxwire._rules import JSON_SAFE_INTEGER
from voxwire.brisvox._engine_transport import (
    CONNECT_FAILURES,
    LinkCounts,
    connect_agent,
    describe,
    open_link,
)
from voxwire.brisvox.codec import decoder, encode
from voxwire.brisvox.engine_config import (
    AgentLinkConfig,
    AgentTarget,
    CABundleError,
    caller_identity,
    load_ca_bundle,
    load_config,
    sip_user_part,
)
from voxwire.brisvox.engine_core import (
    AgentAccepted,
    CloseAfter,
    CommandReceived,
    EngineCore,
    EngineOutput,
    EngineState,
    LinkDown,
    LinkSettings,
    SendEvent,
    ToolCallQueued,
    ToolFinished,
    ToolOverdue,
)
from voxwire.brisvox.errors import ErrorCode
from voxwire.brisvox.messages import (
    CallIdentity,
    Capabilities,
    ErrorEvent,
    Event,
    ServerMessage,
    SessionAccept,
    SessionEndReason,
    SessionReject,
    SessionUsage,
    ToolCancelReason,
    ToolResult,
)
from voxwire.brisvox.outputs import BadMessage, CommandFailed, HandshakeFailed
from voxwire.brisvox.roles import EngineReceives, EngineSends
from voxwire.capture import Record, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.errors import ConfigError
from voxwire.link import Link
from voxwire.observe.snapshot import Snapshot
from voxwire.observe.stats import SessionStats, wire_size
from voxwire.sansio import Close, Ignored, SendText
from voxwire.session import DeadlineTimer, Handler, HandlerCount, Handlers, Inbox

__all__ = [
    "AgentLinkConfig",
    "AgentTarget",
    "CABundleError",
    "ConfigError",
    "EngineLink",
    "LinkNotice",
    "PendingTool",
    "caller_identity",
    "load_ca_bundle",
    "load_config",
    "sip_user_part",
]

log = logging.getLogger(__name__)

_COMMAND_QUEUE: Final = 1024
"""Commands held for the application (handled ones aside) before new ones are answered
``queue_full``."""

LinkNotice: TypeAlias = CommandReceived | ToolOverdue | AgentAccepted | HandshakeFailed | LinkDown
"""What iterating an :class:`EngineLink` yields: the agent's commands and the link's changes."""


@dataclass(slots=True)
class PendingTool:
    """A remote tool call in flight; await it for its :class:`ToolFinished`."""

    request_id: int
    call_id: str
    future: asyncio.Future[ToolFinished]

    def __await__(self) -> Generator[Any, None, ToolFinished]:
        return self.future.__await__()


class EngineLink(EngineSends[None], EngineReceives, HandlerCount):
    """One call's link to its agent: connects, handshakes, keeps alive and reconnects.

    Events go out through the typed sends (``link.send_user_text(epoch=1, text="hours?")``, one
    per event the engine may send; seq and t_ms are the core's), or :meth:`send_event` with a
    message object. The agent's commands come out of the iteration (answer each with
    :meth:`answer`), or go to a handler registered with the typed ``on()``:
    ``link.on("say", speak)`` calls ``speak(say)`` and answers ok when it returns (or its
    awaitable completes), with the failure when it raises :class:`CommandFailed`. Handlers run
    as :mod:`voxwire.session` says for every role: in the reader, in arrival order; what a
    handler takes is not iterated; one that raises anything else is logged with the session and
    the message type, counted in :attr:`handler_errors`, and its command answered
    ``unavailable``.

    Args:
        target: Where the agent is (see :meth:`AgentLinkConfig.target`).
        session_id: The call's id.
        agent: The agent definition's name.
        capabilities: What the call can do.
        call: The caller identity, sent when the target opted in.
        settings: The bounds (timeouts, queues, reconnecting).
        ssl: The TLS context for wss:// (the private CA); default roots when None.
        clock: The clock every timer reads.
        record: Record every message of the call, sent and received, across its
            reconnections, into this capture (a path, ``{session_id}`` in it replaced by the
            call's id; or a ``voxwire.capture.Recorder``); see ``voxwire validate``.
    """

    def __init__(
        self,
        target: AgentTarget,
        *,
        session_id: str,
        agent: str,
        capabilities: Capabilities | None = None,
        call: CallIdentity | None = None,
        settings: LinkSettings | None = None,
        ssl: ssl_module.SSLContext | None = None,
        clock: Clock = SYSTEM_CLOCK,
        record: Record = None,
    ) -> None:
        self.target = target
        self.clock = clock
        self.settings = settings or LinkSettings()
        self.core = EngineCore(
            session_id=session_id,
            agent=agent,
            now=clock.now(),
            capabilities=capabilities,
            call=call if target.caller_identity else None,
            settings=self.settings,
        )
        self.reconnects = 0
        """Links taken up again after a loss."""
        self._ssl = ssl
        self._ws: ClientConnection | None = None
        self._link: Link | None = None
        self._done = LinkCounts()
        self._notices: Inbox[LinkNotice] = Inbox(_COMMAND_QUEUE)
        self._tools: dict[int, asyncio.Future[ToolFinished]] = {}
        self._link_tasks: set[asyncio.Task[Any]] = set()
        self._handlers = Handlers(session_id, log, refusal=CommandFailed, tasks=self._link_tasks)
        self._usage: SessionUsage | None = None
        self._timer = DeadlineTimer(
            clock, self.core.next_deadline, lambda now: self._apply(self.core.tick(now))
        )
        self._changed = asyncio.Event()
        self._retry_at: float | None = None
        self._runner: asyncio.Task[None] | None = None
        self._ended = False
        self._recorder, self._capture = open_recorder(
            record, protocol="brisvox", recorded_by="server", session_id=session_id, clock=clock
        )
        self._stats = SessionStats.of("brisvox", own="server")

    # -- state ----------------------------------------------------------------------------------

    @property
    def stats(self) -> Snapshot:
        """The call's statistics so far, across its links (docs/observability.md): what the
        engine sent as it queued it (its size with the widest envelope, which the writer
        stamps in place), what it read once its core accepted it."""
        return self._stats.snapshot()

    @property
    def accept(self) -> SessionAccept | None:
        """The agent's first accept (its tools), once the handshake succeeded."""
        return self.core.accept

    @property
    def up(self) -> bool:
        """Whether the link is open now."""
        return self.core.state is EngineState.OPEN

    @property
    def gone(self) -> bool:
        """Whether the call goes on without the agent for good."""
        return self.core.state is EngineState.GONE

    @property
    def pings(self) -> int:
        """Pings sent over the call's life."""
        return self._done.pings + (self._link.pings if self._link is not None else 0)

    @property
    def pongs(self) -> int:
        """Pongs received over the call's life."""
        return self._done.pongs + (self._link.pongs if self._link is not None else 0)

    @property
    def events_lost(self) -> int:
        """Events the agent never got over the call's life: dropped by a full queue (the agent
        fell behind) or sent while no link was up; each reported to it in ``events.lost``."""
        queued = self._link.outbound.lost_total if self._link is not None else 0
        return self._done.lost + queued + self.core.outage_lost_total

    @property
    def pending(self) -> bool:
        """Whether the current link has messages waiting to be written."""
        return self._link is not None and self._link.outbound.pending

    # -- the call's life ------------------------------------------------------------------------

    async def start(self) -> bool:
        """Connect and handshake; True when the agent took the call. False means the call runs
        without it (the reason was logged and is the first notice)."""
        if self._runner is not None:
            raise RuntimeError("start() was already called")
        self._runner = asyncio.ensure_future(self._run())
        while self.core.state in (EngineState.IDLE, EngineState.HANDSHAKING):
            self._changed.clear()
            await self._changed.wait()
        return self.core.state is EngineState.OPEN

    async def next_notice(self) -> LinkNotice | None:
        """The next command or link change, or None once the link is gone for good."""
        return await self._notices.get()

    def __aiter__(self) -> Inbox[LinkNotice]:
        return self._notices

    def send_event(self, event: Event | ErrorEvent) -> None:
        """Queue an event for the agent (seq and t_ms are stamped when written; pass 0).

        Raises ``brisvox.ProtocolError`` (nothing queued, the link unharmed) when it breaks a
        rule."""
        now = self.clock.now()
        outputs = self.core.send_event(event, now)
        if self._link is not None and len(outputs) == 1 and type(sent := outputs[0]) is SendEvent:
            self._link.event(sent)  # the common case: nothing else to apply or wake
            self._stats.on_message("server", event, now, size=len(sent.data))
            return
        self._apply(outputs)

    def _send(self, kind: type[ServerMessage], fields: dict[str, Any]) -> None:
        """The typed sends' one path: an event (or ``error``) of ``fields``, stamped when it is
        written; ``session.usage`` is kept for :meth:`end`. Anything else the engine sends has
        its own method (answer, call_tool, cancel_tool, end)."""
        message = kind(seq=JSON_SAFE_INTEGER, t_ms=JSON_SAFE_INTEGER, **fields)
        if isinstance(message, SessionUsage):  # written right before session.end, by end()
            encode(message)  # checked now, in the caller's call
            self._usage = message
            return
        if not isinstance(message, _SENDABLE):
            raise TypeError(f"the engine sends {kind.type} through its own method, not _send")
        self.send_event(message)

    def _on(self, message_type: str, handler: Handler) -> None:
        self._handlers.add(message_type, handler)

    def answer(self, received: CommandReceived, *, error: tuple[str, str] | None = None) -> None:
        """Answer a command the agent sent: ok, or ``(code, message)``. Raises
        ``brisvox.ProtocolError`` (nothing queued) when the answer breaks a rule."""
        self._apply(self.core.answer(received, error=error))

    def call_tool(
        self, name: str, arguments: dict[str, Any], *, call_id: str, epoch: int
    ) -> PendingTool:
        """Ask the agent to run a declared tool; await the returned :class:`PendingTool`.

        Raises ``brisvox.ProtocolError`` (nothing queued) when the call breaks a rule (its
        arguments too large or not JSON)."""
        future: asyncio.Future[ToolFinished] = asyncio.get_running_loop().create_future()
        outputs = self.core.call_tool(
            name, arguments, call_id=call_id, epoch=epoch, now=self.clock.now()
        )
        request_id = -1
        for out in outputs:  # the caller's PendingTool: queued, or finished at once
            if type(out) is ToolCallQueued:
                request_id = out.request_id
                self._tools[request_id] = future
            elif type(out) is ToolFinished:
                request_id = out.request_id
                future.set_result(out)
        self._apply(outputs)
        return PendingTool(request_id, call_id, future)

    def cancel_tool(
        self, request_id: int, reason: ToolCancelReason = ToolCancelReason.INTERRUPTED
    ) -> None:
        """Stop waiting for a read_only call (a barge-in); advice only for a side_effect one."""
        self._apply(self.core.cancel_tool(request_id, self.clock.now(), reason))

    async def end(
        self, reason: str = SessionEndReason.CALL_ENDED, usage: SessionUsage | None = None
    ) -> None:
        """End the call: write what is queued, ``session.usage`` (``usage``, or what
        ``send_session_usage`` gave) and ``session.end``, then close, all bounded by the close
        timeout."""
        self._ended = True
        self._apply(self.core.end_call(reason, self.clock.now(), usage or self._usage))
        link = self._link
        if link is not None and self.core.state is EngineState.ENDING:
            try:
                async with asyncio.timeout(self._real(self.settings.close_timeout)):
                    await link.wait_closed()
            except TimeoutError:
                link.abort("the call's end was not written within the close timeout")
        await self.close()

    async def close(self) -> None:
        """Stop everything now (no ``session.end``); the call goes on without the agent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
        if self._ws is not None:
            self._ws.transport.abort()
        self._apply(self.core.end_call(SessionEndReason.CALL_ENDED, self.clock.now()))
        self._timer.cancel()
        self._notices.close()
        if self._capture is not None:
            self._capture.close()

    async def __aenter__(self) -> EngineLink:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- connections ----------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                ws = await self._connect()
                if ws is not None:
                    await self._serve(ws)
                if self.core.state is not EngineState.DOWN or self._retry_at is None:
                    break
                await self.clock.sleep(self._retry_at - self.clock.now())
                self._retry_at = None
        except Exception:
            log.exception("agent %s: the link failed", self.target.url.redacted)
            self._apply(self.core.end_call(SessionEndReason.CALL_ENDED, self.clock.now()))
            self._notices.close()
        finally:
            self._changed.set()

    async def _connect(self) -> ClientConnection | None:
        try:
            ws = await connect_agent(self.target, self.settings, self.clock, self._ssl)
        except CONNECT_FAILURES as exc:
            reason = describe(exc)
            log.warning("agent %s: connect failed: %s", self.target.url.redacted, reason)
            self._apply(self.core.connect_failed(self.clock.now(), reason))
            return None
        self._ws = ws
        if self.core.link > 0:  # a reconnection
            self._stats.on_link("open", self.clock.now())
            if self._recorder is not None:
                self._recorder.link("open")
        number = self.core.link + 1
        self._link = open_link(
            ws,
            self.core,
            self.settings,
            self.clock,
            recorder=self._recorder,
            on_down=lambda down: self._link_down(number, down),
            name=f"agent {self.target.url.redacted}",
        )
        self._apply(self.core.connected(self.clock.now()))
        return ws

    def _link_down(self, number: int, down: LinkDown) -> None:
        """The link went down under the writer (drain timeout, silence, a failed write): the
        core's link-down path, then reconnecting or the fallback."""
        if self.core.link == number:
            self._apply(self.core.link_lost(self.clock.now(), down.reason))

    async def _serve(self, ws: ClientConnection) -> None:
        """Run one connection to its end: this reader beside the link's writer and keepalive."""
        number, link = self.core.link, self._link
        assert link is not None
        reason = "closed"
        try:
            async for raw in ws:
                link.heard()
                now = self.clock.now()
                if self._recorder is not None:
                    self._recorder.record("agent", raw)
                if isinstance(raw, str):
                    outputs = self.core.receive_text(raw, now)
                else:
                    outputs = self.core.receive_binary(raw, now)
                _count_read(self._stats, outputs, now, wire_size(raw))
                self._apply(outputs)
        except ConnectionClosed as exc:
            reason = str(exc)
        finally:
            await link.stop()
            self._done.add(link)
            for task in list(self._link_tasks):
                task.cancel()
            if self.core.link == number:
                self._apply(self.core.link_lost(self.clock.now(), reason))
            down = self.core.state is EngineState.DOWN  # a reconnection follows
            self._stats.on_link("lost" if down else "closed", self.clock.now())
            if self._recorder is not None and down:
                self._recorder.link("lost")
            self._ws = None
            self._link = None

    # -- the core's outputs ---------------------------------------------------------------------

    def _apply(self, outputs: list[EngineOutput]) -> None:
        link = self._link
        for out in outputs:
            match out:
                case SendEvent() | SendText() | CloseAfter() | Close():
                    if link is not None:
                        _write(link, out, self._stats, self.clock.now())
                case CommandReceived():
                    self._command(out)
                case ToolFinished(message=message, request_id=request_id):
                    if message is not None:
                        self._dispatch(ToolResult.type, message)
                    future = self._tools.pop(request_id, None)
                    if future is not None and not future.done():
                        future.set_result(out)
                case ToolCallQueued():
                    pass  # the caller holds its PendingTool
                case AgentAccepted(accept=accept, resumed=resumed, problems=problems):
                    self._dispatch(SessionAccept.type, accept)
                    where = self.target.url.redacted
                    for problem in problems:
                        log.warning("agent %s: handshake problem: %s", where, problem)
                    log.info("agent %s: %s", where, "resumed" if resumed else "accepted the call")
                    if resumed:  # start() reports the first
                        self.reconnects += 1
                        self._notify(out)
                case HandshakeFailed(rejected=rejected, reason=reason):
                    if rejected is not None:
                        self._dispatch(SessionReject.type, rejected)
                    log.warning("agent %s: handshake failed: %s", self.target.url.redacted, reason)
                    self._notify(out)
                case LinkDown():
                    self._link_down_notice(out)
                    self._notify(out)
                case ToolOverdue():
                    self._notify(out)
                case Ignored(what=what):
                    log.debug("agent %s: ignored %s", self.target.url.redacted, what)
                case BadMessage(error=error):
                    log.warning("agent %s: %s", self.target.url.redacted, error)
                case _:
                    assert_never(out)
        self._timer.update()
        self._changed.set()

    def _link_down_notice(self, down: LinkDown) -> None:
        where, reason, delay = self.target.url.redacted, down.reason, down.reconnect_in
        if self._ended:
            log.info("agent %s: link closed at the call's end", where)
        elif delay is None:
            log.warning("agent %s: link down (%s); the call goes on without it", where, reason)
        else:
            text = "agent %s: link down (%s); reconnecting in %.0f ms"
            log.warning(text, where, reason, delay * 1000)
            self._retry_at = self.clock.now() + delay

    def _notify(self, notice: ToolOverdue | AgentAccepted | HandshakeFailed | LinkDown) -> None:
        """A change of the link for the iteration (never dropped); its end once it is gone."""
        self._notices.put_always(notice)
        if self.gone:
            self._notices.close()

    def _command(self, received: CommandReceived) -> None:
        command = received.command
        if command.type in self._handlers.types:
            self._handlers.dispatch(
                command.type, command, lambda error: self._answer_handled(received, error)
            )
        elif not self._notices.put(received):
            self._apply(
                self.core.answer(
                    received, error=(ErrorCode.QUEUE_FULL, "the call's input queue is full")
                )
            )

    def _answer_handled(self, received: CommandReceived, error: BaseException | None) -> None:
        """The command's handlers finished: ok, the refusal one raised, or ``unavailable``."""
        answer: tuple[str, str] | None = None
        if isinstance(error, CommandFailed):
            answer = (error.code, error.message)
        elif error is not None:
            answer = (ErrorCode.UNAVAILABLE, f"the engine failed to apply {received.command.type}")
        self._apply(self.core.answer(received, error=answer))

    def _dispatch(self, message_type: str, message: object) -> None:
        if message_type in self._handlers.types:
            self._handlers.dispatch(message_type, message)

    # -- plumbing -------------------------------------------------------------------------------

    def _real(self, seconds: float) -> float:
        return self.clock.real_seconds(max(0.0, seconds))


def _write(
    link: Link, out: SendEvent | SendText | CloseAfter | Close, stats: SessionStats, now: float
) -> None:
    """Hand a write of the core to ``link``: an event (bounded), control, the end, a close; each
    message is counted, read back from its bytes (these are few: ``send_event``'s common case
    counts its events itself)."""
    written: Sequence[SendText] = ()
    match out:
        case SendEvent():
            link.event(out)
            written = (out,)
        case SendText():
            link.control(out)
            written = (out,)
        case CloseAfter(final=final, close=close):
            link.close(close.code, close.reason, final=final)
            written = final
        case Close(code=code, reason=reason):
            link.close(code, reason)
        case _:
            assert_never(out)
    for frame in written:
        stats.on_message("server", _DECODE_SERVER(frame.data), now, size=len(frame.data))


def _count_read(stats: SessionStats, outputs: list[EngineOutput], now: float, size: int) -> None:
    """Count what the core read of one message: the message it accepted, or nothing read."""
    for out in outputs:
        field = _READ.get(type(out))
        if field is not None and (message := getattr(out, field)) is not None:
            stats.on_message("agent", message, now, size=size)
            return
    stats.on_unreadable("agent", now, size=size)


_READ: Final[dict[type, str]] = {
    CommandReceived: "command",
    ToolFinished: "message",
    AgentAccepted: "accept",
    HandshakeFailed: "rejected",
}
"""The outputs that carry the agent's message they were read from, and its field."""
_DECODE_SERVER: Final = decoder("server")
_SENDABLE: Final = (*get_args(Event), ErrorEvent)
"""What the typed sends may send through ``EngineLink._send``."""
