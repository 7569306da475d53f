"""What the engine side's adapter does with ``websockets``: open a connection to the agent, and
build the link each connection writes through. Not public: :mod:`voxwire.brisvox.engine` is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidURI

from voxwire.brisvox._logs import websockets_logger
from voxwire.brisvox.constants import MAX_MESSAGE_BYTES
from voxwire.brisvox.engine_config import AgentTarget
from voxwire.brisvox.engine_core import EngineCore, LinkSettings
from voxwire.capture import Recorder
from voxwire.clock import Clock
from voxwire.link import Keepalive, Link, LinkDown, Outbound, Overflow

__all__ = ["CONNECT_FAILURES", "LinkCounts", "connect_agent", "describe", "open_link"]

CONNECT_FAILURES = (OSError, TimeoutError, InvalidHandshake, InvalidURI)
"""What a failed connection attempt raises (:func:`describe` says it in words)."""


async def connect_agent(
    target: AgentTarget, settings: LinkSettings, clock: Clock, ssl: Any
) -> ClientConnection:
    """Connect to ``target`` within the connect timeout, with its bearer token and, for
    ``wss://``, ``ssl`` (the default roots when None). Raises one of :data:`CONNECT_FAILURES`."""
    url = target.url
    headers = {"Authorization": f"Bearer {target.token}"} if target.token else {}
    tls: dict[str, Any] = {"ssl": ssl or True} if url.scheme == "wss" else {}
    async with asyncio.timeout(clock.real_seconds(settings.connect_timeout)):
        return await connect(
            url.url,
            additional_headers=headers,
            **tls,
            **url.connect_overrides(),  # an IPv6 zone, decoded for getaddrinfo
            compression=None,
            max_size=MAX_MESSAGE_BYTES,
            ping_interval=None,
            close_timeout=clock.real_seconds(settings.close_timeout),
            open_timeout=None,
            proxy=None,
            logger=websockets_logger("voxwire.brisvox.engine.websockets"),
        )


def open_link(
    ws: ClientConnection,
    core: EngineCore,
    settings: LinkSettings,
    clock: Clock,
    *,
    recorder: Recorder | None,
    on_down: Callable[[LinkDown], None],
    name: str,
) -> Link:
    """The connection's way out: control first, events bounded and counted, stamped with seq and
    t_ms as the writer takes them, the keepalive of the spec."""
    outbound = Outbound(
        event_bound=settings.event_queue,
        overflow=Overflow.DROP,
        control_first=True,
        report_lost=core.events_lost,
        stamp=core.stamp,
    )
    return Link(
        ws,
        outbound,
        clock=clock,
        drain_timeout=settings.write_timeout,
        keepalive=Keepalive(
            ping_interval=settings.ping_interval,
            silence_timeout=settings.silence_timeout,
            now=clock.now(),
        ),
        close_timeout=settings.close_timeout,
        on_down=on_down,
        record=(lambda data: recorder.record("server", data)) if recorder else None,
        name=name,
    )


def describe(exc: BaseException) -> str:
    """A failed connection attempt, in words."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


@dataclass(slots=True)
class LinkCounts:
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
