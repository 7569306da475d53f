"""One OVP session as the gateway's application sees it: :class:`GatewaySession`, across the
client's connections.

:class:`~voxwire.ovp.gateway.Gateway` serves the endpoint, checks each connection's
subprotocol and token, and hands the connection to its session (:meth:`GatewaySession.serve`);
the session owns the rest: its core, its links, the application's inbox and handlers
(:mod:`voxwire.session`), its timer, and the application's task. It hears the gateway through
the :class:`GatewayHost` it was given.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, TypeVar, assert_never

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voxwire.capture import Record, open_recorder
from voxwire.clock import Clock
from voxwire.link import Link, Put
from voxwire.observe.metrics import Metrics
from voxwire.observe.snapshot import Snapshot
from voxwire.observe.stats import SessionStats
from voxwire.ovp import (
    STREAM_WINDOW_EVENTS,
    AgentConfig,
    AudioFrame,
    CallInfo,
    ClientMessage,
    CostBreakdown,
    ErrorCode,
    ErrorEvent,
    Message,
    ServerMessage,
    SessionEnd,
    SessionEndReason,
    SessionPatch,
    SessionStart,
)
from voxwire.ovp._gateway_connection import GatewayConnection
from voxwire.ovp._session import AudioIn, Sent, SessionOver, SessionStateError
from voxwire.ovp._transport import count_read, open_link, perform
from voxwire.ovp.gateway_core import (
    ClientEvent,
    GatewayCore,
    GatewayOutput,
    GatewayState,
    LinkDropped,
    Resumed,
    ToLink,
)
from voxwire.ovp.gateway_periodic import QualityMeter
from voxwire.ovp.gateway_state import TakenOver, restore
from voxwire.ovp.gateway_tokens import TokenClaims
from voxwire.ovp.roles import GatewayReceives, GatewaySends
from voxwire.sansio import Ignored, SendBinary
from voxwire.session import DeadlineTimer, Handler, Handlers, Inbox, SessionCounts

__all__ = ["GatewayConnection", "GatewayHost", "GatewaySession"]

M = TypeVar("M", bound=Message)

log = logging.getLogger("voxwire.ovp.gateway")

_OVER: Final = GatewayState.OVER
_NO_DEADLINE: Final = frozenset({AudioIn, ToLink, Sent})
"""Outputs that never move one of the core's deadlines: a frame in or out, an event sent (but
session.start, which starts the 5 s cadence: it sets the timer itself). An empty output may
(a frame error)."""


@dataclass(frozen=True, slots=True)
class GatewayHost:
    """What a session needs of the gateway that holds it (the gateway builds one)."""

    clock: Clock
    handler: Callable[[GatewaySession], Awaitable[None]]
    """The application, run once for the session."""
    accept_patch: Callable[[SessionPatch], str | None] | None
    max_events: int
    write_timeout: float
    keepalive: float
    record: Record
    bury: Callable[[GatewaySession], None]
    """The session is over: the gateway keeps its id as a tombstone for a while."""
    forget: Callable[[GatewaySession], None]
    """The tombstone's time is up: the gateway lets the session go."""
    metrics: Metrics | None = None
    """The gateway's metrics: the session's statistics are read there while it lives."""
    persist: Callable[[GatewaySession], None] | None = None
    """The session sent events not saved yet (with a store: voxwire.cluster)."""


class GatewaySession(GatewaySends[ServerMessage], GatewayReceives, SessionCounts):
    """One session as the gateway's application sees it, across the client's reconnects.

    Iterate it for the client's events (:class:`~voxwire.ovp.ClientMessage`) and audio
    (:class:`~voxwire.ovp.AudioFrame`, its PCM 640 bytes) in arrival order; the iteration
    ends when the session is over. A handler registered with :meth:`on` runs as
    :mod:`voxwire.session` says for every role: in the reader, in arrival order (an ``async``
    one as a task); what a handler takes is not iterated; one that raises is logged with the
    session and the event type and counted in :attr:`handler_errors`.
    It sends with one typed method per server event (``session.send_agent_output(turn_id=...,
    text=..., final=True)``: keyword arguments, the event's own fields), each returning the
    stamped event. The sending methods never wait: what they write is queued on the current
    connection, and kept for replay while there is none.
    """

    def __init__(
        self, host: GatewayHost, claims: TokenClaims, taken: TakenOver | None = None
    ) -> None:
        self.claims = claims
        self.session_id = claims.session_id
        self._host = host
        self._clock = host.clock
        self._stats = SessionStats.of("ovp", own="server")
        measure = QualityMeter(self._stats, "client", self._rtt)
        self._core = (
            GatewayCore(
                claims.session_id,
                epoch=time.time() - self._clock.now(),
                accept_patch=host.accept_patch,
                window=STREAM_WINDOW_EVENTS,
                measure=measure,
            )
            if taken is None  # else taken over from another process, as it stood there
            else restore(
                taken,
                now=self._clock.now(),
                wall=time.time(),
                accept_patch=host.accept_patch,
                measure=measure,
            )
        )
        if host.metrics is not None:
            host.metrics.opened(
                self,
                self._stats,
                lambda: self.handler_errors,
                session_id=self.session_id,
                clock=self._clock,
            )
        self.saved_seq = self._core.last_seq
        """The last event the store holds (with a store; the gateway's persister keeps it)."""
        self._moved = False
        self._links: dict[int, Link] = {}
        self._unlinked = asyncio.Event()
        """Set while no connection carries the session."""
        self._unlinked.set()
        self._ended = asyncio.Event()
        """Set once the session is over (ended, failed or aborted)."""
        self._inbox: Inbox[ClientMessage | AudioFrame] = Inbox(
            host.max_events, before_wait=self._flush_links
        )
        self._handlers = Handlers(claims.session_id, log)
        # One loop timer at the core's next deadline, rather than a task per session.
        self._timer = DeadlineTimer(self._clock, self._core.next_deadline, self._tick)
        self._buried = False
        self._handler: asyncio.Task[None] | None = None  # let go once it returns
        self._recorder, self._capture = open_recorder(
            host.record,
            protocol="ovp",
            recorded_by="server",
            session_id=self.session_id,
            clock=self._clock,
        )
        self.ignored = 0

    def __repr__(self) -> str:
        return f"GatewaySession({self.session_id!r}, tenant={self.claims.tenant_id!r})"

    # ------------------------------------------------------------------ application interface

    def start(self, call: CallInfo, agent: AgentConfig) -> SessionStart:
        """Send ``session.start`` (seq 0) with the call, the agent and the audio invariants."""
        start = self._sent(self._core.start(call, agent, self._clock.now()), SessionStart)
        self._set_timer()  # the 5 s events' deadlines begin
        return start

    def _send(self, kind: type[ServerMessage], fields: dict[str, Any]) -> ServerMessage:
        """The one send path of every typed ``send_*`` method: one server event of ``fields``;
        seq, ts and session_id are stamped here (session.start, error and session.end have no
        typed send: :meth:`start`, :meth:`fail` and :meth:`end` send them).

        Raises ``TypeError`` for a wrong field, :class:`~voxwire.ovp.ProtocolError` for a value
        the spec refuses, ``SessionStateError`` outside the session.
        """
        return self._sent(self._core.send(kind, fields, self._clock.now()), kind)

    def send_audio(self, pcm: bytes | bytearray | memoryview, *, flags: int = 0) -> None:
        """Send 20 ms of agent audio (640 bytes of PCM); dropped while the client is away."""
        now = self._clock.now()
        out = self._core.send_audio(pcm, now, flags=flags)
        item = out[0] if len(out) == 1 else None
        # The audio path: the frame goes as control, and no deadline moves.
        if type(item) is ToLink and type(frame := item.action) is SendBinary:
            link = self._links.get(item.link)
            if link is not None:
                link.control(frame)
                self._stats.on_frame("server", self._core.frame_sent, now)
        elif out:
            self._perform(out)

    def fail(
        self,
        code: str,
        message: str,
        *,
        recoverable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> ErrorEvent:
        """Send an ``error``; an unrecoverable code then ends the session (``session.end``)."""
        out = self._core.fail(
            code, message, self._clock.now(), recoverable=recoverable, details=details
        )
        return self._sent(out, ErrorEvent)

    def end(
        self, reason: str = SessionEndReason.AGENT_ENDED, *, error_code: str | None = None
    ) -> SessionEnd:
        """Send ``session.end`` with the final stats and close the connection with 1000."""
        return self._sent(
            self._core.end(reason, self._clock.now(), error_code=error_code), SessionEnd
        )

    def set_quality(
        self, *, packet_loss_pct: float, jitter_ms: float, rtt_ms: float, mos: float
    ) -> None:
        """The values of the ``call.quality.update`` sent every 5 s from now on, instead of
        what the gateway measures itself (docs/observability.md, the periodic events)."""
        self._core.set_quality(
            packet_loss_pct=packet_loss_pct, jitter_ms=jitter_ms, rtt_ms=rtt_ms, mos=mos
        )

    def set_cost(self, breakdown: CostBreakdown) -> None:
        """The running cost of the ``agent.cost.tick`` sent every 5 s (zeros until set) and of
        the final stats."""
        self._core.set_cost(breakdown)

    @property
    def agent(self) -> AgentConfig | None:
        """The agent's configuration, with the accepted ``session.update`` patches applied."""
        return self._core.agent

    @property
    def caller_context(self) -> dict[str, Any] | None:
        """The last ``caller_context`` a patch supplied."""
        return self._core.caller_context

    @property
    def last_seq(self) -> int:
        """The seq of the last event sent (-1 before ``session.start``): where a session taken
        over from another process stands."""
        return self._core.last_seq

    @property
    def connected(self) -> bool:
        """Whether the client is connected now."""
        return self._core.current_link is not None

    @property
    def over(self) -> SessionOver | None:
        """How the session ended, once it did."""
        return self._core.over

    @property
    def stats(self) -> Snapshot:
        """The session's statistics so far, across the client's connections
        (docs/observability.md): what it sent as it sent it (a replay is not sent again), what
        it read once its core accepted it."""
        return self._stats.snapshot()

    def __aiter__(self) -> Inbox[ClientMessage | AudioFrame]:
        return self._inbox

    def _rtt(self) -> float | None:
        """The round trip of the current link's last keepalive ping, in seconds."""
        number = self._core.current_link
        link = None if number is None else self._links.get(number)
        return None if link is None else link.rtt

    def _flush_links(self) -> None:
        """The application waits for its next item: what it sent meanwhile leaves now, at once."""
        for link in self._links.values():
            link.flush()

    def _on(self, message_type: str, handler: Handler) -> None:
        """Register ``handler`` for ``message_type`` (:meth:`on` checked it: a client event)."""
        self._handlers.add(message_type, handler)

    # ------------------------------------------------------------------ adapter

    def _sent(self, out: list[GatewayOutput], kind: type[M]) -> M:
        self._perform(out)
        message = None
        for item in out:  # the first event sent (the core puts it first)
            if type(item) is Sent:
                message = item.message
                break
        if not isinstance(message, kind):
            assert self._core.over is not None
            raise SessionStateError(f"the session ended instead: {self._core.over.detail}")
        return message

    def _perform(self, out: list[GatewayOutput]) -> None:
        for item in out:
            match item:
                case ToLink(link=number, action=action, stream=stream):
                    link = self._links.get(number)
                    if link is not None:
                        put = perform(link, action, event=stream)
                        assert put is not Put.FULL, "the core hands out no more than the window"
                case Sent(message=message, size=size):  # the caller's to return
                    self._stats.on_message("server", message, self._clock.now(), size=size)
                case ClientEvent(message=message):
                    message_type = message.type
                    handlers = self._handlers
                    if not (
                        message_type in handlers.types and handlers.dispatch(message_type, message)
                    ):
                        self._deliver(message)
                case AudioIn(frame=frame):
                    self._deliver(frame)
                case Ignored(what=what):
                    self.ignored += 1
                    log.debug("session %s: ignored %s", self.session_id, what)
                case LinkDropped():
                    log.info("session %s: the client dropped; resumable for 30 s", self.session_id)
                case Resumed(replayed=replayed):
                    log.info("session %s: resumed, %d events replayed", self.session_id, replayed)
                case SessionOver(detail=detail):
                    log.info("session %s is over: %s", self.session_id, detail)
                    self._inbox.close()
                    self._ended.set()
                case _:
                    assert_never(item)
        persist = self._host.persist
        if persist is not None and self._core.last_seq > self.saved_seq and not self._moved:
            persist(self)
        if (
            out
            and all(type(item) in _NO_DEADLINE for item in out)
            and self._core.state is not _OVER
        ):
            return  # no deadline moved: a frame in or out, an event sent
        self._set_timer()  # and once over, the tombstone

    def _stream(self, out: list[GatewayOutput]) -> None:
        """What the core streams once a link drained (mostly nothing: a drain of audio)."""
        if out:
            self._perform(out)

    def _deliver(self, item: ClientMessage | AudioFrame) -> None:
        if not self._inbox.put(item):
            self._report_lost()

    def _report_lost(self) -> None:
        if self._inbox.lost in (1, 10, 100, 1000, 10000):
            log.warning(
                "session %s: the application is not keeping up: %d items lost",
                self.session_id,
                self._inbox.lost,
            )

    def launch(self, handler: Callable[[GatewaySession], Awaitable[None]] | None = None) -> None:
        """Run the application's handler for this session (the gateway calls it once): the
        host's, or ``handler`` (a session taken over from another process)."""
        self._handler = asyncio.create_task(self._run_handler(handler or self._host.handler))
        self._set_timer()

    async def _run_handler(self, handler: Callable[[GatewaySession], Awaitable[None]]) -> None:
        core = self._core
        try:
            await handler(self)
        except Exception as exc:
            if isinstance(exc, SessionStateError) and core.over is not None:
                # The session ended under the handler (a resume of a session this gateway does
                # not hold is refused before it starts it): no failure of the application.
                log.info("session %s: the handler stopped: %s", self.session_id, exc)
            else:
                log.exception("session %s: the application handler failed", self.session_id)
                if core.started_at is not None and core.over is None:
                    self.fail(ErrorCode.OVP_INTERNAL_ERROR, "internal error")
        finally:
            self._handler = None
        if core.over is None:
            now = self._clock.now()
            if core.started_at is None:
                self._perform(core.abort("the handler returned before start()", now))
            else:
                self._perform(core.end(SessionEndReason.AGENT_ENDED, now))

    def _set_timer(self) -> None:
        """Set the timer for the core's next deadline; once the session is over, hand it to the
        gateway's tombstones."""
        if self._moved:
            return  # another process holds the session now
        if self._core.state is _OVER:
            self._timer.cancel()
            if not self._buried:
                self._buried = True
                self._host.bury(self)
                if self._host.metrics is not None:
                    self._host.metrics.closed(self)
            return
        self._timer.update()

    def _tick(self, now: float) -> None:
        self._perform(self._core.tick(now))  # sets the timer for the next deadline

    def expire(self) -> None:
        """The tombstone's time is up: the gateway no longer knows the session (the gateway
        calls it)."""
        self._host.forget(self)
        for link in list(self._links.values()):
            link.abort("the session is forgotten")
        if not self._links:  # else a reader may still record; the file is flushed anyway
            self._close_capture()

    def _close_capture(self) -> None:
        if self._capture is not None:
            self._capture.close()
            self._capture = None

    async def serve(self, ws: ServerConnection, first: str | None = None) -> None:
        """Carry the session over one connection until it closes (the gateway calls it with
        each connection of the session); ``first``: the connection's first message, already read
        (the ``session.resume`` of a session taken over).

        An audio frame is judged as ``websockets`` parses it (:class:`GatewayConnection`), and
        everything else by this task, in arrival order either way.
        """
        core, clock, recorder, stats = self._core, self._clock, self._recorder, self._stats
        record = None if recorder is None else partial(recorder.record, "server")
        link, out = core.open_link(clock.now())
        if link > 0:  # a connection after the session's first
            stats.on_link("open", clock.now())
            if recorder is not None:
                recorder.link("open")
        way_out = open_link(
            ws,
            clock,
            write_timeout=self._host.write_timeout,
            keepalive=self._host.keepalive,
            name=f"OVP session {self.session_id} link {link}",
            record=record,
            on_drained=lambda room: self._stream(core.drained(link, room, clock.now())),
            eager=False,  # the application's sends leave as it waits for its next input
        )
        self._links[link] = way_out
        self._unlinked.clear()
        self._perform(out)
        deliver = self._inbox.put

        def receive_binary(data: bytes) -> None:
            now = clock.now()
            way_out.heard(now)
            if recorder is not None:
                recorder.record("client", data)
            out = core.receive_binary(link, data, now)
            item = out[0] if len(out) == 1 else None
            if type(item) is AudioIn:  # the audio path: no deadline moves
                stats.on_frame("client", item.frame, now)
                if not deliver(item.frame):
                    self._report_lost()
            else:
                count_read(stats, "client", out, now, data)
                self._perform(out)

        def receive_binary_now(data: bytes) -> None:
            try:
                receive_binary(data)
            except Exception as exc:  # in websockets' data_received: never raise there
                log.exception("session %s: an audio frame failed", self.session_id)
                way_out.abort(f"an audio frame failed: {exc!r}")

        direct = ws if isinstance(ws, GatewayConnection) else None
        if direct is not None:
            direct.on_binary = receive_binary_now
        if first is not None:
            self._take_first(link, way_out, first)
        try:
            async for data in ws:
                if direct is not None:
                    direct.read_one()
                if isinstance(data, str):
                    now = clock.now()
                    way_out.heard(now)
                    if recorder is not None:
                        recorder.record("client", data)
                    out = core.receive_text(link, data, now)
                    count_read(stats, "client", out, now, data)
                    self._perform(out)
                else:
                    receive_binary(data)
        except ConnectionClosed:
            pass
        finally:
            if direct is not None:
                direct.on_binary = None
            protocol = ws.protocol  # the client answered our close: it read all before it
            answered = protocol.close_sent is not None and protocol.close_rcvd is not None
            answered = answered and protocol.close_rcvd_then_sent is False
            if link == core.current_link:
                stats.on_link("closed" if answered else "lost", clock.now())
                if recorder is not None:
                    recorder.link("closed" if answered else "lost")
            self._perform(core.link_lost(link, clock.now(), answered_close=answered))
            del self._links[link]
            await way_out.stop()
            self._gone()

    def _gone(self) -> None:
        """A connection ended: with none left the session is unlinked (and, if it moved to
        another process, done here)."""
        if not self._links:
            self._unlinked.set()
            if self._moved:
                self._close_capture()

    def _take_first(self, link: int, way_out: Link, text: str) -> None:
        """The connection's first message, read before the connection was handed over."""
        now = self._clock.now()
        way_out.heard(now)
        if self._recorder is not None:
            self._recorder.record("client", text)
        self._perform(self._core.receive_text(link, text, now))

    def shut(self) -> None:
        """The gateway stops serving the session: a started one ends with ``session.end``
        (reason ``cancelled``; its link closes with 1000 once the stream is written), one not
        started yet is aborted (there is no session.end to send)."""
        core, now = self._core, self._clock.now()
        if core.over is not None:
            return
        if core.started_at is None:
            self._perform(core.abort("the gateway is shutting down", now))
        else:
            self._perform(core.end(SessionEndReason.CANCELLED, now))

    @property
    def core(self) -> GatewayCore:
        """The session's core (its state, for a snapshot that moves it to another process)."""
        return self._core

    async def stop_application(self) -> None:
        """The application lets the session go (it moves to another process): its handler and
        handlers are cancelled, the timer stops; the session sends nothing more of its own."""
        self._moved = True
        self._timer.cancel()
        self._handlers.cancel()
        handler = self._handler
        if handler is not None:
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)

    def hand_over(self, code: int, reason: str) -> None:
        """The session moved to another process (:meth:`stop_application` came first): each
        connection closes with ``code`` once what it holds is written (the client resumes
        elsewhere), and this gateway forgets it."""
        for link in self._links.values():
            link.close(code, reason)
        self._inbox.close()
        if not self._links:
            self._close_capture()

    async def ended(self) -> None:
        """Wait until the session is over (:attr:`over` is set)."""
        await self._ended.wait()

    async def unlinked(self) -> None:
        """Wait until no connection carries the session (each gone, or closed)."""
        await self._unlinked.wait()

    async def stop(self) -> None:
        """The gateway shuts down: what is left of the session is aborted and its handler
        cancelled (:meth:`shut` first ends a started session cleanly)."""
        self._perform(self._core.abort("the gateway is shutting down", self._clock.now()))
        self._timer.cancel()
        self._handlers.cancel()
        handler = self._handler
        if handler is not None:
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)
        self._close_capture()
