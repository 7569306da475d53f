"""The agent side of the Brisvox link over websockets: :class:`AgentServer`, :class:`AgentSession`.

The brisvox engine connects to the agent, one WebSocket connection per call. The server checks
the bearer token (HTTP 401 before the upgrade) and refuses browser requests (any ``Origin``
header, HTTP 403), answers ``session.start`` within the handshake budget, then gives each call an
:class:`AgentSession` that the application iterates for events and uses to send commands, while
remote tools run as their own tasks.

```text
async def on_session(session: AgentSession) -> None:
    async for event in session:
        if isinstance(event, brisvox.UserText) and "hours" in event.text:
            await session.send_say(text="We open at noon.", re=event.seq)

async with AgentServer(on_session, tools=[hours_tool], port=0) as server:
    print(server.url)       # ws://127.0.0.1:PORT for BRISVOX_AGENT_URL
```

One reader task per connection never waits on application code: events go into a bounded
per-call queue whose overflow comes out of the iteration as :class:`EventsDropped`. The call's
life (its links, commands, handlers, tools) is its session's:
:mod:`voxwire.brisvox.agent_session`; the tools' :mod:`voxwire.brisvox.agent_tools`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from typing import Literal, TypeAlias

import msgspec
from msgspec import UNSET
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from voxwire.brisvox._agent_transport import open_way_out, refusal, refuse
from voxwire.brisvox._logs import websockets_logger
from voxwire.brisvox.agent_cluster import AgentCluster
from voxwire.brisvox.agent_core import AgentCore, ResumeRegistry, StartReceived
from voxwire.brisvox.agent_session import (
    AgentLink,
    AgentSession,
    CallHost,
    CommandTimeout,
    Resumed,
    SessionEvent,
)
from voxwire.brisvox.agent_tools import Tool, ToolContext, ToolError
from voxwire.brisvox.constants import (
    AGENT_TOKEN_ENV,
    MAX_MESSAGE_BYTES,
    SDK_CLOSE_TIMEOUT_MS,
    SDK_COMMAND_TIMEOUT_MS,
    SDK_EVENT_QUEUE,
    SDK_HANDSHAKE_TIMEOUT_MS,
    SDK_MAX_SESSIONS,
    SDK_RESUME_WINDOW_MS,
    SDK_SHUTDOWN_GRACE_MS,
    SDK_UPGRADE_SLACK_MS,
    SDK_WRITE_TIMEOUT_MS,
    SIDE_EFFECT_GRACE_MS,
    SUPPORTED_VERSIONS,
    CloseCode,
)
from voxwire.brisvox.errors import ErrorCode
from voxwire.brisvox.messages import ContextMessage, EventType, SessionAccept, SessionStart
from voxwire.brisvox.outputs import BadMessage, CommandFailed, EventsDropped
from voxwire.capture import Record, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster import Directory, ReplayStore
from voxwire.errors import ConfigError, SessionClosed
from voxwire.hosts import is_loopback
from voxwire.lifecycle import Drained, wait_until
from voxwire.observe.endpoints import Endpoints
from voxwire.observe.metrics import Metrics
from voxwire.sansio import Close, LinkDown
from voxwire.session import DeadlineTimer

__all__ = [
    "Accept",
    "AgentServer",
    "AgentSession",
    "CommandFailed",
    "CommandTimeout",
    "EventsDropped",
    "LinkDown",
    "Reject",
    "Resumed",
    "SessionClosed",
    "SessionEvent",
    "SessionHandler",
    "StartHandler",
    "Tool",
    "ToolContext",
    "ToolError",
    "is_loopback",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Accept:
    """How to take a call: what ``session.accept`` carries beside the version."""

    tools: Sequence[str] | None = None
    """Names of the server's tools to offer (None: all of them)."""
    system_prompt: str | None = None
    context: Sequence[ContextMessage] = ()
    greeting: str | None = None
    events: Sequence[EventType] | None = None
    """The event types to receive (None: every event; ``[]``: none)."""


@dataclass(frozen=True, slots=True)
class Reject:
    """Decline a call with ``session.reject`` (the call runs without the agent)."""

    code: str = ErrorCode.UNAVAILABLE
    message: str | None = None


StartHandler: TypeAlias = Callable[[SessionStart], Accept | Reject | Awaitable[Accept | Reject]]
"""Decides a new call within the handshake budget."""

SessionHandler: TypeAlias = Callable[[AgentSession], Awaitable[None]]
"""Runs one call: iterates its events and sends commands."""


class AgentServer:
    """The agent's WebSocket server: one connection per call.

    Args:
        on_session: Runs each call (started once its ``session.accept`` is written).
        tools: The remote tools the agent implements.
        on_start: Decides each new call within the handshake budget (default: accept with all
            tools). An exception or a late answer rejects the call with ``unavailable``.
        host: Where to listen; loopback by default (said at startup).
        port: The port; 0 picks a free one (``server.port``).
        token: The bearer token the engine must present; ``"env"`` reads
            ``BRISVOX_AGENT_TOKEN`` (unset or empty: no authentication).
        ssl: A TLS context for ``wss://``.
        resume: Declare ``resume`` and park a call whose link is lost for ``resume_window``.
        clock: The clock every timer reads.
        record: Record every message of each call, from its ``session.start`` on, into this
            capture (a path, ``{session_id}`` in it replaced by the call's id; or a
            ``voxwire.capture.Recorder``); see ``voxwire validate``.
        directory: With several agent processes (``voxwire.cluster``): each call is recorded
            as this process's, and a resumption of a call another live process holds is relayed
            there, ``session.start`` first.
        store: With a directory and ``resume``: where each call's resume state is saved as it
            changes (``voxwire.cluster.RedisReplayStore``), so another process can take the call
            over when this one drains or dies.
        on_takeover: With a store: runs each call this server takes over from another process,
            instead of ``on_session`` (the call is under way: rebuild the application's own
            state, then go on as ``on_session`` would). Without it, a resumption of a call whose
            owner is gone is rejected ``unknown_session``.
    """

    def __init__(
        self,
        on_session: SessionHandler,
        *,
        tools: Sequence[Tool] = (),
        on_start: StartHandler | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | Literal["env"] | None = "env",
        ssl: ssl_module.SSLContext | None = None,
        resume: bool = False,
        resume_window: float = SDK_RESUME_WINDOW_MS / 1000,
        event_queue: int = SDK_EVENT_QUEUE,
        max_calls: int = SDK_MAX_SESSIONS,
        handshake_timeout: float = SDK_HANDSHAKE_TIMEOUT_MS / 1000,
        command_timeout: float = SDK_COMMAND_TIMEOUT_MS / 1000,
        write_timeout: float = SDK_WRITE_TIMEOUT_MS / 1000,
        side_effect_grace: float = SIDE_EFFECT_GRACE_MS / 1000,
        versions: tuple[int, ...] = SUPPORTED_VERSIONS,
        clock: Clock = SYSTEM_CLOCK,
        record: Record = None,
        directory: Directory | None = None,
        store: ReplayStore | None = None,
        on_takeover: SessionHandler | None = None,
    ) -> None:
        if store is not None and (directory is None or not resume):
            raise ConfigError("a store needs a directory and resume=True")
        names = [t.declaration.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique: {names}")
        if event_queue < 1 or max_calls < 1:
            raise ValueError("event_queue and max_calls must be at least 1")
        self.on_session = on_session
        self.tools = {t.declaration.name: t for t in tools}
        self.on_start = on_start
        self.host = host
        self.token = (os.environ.get(AGENT_TOKEN_ENV) or None) if token == "env" else token
        self.ssl = ssl
        self.resume = resume
        self.event_queue = event_queue
        self.max_calls = max_calls
        self.handshake_timeout = handshake_timeout
        self.command_timeout = command_timeout
        self.write_timeout = write_timeout
        self.side_effect_grace = side_effect_grace
        self.versions = versions
        self.clock = clock
        self.record = record
        self.directory = directory
        self.on_takeover = on_takeover
        self._port = port
        self._resume_window = resume_window
        self._registry = ResumeRegistry(resume_window)
        self._sessions: dict[str, AgentSession] = {}
        self._server: Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._expiry = DeadlineTimer(clock, self._registry.next_deadline, self._expire)
        self._closing = False
        self.metrics = Metrics("brisvox", "agent")  # served at /metrics: docs/observability.md
        self.endpoints = Endpoints(metrics=self.metrics.exposition)
        """``/healthz``, ``/readyz`` and ``/metrics`` on the server's port."""
        self._cluster = (
            None
            if directory is None
            else AgentCluster(
                directory,
                store,
                clock=clock,
                bearer=self.token is not None,
                takes_over=on_takeover is not None,
                metrics=self.metrics,
            )
        )
        self._draining = False
        self._forgot = asyncio.Event()  # set whenever a call is over (a drain waits on it)

    @property
    def port(self) -> int:
        """The port listened on."""
        if self._server is not None:
            for sock in self._server.sockets:
                return int(sock.getsockname()[1])
        return self._port

    @property
    def url(self) -> str:
        """The URL the engine connects to."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'wss' if self.ssl else 'ws'}://{host}:{self.port}"

    @property
    def calls(self) -> int:
        """Calls the agent holds (connected or parked)."""
        return len(self._sessions)

    async def start(self) -> AgentServer:
        """Start listening (and say where)."""
        self._closing = self._draining = False
        self.endpoints.ready = True
        self._server = await serve(
            self._handle,
            self.host,
            self._port,
            ssl=self.ssl,
            process_request=self._check_request,
            compression=None,
            max_size=MAX_MESSAGE_BYTES,
            ping_interval=None,
            open_timeout=self.clock.real_seconds(self.handshake_timeout)
            + SDK_UPGRADE_SLACK_MS / 1000,
            logger=websockets_logger(f"{__name__}.websockets"),
        )
        if is_loopback(self.host):
            log.info("brisvox agent listening on %s (loopback only)", self.url)
        else:
            log.warning("brisvox agent listening on %s: reachable from the network", self.url)
        if self.token is None:
            log.warning("brisvox agent: no bearer token set, every connection is accepted")
        return self

    async def drain(self, deadline: float) -> Drained:
        """Take the server out of service within ``deadline`` seconds of its clock.

        ``/readyz`` answers 503 at once. With a store, each call is handed over (saved, its link
        closed with 1012). While it holds calls, a new call is rejected ``unavailable`` and a
        resumption of a held call served; once it holds none, every upgrade gets HTTP 503 (a
        balancer retries elsewhere). It returns once no call is left, or at the deadline, when
        each call left ends: its link closed (1000; the call goes on without the agent), or,
        parked, given up. Then :meth:`close`."""
        self.endpoints.ready = False
        self._draining = True
        live = [session for session in self._sessions.values() if not session.ended]
        log.info("brisvox agent draining: %d calls, %g s at most", len(live), deadline)
        handed = [] if self._cluster is None else await self._cluster.hand_over_all(live)
        for session in handed:  # another process's now: a resumption is not served here
            self._forget(session)
        await self._until_ended(handed, SDK_CLOSE_TIMEOUT_MS / 1000)  # what was on the way
        live = [session for session in live if session not in handed]
        await self._until_ended(live, deadline)
        left = [session for session in live if not session.ended]
        if left:
            self._closing = True  # a link closed now is not parked
            for session in left:
                session.leave("the agent is shutting down")
            await self._until_ended(left, SDK_CLOSE_TIMEOUT_MS / 1000)
        return Drained(len(handed), finished=len(live) - len(left), ended=len(left))

    async def close(self) -> None:
        """Stop listening, close the calls' links and end parked calls."""
        self._closing = True
        self._expiry.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for session in list(self._sessions.values()):
            if session.parked:
                session.give_up("the agent server closed")
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SDK_SHUTDOWN_GRACE_MS / 1000):
                    await asyncio.gather(*tasks, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._cluster is not None:
            await self._cluster.close()

    async def __aenter__(self) -> AgentServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- HTTP, before the upgrade ---------------------------------------------------------------

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        probe = self.endpoints.answer(connection, request)
        if probe is not None:
            return probe
        if self._draining and not self._sessions:
            # Nothing to resume here: a balancer's retry sends the engine to another process.
            return connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, "draining\n")
        return refusal(connection, request, self.token, self.metrics)

    # -- one connection -------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        core = AgentCore(
            self.clock.now(), versions=self.versions, handshake_timeout=self.handshake_timeout
        )
        way_out = partial(
            open_way_out, clock=self.clock, event_queue=self.event_queue, drain=self.write_timeout
        )
        link = AgentLink(ws, core, way_out)
        try:
            session = await self._handshake(link)
            if session is not None:
                await session.serve(link)
            elif link.capture is not None:  # a call not taken
                link.capture.close()
        finally:
            await link.out.stop()

    async def _handshake(self, link: AgentLink) -> AgentSession | None:
        core = link.core
        try:
            async with asyncio.timeout(self._real_until(core.next_deadline())):
                raw = await link.ws.recv()
            link.out.heard()
        except TimeoutError:
            await link.perform(core.tick(float("inf")))
            return None
        except ConnectionClosed:
            return None
        now = self.clock.now()
        outputs = (
            core.receive_text(raw, now) if isinstance(raw, str) else core.receive_binary(raw, now)
        )
        started = next((out for out in outputs if type(out) is StartReceived), None)
        if started is None:
            await link.perform(outputs)
            return None
        start, version = started.start, started.version
        for out in outputs:  # the start's envelope broke a rule: reported, read anyway
            if type(out) is BadMessage:
                log.warning("session %s: %s", start.session_id, out.error)
        resuming = start.resume not in (UNSET, None)
        if resuming:
            known = self._sessions.get(start.session_id)
            link.recorder = known.recorder if known is not None else None
            if known is not None and link.recorder is not None:
                if not known.closed:  # half-open: the engine lost it, this side not yet
                    link.recorder.link("lost")
                link.recorder.link("open")
        else:
            link.recorder, link.capture = open_recorder(
                self.record,
                protocol="brisvox",
                recorded_by="agent",
                session_id=start.session_id,
                clock=self.clock,
            )
        if link.recorder is not None:
            link.recorder.record("server", raw)
        if resuming:
            return await self._resume(link, start, version, raw)
        busy = self._busy()
        if busy is not None:
            await refuse(link, self.metrics, ErrorCode.UNAVAILABLE, busy)
            return None
        try:
            async with asyncio.timeout(self._real_until(core.next_deadline())):
                decision = await self._decide(start)
        except TimeoutError:
            log.warning("session %s: on_start exceeded the handshake budget", start.session_id)
            decision = Reject(ErrorCode.UNAVAILABLE, "handshake budget exceeded")
        except Exception:
            log.exception("session %s: on_start raised; rejecting", start.session_id)
            decision = Reject(ErrorCode.UNAVAILABLE, "agent error")
        now = self.clock.now()
        if isinstance(decision, Reject):
            await refuse(link, self.metrics, decision.code, decision.message)
            return None
        try:
            accept = self._accept_message(decision, version)
            actions = core.accept(accept, now)
        except Exception:
            log.exception("session %s: the accept breaks a rule; rejecting", start.session_id)
            await refuse(link, self.metrics, ErrorCode.UNAVAILABLE, "agent error")
            return None
        try:
            await link.perform(actions)
        except SessionClosed as exc:
            log.warning("session %s: the accept was not written: %s", start.session_id, exc)
            return None
        session = AgentSession(self._host(), start, version, accept, link)
        self._sessions[session.id] = session
        if self.resume:
            self._registry.live(session.id)
        if self._cluster is not None:
            self._spawn(self._cluster.own(session.id, True), f"brisvox-own-{session.id}")
            self._cluster.changed(session)
        self._spawn(self._run_session(session, self.on_session), f"brisvox-session-{session.id}")
        return session

    async def _until_ended(self, sessions: list[AgentSession], seconds: float) -> None:
        """Wait until each of ``sessions`` ended, ``seconds`` of the clock at most."""
        await wait_until(lambda: all(s.ended for s in sessions), self._forgot, self.clock, seconds)

    def _busy(self) -> str | None:
        """Why a new call is rejected ``unavailable`` now, or None."""
        if self._draining:
            return "the agent is draining"
        return "too many calls" if self.calls >= self.max_calls else None

    async def _decide(self, start: SessionStart) -> Accept | Reject:
        if self.on_start is None:
            return Accept()
        decision = self.on_start(start)
        if inspect.isawaitable(decision):
            decision = await decision
        if not isinstance(decision, Accept | Reject):
            raise TypeError(f"on_start returned {decision!r}, not an Accept or a Reject")
        return decision

    def _accept_message(self, accept: Accept, version: int) -> SessionAccept:
        names = list(self.tools) if accept.tools is None else list(accept.tools)
        unknown = [n for n in names if n not in self.tools]
        if unknown:
            raise ValueError(f"Accept.tools names tools the server does not have: {unknown}")
        return SessionAccept(
            version=version,
            tools=[self.tools[n].declaration for n in names],
            system_prompt=_opt(accept.system_prompt),
            context=list(accept.context) if accept.context else UNSET,
            greeting=_opt(accept.greeting),
            events=UNSET if accept.events is None else list(accept.events),
            resume=self.resume,
        )

    async def _resume(
        self, link: AgentLink, start: SessionStart, version: int, raw: str | bytes
    ) -> AgentSession | None:
        core, now = link.core, self.clock.now()
        session = self._sessions.get(start.session_id)
        if session is None and self._cluster is not None:
            takes_over = self.on_takeover is not None and not self._draining
            taken = await self._cluster.resume_elsewhere(
                link, start, version, raw, host=self._host() if takes_over else None
            )
            if taken is not None and self.on_takeover is not None:
                self._sessions[taken.id] = taken
                self._registry.live(taken.id)
                self._spawn(self._run_session(taken, self.on_takeover), f"brisvox-call-{taken.id}")
            return taken
        if (
            not self.resume
            or self._closing
            or session is None
            or session.ended
            or not self._registry.may_resume(session.id, now)
        ):
            log.warning(
                "session %s: resumption of a call this agent does not hold", start.session_id
            )
            await refuse(link, self.metrics, ErrorCode.UNKNOWN_SESSION, "no such call")
            return None
        accept = SessionAccept(version=version, tools=[], events=session.accept.events, resume=True)
        try:
            await link.perform(core.accept(accept, now))
        except SessionClosed as exc:
            log.warning("session %s: the resumption's accept was not written: %s", session.id, exc)
            return None  # still parked, with the same deadline
        if session.ended:
            await link.perform([Close(CloseCode.NORMAL, "the call ended")])
            return None
        self._registry.live(session.id)
        session.take_over(link, start, version, accept)
        return session

    def _host(self) -> CallHost:
        """What a new call needs of this server (its settings as they are now)."""
        return CallHost(
            clock=self.clock,
            command_timeout=self.command_timeout,
            side_effect_grace=self.side_effect_grace,
            event_queue=self.event_queue,
            tools=self.tools,
            tasks=self._tasks,
            park=self._park,
            forget=self._forget,
            metrics=self.metrics,
            changed=None if self._cluster is None else self._cluster.changed,
        )

    def _park(self, session: AgentSession) -> bool:
        """``session`` lost its link: park it for a resumption when the server resumes calls."""
        if not self.resume or self._closing:
            return False
        self._registry.lost(session.id, self.clock.now())
        self._expiry.update()
        log.info("session %s: link lost; parked for a resumption", session.id)
        if self._cluster is not None:
            self._cluster.changed(session)
        return True

    def _forget(self, session: AgentSession) -> None:
        """``session`` is over."""
        self._registry.forget(session.id)
        if self._cluster is not None:
            self._spawn(self._cluster.own(session.id, False), f"brisvox-disown-{session.id}")
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        self._forgot.set()

    def _expire(self, now: float) -> None:
        for session_id in self._registry.expired(now):
            session = self._sessions.get(session_id)
            if session is not None:
                log.info("session %s: not resumed in time; the call ends", session_id)
                session.give_up("not resumed within the resume window")

    # -- plumbing -------------------------------------------------------------------------------

    async def _run_session(self, session: AgentSession, handler: SessionHandler) -> None:
        try:
            await handler(session)
        except SessionClosed as exc:
            log.debug("session %s: on_session stopped on a closed link: %s", session.id, exc)
        except Exception:
            log.exception("session %s: on_session raised", session.id)

    def _real_until(self, deadline: float | None) -> float | None:
        if deadline is None:
            return None
        return self.clock.real_seconds(max(0.0, deadline - self.clock.now()))

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _opt(value: str | None) -> str | msgspec.UnsetType:
    return UNSET if value is None else value
