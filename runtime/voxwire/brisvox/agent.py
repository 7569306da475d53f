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
            await session.say("We open at noon.", re=event.seq)

async with AgentServer(on_session, tools=[hours_tool], port=0) as server:
    print(server.url)       # ws://127.0.0.1:PORT for BRISVOX_AGENT_URL
```

One reader task per connection never waits on application code: events go into a bounded
per-call queue whose overflow comes out of the iteration as :class:`EventsDropped`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import logging
import os
import ssl as ssl_module
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final, Literal, TypeAlias, get_args

import msgspec
from msgspec import UNSET
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from voxwire.brisvox._logs import websockets_logger
from voxwire.brisvox.agent_core import (
    AgentCore,
    AgentOutput,
    CommandAnswered,
    CommandTimedOut,
    Delivered,
    EventReceived,
    ResumeRegistry,
    StartReceived,
    ToolCallCancelled,
    ToolCallStarted,
)
from voxwire.brisvox.constants import (
    AGENT_TOKEN_ENV,
    END_COMMAND_EXTRA_MS,
    LINK_CLOSED_REASON,
    MAX_MESSAGE_BYTES,
    PING_INTERVAL_MS,
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
    SILENCE_TIMEOUT_MS,
    SUPPORTED_VERSIONS,
    TRANSFER_COMMAND_EXTRA_MS,
    CloseCode,
)
from voxwire.brisvox.errors import ErrorCode
from voxwire.brisvox.messages import (
    AgentMessage,
    Command,
    CommandResult,
    ContextMessage,
    ContextUpdate,
    End,
    EventType,
    Say,
    SessionAccept,
    SessionEnd,
    SessionStart,
    ToolCall,
    ToolDeclaration,
    ToolKind,
    ToolsSet,
    Transfer,
    TransferMode,
)
from voxwire.brisvox.outputs import (
    BadMessage,
    CommandFailed,
    EventBuffer,
    EventsDropped,
    HandshakeFailed,
)
from voxwire.brisvox.roles import AgentReceives, AgentSends
from voxwire.capture import CaptureWriter, Record, Recorder, open_recorder
from voxwire.clock import SYSTEM_CLOCK, Clock
from voxwire.cluster import Directory, StoreUnavailable, other_owner
from voxwire.cluster.relay import Keepalive as RelayKeepalive
from voxwire.cluster.relay import RelayFailed, carry, open_relay
from voxwire.errors import SessionClosed, VoxwireError
from voxwire.hosts import is_loopback
from voxwire.link import Keepalive, Link, Outbound, Overflow, Put
from voxwire.sansio import Close, Ignored, SendText

__all__ = [
    "Accept",
    "AgentServer",
    "AgentSession",
    "CommandFailed",
    "CommandTimeout",
    "EventsDropped",
    "LinkClosed",
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

_CLUSTER_KEY: Final = "brisvox"
"""The protocol's name in the owner directory (voxwire.cluster), beside OVP's."""


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


@dataclass(frozen=True, slots=True)
class Resumed:
    """The call's lost link was taken up again (not on the wire; the server's ``events.lost``
    follows). ``seen_seq`` is the last seq this side read on the lost link."""

    attempt: int
    previous_seq: int
    seen_seq: int
    down_ms: int
    seq: int


@dataclass(frozen=True, slots=True)
class LinkClosed:
    """The call ended for the agent without a ``session.end`` (the link was lost, a parked call
    was not resumed in time, or the server shut down)."""

    reason: str


SessionEvent: TypeAlias = Delivered | EventsDropped | Resumed | LinkClosed
"""What iterating an :class:`AgentSession` yields; the last one is a SessionEnd or LinkClosed."""

StartHandler: TypeAlias = Callable[[SessionStart], Accept | Reject | Awaitable[Accept | Reject]]
"""Decides a new call within the handshake budget."""

SessionHandler: TypeAlias = Callable[["AgentSession"], Awaitable[None]]
"""Runs one call: iterates its events and sends commands."""


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


class ToolError(VoxwireError):
    """Raise from a tool to fail it with this text as the error the LLM gets."""


@dataclass(slots=True)
class ToolContext:
    """What a running tool knows: its call, its session, and whether the server stopped waiting."""

    call: ToolCall
    session: AgentSession
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on ``tool.cancel`` or a lost link; a read_only tool is also cancelled then."""
    cancel_reason: str | None = None
    """The ``tool.cancel`` reason, or ``link_closed``."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A remote tool: its declaration and the coroutine that runs it.

    ``run`` returns any JSON value (the result) or raises :class:`ToolError` (the error text);
    another exception fails the call with its type name only.
    """

    declaration: ToolDeclaration
    run: Callable[[ToolContext], Awaitable[object]]


class _Connection:
    """One connection of a call: its socket, its way out, its core, and the call's recorder."""

    __slots__ = ("capture", "core", "out", "recorder", "timer", "wake", "ws")

    def __init__(
        self, ws: ServerConnection, core: AgentCore, way_out: Callable[[_Connection], Link]
    ) -> None:
        self.ws = ws
        self.core = core
        self.wake = asyncio.Event()
        self.timer: asyncio.Task[None] | None = None
        self.recorder: Recorder | None = None
        self.capture: CaptureWriter | None = None
        """The capture file opened for a new call (its session closes it at the call's end)."""
        self.out = way_out(self)
        """Every write goes here: one queue, one writer, the keepalive, the close."""


class AgentSession(AgentSends[Coroutine[Any, Any, CommandResult]], AgentReceives):
    """One call seen from the agent: its ``session.start``, its events, its commands.

    Commands go out through the typed sends (``await session.send_say(text="Hello.")``, one per
    command; the id is the session's, ``c1``, ``c2``...), the helpers below (:meth:`say`,
    :meth:`transfer`... with a chosen ``id`` or ``timeout``), or :meth:`command` with a message
    object: one path. A handler registered with the typed ``on()`` (``session.on("user.text",
    handle)``) gets each message of its type as it arrives, in the reader's order (an awaitable
    one runs as its own task); those messages are not iterated. ``session.end`` reaches both.

    Iterate it (``async for event in session``) for the events in the server's order; the last
    one is the server's ``SessionEnd`` or a :class:`LinkClosed`. Commands wait for their
    ``command.result``: ok returns it, a refusal raises :class:`CommandFailed`, no answer in time
    raises :class:`CommandTimeout`, a closed or parked link :class:`SessionClosed`.
    """

    def __init__(
        self, server: AgentServer, start: SessionStart, version: int, accept: SessionAccept
    ) -> None:
        self.start = start
        """The call's first ``session.start``."""
        self.version = version
        """The protocol version picked."""
        self.accept = accept
        """The ``session.accept`` sent for the call."""
        self.resumes = 0
        """How many times the call's link was taken up again."""
        self._server = server
        self._buffer: EventBuffer[SessionEvent] = EventBuffer(server.event_queue)
        self._ready = asyncio.Event()
        self._link: _Connection | None = None
        self._next_id = 0
        self._pending: dict[str, asyncio.Future[CommandResult]] = {}
        self._tools: dict[int, tuple[asyncio.Task[None], ToolContext]] = {}
        self._ended = False
        self._seen_seq = start.seq
        self._handlers: dict[str, list[Callable[[Any], object]]] = {}
        self._recorder: Recorder | None = None
        self._capture: CaptureWriter | None = None

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
    def events_lost(self) -> int:
        """Events this side dropped because the application fell behind."""
        return self._buffer.lost_total

    # -- events ---------------------------------------------------------------------------------

    async def next_event(self) -> SessionEvent | None:
        """The next event, or None once the call's last event was taken."""
        while True:
            item = self._buffer.pop()
            if item is not None:
                return item
            if self._buffer.finished:
                return None
            self._ready.clear()
            await self._ready.wait()

    def __aiter__(self) -> AgentSession:
        return self

    async def __anext__(self) -> SessionEvent:
        item = self._buffer.pop()  # the common case under load: no wait, no generator step
        if item is None:
            item = await self.next_event()
            if item is None:
                raise StopAsyncIteration
        return item

    def _deliver(self, event: SessionEvent) -> None:
        if not self._buffer.push(event):
            log.debug("session %s: event queue full, %s dropped", self.id, type(event).__name__)
        elif not self._ready.is_set():
            self._ready.set()

    def _finish(self, event: SessionEnd | LinkClosed) -> None:
        self._ended = True
        self._buffer.finish(event)
        self._ready.set()

    def _close_capture(self) -> None:
        if self._capture is not None:
            self._capture.close()
            self._capture = None

    # -- commands -------------------------------------------------------------------------------

    def _send(
        self, kind: type[AgentMessage], fields: dict[str, Any]
    ) -> Coroutine[Any, Any, CommandResult]:
        """The typed sends' one path: a command of ``fields``, sent by :meth:`command`."""
        message = kind(**fields)
        if not isinstance(message, _COMMANDS):
            raise TypeError(f"the agent sends {kind.type} itself, not through _send")
        return self.command(message)

    def _on(self, message_type: str, handler: Callable[[Any], object]) -> None:
        self._handlers.setdefault(message_type, []).append(handler)

    def _call(self, message_type: str, message: object) -> bool:
        """Call the handlers of ``message_type``; whether it has any."""
        handlers = self._handlers.get(message_type)
        for handler in handlers or ():
            try:
                done = handler(message)
            except Exception:
                log.exception("session %s: a %s handler failed", self.id, message_type)
                continue
            if inspect.isawaitable(done):
                self._server._spawn(_awaited(done), f"brisvox-handler-{message_type}")
        return bool(handlers)

    async def command(self, command: Command, *, timeout: float | None = None) -> CommandResult:
        """Send ``command`` (an id ``c1``, ``c2``... is added when it has none) and wait for its
        result. Raises ``brisvox.ProtocolError`` (nothing sent) when it breaks a rule."""
        link = self._link
        if link is None:
            raise SessionClosed(f"session {self.id}: the link is {self._state()}")
        if command.id is UNSET:
            self._next_id += 1
            command = msgspec.structs.replace(command, id=f"c{self._next_id}")
        assert isinstance(command.id, str)
        if timeout is None:
            timeout = self._server.command_timeout
            if isinstance(command, End | Transfer):
                timeout += (
                    END_COMMAND_EXTRA_MS if isinstance(command, End) else TRANSFER_COMMAND_EXTRA_MS
                ) / 1000
        clock = self._server.clock
        actions = link.core.send_command(command, clock.now(), timeout)
        future: asyncio.Future[CommandResult] = asyncio.get_running_loop().create_future()
        self._pending[command.id] = future
        link.wake.set()
        try:
            await self._server._perform(link, actions)
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

    async def say(
        self,
        text: str,
        *,
        interrupt: bool = False,
        id: str | None = None,
        re: int | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Speak ``text`` verbatim as a bot line (``interrupt`` cuts a running response)."""
        return await self.command(
            Say(text=text, interrupt=interrupt, id=_opt(id), re=_opt_int(re)), timeout=timeout
        )

    async def end(
        self,
        say: str | None = None,
        *,
        reason: str | None = None,
        id: str | None = None,
        re: int | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """End the call after the optional farewell ``say``."""
        return await self.command(
            End(say=_opt(say), reason=_opt(reason), id=_opt(id), re=_opt_int(re)), timeout=timeout
        )

    async def transfer(
        self,
        destination: str,
        *,
        mode: TransferMode = TransferMode.COLD,
        summary: str | None = None,
        reason: str | None = None,
        id: str | None = None,
        re: int | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Transfer the call to the E.164 ``destination``; after a timeout repeat it only with
        the same ``id``."""
        message = Transfer(
            destination=destination,
            mode=mode,
            summary=_opt(summary),
            reason=_opt(reason),
            id=_opt(id),
            re=_opt_int(re),
        )
        return await self.command(message, timeout=timeout)

    async def update_context(
        self,
        *,
        system_prompt: str | None = None,
        append: Sequence[ContextMessage] = (),
        id: str | None = None,
        re: int | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Replace the system prompt and/or append messages, from the next response on."""
        message = ContextUpdate(
            system_prompt=_opt(system_prompt),
            append=list(append) if append else UNSET,
            id=_opt(id),
            re=_opt_int(re),
        )
        return await self.command(message, timeout=timeout)

    async def set_tools(
        self,
        enabled: Sequence[str] | None,
        *,
        id: str | None = None,
        re: int | None = None,
        timeout: float | None = None,
    ) -> CommandResult:
        """Offer only the tools named (None: all again) from the next response on."""
        message = ToolsSet(
            enabled=None if enabled is None else list(enabled), id=_opt(id), re=_opt_int(re)
        )
        return await self.command(message, timeout=timeout)

    def _state(self) -> str:
        return "parked" if self.parked else "closed"

    def _fail_pending(self, reason: str) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(SessionClosed(f"session {self.id}: {reason}"))


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
        directory: With several agent processes (``voxwire.cluster``): a parked call is
            recorded as this process's for the resume window, and a resumption of a call parked
            on another live process is relayed there, ``session.start`` first.
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
    ) -> None:
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
        self._port = port
        self._resume_window = resume_window
        self._registry = ResumeRegistry(resume_window)
        self._sessions: dict[str, AgentSession] = {}
        self._server: Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._expiry_wake = asyncio.Event()
        self._expiry: asyncio.Task[None] | None = None
        self._closing = False

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
        self._closing = False
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
        if self.resume:
            self._expiry = self._spawn(self._expire_loop(), "brisvox-agent-expiry")
        return self

    async def close(self) -> None:
        """Stop listening, close the calls' links and end parked calls."""
        self._closing = True
        if self._expiry is not None:
            self._expiry.cancel()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for session in list(self._sessions.values()):
            if session.parked:
                self._end(session, LinkClosed("the agent server closed"))
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SDK_SHUTDOWN_GRACE_MS / 1000):
                    await asyncio.gather(*tasks, return_exceptions=True)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> AgentServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- HTTP, before the upgrade ---------------------------------------------------------------

    def _check_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if "Origin" in request.headers:
            log.warning("refused a request with an Origin header (a browser)")
            return connection.respond(HTTPStatus.FORBIDDEN, "browser origins are refused\n")
        if self.token is None:
            return None
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), self.token.encode()
        ):
            return None
        log.warning("refused a request without the right bearer token")
        response = connection.respond(HTTPStatus.UNAUTHORIZED, "unauthorized\n")
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    # -- one connection -------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        core = AgentCore(
            self.clock.now(), versions=self.versions, handshake_timeout=self.handshake_timeout
        )
        link = _Connection(ws, core, self._open_link)
        try:
            await self._serve(link)
        finally:
            await link.out.stop()

    def _open_link(self, link: _Connection) -> Link:
        """The connection's way out: everything the agent sends is control (never dropped),
        one writer drains it under the write timeout, the keepalive of the spec."""

        def record(data: str | bytes) -> None:
            if link.recorder is not None:  # known once the session.start was read
                link.recorder.record("agent", data)

        return Link(
            link.ws,
            Outbound(event_bound=self.event_queue, overflow=Overflow.DROP),
            clock=self.clock,
            drain_timeout=self.write_timeout,
            keepalive=Keepalive(
                ping_interval=PING_INTERVAL_MS / 1000,
                silence_timeout=SILENCE_TIMEOUT_MS / 1000,
                now=self.clock.now(),
            ),
            close_timeout=SDK_CLOSE_TIMEOUT_MS / 1000,
            record=record,
            name=f"brisvox agent link {link.ws.id}",
        )

    async def _serve(self, link: _Connection) -> None:
        session = await self._handshake(link)
        if session is None:
            if link.capture is not None:  # a call not taken
                link.capture.close()
            return
        link.timer = self._spawn(self._timer(link, session), f"brisvox-timer-{session.id}")
        # The loop runs once per message: what it reads on every pass is bound here (the
        # recorder is known once the handshake read the session.start).
        core, out, clock, recorder = link.core, link.out, self.clock, link.recorder
        buffer = session._buffer
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
                self._handle_outputs(session, link, outputs)
                if 2 * len(buffer) >= buffer.capacity:
                    # Half the handler's queue waits: websockets hands over buffered messages
                    # without yielding, so let the handler take some before the queue overflows
                    # (one loop turn, never a wait on it).
                    await asyncio.sleep(0)
        except ConnectionClosed:
            pass
        finally:
            link.timer.cancel()
            down = link.out.down  # the writer took it down (drain timeout, silence, a fault)
            self._link_lost(session, link, down.reason if down else "the link closed")
            if session._ended:
                session._close_capture()

    async def _handshake(self, link: _Connection) -> AgentSession | None:
        core = link.core
        try:
            async with asyncio.timeout(self._real_until(core.next_deadline())):
                raw = await link.ws.recv()
            link.out.heard()
        except TimeoutError:
            await self._perform(link, core.tick(float("inf")))
            return None
        except ConnectionClosed:
            return None
        now = self.clock.now()
        outputs = (
            core.receive_text(raw, now) if isinstance(raw, str) else core.receive_binary(raw, now)
        )
        started = [o for o in outputs if isinstance(o, StartReceived)]
        if not started:
            await self._perform(link, outputs)
            return None
        start, version = started[0].start, started[0].version
        for out in outputs:  # the start's envelope broke a rule: reported, read anyway
            if isinstance(out, BadMessage):
                log.warning("session %s: %s", start.session_id, out.error)
        resuming = start.resume not in (UNSET, None)
        if resuming:
            known = self._sessions.get(start.session_id)
            link.recorder = known._recorder if known is not None else None
            if known is not None and link.recorder is not None:
                if known._link is not None:  # half-open: the engine lost it, this side not yet
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
        if self.calls >= self.max_calls:
            await self._perform(link, core.reject(ErrorCode.UNAVAILABLE, "too many calls", now))
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
            await self._perform(link, core.reject(decision.code, decision.message, now))
            return None
        try:
            accept = self._accept_message(decision, version)
            actions = core.accept(accept, now)
        except Exception:
            log.exception("session %s: the accept breaks a rule; rejecting", start.session_id)
            await self._perform(link, core.reject(ErrorCode.UNAVAILABLE, "agent error", now))
            return None
        try:
            await self._perform(link, actions)
        except SessionClosed as exc:
            log.warning("session %s: the accept was not written: %s", start.session_id, exc)
            return None
        session = AgentSession(self, start, version, accept)
        session._link = link
        session._recorder, session._capture = link.recorder, link.capture
        self._sessions[session.id] = session
        if self.resume:
            self._registry.live(session.id)
        self._spawn(self._run_session(session), f"brisvox-session-{session.id}")
        return session

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
        self, link: _Connection, start: SessionStart, version: int, raw: str | bytes
    ) -> AgentSession | None:
        core, now = link.core, self.clock.now()
        session = self._sessions.get(start.session_id)
        if session is None and await self._relayed(link, start.session_id, raw):
            return None
        if (
            not self.resume
            or self._closing
            or session is None
            or session._ended
            or not self._registry.may_resume(session.id, now)
        ):
            log.warning(
                "session %s: resumption of a call this agent does not hold", start.session_id
            )
            await self._perform(link, core.reject(ErrorCode.UNKNOWN_SESSION, "no such call", now))
            return None
        assert not isinstance(start.resume, msgspec.UnsetType) and start.resume is not None
        accept = SessionAccept(version=version, tools=[], events=session.accept.events, resume=True)
        try:
            await self._perform(link, core.accept(accept, now))
        except SessionClosed as exc:
            log.warning("session %s: the resumption's accept was not written: %s", session.id, exc)
            return None  # still parked, with the same deadline
        if session._ended:
            await self._perform(link, [Close(CloseCode.NORMAL, "the call ended")])
            return None
        self._registry.live(session.id)
        old = session._link
        if old is not None:  # a half-open link: the resumption takes the call over
            self._wind_down(session, old, "superseded by a resumed link")
            old.out.close(CloseCode.NORMAL, "superseded by a resumed link")
        seen_seq = old.core.last_seq if old is not None else session._seen_seq
        session._link = link
        session.version = version
        session.resumes += 1
        log.info(
            "session %s: resumed (attempt %d, down %d ms)",
            session.id,
            start.resume.attempt,
            start.resume.down_ms,
        )
        session._deliver(
            Resumed(
                attempt=start.resume.attempt,
                previous_seq=start.resume.previous_seq,
                seen_seq=seen_seq,
                down_ms=start.resume.down_ms,
                seq=start.seq,
            )
        )
        session._call(start.type, start)  # the resumption's session.start
        return session

    def _handle_outputs(
        self, session: AgentSession, link: _Connection, outputs: list[AgentOutput]
    ) -> None:
        for out in outputs:
            if isinstance(out, EventReceived):
                message = out.message
                handled = session._call(message.type, message)
                if isinstance(message, SessionEnd):
                    self._end(session, message)
                elif not handled:
                    session._deliver(message)
            elif isinstance(out, ToolCallStarted):
                session._call(out.call.type, out.call)
                self._start_tool(session, link, out.call)
            elif isinstance(out, ToolCallCancelled):
                if out.message is not None:
                    session._call(out.message.type, out.message)
                self._cancel_tool(session, out)
            elif isinstance(out, CommandAnswered):
                session._call(out.result.type, out.result)
                future = session._pending.get(out.result.id)
                if future is not None and not future.done():
                    future.set_result(out.result)
            elif isinstance(out, CommandTimedOut):
                future = session._pending.get(out.command_id)
                if future is not None and not future.done():
                    future.set_exception(CommandTimeout(out.command_id, out.timeout))
            elif isinstance(out, SendText):  # an answer the core makes itself
                self._queue(link, out)
            elif isinstance(out, Ignored):
                log.debug("session %s: ignored %s", session.id, out.what)
            elif isinstance(out, BadMessage):
                log.warning("session %s: %s", session.id, out.error)
            else:  # the handshake's outputs cannot come once the link is open
                raise AssertionError(f"unexpected core output {out!r}")

    async def _timer(self, link: _Connection, session: AgentSession) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._real_until(link.core.next_deadline())):
                    await link.wake.wait()
            link.wake.clear()
            self._handle_outputs(session, link, link.core.tick(self.clock.now()))

    # -- tools ----------------------------------------------------------------------------------

    def _start_tool(self, session: AgentSession, link: _Connection, call: ToolCall) -> None:
        ctx = ToolContext(call, session)
        task = self._spawn(self._run_tool(link, ctx), f"brisvox-tool-{call.name}-{call.id}")
        session._tools[call.id] = (task, ctx)
        task.add_done_callback(lambda _: session._tools.pop(call.id, None))

    def _cancel_tool(self, session: AgentSession, cancel: ToolCallCancelled) -> None:
        entry = session._tools.get(cancel.call.id)
        if entry is None:
            return
        task, ctx = entry
        ctx.cancel_reason = cancel.reason
        ctx.cancelled.set()
        if cancel.call.kind is ToolKind.READ_ONLY:
            task.cancel()

    async def _run_tool(self, link: _Connection, ctx: ToolContext) -> None:
        call = ctx.call
        tool = self.tools.get(call.name)
        answer: dict[str, Any]
        if tool is None:
            answer = {"error": f"unknown tool {call.name!r}"}
        else:
            try:
                answer = {"result": await tool.run(ctx)}
            except asyncio.CancelledError:
                if ctx.cancelled.is_set():
                    log.debug("tool %s (%d) cancelled: %s", call.name, call.id, ctx.cancel_reason)
                    return
                raise
            except ToolError as exc:
                answer = {"error": str(exc) or "tool failed"}
            except Exception as exc:
                log.exception("tool %s (%d) failed", call.name, call.id)
                answer = {"error": f"tool failed: {type(exc).__name__}"}
        outputs = link.core.answer_tool(call.id, self.clock.now(), **answer)
        for out in outputs:
            if isinstance(out, BadMessage):
                log.warning("tool %s (%d): %s; sent as an error", call.name, call.id, out.error)
            elif isinstance(out, Ignored):
                log.debug("tool %s (%d): %s", call.name, call.id, out.what)
        with contextlib.suppress(SessionClosed):
            await self._perform(link, outputs)

    def _wind_down(self, session: AgentSession, link: _Connection, reason: str) -> None:
        """A link is gone: commands fail, running tools hear ``link_closed``; read_only tools
        stop now, side_effect ones get ``side_effect_grace`` to finish."""
        if session._link is link:
            session._link = None
            session._seen_seq = link.core.last_seq
        link.core.closed()
        session._fail_pending(reason)
        for task, ctx in list(session._tools.values()):
            ctx.cancel_reason = ctx.cancel_reason or LINK_CLOSED_REASON
            ctx.cancelled.set()
            if ctx.call.kind is ToolKind.READ_ONLY:
                task.cancel()
            else:
                self._spawn(self._cancel_later(task), "brisvox-tool-grace")

    async def _cancel_later(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.clock.real_seconds(self.side_effect_grace)):
                await asyncio.shield(task)
        task.cancel()

    def _link_lost(self, session: AgentSession, link: _Connection, reason: str) -> None:
        if session._link is not link:
            return  # a resumption took the call over
        self._wind_down(session, link, reason)
        if session._ended:
            return
        if self.resume and not self._closing:
            if session._recorder is not None:
                session._recorder.link("lost")
            self._registry.lost(session.id, self.clock.now())
            self._expiry_wake.set()
            log.info("session %s: link lost; parked for a resumption", session.id)
            if self.directory is not None:
                window = self.clock.real_seconds(self._resume_window)
                self._spawn(self._own(session.id, window), f"brisvox-own-{session.id}")
        else:
            self._end(session, LinkClosed(reason))

    def _end(self, session: AgentSession, event: SessionEnd | LinkClosed) -> None:
        self._registry.forget(session.id)
        if self.directory is not None:
            self._spawn(self._own(session.id, None), f"brisvox-disown-{session.id}")
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        session._finish(event)
        if session._link is None:  # else the link's reader closes it when the link is gone
            session._close_capture()

    async def _expire_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._real_until(self._registry.next_deadline())):
                    await self._expiry_wake.wait()
            self._expiry_wake.clear()
            for session_id in self._registry.expired(self.clock.now()):
                session = self._sessions.get(session_id)
                if session is not None:
                    log.info("session %s: not resumed in time; the call ends", session_id)
                    self._end(session, LinkClosed("not resumed within the resume window"))

    # -- several processes (voxwire.cluster) ----------------------------------------------------

    async def _own(self, session_id: str, window: float | None) -> None:
        """Record this process as the parked call's owner for ``window`` seconds (None: forget)."""
        assert self.directory is not None
        try:
            if window is None:
                await self.directory.release(_CLUSTER_KEY, session_id)
            else:
                await self.directory.claim(_CLUSTER_KEY, session_id, window)
        except StoreUnavailable as exc:
            # Not recorded: a resumption landing elsewhere is refused (unknown_session), as
            # with one process; one landing here still finds the call.
            log.warning("session %s: the owner directory was not updated: %s", session_id, exc)

    async def _relayed(self, link: _Connection, session_id: str, raw: str | bytes) -> bool:
        """Relay a resumption of a call parked on another live process; False if there is none."""
        if self.directory is None:
            return False
        owner = await other_owner(self.directory, _CLUSTER_KEY, session_id)
        if owner is None:
            return False
        request = link.ws.request
        assert request is not None
        headers = {"Authorization": request.headers["Authorization"]} if self.token else {}
        try:
            upstream = await open_relay(
                owner, request.path, headers=headers, max_size=MAX_MESSAGE_BYTES
            )
        except RelayFailed as exc:
            log.warning(
                "session %s: parked on %s, which cannot be reached: %s",
                session_id,
                owner.process_id,
                exc,
            )
            return False
        log.info("session %s: parked on %s; relaying the resumption", session_id, owner.process_id)
        await link.out.stop()  # the owner's link speaks on this connection now
        silence = (SILENCE_TIMEOUT_MS - PING_INTERVAL_MS) / 1000
        keepalive = RelayKeepalive(PING_INTERVAL_MS / 1000, silence, self.clock)
        await carry(link.ws, upstream, owner, first=[raw], keepalive=keepalive)
        return True

    # -- plumbing -------------------------------------------------------------------------------

    async def _run_session(self, session: AgentSession) -> None:
        try:
            await self.on_session(session)
        except SessionClosed as exc:
            log.debug("session %s: on_session stopped on a closed link: %s", session.id, exc)
        except Exception:
            log.exception("session %s: on_session raised", session.id)

    async def _perform(self, link: _Connection, outputs: Sequence[AgentOutput]) -> None:
        """Queue the writes the core asks for; after a close, wait until it was written (the
        link's close timeout bounds it). Raises SessionClosed when the link no longer takes
        writes (it went down or is closing)."""
        closing = False
        for out in outputs:
            if isinstance(out, SendText):
                self._queue(link, out)
            elif isinstance(out, Close):
                link.out.close(out.code, out.reason)
                closing = True
            elif isinstance(out, HandshakeFailed):
                log.warning("handshake failed: %s", out.reason)
            elif isinstance(out, BadMessage):
                log.warning("%s", out.error)
            elif isinstance(out, Ignored):
                log.debug("ignored %s", out.what)
        if closing:
            await link.out.wait_closed()

    @staticmethod
    def _queue(link: _Connection, frame: SendText) -> None:
        put = link.out.control(frame)
        if put is not Put.QUEUED:
            reason = link.out.down.reason if link.out.down else "the link is closing"
            raise SessionClosed(f"nothing more can be sent: {reason}")

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


def _opt_int(value: int | None) -> int | msgspec.UnsetType:
    return UNSET if value is None else value


_COMMANDS: Final = get_args(Command)
"""What the typed sends may send through ``AgentSession._send``."""


async def _awaited(done: Awaitable[object]) -> None:
    await done
