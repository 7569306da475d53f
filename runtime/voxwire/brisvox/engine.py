"""The engine side of the Brisvox link over websockets: :class:`EngineLink` and its configuration.

The engine connects out to the agent, one link per call, under the document's rules: the
plaintext host rule (:func:`voxwire.hosts.check_url`), the private CA bundle, the bearer token,
2 s to connect and 2 s to handshake, a ping every 10 s and the link down after 30 s of silence,
2 s per drain of the outbound queue, 1 s to close, and reconnecting with backoff for an agent
that declared resume. Each connection's writes go through one :class:`voxwire.link.Link`:
control messages first and never dropped, events bounded and counted (``events.lost``) when
the agent falls behind, one writer, and the link taken down visibly when anything fails.

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
import base64
import binascii
import contextlib
import inspect
import logging
import os
import re
import ssl as ssl_module
import stat
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias, get_args

from msgspec import UNSET
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from voxwire._rules import JSON_SAFE_INTEGER
from voxwire.brisvox._logs import websockets_logger
from voxwire.brisvox.codec import encode
from voxwire.brisvox.constants import (
    AGENT_ALLOW_INSECURE_ENV,
    AGENT_CALLER_IDENTITY_ENV,
    AGENT_RECONNECT_ATTEMPTS_ENV,
    AGENT_RECONNECT_WINDOW_ENV,
    AGENT_TLS_CA_ENV,
    AGENT_TOKEN_ENV,
    AGENT_URL_ENV,
    CA_BUNDLE_MAX_BYTES,
    CA_BUNDLE_MAX_CERTIFICATES,
    MAX_MESSAGE_BYTES,
    MAX_SIP_USER_PART_LENGTH,
    RECONNECT_WINDOW_MS,
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
from voxwire.hosts import CheckedURL, check_url
from voxwire.link import Keepalive, Link, Outbound, Overflow
from voxwire.link import LinkDown as WireDown
from voxwire.sansio import Close, Ignored, SendText

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
_SECTION_KEYS: Final = frozenset(
    {"url", "token_env", "allow_insecure", "caller_identity", "routes"}
)
_ROUTE_KEYS: Final = frozenset({"name", "url", "token_env", "allow_insecure", "caller_identity"})
_PEM_BEGIN: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")
_PEM_END: Final = re.compile(r"-----END ([A-Z0-9 ]+)-----")
_SIP_USER: Final = re.compile(rf"[0-9A-Za-z+*#._-]{{1,{MAX_SIP_USER_PART_LENGTH}}}")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


# -- configuration ------------------------------------------------------------------------------


class CABundleError(ConfigError):
    """The private CA bundle is missing, empty, too large or malformed."""


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """Where one call's agent process is: the checked URL, its token, the identity opt-in."""

    url: CheckedURL
    token: str | None = field(default=None, repr=False)
    caller_identity: bool = False
    route: str | None = None
    """The route's name; None for the default agent process."""


@dataclass(frozen=True, slots=True)
class AgentLinkConfig:
    """The engine's agent links: the default target, the named routes, TLS and the bounds."""

    default: AgentTarget | None
    routes: Mapping[str, AgentTarget]
    ssl: ssl_module.SSLContext | None = None
    """The private CA added to the default roots, for every wss:// target."""
    settings: LinkSettings = field(default_factory=LinkSettings)

    def target(self, route: str | None = None) -> AgentTarget | None:
        """The target of a call: its named route, else the default (an unknown route falls back
        and is logged). A call names a route, never a URL."""
        if route is not None:
            found = self.routes.get(route)
            if found is not None:
                return found
            log.warning("unknown agent route %r; using the default agent", route)
        return self.default


def load_config(
    *,
    environ: Mapping[str, str] | None = None,
    toml: Path | Mapping[str, Any] | None = None,
) -> AgentLinkConfig:
    """Read the environment and the ``[agent_link]`` section (a TOML file or a parsed document).

    The section's url wins over ``BRISVOX_AGENT_URL`` and its ``caller_identity`` over
    ``BRISVOX_AGENT_CALLER_IDENTITY``; a route has its own url, ``token_env``, ``allow_insecure``
    and ``caller_identity`` and inherits none of them. Raises :class:`ConfigError` naming what
    is wrong (an insecure URL raises ``voxwire.hosts.InsecureURLError``, also a ValueError).
    """
    env = os.environ if environ is None else environ
    if isinstance(toml, Path):
        try:
            document: Mapping[str, Any] = tomllib.loads(toml.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{toml}: {exc}") from None
    else:
        document = toml or {}
    section = document.get("agent_link", {})
    if not isinstance(section, Mapping):
        raise ConfigError("[agent_link] must be a table")
    _no_unknown_keys(section, _SECTION_KEYS, "[agent_link]")
    warned: set[str] = set()

    url = _str_setting(section, "url", "[agent_link]") or env.get(AGENT_URL_ENV) or None
    default: AgentTarget | None = None
    if url is not None:
        token_env = _str_setting(section, "token_env", "[agent_link]")
        token = _token(env, token_env, "[agent_link] token_env") if token_env else None
        if token_env is None:
            token = env.get(AGENT_TOKEN_ENV) or None
        allow = _bool_setting(section, "allow_insecure", "[agent_link]")
        identity = _bool_setting(section, "caller_identity", "[agent_link]")
        default = AgentTarget(
            _check(url, bool(allow) or _env_bool(env, AGENT_ALLOW_INSECURE_ENV), "default", warned),
            token,
            identity if identity is not None else _env_bool(env, AGENT_CALLER_IDENTITY_ENV),
        )

    routes: dict[str, AgentTarget] = {}
    raw_routes = section.get("routes", [])
    if not isinstance(raw_routes, list):
        raise ConfigError("[agent_link] routes must be an array of tables ([[agent_link.routes]])")
    for index, raw in enumerate(raw_routes):
        where = f"[[agent_link.routes]] #{index + 1}"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where} must be a table")
        _no_unknown_keys(raw, _ROUTE_KEYS, where)
        name = _str_setting(raw, "name", where)
        route_url = _str_setting(raw, "url", where)
        if not name or not route_url:
            raise ConfigError(f"{where} needs a name and a url")
        if name in routes:
            raise ConfigError(f"{where}: route {name!r} is defined twice")
        token_env = _str_setting(raw, "token_env", where)
        routes[name] = AgentTarget(
            _check(route_url, bool(_bool_setting(raw, "allow_insecure", where)), name, warned),
            _token(env, token_env, f"{where} token_env") if token_env else None,
            bool(_bool_setting(raw, "caller_identity", where)),
            name,
        )

    attempts = _env_int(env, AGENT_RECONNECT_ATTEMPTS_ENV, LinkSettings().reconnect_attempts, 0)
    window_ms = _env_int(env, AGENT_RECONNECT_WINDOW_ENV, RECONNECT_WINDOW_MS, 1)
    ca_path = env.get(AGENT_TLS_CA_ENV)
    return AgentLinkConfig(
        default,
        routes,
        load_ca_bundle(ca_path) if ca_path else None,
        LinkSettings(reconnect_attempts=attempts, reconnect_window=window_ms / 1000),
    )


def load_ca_bundle(path: str | Path) -> ssl_module.SSLContext:
    """A TLS context with the default roots plus the private CA bundle at ``path``.

    The bundle must be a regular file holding 1 to 16 PEM certificates in at most 256 KiB,
    counted by this scan (OpenSSL would accept more); a missing, empty or malformed file, or
    anything but a regular file (a FIFO would block the startup forever, a device never end),
    raises :class:`CABundleError`.
    """
    where = f"{AGENT_TLS_CA_ENV} {path}"
    try:
        # Opened without blocking (a FIFO would wait for a writer), then judged by what it is.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            data = _read_at_most(fd, CA_BUNDLE_MAX_BYTES + 1) if regular else b""
        finally:
            os.close(fd)
    except OSError as exc:
        raise CABundleError(f"{where}: cannot be read: {exc.strerror}") from None
    if not regular:
        raise CABundleError(f"{where}: not a regular file")
    if len(data) > CA_BUNDLE_MAX_BYTES:
        raise CABundleError(f"{where}: larger than {CA_BUNDLE_MAX_BYTES} bytes")
    count = _count_pem_certificates(data, where)
    if count > CA_BUNDLE_MAX_CERTIFICATES:
        raise CABundleError(f"{where}: {count} certificates, at most {CA_BUNDLE_MAX_CERTIFICATES}")
    context = ssl_module.create_default_context()
    try:
        context.load_verify_locations(cadata=data.decode("ascii"))
    except ssl_module.SSLError as exc:
        raise CABundleError(f"{where}: not a valid certificate bundle: {exc.reason}") from None
    return context


def _read_at_most(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size > 0 and (chunk := os.read(fd, size)):
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _count_pem_certificates(data: bytes, where: str) -> int:
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CABundleError(f"{where}: not PEM text (non-ASCII bytes)") from None
    count = 0
    body: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if (begin := _PEM_BEGIN.fullmatch(line)) is not None:
            if body is not None:
                raise CABundleError(f"{where}: line {number}: BEGIN inside a PEM block")
            if begin.group(1) not in ("CERTIFICATE", "TRUSTED CERTIFICATE"):
                raise CABundleError(
                    f"{where}: line {number}: a {begin.group(1)} block is no certificate"
                )
            body = []
        elif (end := _PEM_END.fullmatch(line)) is not None:
            if body is None:
                raise CABundleError(f"{where}: line {number}: END outside a PEM block")
            try:
                der = base64.b64decode("".join(body), validate=True)
            except (binascii.Error, ValueError):
                raise CABundleError(f"{where}: line {number}: the block is not base64") from None
            if (
                not der
                or der[0] != 0x30
                or end.group(1) not in ("CERTIFICATE", "TRUSTED CERTIFICATE")
            ):
                raise CABundleError(f"{where}: line {number}: the block is not a certificate")
            count += 1
            body = None
        elif body is not None:
            body.append(line)
    if body is not None:
        raise CABundleError(f"{where}: a PEM block is not closed")
    if count == 0:
        raise CABundleError(f"{where}: holds no certificate")
    return count


def sip_user_part(uri: str) -> str | None:
    """The user part of a SIP ``From``/``To`` value (``"Ann" <sip:+1555@trunk>``, ``tel:+1555``)
    when it passes the filter (1 to 64 of ``0-9 A-Z a-z + * # . _ -``), else None."""
    inner = uri[uri.index("<") + 1 : uri.index(">")] if "<" in uri and ">" in uri else uri
    scheme, colon, rest = inner.strip().partition(":")
    scheme = scheme.lower()
    if not colon:
        return None
    if scheme == "tel":
        user = rest.split(";", 1)[0]
    elif scheme in ("sip", "sips"):
        user, at, _ = rest.partition("@")
        if not at:
            return None
    else:
        return None
    return user if _SIP_USER.fullmatch(user) else None


def caller_identity(
    carrier: str,
    carrier_call_id: str | None,
    *,
    from_: str | None = None,
    to: str | None = None,
    redact: bool = False,
) -> CallIdentity | None:
    """The ``session.start.call`` of a telephony call, or None without a carrier call id.

    For ``sip`` a number is kept only when it passes the user-part filter; ``redact`` withholds
    the numbers (``pii_redacted``) while the carrier and its id are still sent.
    """
    if not carrier_call_id:
        return None
    if redact:
        return CallIdentity(carrier=carrier, carrier_call_id=carrier_call_id, pii_redacted=True)

    def keep(number: str | None) -> str | None:
        if number is None or (carrier == "sip" and not _SIP_USER.fullmatch(number)):
            return None
        return number

    kept_from, kept_to = keep(from_), keep(to)
    return CallIdentity(
        carrier=carrier,
        carrier_call_id=carrier_call_id,
        from_=kept_from if kept_from is not None else UNSET,
        to=kept_to if kept_to is not None else UNSET,
    )


def _check(url: str, allow_insecure: bool, name: str, warned: set[str]) -> CheckedURL:
    checked = check_url(url, allow_insecure=allow_insecure)
    if checked.warning and checked.host not in warned:
        warned.add(checked.host)
        log.warning("agent %s %s: %s", name, checked.redacted, checked.warning)
    log.info("agent %s at %s", name, checked.redacted)
    return checked


def _token(env: Mapping[str, str], name: str, where: str) -> str | None:
    if name not in env:
        raise ConfigError(f"{where}: the environment variable {name} is not set")
    return env[name] or None


def _no_unknown_keys(table: Mapping[str, Any], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(known)}")


def _str_setting(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{where} {key} must be a string, not {type(value).__name__}")
    return value


def _bool_setting(table: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = table.get(key)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{where} {key} must be true or false, not {value!r}")
    return value


def _env_bool(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0 (true/false), not {env[name]!r}")


def _env_int(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = env.get(name, "").strip()
    if not value:
        return default
    if not value.isascii() or not value.isdigit() or int(value) < minimum:
        raise ConfigError(f"{name} must be an integer of at least {minimum}, not {value!r}")
    return int(value)


# -- the link -----------------------------------------------------------------------------------

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


class EngineLink(EngineSends[None], EngineReceives):
    """One call's link to its agent: connects, handshakes, keeps alive and reconnects.

    Events go out through the typed sends (``link.send_user_text(epoch=1, text="hours?")``, one
    per event the engine may send; seq and t_ms are the core's), or :meth:`send_event` with a
    message object. The agent's commands come out of the iteration (answer each with
    :meth:`answer`), or go to a handler registered with the typed ``on()``:
    ``link.on("say", speak)`` calls ``speak(say)`` and answers ok when it returns (or its
    awaitable completes), with the failure when it raises :class:`CommandFailed`.

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
        self._done = _Counts()
        self._notices: asyncio.Queue[LinkNotice | None] = asyncio.Queue()
        self._tools: dict[int, asyncio.Future[ToolFinished]] = {}
        self._handlers: dict[str, list[Callable[[Any], object]]] = {}
        self._usage: SessionUsage | None = None
        self._tick = asyncio.Event()
        self._changed = asyncio.Event()
        self._retry_at: float | None = None
        self._runner: asyncio.Task[None] | None = None
        self._link_tasks: set[asyncio.Task[Any]] = set()
        self._ended = False
        self._recorder, self._capture = open_recorder(
            record, protocol="brisvox", recorded_by="server", session_id=session_id, clock=clock
        )

    # -- state ----------------------------------------------------------------------------------

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

    async def __aiter__(self) -> AsyncIterator[LinkNotice]:
        while (notice := await self.next_notice()) is not None:
            yield notice

    def send_event(self, event: Event | ErrorEvent) -> None:
        """Queue an event for the agent (seq and t_ms are stamped when written; pass 0).

        Raises ``brisvox.ProtocolError`` (nothing queued, the link unharmed) when it breaks a
        rule."""
        outputs = self.core.send_event(event, self.clock.now())
        if self._link is not None and len(outputs) == 1 and type(outputs[0]) is SendEvent:
            self._link.event(outputs[0])  # the common case: nothing else to apply or wake
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

    def _on(self, message_type: str, handler: Callable[[Any], object]) -> None:
        self._handlers.setdefault(message_type, []).append(handler)

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
        for out in outputs:
            if isinstance(out, ToolCallQueued):
                request_id = out.request_id
                self._tools[request_id] = future
            elif isinstance(out, ToolFinished):
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
        self._notices.put_nowait(None)
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
            self._notices.put_nowait(None)
        finally:
            self._changed.set()

    async def _connect(self) -> ClientConnection | None:
        url = self.target.url
        headers = {"Authorization": f"Bearer {self.target.token}"} if self.target.token else {}
        tls: dict[str, Any] = {"ssl": self._ssl or True} if url.scheme == "wss" else {}
        try:
            async with asyncio.timeout(self._real(self.settings.connect_timeout)):
                ws = await connect(
                    url.url,
                    additional_headers=headers,
                    **tls,
                    **url.connect_overrides(),  # an IPv6 zone, decoded for getaddrinfo
                    compression=None,
                    max_size=MAX_MESSAGE_BYTES,
                    ping_interval=None,
                    close_timeout=self._real(self.settings.close_timeout),
                    open_timeout=None,
                    proxy=None,
                    logger=websockets_logger(f"{__name__}.websockets"),
                )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            reason = _describe(exc)
            log.warning("agent %s: connect failed: %s", url.redacted, reason)
            self._apply(self.core.connect_failed(self.clock.now(), reason))
            return None
        self._ws = ws
        if self._recorder is not None and self.core.link > 0:  # a reconnection
            self._recorder.link("open")
        self._link = self._open_link(ws)
        self._apply(self.core.connected(self.clock.now()))
        return ws

    def _open_link(self, ws: ClientConnection) -> Link:
        """The connection's way out: control first, events bounded and counted, stamped with
        seq and t_ms as the writer takes them, the keepalive of the spec."""
        settings, number, now = self.settings, self.core.link + 1, self.clock.now()
        outbound = Outbound(
            event_bound=settings.event_queue,
            overflow=Overflow.DROP,
            control_first=True,
            report_lost=self.core.events_lost,
            stamp=self.core.stamp,
        )
        recorder = self._recorder
        return Link(
            ws,
            outbound,
            clock=self.clock,
            drain_timeout=settings.write_timeout,
            keepalive=Keepalive(
                ping_interval=settings.ping_interval,
                silence_timeout=settings.silence_timeout,
                now=now,
            ),
            close_timeout=settings.close_timeout,
            on_down=lambda down: self._link_down(number, down),
            record=(lambda data: recorder.record("server", data)) if recorder else None,
            name=f"agent {self.target.url.redacted}",
        )

    def _link_down(self, number: int, down: WireDown) -> None:
        """The link went down under the writer (drain timeout, silence, a failed write): the
        core's link-down path, then reconnecting or the fallback."""
        if self.core.link == number:
            self._apply(self.core.link_lost(self.clock.now(), down.reason))

    async def _serve(self, ws: ClientConnection) -> None:
        """Run one connection to its end: the link's writer and keepalive and a timer beside
        this reader."""
        number, link = self.core.link, self._link
        assert link is not None
        timer = self._spawn(self._timer(number))
        reason = "closed"
        try:
            async for raw in ws:
                link.heard()
                now = self.clock.now()
                if self._recorder is not None:
                    self._recorder.record("agent", raw)
                if isinstance(raw, str):
                    self._apply(self.core.receive_text(raw, now))
                else:
                    self._apply(self.core.receive_binary(raw, now))
        except ConnectionClosed as exc:
            reason = str(exc)
        finally:
            timer.cancel()
            await link.stop()
            self._done.add(link)
            for task in list(self._link_tasks):
                task.cancel()
            if self.core.link == number:
                self._apply(self.core.link_lost(self.clock.now(), reason))
            if self._recorder is not None and self.core.state is EngineState.DOWN:
                self._recorder.link("lost")  # a reconnection follows
            self._ws = None
            self._link = None

    async def _timer(self, number: int) -> None:
        while self.core.link == number:
            deadline = self.core.next_deadline()
            with contextlib.suppress(TimeoutError):
                wait = None if deadline is None else self._real(deadline - self.clock.now())
                async with asyncio.timeout(wait):
                    await self._tick.wait()
            self._apply(self.core.tick(self.clock.now()))
            self._tick.clear()  # after: the loop reads the deadline again anyway

    # -- the core's outputs ---------------------------------------------------------------------

    def _apply(self, outputs: list[EngineOutput]) -> None:
        link = self._link
        for out in outputs:
            if isinstance(out, SendEvent):
                if link is not None:
                    link.event(out)
            elif isinstance(out, SendText):
                if link is not None:
                    link.control(out)
            elif isinstance(out, CloseAfter):
                if link is not None:
                    link.close(out.close.code, out.close.reason, final=out.final)
            elif isinstance(out, Close):
                if link is not None:
                    link.close(out.code, out.reason)
            elif isinstance(out, CommandReceived):
                self._command(out)
            elif isinstance(out, ToolFinished):
                if out.message is not None:
                    self._call(ToolResult.type, out.message)
                future = self._tools.pop(out.request_id, None)
                if future is not None and not future.done():
                    future.set_result(out)
            elif isinstance(out, ToolCallQueued):
                pass  # the caller holds its PendingTool
            elif isinstance(out, Ignored):
                log.debug("agent %s: ignored %s", self.target.url.redacted, out.what)
            elif isinstance(out, BadMessage):
                log.warning("agent %s: %s", self.target.url.redacted, out.error)
            else:
                self._notice(out)
        self._tick.set()
        self._changed.set()

    def _notice(self, out: ToolOverdue | AgentAccepted | HandshakeFailed | LinkDown) -> None:
        where = self.target.url.redacted
        if isinstance(out, AgentAccepted):
            self._call(SessionAccept.type, out.accept)
            if out.resumed:
                self.reconnects += 1
            for problem in out.problems:
                log.warning("agent %s: handshake problem: %s", where, problem)
            log.info("agent %s: %s", where, "resumed" if out.resumed else "accepted the call")
        elif isinstance(out, HandshakeFailed):
            if out.rejected is not None:
                self._call(SessionReject.type, out.rejected)
            log.warning("agent %s: handshake failed: %s", where, out.reason)
        elif isinstance(out, LinkDown):
            if self._ended:
                log.info("agent %s: link closed at the call's end", where)
            elif out.reconnect_in is None:
                log.warning(
                    "agent %s: link down (%s); the call goes on without it", where, out.reason
                )
            else:
                log.warning(
                    "agent %s: link down (%s); reconnecting in %.0f ms",
                    where,
                    out.reason,
                    out.reconnect_in * 1000,
                )
                self._retry_at = self.clock.now() + out.reconnect_in
        if not isinstance(out, AgentAccepted) or out.resumed:  # start() reports the first
            self._notices.put_nowait(out)
        if self.gone:
            self._notices.put_nowait(None)

    def _command(self, received: CommandReceived) -> None:
        handlers = self._handlers.get(received.command.type)
        if handlers:
            self._spawn(self._handle_command(received, handlers))
            return
        if self._notices.qsize() >= _COMMAND_QUEUE:
            self._apply(
                self.core.answer(
                    received, error=(ErrorCode.QUEUE_FULL, "the call's input queue is full")
                )
            )
            return
        self._notices.put_nowait(received)

    async def _handle_command(
        self, received: CommandReceived, handlers: list[Callable[[Any], object]]
    ) -> None:
        """Run the command's handlers in turn, then answer: ok, or the failure one raised."""
        error: tuple[str, str] | None = None
        try:
            for handler in handlers:
                done = handler(received.command)
                if inspect.isawaitable(done):
                    await done
        except CommandFailed as exc:
            error = (exc.code, exc.message)
        except Exception:
            log.exception(
                "agent %s: the %s handler failed", self.target.url.redacted, received.command.type
            )
            error = (ErrorCode.UNAVAILABLE, f"the engine failed to apply {received.command.type}")
        self._apply(self.core.answer(received, error=error))

    def _call(self, message_type: str, message: object) -> None:
        """Call the handlers of ``message_type`` (an awaitable one runs as its own task)."""
        for handler in self._handlers.get(message_type, ()):
            try:
                done = handler(message)
            except Exception:
                log.exception(
                    "agent %s: a %s handler failed", self.target.url.redacted, message_type
                )
                continue
            if inspect.isawaitable(done):
                self._spawn(_awaited(done))

    # -- plumbing -------------------------------------------------------------------------------

    def _real(self, seconds: float) -> float:
        return self.clock.real_seconds(max(0.0, seconds))

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._link_tasks.add(task)
        task.add_done_callback(self._link_tasks.discard)
        return task


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


@dataclass(slots=True)
class _Counts:
    """What the call's ended links did."""

    pings: int = 0
    pongs: int = 0
    lost: int = 0

    def add(self, link: Link) -> None:
        self.pings += link.pings
        self.pongs += link.pongs
        # Only the drops its events.lost reported: those it never reported went to the core's
        # outage count with the rest the link took down with it (counted once, there).
        self.lost += link.outbound.lost_total - link.outbound.lost


_SENDABLE: Final = (*get_args(Event), ErrorEvent)
"""What the typed sends may send through ``EngineLink._send``."""


async def _awaited(done: Awaitable[object]) -> None:
    await done
