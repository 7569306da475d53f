"""The gateway side of OVP over ``websockets``: :class:`Gateway` serves ``/voice/ws/{session_id}``.

For people who build or emulate a voice gateway. The gateway checks the subprotocol
(``orbit-voice/1.0``, or the token-form alias browsers can offer; else HTTP 400
with an ``OVP_SUBPROTOCOL_MISMATCH`` JSON body), then the HS256 token (a bad one gets the
handshake, an ``error`` ``OVP_AUTH_FAILED`` and a close 1008), and hands each session to the
application's handler as a :class:`GatewaySession`: typed client events and audio frames in,
events, audio, errors and the end out. The session outlives its connections: after a drop it
waits 30 s for a ``session.resume`` and replays what the client missed. The session is
:mod:`voxwire.ovp.gateway_session`'s, the tokens :mod:`voxwire.ovp.gateway_tokens`'s (every
public name of both importable from here too).

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
import contextlib
import json
import logging
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from voxwire.capture import Record
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster import Directory, ReplayStore
from voxwire.hosts import is_loopback
from voxwire.lifecycle import Drained
from voxwire.observe.endpoints import Endpoints
from voxwire.observe.metrics import Metrics
from voxwire.ovp import (
    ENDPOINT_PATH,
    MAX_RECEIVE_BYTES,
    MAX_TOKEN_LIFETIME_S,
    SILENCE_TIMEOUT_MS,
    SUBPROTOCOL,
    SUBPROTOCOL_ALIAS,
    SUBPROTOCOL_MISMATCH_HTTP_STATUS,
    TOKEN_CLOCK_LEEWAY_S,
    TOKEN_QUERY_PARAMETER,
    WRITE_TIMEOUT_MS,
    ErrorCode,
    SessionPatch,
)
from voxwire.ovp._session import SessionStateError, check_session_id
from voxwire.ovp._transport import refuse
from voxwire.ovp.gateway_cluster import GatewayCluster
from voxwire.ovp.gateway_core import refuse_token
from voxwire.ovp.gateway_session import GatewayConnection, GatewayHost, GatewaySession
from voxwire.ovp.gateway_tokens import (
    GatewayConfigError,
    TokenClaims,
    TokenRejected,
    check_secret,
    mint_token,
    verify_token,
)
from voxwire.redaction import install_redaction

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

log = logging.getLogger(__name__)

SessionHandler = Callable[[GatewaySession], Awaitable[None]]
"""The application: called once per new session, which lasts until it returns (or ends)."""

_PREFIX: Final = ENDPOINT_PATH.split("{", 1)[0]
# An ended session's id is remembered as long as a token for it can still be valid, so a late
# resume is refused (OVP_RESUME_EXPIRED) rather than starting the session anew.
_TOMBSTONE_S: Final = MAX_TOKEN_LIFETIME_S + 2 * TOKEN_CLOCK_LEEWAY_S


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
        store: With a directory: where every session's events and resume state are saved as
            they go (``voxwire.cluster.RedisReplayStore``), so another process can take a
            session over when this one drains or dies.
        on_takeover: With a store: runs each session this gateway takes over from another
            process, instead of ``handler`` (the session has started: rebuild the
            application's own state from it, then go on as ``handler`` would). Without it, a
            resume whose owner is gone is refused (``OVP_RESUME_EXPIRED``).
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
        store: ReplayStore | None = None,
        on_takeover: SessionHandler | None = None,
    ) -> None:
        if store is not None and directory is None:
            raise GatewayConfigError("a store needs a directory: who holds a session is in it")
        self.handler = handler
        self.on_takeover = on_takeover
        self._secret = check_secret(secret)
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
        self.metrics = Metrics("ovp", "gateway")
        """The gateway's metrics (docs/observability.md), which ``/metrics`` serves."""
        self.endpoints = Endpoints(metrics=self.metrics.exposition)
        """``/healthz``, ``/readyz`` and ``/metrics`` on the gateway's port."""
        self._server: Server | None = None
        self._sessions: dict[str, GatewaySession] = {}
        self._cluster = (
            None
            if directory is None
            else GatewayCluster(
                directory,
                store,
                clock=clock,
                keepalive=keepalive,
                write_timeout=write_timeout,
                takes_over=on_takeover is not None,
                metrics=self.metrics,
            )
        )
        # The ended sessions in the order they ended, each forgotten _TOMBSTONE_S after: one
        # task for all of them (started with the first), none per session.
        self._buried: deque[tuple[float, GatewaySession]] = deque()
        self._reaper: asyncio.Task[None] | None = None
        self._draining = False
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
        self._draining = False
        self.endpoints.ready = True
        self._server = await serve(
            self._connection,
            self.host,
            self._port,
            process_request=self._process_request,
            process_response=self._process_response,
            compression=None,
            max_size=MAX_RECEIVE_BYTES,
            ping_interval=None,  # the link's keepalive
            create_connection=GatewayConnection,
            close_timeout=self.clock.real_seconds(self.write_timeout),
            ssl=self._ssl,
        )
        self._port = self._server.sockets[0].getsockname()[1]
        if is_loopback(self.host):
            log.info("OVP gateway listening on %s (loopback only)", self.url)
        else:
            log.warning("OVP gateway listening on %s: reachable beyond this machine", self.url)

    async def drain(self, deadline: float) -> Drained:
        """Take the gateway out of service within ``deadline`` seconds of its clock, dropping
        no session that can go on.

        ``/readyz`` answers 503 at once, and so does the upgrade of any connection that is not
        for a session this gateway holds (a balancer's retry sends it to another process; a
        client retries a 503 within its resume window); the sessions it holds are served as
        before, resumes included. The drain returns once none of them is live, or at the
        deadline, when each one still live ends with ``session.end`` (reason ``cancelled``,
        close 1000), or is aborted if it never started. It leaves the gateway listening (the
        probes still answer): :meth:`close` it then.
        """
        self.endpoints.ready = False
        self._draining = True
        live = self._live()
        log.info("OVP gateway draining: %d live sessions, %g s at most", len(live), deadline)
        handed = await self._hand_over(live)
        live = [session for session in live if session not in handed]
        if live:
            waits = [asyncio.ensure_future(session.ended()) for session in live]
            _, pending = await asyncio.wait(waits, timeout=self.clock.real_seconds(deadline))
            for wait in pending:
                wait.cancel()
        left = [session for session in live if session.over is None]
        await self._end(left)
        return Drained(len(handed), finished=len(live) - len(left), ended=len(left))

    async def _hand_over(self, sessions: list[GatewaySession]) -> list[GatewaySession]:
        """Hand each of ``sessions`` that can move to the store (a store is needed); the ones
        handed over, which this gateway no longer holds."""
        cluster = self._cluster
        if cluster is None or cluster.store is None:
            return []
        moved = await asyncio.gather(*(cluster.hand_over(session) for session in sessions))
        handed = [session for session, done in zip(sessions, moved, strict=True) if done]
        for session in handed:
            del self._sessions[session.session_id]
        with contextlib.suppress(TimeoutError):  # what the links hold goes out, then the close
            async with asyncio.timeout(self.clock.real_seconds(self.write_timeout)):
                await asyncio.gather(*(session.unlinked() for session in handed))
        return handed

    async def close(self) -> None:
        """Stop listening and end every session: a started one with ``session.end`` (reason
        ``cancelled``, then close 1000, each link given the write timeout to take it), one not
        started yet aborted (1011); then the sessions' tasks are stopped."""
        self.endpoints.ready = False
        self._draining = True
        await self._end(self._live())
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for session in list(self._sessions.values()):
            await session.stop()
        self._sessions.clear()
        if self._cluster is not None:
            await self._cluster.close()
        if self._reaper is not None:
            self._reaper.cancel()
            await asyncio.gather(self._reaper, return_exceptions=True)
            self._reaper = None
        self._buried.clear()

    def _live(self) -> list[GatewaySession]:
        return [session for session in self._sessions.values() if session.over is None]

    async def _end(self, ending: list[GatewaySession]) -> None:
        """End ``ending`` (:meth:`GatewaySession.shut`), then give every session's links the
        write timeout to deliver what is left (``session.end`` last) and close."""
        for session in ending:
            session.shut()
        held = list(self._sessions.values())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.clock.real_seconds(self.write_timeout)):
                await asyncio.gather(*(session.unlinked() for session in held))

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
            session.expire()
        self._reaper = None

    def _forget(self, session: GatewaySession) -> None:
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]
            if self._cluster is not None:
                self._cluster.own(session.session_id, owned=False)

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Route the path, check the subprotocol; the token waits for the handshake's end."""
        probe = self.endpoints.answer(connection, request)
        if probe is not None:
            return probe
        path = urlsplit(request.path).path
        try:
            if not path.startswith(_PREFIX):
                raise ValueError(path)
            check_session_id(path[len(_PREFIX) :])
        except ValueError:
            return connection.respond(HTTPStatus.NOT_FOUND, "Not an OVP endpoint.\n")
        if self._draining and path[len(_PREFIX) :] not in self._sessions:
            # Not a session of this gateway: a balancer's retry (or the client's) goes elsewhere.
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
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
            self.metrics.refused(ErrorCode.OVP_SUBPROTOCOL_MISMATCH)
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
            self.metrics.refused(ErrorCode.OVP_AUTH_FAILED)
            now = self.clock.now()
            await refuse(
                ws,
                self.clock,
                refuse_token(session_id, str(exc), epoch=time.time() - now, now=now),
                write_timeout=self.write_timeout,
                keepalive=self.keepalive,
                name=f"OVP session {session_id} refusal",
            )
            return
        cluster = self._cluster
        if session is None and cluster is not None and cluster.started_elsewhere(session_id):
            # A resume (the session started somewhere): relayed, refused, or taken over.
            taken = await cluster.resume_elsewhere(ws, claims)
            if taken is None or self.on_takeover is None:
                return
            session = GatewaySession(self._host(), claims, taken)
            self._sessions[session_id] = session
            session.launch(self.on_takeover)
            await session.serve(ws, first=taken.first)
            return
        if session is None:
            session = GatewaySession(self._host(), claims)
            self._sessions[session_id] = session
            if cluster is not None:
                cluster.own(session_id, owned=True)
            session.launch()
        await session.serve(ws)

    def _host(self) -> GatewayHost:
        """What a new session needs of this gateway (its settings as they are now)."""
        return GatewayHost(
            clock=self.clock,
            handler=self.handler,
            accept_patch=self.accept_patch,
            max_events=self.max_events,
            write_timeout=self.write_timeout,
            keepalive=self.keepalive,
            record=self.record,
            bury=self._bury,
            forget=self._forget,
            metrics=self.metrics,
            persist=None
            if self._cluster is None or self._cluster.store is None
            else self._cluster.persist,
        )
