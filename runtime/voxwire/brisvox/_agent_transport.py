"""The agent server's connections: what it answers over HTTP before the upgrade (a browser,
any ``Origin``, gets 403; a request without the right bearer token 401), each connection's way
out, and a ``session.reject``. Not public: :mod:`voxwire.brisvox.agent` is.
"""

from __future__ import annotations

import hmac
import logging
from http import HTTPStatus
from typing import TYPE_CHECKING

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from voxwire.brisvox.constants import PING_INTERVAL_MS, SDK_CLOSE_TIMEOUT_MS, SILENCE_TIMEOUT_MS
from voxwire.clock import Clock
from voxwire.link import Keepalive, Link, Outbound, Overflow
from voxwire.observe.metrics import Metrics

if TYPE_CHECKING:
    from voxwire.brisvox.agent_session import AgentLink

__all__ = ["open_way_out", "refusal", "refuse"]

log = logging.getLogger("voxwire.brisvox.agent")


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
