"""The gateway side of OVP over ``websockets``: :class:`Gateway` serves ``/voice/ws/{session_id}``.

For people who build or emulate a voice gateway. The gateway checks the subprotocol
(``orbit-voice/1.0``, or the token-form alias browsers can offer; else HTTP 400
with an ``OVP_SUBPROTOCOL_MISMATCH`` JSON body), then the HS256 token (a bad one gets the
handshake, an ``error`` ``OVP_AUTH_FAILED`` and a close 1008), and hands each session to the
application's handler as a :class:`GatewaySession`: typed client events and audio frames in,
events, audio, errors and the end out. The session outlives its connections: after a drop it
waits 30 s for a ``session.resume`` and replays what the client missed.

```text
async def handler(session: GatewaySession) -> None:
    session.start(call, agent)                       # session.start, seq 0
    async for item in session:                       # ClientMessage or AudioFrame
        if isinstance(item, ovp.AudioFrame):
            session.send_audio(item.pcm)             # echo
    # returning ends the session (session.end reason agent_ended) if it is still open

async with Gateway(handler, secret=secret) as gateway:   # 127.0.0.1, a free port
    print(gateway.url)
```
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from http import HTTPStatus
from typing import Any, Final, TypeVar
from urllib.parse import parse_qs, urlsplit

import jwt
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import Event

from voxwire.capture import Record, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster import Directory, StoreUnavailable, other_owner
from voxwire.cluster.relay import Keepalive as RelayKeepalive
from voxwire.cluster.relay import RelayFailed, carry, open_relay
from voxwire.errors import ConfigError, VoxwireError
from voxwire.hosts import is_loopback
from voxwire.link import Link, Put
from voxwire.ovp import (
    ENDPOINT_PATH,
    JWT_ALGORITHM,
    MAX_RECEIVE_BYTES,
    MAX_TOKEN_LIFETIME_S,
    MIN_GATEWAY_SECRET_BYTES,
    SILENCE_TIMEOUT_MS,
    SUBPROTOCOL,
    SUBPROTOCOL_ALIAS,
    SUBPROTOCOL_MISMATCH_HTTP_STATUS,
    TOKEN_CLOCK_LEEWAY_S,
    TOKEN_QUERY_PARAMETER,
    WRITE_TIMEOUT_MS,
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
from voxwire.ovp._session import (
    STREAM_WINDOW,
    AudioIn,
    Sent,
    SessionOver,
    SessionStateError,
    check_session_id,
)
from voxwire.ovp._transport import Inbox, open_link, perform
from voxwire.ovp.gateway_core import (
    ClientEvent,
    GatewayCore,
    GatewayOutput,
    GatewayState,
    LinkDropped,
    Resumed,
    ToLink,
    refuse_token,
)
from voxwire.ovp.roles import GatewayReceives, GatewaySends
from voxwire.redaction import install_redaction
from voxwire.sansio import Ignored, SendBinary

__all__ = [
    "Gateway",
    "GatewayConfigError",
    "GatewaySession",
    "SessionHandler",
    "SessionStateError",
    "TokenClaims",
    "TokenRejected",
    "mint_token",
    "select_subprotocol",
    "verify_token",
]

M = TypeVar("M", bound=Message)

log = logging.getLogger(__name__)

SessionHandler = Callable[["GatewaySession"], Awaitable[None]]
"""The application: called once per new session, which lasts until it returns (or ends)."""

_PREFIX: Final = ENDPOINT_PATH.split("{", 1)[0]
_REQUIRED_CLAIMS: Final = ("exp", "iat", "tenant_id", "session_id")
# An ended session's id is remembered as long as a token for it can still be valid, so a late
# resume is refused (OVP_RESUME_EXPIRED) rather than starting the session anew.
_TOMBSTONE_S: Final = MAX_TOKEN_LIFETIME_S + 2 * TOKEN_CLOCK_LEEWAY_S
# Outputs that never move one of the core's deadlines (an empty output may: a frame error).
_OVER: Final = GatewayState.OVER
_NO_DEADLINE: Final = (AudioIn, ToLink, Sent)
"""Outputs that never move one of the core's deadlines: a frame in or out, an event sent (but
session.start, which starts the 5 s cadence: start() sets the timer itself)."""
_BINARY: Final = Opcode.BINARY  # bound once: an Enum member look-up costs a call on 3.11
_DATA_OPCODES: Final = (Opcode.TEXT, _BINARY)
"""The first frame of a message (a continuation frame belongs to the message before it)."""
_CLUSTER_KEY: Final = "ovp"
"""The protocol's name in the owner directory (voxwire.cluster), beside Brisvox's."""
_OWNERSHIP_S: Final = 24 * 3600.0
"""How long an owner entry lives unrefreshed. Liveness is the owner process's heartbeat, so a
dead process's entries are no owner at once; this only bounds what a crash leaves in Redis."""


class GatewayConfigError(ConfigError):
    """A gateway configuration that must not start (a secret shorter than 32 bytes)."""


class TokenRejected(VoxwireError, ValueError):
    """A token the gateway refuses; the text says why and never holds the token."""


@dataclass(frozen=True, slots=True)
class TokenClaims:
    """The verified claims of a session token (the token itself is not kept)."""

    tenant_id: str
    session_id: str
    issued_at: float
    expires_at: float
    claims: Mapping[str, Any] = field(repr=False)
    """Every claim, the call context included."""


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else bytes(secret)
    if len(key) < MIN_GATEWAY_SECRET_BYTES:
        raise GatewayConfigError(
            f"the gateway secret is {len(key)} bytes; HS256 needs at least "
            f"{MIN_GATEWAY_SECRET_BYTES} (RFC 7518 §3.2)"
        )
    return key


def select_subprotocol(offered: Iterable[str]) -> str | None:
    """The subprotocol the gateway selects from the offered ones, or ``None`` (HTTP 400).

    ``orbit-voice/1.0`` whenever it is offered, else its token-form alias
    ``voxwire.orbit-voice.1.0`` (a voxwire extension for browsers and JS clients, which cannot
    offer ``/``; decision ``subprotocol-token-alias``), compared exactly.
    """
    offered = set(offered)
    for candidate in (SUBPROTOCOL, SUBPROTOCOL_ALIAS):
        if candidate in offered:
            return candidate
    return None


def mint_token(
    secret: str | bytes,
    *,
    session_id: str,
    tenant_id: str,
    lifetime_s: int = MAX_TOKEN_LIFETIME_S,
    now: float | None = None,
    **context: Any,
) -> str:
    """An HS256 session token as the platform mints it (for tests and gateway emulators)."""
    issued = int(time.time() if now is None else now)
    claims = {
        **context,
        "tenant_id": tenant_id,
        "session_id": session_id,
        "iat": issued,
        "exp": issued + lifetime_s,
    }
    return jwt.encode(claims, _key(secret), algorithm=JWT_ALGORITHM)


def verify_token(
    token: str, secret: str | bytes, session_id: str, *, now: float | None = None
) -> TokenClaims:
    """Verify a session token for the path's ``session_id``; raise :class:`TokenRejected`.

    HS256 only (the header's ``alg`` is never trusted), signature, ``exp`` and ``iat`` with 30 s
    of leeway, a lifetime ``exp - iat`` of at most 300 s, and ``tenant_id`` and ``session_id``
    claims, the latter equal to the path's.
    """
    moment = time.time() if now is None else now
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            _key(secret),
            algorithms=[JWT_ALGORITHM],
            options={"require": list(_REQUIRED_CLAIMS)},
            leeway=TOKEN_CLOCK_LEEWAY_S,
        )
    except jwt.ExpiredSignatureError:
        raise TokenRejected("token expired") from None
    except jwt.ImmatureSignatureError:
        raise TokenRejected("token issued in the future") from None
    except jwt.InvalidSignatureError:
        raise TokenRejected("token signature does not verify") from None
    except jwt.InvalidAlgorithmError:
        raise TokenRejected(f"token algorithm is not {JWT_ALGORITHM}") from None
    except jwt.MissingRequiredClaimError as exc:
        raise TokenRejected(f"token lacks the {exc.claim} claim") from None
    except jwt.DecodeError:
        raise TokenRejected("malformed token") from None
    except jwt.InvalidTokenError as exc:
        raise TokenRejected(f"invalid token ({type(exc).__name__})") from None
    issued, expires = claims["iat"], claims["exp"]
    if not all(_is_number(value) for value in (issued, expires)):
        raise TokenRejected("token iat and exp must be numbers")
    if issued > moment + TOKEN_CLOCK_LEEWAY_S:
        raise TokenRejected("token issued in the future")
    if expires - issued > MAX_TOKEN_LIFETIME_S:
        raise TokenRejected(
            f"token lives {expires - issued:g} s, at most {MAX_TOKEN_LIFETIME_S} s is allowed"
        )
    tenant = claims["tenant_id"]
    if not isinstance(tenant, str) or not tenant:
        raise TokenRejected("token tenant_id is not a non-empty string")
    if claims["session_id"] != session_id:
        raise TokenRejected("token is for another session")
    return TokenClaims(tenant, session_id, float(issued), float(expires), claims)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _GatewayConnection(ServerConnection):
    """A gateway connection that hands each audio frame to its session as ``websockets`` parses
    it (``on_binary``, called in ``data_received``), rather than through its message queue and a
    wakeup of the session's reader task: a frame costs no loop turn on its way in.

    Only a whole binary message takes that path, and only while no message is waiting in the
    queue (``queued``: what the reader has not read yet), so the order of arrival holds; text
    (UTF-8 checked by ``websockets``), fragmented messages and whatever arrives behind them go
    through the queue.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_binary: Callable[[bytes], None] | None = None
        self.queued = 0

    def process_event(self, event: Event) -> None:
        if type(event) is Frame and event.opcode in _DATA_OPCODES:
            on_binary = self.on_binary
            if on_binary is not None and event.fin and event.opcode is _BINARY and not self.queued:
                data = event.data
                on_binary(data if type(data) is bytes else bytes(data))
                return
            self.queued += 1
        super().process_event(event)

    def read_one(self) -> None:
        """The reader took one message from the queue."""
        self.queued -= 1


class GatewaySession(GatewaySends[ServerMessage], GatewayReceives):
    """One session as the gateway's application sees it, across the client's reconnects.

    Iterate it for the client's events (:class:`~voxwire.ovp.ClientMessage`) and audio
    (:class:`~voxwire.ovp.AudioFrame`, its PCM 640 bytes) in arrival order; the iteration
    ends when the session is over, and runs the handlers of :meth:`on` for each event first.
    It sends with one typed method per server event (``session.send_agent_output(turn_id=...,
    text=..., final=True)``: keyword arguments, the event's own fields), each returning the
    stamped event. The sending methods never wait: what they write is queued on the current
    connection, and kept for replay while there is none.
    """

    def __init__(self, gateway: Gateway, claims: TokenClaims) -> None:
        self.claims = claims
        self.session_id = claims.session_id
        self._gateway = gateway
        self._clock = gateway.clock
        self._core = GatewayCore(
            claims.session_id,
            epoch=time.time() - self._clock.now(),
            accept_patch=gateway.accept_patch,
            window=STREAM_WINDOW,
        )
        self._links: dict[int, Link] = {}
        self._inbox: Inbox[ClientMessage | AudioFrame] = Inbox(gateway.max_events)
        self._handlers: dict[str, list[Callable[[Any], object]]] = {}
        # One loop timer at the core's next deadline, rather than a task per session.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf  # the deadline it is set for
        self._buried = False
        self._handler: asyncio.Task[None] | None = None  # let go once it returns
        self._recorder, self._capture = open_recorder(
            gateway.record,
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
        seq, ts and session_id are stamped here (session.start, error and session.end go the
        ways of :meth:`start`, :meth:`fail` and :meth:`end`).

        Raises ``TypeError`` for a wrong field, :class:`~voxwire.ovp.ProtocolError` for a value
        the spec refuses, ``SessionStateError`` outside the session.
        """
        if kind is SessionStart:
            return self.start(**fields)
        if kind is ErrorEvent:
            return self.fail(**fields)
        if kind is SessionEnd:
            return self.end(**fields)
        return self._sent(self._core.send(kind, fields, self._clock.now()), kind)

    def send_audio(self, pcm: bytes | bytearray | memoryview, *, flags: int = 0) -> None:
        """Send 20 ms of agent audio (640 bytes of PCM); dropped while the client is away."""
        out = self._core.send_audio(pcm, self._clock.now(), flags=flags)
        item = out[0] if len(out) == 1 else None
        # The audio path: the frame goes as control, and no deadline moves.
        if type(item) is ToLink and isinstance(frame := item.action, SendBinary):
            link = self._links.get(item.link)
            if link is not None:
                link.control(frame)
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
        """The values of the ``call.quality.update`` sent every 5 s from now on."""
        self._core.set_quality(
            packet_loss_pct=packet_loss_pct, jitter_ms=jitter_ms, rtt_ms=rtt_ms, mos=mos
        )

    def set_cost(self, breakdown: CostBreakdown) -> None:
        """The running cost of the ``agent.cost.tick`` sent every 5 s (and of the final stats)."""
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
    def connected(self) -> bool:
        """Whether the client is connected now."""
        return self._core.current_link is not None

    @property
    def over(self) -> SessionOver | None:
        """How the session ended, once it did."""
        return self._core.over

    @property
    def events_lost(self) -> int:
        """Client events and frames dropped because the application did not keep up."""
        return self._inbox.lost

    def __aiter__(self) -> GatewaySession:
        return self

    async def __anext__(self) -> ClientMessage | AudioFrame:
        if not self._inbox:  # the application waits: what it sent meanwhile leaves now, at once
            self._flush_links()
        item = await self._inbox.get()
        if not isinstance(item, AudioFrame):
            for handler in self._handlers.get(item.type, ()):
                result = handler(item)
                if inspect.isawaitable(result):
                    await result
        return item

    def _flush_links(self) -> None:
        # Not inline in __anext__: its frame, suspended on the inbox, would keep the last link
        # (and its connection) alive for as long as the session waits.
        for link in self._links.values():
            link.flush()

    def _on(self, message_type: str, handler: Callable[[Any], object]) -> None:
        """Register ``handler`` for ``message_type`` (:meth:`on` checked it: a client event);
        handlers run as the session is iterated."""
        self._handlers.setdefault(message_type, []).append(handler)

    # ------------------------------------------------------------------ adapter

    def _sent(self, out: list[GatewayOutput], kind: type[M]) -> M:
        self._perform(out)
        message = None
        for item in out:  # the first event sent (the core puts it first)
            if isinstance(item, Sent):
                message = item.message
                break
        if not isinstance(message, kind):
            assert self._core.over is not None
            raise SessionStateError(f"the session ended instead: {self._core.over.detail}")
        return message

    def _perform(self, out: list[GatewayOutput]) -> None:
        for item in out:
            if isinstance(item, ToLink):
                link = self._links.get(item.link)
                if link is not None:
                    put = perform(link, item.action, event=item.stream)
                    assert put is not Put.FULL, "the core hands out no more than the window"
            elif isinstance(item, Sent):
                continue  # the caller's to return
            elif isinstance(item, ClientEvent):
                self._deliver(item.message)
            elif isinstance(item, AudioIn):
                self._deliver(item.frame)
            elif isinstance(item, Ignored):
                self.ignored += 1
                log.debug("session %s: ignored %s", self.session_id, item.what)
            elif isinstance(item, LinkDropped):
                log.info("session %s: the client dropped; resumable for 30 s", self.session_id)
            elif isinstance(item, Resumed):
                log.info("session %s: resumed, %d events replayed", self.session_id, item.replayed)
            elif isinstance(item, SessionOver):
                log.info("session %s is over: %s", self.session_id, item.detail)
                self._inbox.close()
        if (
            out
            and all(isinstance(item, _NO_DEADLINE) for item in out)
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

    def _launch(self) -> None:
        self._handler = asyncio.create_task(self._run_handler())
        self._set_timer()

    async def _run_handler(self) -> None:
        core = self._core
        try:
            await self._gateway.handler(self)
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
        """Set the timer for the core's next deadline when it is sooner than the one set; once
        the session is over, hand its id to the gateway's tombstones (:meth:`Gateway._bury`)."""
        core = self._core
        if core.state is GatewayState.OVER:
            self._cancel_timer()
            if not self._buried:
                self._buried = True
                self._gateway._bury(self)
            return
        deadline = core.next_deadline()
        if deadline is None or deadline >= self._timer_at:
            return  # a timer set for an earlier deadline ticks and sets the next one
        self._cancel_timer()
        delay = self._clock.real_seconds(max(0.0, deadline - self._clock.now()))
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
        self._timer_at = deadline

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, math.inf
        deadline, now = self._core.next_deadline(), self._clock.now()
        if deadline is not None and deadline <= now:
            self._perform(self._core.tick(now))  # sets the timer for the next deadline
        self._set_timer()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf

    def _forgotten(self) -> None:
        """The tombstone's time is up: the gateway no longer knows the session."""
        self._gateway._forget(self)
        for link in list(self._links.values()):
            link.abort("the session is forgotten")
        if not self._links:  # else a reader may still record; the file is flushed anyway
            self._close_capture()

    def _close_capture(self) -> None:
        if self._capture is not None:
            self._capture.close()
            self._capture = None

    async def _serve(self, ws: ServerConnection) -> None:
        """Carry the session over one connection until it closes.

        An audio frame is judged as ``websockets`` parses it (:class:`_GatewayConnection`), and
        everything else by this task, in arrival order either way.
        """
        core, clock, recorder = self._core, self._clock, self._recorder
        record = None if recorder is None else partial(recorder.record, "server")
        link, out = core.open_link(clock.now())
        if recorder is not None and link > 0:  # a connection after the session's first
            recorder.link("open")
        way_out = open_link(
            ws,
            clock,
            write_timeout=self._gateway.write_timeout,
            keepalive=self._gateway.keepalive,
            name=f"OVP session {self.session_id} link {link}",
            record=record,
            on_drained=lambda room: self._stream(core.drained(link, room, clock.now())),
            eager=False,  # the application's sends leave as it waits for its next input
        )
        self._links[link] = way_out
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
                if not deliver(item.frame):
                    self._report_lost()
            else:
                self._perform(out)

        def receive_binary_now(data: bytes) -> None:
            try:
                receive_binary(data)
            except Exception as exc:  # in websockets' data_received: never raise there
                log.exception("session %s: an audio frame failed", self.session_id)
                way_out.abort(f"an audio frame failed: {exc!r}")

        direct = ws if isinstance(ws, _GatewayConnection) else None
        if direct is not None:
            direct.on_binary = receive_binary_now
        try:
            async for data in ws:
                if direct is not None:
                    direct.read_one()
                if isinstance(data, str):
                    now = clock.now()
                    way_out.heard(now)
                    if recorder is not None:
                        recorder.record("client", data)
                    self._perform(core.receive_text(link, data, now))
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
            if recorder is not None and link == core.current_link:
                recorder.link("closed" if answered else "lost")
            self._perform(core.link_lost(link, clock.now(), answered_close=answered))
            del self._links[link]
            await way_out.stop()

    async def _stop(self) -> None:
        self._perform(self._core.abort("the gateway is shutting down", self._clock.now()))
        self._cancel_timer()
        handler = self._handler
        if handler is not None:
            handler.cancel()
            await asyncio.gather(handler, return_exceptions=True)
        self._close_capture()


class Gateway:
    """An OVP gateway: serves ``/voice/ws/{session_id}`` and runs ``handler`` once per session.

    Args:
        handler: The application, called with each new :class:`GatewaySession`.
        secret: The HS256 key the session tokens are signed with, at least 32 bytes.
        host: Where to listen; loopback unless told otherwise.
        port: The port; 0 picks a free one (see :attr:`port`).
        clock: The clock of every timer (resume window, 5 s events, tombstones).
        accept_patch: Judges each well-formed ``session.update`` patch: ``None`` applies it,
            a string refuses it with ``OVP_SESSION_UPDATE_REJECTED``.
        write_timeout: Seconds one drain of a connection's queue may take before the connection
            is dropped.
        keepalive: Seconds of silence (no message, no pong) after which a connection counts as
            dropped; it is pinged twice as often.
        max_events: Client events and frames a session holds for its application.
        ssl: An ``ssl.SSLContext`` to serve ``wss://``.
        record: Record every message of each session, sent and received, across its
            connections, into this capture (a path, ``{session_id}`` in it replaced by the
            session's id; or a ``voxwire.capture.Recorder``); see ``voxwire validate``.
        directory: With several gateway processes (``voxwire.cluster``): each session this
            gateway holds is recorded as its own, and a connection for a session another live
            process holds is relayed there (the token is checked here first).
    """

    def __init__(
        self,
        handler: SessionHandler,
        *,
        secret: str | bytes,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Clock = SYSTEM_CLOCK,
        accept_patch: Callable[[SessionPatch], str | None] | None = None,
        write_timeout: float = WRITE_TIMEOUT_MS / 1000,
        keepalive: float = SILENCE_TIMEOUT_MS / 1000,
        max_events: int = 4096,
        ssl: Any = None,
        record: Record = None,
        directory: Directory | None = None,
    ) -> None:
        self.handler = handler
        self._secret = _key(secret)
        self.host = host
        self._port = port
        self.clock = clock
        self.accept_patch = accept_patch
        self.write_timeout = write_timeout
        self.keepalive = keepalive
        self.max_events = max_events
        self.record = record
        self.directory = directory
        self._ssl = ssl
        self._server: Server | None = None
        self._sessions: dict[str, GatewaySession] = {}
        self._owning: set[asyncio.Task[None]] = set()
        # The ended sessions in the order they ended, each forgotten _TOMBSTONE_S after: one
        # task for all of them (started with the first), none per session.
        self._buried: deque[tuple[float, GatewaySession]] = deque()
        self._reaper: asyncio.Task[None] | None = None
        self._selected: weakref.WeakKeyDictionary[ServerConnection, str] = (
            weakref.WeakKeyDictionary()
        )

    def __repr__(self) -> str:
        return f"Gateway({self.host!r}, port={self._port})"

    @property
    def port(self) -> int:
        """The port it listens on (the one picked, with ``port=0``)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL clients connect to (``ws://host:port``, ``wss://`` with ``ssl``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'wss' if self._ssl else 'ws'}://{host}:{self._port}"

    @property
    def sessions(self) -> Mapping[str, GatewaySession]:
        """The sessions it holds (ended ones stay a few minutes, to refuse late resumes)."""
        return self._sessions

    async def start(self) -> None:
        """Listen."""
        install_redaction()
        self._server = await serve(
            self._connection,
            self.host,
            self._port,
            process_request=self._process_request,
            process_response=self._process_response,
            compression=None,
            max_size=MAX_RECEIVE_BYTES,
            ping_interval=None,  # the link's keepalive
            create_connection=_GatewayConnection,
            close_timeout=self.clock.real_seconds(self.write_timeout),
            ssl=self._ssl,
        )
        self._port = self._server.sockets[0].getsockname()[1]
        if is_loopback(self.host):
            log.info("OVP gateway listening on %s (loopback only)", self.url)
        else:
            log.warning("OVP gateway listening on %s: reachable beyond this machine", self.url)

    async def close(self) -> None:
        """Stop listening, close every connection and end the sessions' tasks."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for session in list(self._sessions.values()):
            await session._stop()
        self._sessions.clear()
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        self._buried.clear()

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _bury(self, session: GatewaySession) -> None:
        """``session`` is over: keep its id as a tombstone for ``_TOMBSTONE_S``, then forget it."""
        self._buried.append((self.clock.now() + _TOMBSTONE_S, session))
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap(), name="ovp-tombstones")

    async def _reap(self) -> None:
        buried, clock = self._buried, self.clock
        while buried:
            due, session = buried[0]
            if clock.now() < due:
                del session  # not kept alive by this frame while it sleeps
                await clock.sleep(due - clock.now())
                continue
            buried.popleft()
            session._forgotten()
        self._reaper = None

    def _forget(self, session: GatewaySession) -> None:
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]
            self._own(session.session_id, owned=False)

    # -- several processes (voxwire.cluster) ----------------------------------------------------

    def _own(self, session_id: str, *, owned: bool) -> None:
        """Record (or forget) this gateway as the owner of ``session_id``, in a task."""
        if self.directory is None:
            return
        directory = self.directory

        async def update() -> None:
            try:
                if owned:
                    await directory.claim(_CLUSTER_KEY, session_id, _OWNERSHIP_S)
                else:
                    await directory.release(_CLUSTER_KEY, session_id)
            except StoreUnavailable as exc:
                # Not recorded: a resume landing on another process is refused there
                # (OVP_RESUME_EXPIRED), as with one process; one landing here still works.
                log.warning("session %s: the owner directory was not updated: %s", session_id, exc)

        task = asyncio.create_task(update(), name=f"ovp-own-{session_id}")
        self._owning.add(task)
        task.add_done_callback(self._owning.discard)

    async def _relayed(self, ws: ServerConnection, session_id: str) -> bool:
        """Relay ``ws`` to the live process that holds ``session_id``; False if there is none."""
        if self.directory is None:
            return False
        owner = await other_owner(self.directory, _CLUSTER_KEY, session_id)
        if owner is None:
            return False
        assert ws.request is not None
        try:
            # The token form: the relay is a voxwire client, and the owner answers it alike.
            upstream = await open_relay(
                owner, ws.request.path, subprotocol=SUBPROTOCOL_ALIAS, max_size=MAX_RECEIVE_BYTES
            )
        except RelayFailed as exc:
            log.warning(
                "session %s: held by %s, which cannot be reached: %s",
                session_id,
                owner.process_id,
                exc,
            )
            return False
        log.info("session %s: held by %s; relaying the connection", session_id, owner.process_id)
        # The gateway's own rule: silent for `keepalive` seconds is dropped, pinged twice as often.
        half = self.keepalive / 2
        await carry(ws, upstream, owner, keepalive=RelayKeepalive(half, half, self.clock))
        return True

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Route the path, check the subprotocol; the token waits for the handshake's end."""
        path = urlsplit(request.path).path
        try:
            if not path.startswith(_PREFIX):
                raise ValueError(path)
            check_session_id(path[len(_PREFIX) :])
        except ValueError:
            return connection.respond(HTTPStatus.NOT_FOUND, "Not an OVP endpoint.\n")
        offered = [
            value.strip()
            for header in request.headers.get_all("Sec-WebSocket-Protocol")
            for value in header.split(",")
        ]
        selected = select_subprotocol(offered)
        if selected is None:
            body = json.dumps(
                {
                    "code": ErrorCode.OVP_SUBPROTOCOL_MISMATCH,
                    "message": f"offer the subprotocol {SUBPROTOCOL} or {SUBPROTOCOL_ALIAS}",
                }
            )
            response = connection.respond(SUBPROTOCOL_MISMATCH_HTTP_STATUS, body)
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        # websockets refuses "/" in a subprotocol token (RFC 6455 §4.1); the gateway selects it
        # itself, in _process_response.
        del request.headers["Sec-WebSocket-Protocol"]
        self._selected[connection] = selected
        return None

    def _process_response(
        self, connection: ServerConnection, request: Request, response: Response
    ) -> None:
        selected = self._selected.pop(connection, None)
        if response.status_code == HTTPStatus.SWITCHING_PROTOCOLS and selected is not None:
            response.headers["Sec-WebSocket-Protocol"] = selected

    async def _connection(self, ws: ServerConnection) -> None:
        """One connection, after the handshake: the token, then the session."""
        assert ws.request is not None
        target = urlsplit(ws.request.path)
        session_id = target.path[len(_PREFIX) :]
        tokens = parse_qs(target.query, keep_blank_values=True).get(TOKEN_QUERY_PARAMETER, [])
        try:
            if len(tokens) != 1:
                raise TokenRejected("token missing" if not tokens else "more than one token")
            claims = verify_token(tokens[0], self._secret, session_id)
            session = self._sessions.get(session_id)
            if session is not None and session.claims.tenant_id != claims.tenant_id:
                raise TokenRejected("token is for another tenant")
        except TokenRejected as exc:
            log.info("session %s: refused a connection: %s", session_id, exc)
            link = open_link(
                ws,
                self.clock,
                write_timeout=self.write_timeout,
                keepalive=self.keepalive,
                name=f"OVP session {session_id} refusal",
            )
            for action in refuse_token(
                session_id, str(exc), epoch=time.time() - self.clock.now(), now=self.clock.now()
            ):
                perform(link, action)
            await link.wait_closed()
            await link.stop()
            return
        if session is None and await self._relayed(ws, session_id):
            return
        if session is None:
            session = GatewaySession(self, claims)
            self._sessions[session_id] = session
            self._own(session_id, owned=True)
            session._launch()
        await session._serve(ws)
