"""The agent server's connections: what it answers over HTTP before the upgrade (a browser,
any ``Origin``, gets 403; a request without the right bearer token 401), each connection
(:class:`AgentLink`, public as :mod:`voxwire.brisvox.agent_session`'s) and its way out, and a
``session.reject``. Not public: :mod:`voxwire.brisvox.agent` is.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from http import HTTPStatus
from typing import Final, assert_never

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from voxwire.brisvox.agent_core import (
    AgentCore,
    AgentOutput,
    CommandAnswered,
    CommandTimedOut,
    EventReceived,
    StartReceived,
    ToolCallCancelled,
    ToolCallStarted,
)
from voxwire.brisvox.codec import decoder
from voxwire.brisvox.constants import PING_INTERVAL_MS, SDK_CLOSE_TIMEOUT_MS, SILENCE_TIMEOUT_MS
from voxwire.brisvox.outputs import BadMessage, HandshakeFailed
from voxwire.capture import CaptureWriter, Recorder
from voxwire.clock import Clock
from voxwire.errors import SessionClosed
from voxwire.link import Keepalive, Link, Outbound, Overflow, Put
from voxwire.observe.metrics import Metrics
from voxwire.observe.stats import SessionStats
from voxwire.sansio import Close, Ignored, SendText
from voxwire.session import DeadlineTimer

__all__ = ["AgentLink", "open_way_out", "refusal", "refuse"]

log = logging.getLogger("voxwire.brisvox.agent")

_DECODE_AGENT: Final = decoder("agent")


class AgentLink:
    """One connection of a call: its socket, its way out, its core, and the call's recorder."""

    __slots__ = ("capture", "core", "out", "recorder", "stats", "timer", "ws")

    def __init__(
        self, ws: ServerConnection, core: AgentCore, way_out: Callable[[AgentLink], Link]
    ) -> None:
        self.ws = ws
        self.core = core
        self.recorder: Recorder | None = None
        self.capture: CaptureWriter | None = None
        """The capture file opened for a new call (its session closes it at the call's end)."""
        self.timer: DeadlineTimer | None = None
        """The core's deadlines (its session's, once the link carries a call)."""
        self.stats: SessionStats | None = None
        """Its call's statistics, once the link carries a call: every write is counted."""
        self.out = way_out(self)
        """Every write goes here: one queue, one writer, the keepalive, the close."""

    def queue(self, frame: SendText) -> None:
        """Queue a write (control: never dropped). Raises SessionClosed when the link no longer
        takes writes (it went down or is closing)."""
        put = self.out.control(frame)
        if put is not Put.QUEUED:
            reason = self.out.down.reason if self.out.down else "the link is closing"
            raise SessionClosed(f"nothing more can be sent: {reason}")
        if self.stats is not None:  # the agent's own messages are few: read back to be counted
            self.stats.on_message(
                "agent", _DECODE_AGENT(frame.data), self.out.clock.now(), size=len(frame.data)
            )

    async def perform(self, outputs: Sequence[AgentOutput]) -> None:
        """Carry out what the core asks of the link: writes, a close (then wait until it was
        written; the link's close timeout bounds it), what to log. Raises SessionClosed when the
        link no longer takes writes."""
        closing = False
        for out in outputs:
            match out:
                case SendText():
                    self.queue(out)
                case Close(code=code, reason=reason):
                    self.out.close(code, reason)
                    closing = True
                case HandshakeFailed(reason=reason):
                    log.warning("handshake failed: %s", reason)
                case BadMessage(error=error):
                    log.warning("%s", error)
                case Ignored(what=what):
                    log.debug("ignored %s", what)
                case (
                    StartReceived()
                    | EventReceived()
                    | ToolCallStarted()
                    | ToolCallCancelled()
                    | CommandAnswered()
                    | CommandTimedOut()
                ):
                    raise AssertionError(f"{out!r} is for a session to handle, not the link")
                case _:
                    assert_never(out)
        if closing:
            await self.out.wait_closed()


def refusal(
    connection: ServerConnection, request: Request, token: str | None, metrics: Metrics
) -> Response | None:
    """The answer that refuses ``request`` before the upgrade (counted in ``metrics``), or None
    to upgrade it. The token is compared in constant time; without one (``None``) every engine
    is taken."""
    if "Origin" in request.headers:
        log.warning("refused a request with an Origin header (a browser)")
        metrics.refused("forbidden_origin")
        return connection.respond(HTTPStatus.FORBIDDEN, "browser origins are refused\n")
    if token is None:
        return None
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    ):
        return None
    log.warning("refused a request without the right bearer token")
    metrics.refused("unauthorized")
    response = connection.respond(HTTPStatus.UNAUTHORIZED, "unauthorized\n")
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


def open_way_out(link: AgentLink, *, clock: Clock, event_queue: int, drain: float) -> Link:
    """A connection's way out: everything the agent sends is control (never dropped), one
    writer drains it under the write timeout (``drain``), the keepalive of the spec."""

    def record(data: str | bytes) -> None:
        if link.recorder is not None:  # known once the session.start was read
            link.recorder.record("agent", data)

    return Link(
        link.ws,
        Outbound(event_bound=event_queue, overflow=Overflow.DROP),
        clock=clock,
        drain_timeout=drain,
        keepalive=Keepalive(
            ping_interval=PING_INTERVAL_MS / 1000,
            silence_timeout=SILENCE_TIMEOUT_MS / 1000,
            now=clock.now(),
        ),
        close_timeout=SDK_CLOSE_TIMEOUT_MS / 1000,
        record=record,
        name=f"brisvox agent link {link.ws.id}",
    )


async def refuse(link: AgentLink, metrics: Metrics, code: str, message: str | None) -> None:
    """Answer a link's ``session.start`` with ``session.reject`` (counted in ``metrics`` by its
    code) and close it."""
    metrics.refused(code)
    await link.perform(link.core.reject(code, message, link.out.clock.now()))
